"""bench.graph (1): recall with the graph signal at 10,000 and 100,000 relations, in-process through
QueryClient (NATS request -> the projector's query path), beside plain hybrid (the same query, graph weight 0)
asked query by query in the same rounds.

The log (published straight to JetStream, as the gateway would have written it): entities first (ids from
mneme.ids.entity_id_for over mneme.domain.graph.name_key), then memories whose content names two of them
(the projector extracts the mentions as it folds them), then directed, weighted relations between random
pairs. The projector (vectors on: Qdrant Edge, the bundled model) folds it; then the relations grow to the
second size by more events on the same log, and the same rounds run again.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench import fixtures
from bench.common import log, percentiles_ms, rnd
from bench.fixtures import until
from bench.synthetic import envelope, publish
from bench.workload import _WORDS
from mneme.domain.graph import name_key
from mneme.ids import entity_id_for, relation_id_for
from schemas import subjects as S
from schemas.events import Actor, Envelope, MemoryCreated
from schemas.graph_events import AnyGraphEvent, EntityCreated, RelationCreated
from schemas.queries import SearchMemories
from services.gateway.queries import QueryClient

NS = "graphbench"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
ACTOR = Actor(agent_id="bench-graph")
TYPES = ("person", "project", "service", "library", "concept")
RELATION_TYPES = ("works_on", "uses", "knows", "depends_on", "owns", "mentors")
VERBS = ("works with", "talked to", "depends on", "reviewed", "replaced", "asked about", "deployed", "met")
SEMANTIC, KEYWORD = 0.40, 0.15  # memory-mcp's defaults, with graph 0.45
GRAPH_WEIGHT = 0.45
_SYL = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


@dataclass(frozen=True)
class GraphConfig:
    entities: int
    memories: int
    queries: int  # per size and series
    stdio_entities: int  # created over stdio (server-memory)
    sizes: tuple[int, ...] = (10_000, 100_000)  # relations at each measured step
    seed: int = 5

    @staticmethod
    def full() -> GraphConfig:
        return GraphConfig(entities=20_000, memories=10_000, queries=300, stdio_entities=10_000)

    @staticmethod
    def quick() -> GraphConfig:
        return GraphConfig(entities=5_000, memories=2_000, queries=100, stdio_entities=2_000)


def names(n: int, seed: int) -> list[str]:
    """n distinct made-up names ("Kavorel"), none of them an English word of the memories' filler."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        out["".join(rng.choice(_SYL) for _ in range(3)).capitalize() + rng.choice("lnrst")] = None
    return list(out)


def _env(i: int, agg: str, event: Any) -> Envelope:
    return envelope(
        NS, agg, event, (f"evt-graphbench-{i}", f"req-graphbench-{i}"), T0 + timedelta(milliseconds=i), ACTOR
    )


def entity_events(ents: list[str], start: int) -> list[tuple[str, Envelope]]:
    out = []
    for k, name in enumerate(ents):
        eid = entity_id_for(NS, name_key(name))
        ev: AnyGraphEvent = EntityCreated(version=1, entity_id=eid, name=name, entity_type=TYPES[k % len(TYPES)])
        out.append((S.entity_subject(NS, eid), _env(start + k, eid, ev)))
    return out


def memory_events(ents: list[str], n: int, seed: int, start: int) -> list[tuple[str, Envelope]]:
    rng = random.Random(seed)
    out = []
    for k in range(n):
        a, b = rng.sample(ents, 2)
        text = f"{a} {rng.choice(VERBS)} {b}: " + " ".join(rng.choices(_WORDS, k=rng.randint(10, 25))) + "."
        mid = f"{k:08x}-0000-4000-a000-{k:012x}"
        ev = MemoryCreated(memory_id=mid, version=1, store=None, path=None, content=text, kind="note")
        out.append((S.memory_subject(NS, None, mid), _env(start + k, mid, ev)))
    return out


def relation_events(
    ents: list[str], n: int, rng: random.Random, taken: set[str], start: int
) -> list[tuple[str, Envelope]]:
    out: list[tuple[str, Envelope]] = []
    ids = [entity_id_for(NS, name_key(e)) for e in ents]
    while len(out) < n:
        a, b = rng.sample(ids, 2)
        rtype = rng.choice(RELATION_TYPES)
        rid = relation_id_for(NS, a, rtype, b)
        if rid in taken:
            continue
        taken.add(rid)
        ev = RelationCreated(
            version=1, relation_id=rid, from_id=a, to_id=b, relation_type=rtype, weight=round(rng.uniform(0.2, 1), 2)
        )
        out.append((S.relation_subject(NS, rid), _env(start + len(out), rid, ev)))
    return out


def query_texts(ents: list[str], n: int, seed: int) -> list[str]:
    """Questions that name one entity and a few of the memories' words (each distinct)."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        words = " ".join(rng.choices(_WORDS, k=3))
        out[f"what did {rng.choice(ents)} say about {words}?"] = None
    return list(out)


async def rounds(qc: QueryClient, texts: list[str]) -> dict[str, Any]:
    """Each query with the graph signal and without it (alternating which goes first): latency per series,
    the subgraph's size, and how often the graph moved the top 10."""
    lat: dict[str, list[float]] = {"graph": [], "plain": []}
    nodes, changed, seeded = 0, 0, 0
    now = datetime.now(UTC)
    for k, text in enumerate(texts):
        tops = {}
        for series in ("graph", "plain") if k % 2 == 0 else ("plain", "graph"):
            t = time.perf_counter()
            got = await qc.ask(query(text, now, series == "graph"))
            lat[series].append(time.perf_counter() - t)
            tops[series] = [h.memory.id for h in got.hits]
            if series == "graph":
                nodes = max(nodes, got.subgraph_nodes)
                seeded += any(h.graph for h in got.hits)
        changed += tops["graph"] != tops["plain"]
    out: dict[str, Any] = {series: percentiles_ms(xs) | {"n": len(xs)} for series, xs in lat.items()}
    out["graph_minus_plain_p50_ms"] = rnd(out["graph"]["p50_ms"] - out["plain"]["p50_ms"], 3)
    out["subgraph_nodes"] = nodes
    out["queries_with_graph_mass"] = seeded
    out["top10_changed_by_graph"] = changed
    return out


def folded_to(view: Any, head: int) -> Callable[[], bool]:
    return lambda: view.checkpoint >= head


def query(text: str, now: datetime, graph: bool = True) -> SearchMemories:
    """Hybrid with memory-mcp's recall weights, with the graph signal or without it (graph weight 0)."""
    return SearchMemories(namespace=NS, now=now, mode="hybrid", query=text, limit=10, fusion="zscore",
                          graph_weight=GRAPH_WEIGHT if graph else 0.0, semantic_weight=SEMANTIC,
                          keyword_weight=KEYWORD)  # fmt: skip


async def cold_query(qc: QueryClient, text: str) -> float:
    """One graph query right after a fold: the subgraph is built again (its cache is keyed by position)."""
    q = query(text, datetime.now(UTC))
    t = time.perf_counter()
    await qc.ask(q)
    return (time.perf_counter() - t) * 1000


async def grow(srv: fixtures.Nats, view: Any, more: list[tuple[str, Envelope]]) -> dict[str, Any]:
    """More relations published and folded: how long each took."""
    t = time.perf_counter()
    head = await publish(srv.js, iter(more))
    pub_s = time.perf_counter() - t
    await until(folded_to(view, head), 900, "the fold of the new relations", step=0.05)
    fold = time.perf_counter() - t
    log(f"    {len(more):,} more relations published in {pub_s:.1f} s, folded by {fold:.1f} s")
    return {"relations": len(more), "publish_s": rnd(pub_s, 2), "folded_s": rnd(fold, 2),
            "relations_per_s": rnd(len(more) / fold, 0)}  # fmt: skip


async def measure_size(qc: QueryClient, size: int, texts: list[str]) -> dict[str, Any]:
    """At one size: the first graph query after the fold, 19 more to warm up, then the rounds."""
    cold = await cold_query(qc, texts[0])
    for text in texts[1:20]:  # warm-up
        await cold_query(qc, text)
    log(f"(1) {size:,} relations: first graph query after the fold {cold:.0f} ms; {len(texts) - 20} queries")
    res = await rounds(qc, texts[20:])
    res["first_query_after_fold_ms"] = rnd(cold, 1)
    log(f"    p95 graph {res['graph']['p95_ms']} ms, plain {res['plain']['p95_ms']} ms; "
        f"{res['subgraph_nodes']:,} subgraph nodes")  # fmt: skip
    return res


async def phase_recall(cfg: GraphConfig, tmp: Path) -> dict[str, Any]:
    rng = random.Random(cfg.seed)
    ents = names(cfg.entities, cfg.seed)
    events = entity_events(ents, 0) + memory_events(ents, cfg.memories, cfg.seed + 1, cfg.entities)
    taken: set[str] = set()
    n0 = len(events)
    events += relation_events(ents, cfg.sizes[0], rng, taken, n0)
    out: dict[str, Any] = {"entities": cfg.entities, "memories": cfg.memories, "namespace": NS}
    async with AsyncExitStack() as stack:
        srv = await fixtures.start_nats(stack, tmp / "nats", "bench-graph-projector")
        qnc = await fixtures.connect_nats(stack, srv.url, "bench-graph-client")
        head = await publish(srv.js, iter(events))
        log(f"(1) published {head:,} events: {cfg.entities:,} entities, {cfg.memories:,} memories, "
            f"{cfg.sizes[0]:,} relations")  # fmt: skip
        recall = fixtures.recall_projector(stack, srv.nc, tmp)
        t = time.perf_counter()
        fold_s, _ = await fixtures.fold(recall)
        out["first_fold_s"] = rnd(fold_s, 2)
        out["ingest_s"] = rnd(time.perf_counter() - t, 2)
        qc = QueryClient(qnc, timeout=30)
        texts = query_texts(ents, cfg.queries * len(cfg.sizes) + 20 * (len(cfg.sizes) + 1), cfg.seed + 2)
        for step, size in enumerate(cfg.sizes):
            if step:
                more = relation_events(ents, size - cfg.sizes[step - 1], rng, taken, n0 + cfg.sizes[step - 1])
                out[f"fold_{size}"] = await grow(srv, recall.view, more)
            base = step * (cfg.queries + 20)
            out[f"relations_{size}"] = await measure_size(qc, size, texts[base : base + 20 + cfg.queries])
    return out
