"""Retrieval quality on LoCoMo (real conversations nobody here wrote): keyword, semantic, hybrid.

    python -m bench.locomo [--data PATH] [--quick] [--keep] [--model NAME]

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
import json
import re
import time
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import fixtures
from bench.common import log, machine_info, print_table, rnd, rows
from bench.fixtures import run_dir
from bench.runner import Bench
from bench.synthetic import envelope, publish
from mneme.domain.graph import name_key
from mneme.embedding import DEFAULT_MODEL
from mneme.ids import entity_id_for, relation_id_for
from schemas import subjects as S
from schemas.events import Actor, Envelope, MemoryCreated
from schemas.graph_events import EntityCreated, RelationCreated
from schemas.queries import SearchMemories, SearchMode
from services.gateway.queries import QueryClient

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


ACTOR = Actor(agent_id="locomo")


def envelopes(turns: list[tuple]) -> list[tuple[str, Envelope]]:
    out = []
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for i, (ns, dia, content, when, speaker) in enumerate(turns):
        mid = f"{i:08x}-0000-4000-a000-{i:012x}"
        ev = MemoryCreated(memory_id=mid, version=1, store=None, path=None, content=content, kind="turn",
                           subject=speaker, metadata={"dia_id": dia}, valid_from=when)  # fmt: skip
        out.append(
            (S.memory_subject(ns, None, mid), envelope(ns, mid, ev, (f"evt-locomo-{i}", f"req-locomo-{i}"), t0, ACTOR))
        )
    return out


def conversation_graphs(turns: list[tuple]) -> dict[str, dict[str, Any]]:
    """Per conversation: its speakers, how often each capitalized non-opener word is said, by whom, and which
    words are said together in one turn."""
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
    return per_ns


class _GraphLog:
    """The graph's events in order, each in its envelope (numbered from 1)."""

    def __init__(self) -> None:
        self.out: list[tuple[str, Envelope]] = []
        self.t0 = datetime(2025, 12, 31, tzinfo=UTC)

    def add(self, subject: str, ns: str, agg: str, ev: Any) -> None:
        i = len(self.out) + 1
        self.out.append(
            (subject, envelope(ns, agg, ev, (f"evt-locomo-graph-{i}", f"req-locomo-graph-{i}"), self.t0, ACTOR))
        )

    def conversation(self, ns: str, g: dict[str, Any], speakers: bool) -> None:
        ids: dict[str, str] = {}
        concepts = [w for w, n in g["turns"].items() if n >= 2 and w not in g["speakers"]]
        people = [(s, "person") for s in g["speakers"]] if speakers else []
        for name, etype in people + [(c, "concept") for c in concepts]:
            eid = ids[name] = entity_id_for(ns, name_key(name))
            self.add(
                S.entity_subject(ns, eid),
                ns,
                eid,
                EntityCreated(version=1, entity_id=eid, name=name, entity_type=etype),
            )
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
            self.add(S.relation_subject(ns, rid), ns, rid, ev)


def graph_envelopes(turns: list[tuple], speakers: bool = True) -> list[tuple[str, Envelope]]:
    """The knowledge graph an agent would keep of each conversation, built without a language model: its two
    speakers (person) who know each other, and the capitalized words that are not sentence openers and
    appear at least twice in its turns (concept: places, people, pets, events), each linked from the
    speakers who say it, weighted by how often (at most 1). Memories mention them by name (the projector's
    extraction), so the graph signal can walk from a question's hits to linked turns. Without `speakers`
    (a diagnostic): the concepts alone, linked when two are said in one turn; no entity that every turn of
    a speaker names."""
    glog = _GraphLog()
    for ns, g in conversation_graphs(turns).items():
        glog.conversation(ns, g, speakers)
    return glog.out


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


async def ask_all(
    qc: QueryClient, questions: list[tuple], mode: SearchMode, **fields: Any
) -> tuple[list[list[str]], Any]:
    """Each question in its conversation's namespace: the dia_ids of the hits, in order; and the last answer."""
    now = datetime.now(UTC)
    ranked, got = [], None
    for ns, q, _, _ in questions:
        got = await qc.ask(SearchMemories(namespace=ns, now=now, mode=mode, query=q, **fields))
        ranked.append([h.memory.metadata.get("dia_id") for h in got.hits])
    return ranked, got


async def one_run(
    qc: QueryClient, questions: list[tuple], run: tuple[SearchMode, str, dict[str, Any]], per_category: bool
) -> tuple[dict[str, Any], float | None, dict[str, Any]]:
    """One mode: its scores over the top 50 (threshold 0), ms per query, and what a caller gets (defaults, 10)."""
    mode, _, extra = run
    evidence = [e for _, _, e, _ in questions]
    t1 = time.perf_counter()
    ranked, _ = await ask_all(qc, questions, mode, limit=DEPTH, threshold=0.0, **extra)
    ms = rnd((time.perf_counter() - t1) / len(questions) * 1000, 2)
    result: dict[str, Any] = score(ranked, evidence)
    cut, last = await ask_all(
        qc, questions, mode, limit=10, **extra
    )  # as a caller gets it: default threshold, limit 10
    default = {
        "threshold": last.threshold,
        **score(cut, evidence),
        "mean_results": rnd(sum(map(len, cut)) / len(cut), 2),
    }
    if per_category:
        result["by_category"] = {
            str(c): score(
                [r for r, qq in zip(ranked, questions, strict=True) if qq[3] == c],
                [qq[2] for qq in questions if qq[3] == c],
            )
            for c in (1, 2, 3, 4)
        }
    return result, ms, default


def report(results: dict[str, Any], timings: dict[str, float | None], defaults: dict[str, Any]) -> dict[str, Any]:
    """The tables; the graph signal's gain (on - off) in points."""
    print_table(
        "LoCoMo retrieval (recall of evidence turns, MRR over the top 50)",
        ["mode", "R@1", "R@5", "R@10", "MRR", "ms/query"],
        [[*row, timings[row[0]]] for row in rows(results.items(), "recall@1", "recall@5", "recall@10", "mrr")],
    )
    print_table(
        "Default thresholds, limit 10 (what a caller gets; MRR within the 10)",
        ["mode", "threshold", "R@1", "R@5", "R@10", "MRR", "results per query"],
        rows(defaults.items(), "threshold", "recall@1", "recall@5", "recall@10", "mrr", "mean_results"),
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
    return graph_gain


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    data = json.loads(Path(args.data).read_text())
    turns, questions = turns_and_questions(data, 1 if args.quick else None)
    log(f"{len(turns)} turns, {len(questions)} questions (categories 1-4) from {args.data}")
    results: dict[str, Any] = {}
    timings: dict[str, float | None] = {}
    defaults: dict[str, Any] = {}
    async with run_dir("locomo", args.keep) as tmp, AsyncExitStack() as stack:
        srv = await fixtures.start_nats(stack, tmp / "nats", "bench-locomo")
        # entities first: a memory's mentions are found as it is folded
        graph = graph_envelopes(turns, speakers=not args.graph_without_speakers)
        await publish(srv.js, iter(graph + envelopes(turns)))
        recall = fixtures.recall_projector(stack, srv.nc, tmp, args.model)
        _, ingest_s = await fixtures.fold(recall)
        log(f"ingested and embedded in {ingest_s:.1f} s")
        qc = QueryClient(srv.nc, timeout=30)
        for run in RUNS:
            label = run[1]
            results[label], timings[label], defaults[label] = await one_run(qc, questions, run, args.per_category)
    graph_gain = report(results, timings, defaults)
    hyb = results["hybrid"]["recall@10"]
    gain_kw = rnd((hyb - results["keyword"]["recall@10"]) * 100, 1)
    gain_sem = rnd((hyb - results["semantic"]["recall@10"]) * 100, 1)
    return {
        **results,
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
        "model": recall.model.model_id,
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


BENCH = Bench("locomo", __doc__, quick="first conversation only")


def main(argv: list[str] | None = None) -> None:
    ap = BENCH.parser()
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--per-category", action="store_true")
    ap.add_argument(
        "--graph-without-speakers",
        action="store_true",
        help="diagnostic: the graph without the speakers (named in every turn), its concepts linked by co-occurrence",
    )
    BENCH.run(amain, ap.parse_args(argv))


if __name__ == "__main__":
    main()
