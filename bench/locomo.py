"""Retrieval quality on LoCoMo (real conversations nobody here wrote): keyword, semantic, hybrid.

    python -m bench.locomo [--data PATH] [--quick] [--model NAME]

Protocol (../shared/data/locomo/README.md): every turn is a memory, one namespace per
conversation, content "speaker: text" (plus " [image: caption]" when the turn shared an
image), the dia_id in metadata, the session date as valid_from. The memories go through
the real path: events on an embedded nats-server, the projector's vector follower
(Qdrant Edge, the bundled model), and each question of categories 1-4 is asked through
the projector's query path (NATS request/reply, `SearchMemories`) in its conversation's
namespace, with the product's defaults (nothing is tuned per question) and threshold 0, so
every mode ranks its top 50. A hit at k: any evidence dia_id among the top k. MRR:
reciprocal rank of the first evidence turn in the top 50 (0 when absent).

The graph signal, on and off (issue 12): each conversation's knowledge graph (its speakers and the names
said in two turns or more, linked; `graph_envelopes`) is in the log before the turns, and hybrid with
memory-mcp's recall weights (z-score, vector 0.40, BM25 0.15) runs without and with PPR (0.45): the target
is no loss of recall.

Also, in the same run: hybrid with the earlier default fusion (z-score, semantic weight
0.5), for a before/after on the same index; and each of them once more with its default
threshold and limit 10 (what a caller gets; z-score's scores depend on how many
candidates there are, and limit 10 fetches 50 per retriever rather than 250): recall@1/5/10
and MRR within those 10, and how many results came back on average. Last line: one JSON
object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import fixtures
from bench.common import emit_json, log, machine_info, print_table, rnd
from bench.synthetic import publish
from mneme.app.compose import close_nats, connect
from mneme.domain.graph import name_key
from mneme.embed_cache import EmbeddingCache
from mneme.embedded_nats import EmbeddedNats
from mneme.embedding import DEFAULT_MODEL, ModelHandle
from mneme.eventlog import ensure_streams
from mneme.ids import entity_id_for, relation_id_for
from schemas import subjects as S
from schemas.events import Actor, Envelope, MemoryCreated
from schemas.graph_events import EntityCreated, RelationCreated
from schemas.queries import SearchMemories, SearchMode
from services.gateway.queries import QueryClient
from services.projector.service import catch_up
from services.projector.vector_index import EdgeIndex

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo-dev.json"
KS = (1, 5, 10)
DEPTH = 50
RUNS: tuple[tuple[SearchMode, str, dict[str, Any]], ...] = (  # mode, label, query fields beyond the defaults
    ("keyword", "keyword", {}),
    ("semantic", "semantic", {}),
    ("hybrid", "hybrid", {}),
    ("hybrid", "hybrid-zscore", {"fusion": "zscore", "semantic_weight": 0.5}),  # the default until issue 9
    # memory-mcp's recall weights (vector 0.40, BM25 0.15) without and with the graph signal (PPR 0.45)
    ("hybrid", "hybrid-zscore-nograph", {"fusion": "zscore", "semantic_weight": 0.4, "keyword_weight": 0.15}),
    ("hybrid", "hybrid-zscore-graph",
     {"fusion": "zscore", "semantic_weight": 0.4, "keyword_weight": 0.15, "graph_weight": 0.45}),
)  # fmt: skip
# not a name: sentence words that are capitalized often enough in chat to pass the repetition test
_NOT_NAMES = set(
    "I I'm I've I'll I'd It It's That That's This The There They We You Yes No Oh Wow Hey Hi Thanks Thank What "
    "How Why When Where Who Which And But So Also Just Really Sounds Good Great Awesome Yeah Sure Well Me My Your "
    "He She His Her Our Their Let Let's Can Do Did Have Has Was Were Is Are Be Not Any Some All Glad Love Nice "
    "Congrats Congratulations Absolutely Definitely Totally Haha Lol Ok Okay Cool Amazing Sorry Bye See Take".split()
)


def session_date(text: str) -> datetime | None:
    """'1:56 pm on 8 May, 2023' -> 2023-05-08 UTC."""
    m = re.search(r"(\d{1,2}) (\w+),? (\d{4})", text or "")
    if not m:
        return None
    try:
        return datetime.strptime(f"{m.group(1)} {m.group(2)} {m.group(3)}", "%d %B %Y").replace(tzinfo=UTC)
    except ValueError:
        return None


def evidence_ids(ev: list[str]) -> set[str]:
    """Evidence as labelled, with the dataset's few malformed entries ('D8:6; D9:17', 'D:11:26') split and fixed."""
    out = set()
    for e in ev:
        for part in re.split(r"[;,\s]+", e):
            m = re.match(r"D:?(\d+):(\d+)", part.strip())
            if m:
                out.add(f"D{int(m.group(1))}:{int(m.group(2))}")
    return out


def turns_and_questions(data: list[dict[str, Any]], limit: int | None) -> tuple[list[tuple], list[tuple]]:
    turns, questions = [], []
    for conv in data[:limit]:
        ns = f"locomo/{conv['sample_id']}"
        c = conv["conversation"]
        for key, value in c.items():
            if not re.fullmatch(r"session_\d+", key):
                continue
            when = session_date(c.get(f"{key}_date_time", ""))
            for t in value:
                content = f"{t['speaker']}: {t['text']}"
                if t.get("blip_caption"):
                    content += f" [image: {t['blip_caption']}]"
                turns.append((ns, t["dia_id"], content, when, t["speaker"]))
        for qa in conv["qa"]:
            ev = evidence_ids(qa.get("evidence", []))
            if qa.get("category") in (1, 2, 3, 4) and ev:
                questions.append((ns, qa["question"], ev, qa["category"]))
    return turns, questions


def envelopes(turns: list[tuple]) -> list[tuple[str, Envelope]]:
    out = []
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for i, (ns, dia, content, when, speaker) in enumerate(turns):
        mid = f"{i:08x}-0000-4000-a000-{i:012x}"
        ev = MemoryCreated(
            memory_id=mid,
            version=1,
            store=None,
            path=None,
            content=content,
            kind="turn",
            subject=speaker,
            metadata={"dia_id": dia},
            valid_from=when,
        )
        env = Envelope(
            event_id=f"evt-locomo-{i}",
            schema_version=1,
            namespace=ns,
            aggregate_id=mid,
            occurred_at=t0,
            actor=Actor(agent_id="locomo"),
            request_id=f"req-locomo-{i}",
            event=ev,
        )
        out.append((S.memory_subject(ns, None, mid), env))
    return out


def graph_envelopes(turns: list[tuple], speakers: bool = True) -> list[tuple[str, Envelope]]:
    """The knowledge graph an agent would keep of each conversation, built without a language model: its two
    speakers (person) who know each other, and the capitalized words that are not sentence openers and
    appear at least twice in its turns (concept: places, people, pets, events), each linked from the
    speakers who say it, weighted by how often (at most 1). Memories mention them by name (the projector's
    extraction), so the graph signal can walk from a question's hits to linked turns. Without `speakers`
    (a diagnostic): the concepts alone, linked when two are said in one turn; no entity that every turn of
    a speaker names."""
    per_ns: dict[str, dict[str, Any]] = {}
    for ns, _, content, _, speaker in turns:
        g = per_ns.setdefault(ns, {"speakers": [], "turns": {}, "said": {}, "together": {}})
        if speaker not in g["speakers"]:
            g["speakers"].append(speaker)
        text = content.split(": ", 1)[-1]
        seen: list[str] = []
        for m in re.finditer(r"(?<![.!?]\s)(?<!^)\b([A-Z][a-z]{2,})\b", text):
            word = m.group(1)
            if word not in _NOT_NAMES:
                g["turns"][word] = g["turns"].get(word, 0) + 1
                g["said"][(speaker, word)] = g["said"].get((speaker, word), 0) + 1
                seen.append(word)
        for a in set(seen):
            for b in set(seen):
                if a < b:
                    g["together"][(a, b)] = g["together"].get((a, b), 0) + 1
    out = []
    i = 0
    t0 = datetime(2025, 12, 31, tzinfo=UTC)

    def env(ns: str, agg: str, ev: Any) -> Envelope:
        nonlocal i
        i += 1
        return Envelope(
            event_id=f"evt-locomo-graph-{i}",
            schema_version=1,
            namespace=ns,
            aggregate_id=agg,
            occurred_at=t0,
            actor=Actor(agent_id="locomo"),
            request_id=f"req-locomo-graph-{i}",
            event=ev,
        )

    for ns, g in per_ns.items():
        ids: dict[str, str] = {}
        concepts = [w for w, n in g["turns"].items() if n >= 2 and w not in g["speakers"]]
        people = [(s, "person") for s in g["speakers"]] if speakers else []
        for name, etype in people + [(c, "concept") for c in concepts]:
            eid = ids[name] = entity_id_for(ns, name_key(name))
            out.append((S.entity_subject(ns, eid), env(ns, eid, EntityCreated(version=1, entity_id=eid, name=name,
                                                                              entity_type=etype))))  # fmt: skip
        if speakers:
            rels = [(a, b, "knows", 1.0) for a in g["speakers"] for b in g["speakers"] if a != b]
            rels += [(sp, w, "talks_about", min(1.0, n / 5)) for (sp, w), n in g["said"].items() if w in concepts]
        else:
            rels = [
                (a, b, "related_to", min(1.0, n / 3)) for (a, b), n in g["together"].items() if a in ids and b in ids
            ]
        for a, b, rtype, weight in rels:
            rid = relation_id_for(ns, ids[a], rtype, ids[b])
            ev = RelationCreated(version=1, relation_id=rid, from_id=ids[a], to_id=ids[b], relation_type=rtype,
                                 weight=weight)  # fmt: skip
            out.append((S.relation_subject(ns, rid), env(ns, rid, ev)))
    return out


def score(ranked: list[list[str]], evidence: list[set[str]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for k in KS:
        out[f"recall@{k}"] = rnd(
            sum(bool(set(r[:k]) & e) for r, e in zip(ranked, evidence, strict=True)) / len(ranked), 4
        )
    rr = []
    for r, e in zip(ranked, evidence, strict=True):
        first = next((i for i, d in enumerate(r[:DEPTH]) if d in e), None)
        rr.append(0.0 if first is None else 1.0 / (first + 1))
    out["mrr"] = rnd(sum(rr) / len(rr), 4)
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    data = json.loads(Path(args.data).read_text())
    turns, questions = turns_and_questions(data, 1 if args.quick else None)
    log(f"{len(turns)} turns, {len(questions)} questions (categories 1-4) from {args.data}")
    tmp = Path(tempfile.mkdtemp(prefix="mneme-locomo-"))
    nats = EmbeddedNats(tmp / "nats")
    await nats.start()
    nc = await connect(nats.url or "", "bench-locomo")
    try:
        await ensure_streams(nc.jetstream())
        graph = graph_envelopes(
            turns, speakers=not args.graph_without_speakers
        )  # entities first: a memory's mentions are found as it is folded
        await publish(nc.jetstream(), iter(graph + envelopes(turns)))
        model = ModelHandle(args.model).start()
        view = fixtures.memories_view(tmp / "projector.duckdb")
        vectors = fixtures.vector_view(EdgeIndex(tmp / "vectors", model.dim), model, EmbeddingCache(tmp / "emb.sqlite"))
        proj = fixtures.projector(nc, view, vectors=vectors)
        t0 = time.perf_counter()
        await proj.start()
        await catch_up(proj)
        assert proj.vector_follower is not None
        await asyncio.to_thread(model.wait, 120)
        await proj.vector_follower.wait_for(proj.applied, 600)
        await asyncio.to_thread(vectors.fill_pending)
        ingest_s = time.perf_counter() - t0
        await proj.serving.wait()
        log(f"ingested and embedded in {ingest_s:.1f} s")
        qc = QueryClient(nc, timeout=30)
        now = datetime.now(UTC)
        results: dict[str, Any] = {}
        timings: dict[str, float | None] = {}
        defaults: dict[str, Any] = {}
        for mode, label, extra in RUNS:
            ranked = []
            t1 = time.perf_counter()
            for ns, q, _, _ in questions:
                got = await qc.ask(
                    SearchMemories(namespace=ns, now=now, mode=mode, query=q, limit=DEPTH, threshold=0.0, **extra)
                )
                ranked.append([h.memory.metadata.get("dia_id") for h in got.hits])
            timings[label] = rnd((time.perf_counter() - t1) / len(questions) * 1000, 2)
            results[label] = score(ranked, [e for _, _, e, _ in questions])
            cut = []  # as a caller gets it: default threshold, limit 10
            for ns, q, _, _ in questions:
                got = await qc.ask(SearchMemories(namespace=ns, now=now, mode=mode, query=q, limit=10, **extra))
                cut.append([h.memory.metadata.get("dia_id") for h in got.hits])
            defaults[label] = {
                "threshold": got.threshold,
                **score(cut, [e for _, _, e, _ in questions]),
                "mean_results": rnd(sum(map(len, cut)) / len(cut), 2),
            }
            if args.per_category:
                results[label]["by_category"] = {
                    str(c): score(
                        [r for r, qq in zip(ranked, questions, strict=True) if qq[3] == c],
                        [qq[2] for qq in questions if qq[3] == c],
                    )
                    for c in (1, 2, 3, 4)
                }
        await proj.stop()
        vectors.close()
        view.close()
    finally:
        await close_nats(nc)
        await nats.stop()
    modes = [label for _, label, _ in RUNS]
    hyb = results["hybrid"]["recall@10"]
    gain_kw = rnd((hyb - results["keyword"]["recall@10"]) * 100, 1)
    gain_sem = rnd((hyb - results["semantic"]["recall@10"]) * 100, 1)
    print_table(
        "LoCoMo retrieval (recall of evidence turns, MRR over the top 50)",
        ["mode", "R@1", "R@5", "R@10", "MRR", "ms/query"],
        [
            [m, results[m]["recall@1"], results[m]["recall@5"], results[m]["recall@10"], results[m]["mrr"], timings[m]]
            for m in modes
        ],
    )
    print_table(
        "Default thresholds, limit 10 (what a caller gets; MRR within the 10)",
        ["mode", "threshold", "R@1", "R@5", "R@10", "MRR", "results per query"],
        [
            [m, d["threshold"], d["recall@1"], d["recall@5"], d["recall@10"], d["mrr"], d["mean_results"]]
            for m, d in defaults.items()
        ],
    )
    graph_gain = {
        k: rnd((results["hybrid-zscore-graph"][k] - results["hybrid-zscore-nograph"][k]) * 100, 2)
        for k in ("recall@1", "recall@5", "recall@10", "mrr")
    }
    print_table(
        "The graph signal (memory-mcp's weights 0.40/0.15, PPR 0.45) on and off: change in points",
        ["figure", "on - off"],
        list(graph_gain.items()),
    )
    return {
        **{m: results[m] for m in modes},
        "graph": {
            "speakers_as_entities": not args.graph_without_speakers,
            "entities": sum(1 for _, e in graph if isinstance(e.event, EntityCreated)),
            "relations": sum(1 for _, e in graph if isinstance(e.event, RelationCreated)),
            "gain_points": graph_gain,
            "no_loss_at_5_and_10": (graph_gain["recall@5"] or 0) >= 0 and (graph_gain["recall@10"] or 0) >= 0,
        },
        "default_threshold_limit_10": defaults,
        "questions": len(questions),
        "turns": len(turns),
        "model": model.model_id,
        "hybrid_fusion": "calibrated, semantic_weight 0.3 (defaults); hybrid-zscore: zscore, semantic_weight 0.5",
        "ms_per_query": timings,
        "ingest_seconds": rnd(ingest_s, 2),
        "hybrid_gain_over_keyword_points": gain_kw,
        "hybrid_gain_over_semantic_points": gain_sem,
        "target_gain_points": 10,
        "pass_vs_keyword": gain_kw is not None and gain_kw >= 10,
        "pass_vs_semantic": gain_sem is not None and gain_sem >= 10,
        "machine": machine_info(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--quick", action="store_true", help="first conversation only")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--per-category", action="store_true")
    ap.add_argument(
        "--graph-without-speakers",
        action="store_true",
        help="diagnostic: the graph without the speakers (named in every turn), its concepts linked by co-occurrence",
    )
    args = ap.parse_args()
    emit_json(asyncio.run(run(args)))


if __name__ == "__main__":
    main()
