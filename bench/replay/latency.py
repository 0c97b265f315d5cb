"""bench.replay (3): as_of reads at the replayed size through QueryClient.ask, beside the same without as_of
and a core NATS request/reply echo.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import fixtures
from bench.common import latency_summary, log, rnd
from bench.floors import echo_once, echo_responder
from bench.replay.corpus import MODES, VOCAB, Config, LogFacts
from bench.replay.replays import Bed, all_points
from mneme.app.compose import open_vectors, open_view
from mneme.embed_cache import EmbeddingCache
from schemas.queries import AsOf, GetMemory, SearchMemories
from services.gateway.queries import QueryClient
from services.projector.generation import close_generation

# -- as_of latency -----------------------------------------------------------------------------------------------


class Queries:
    """Random queries over the log: gets of a memory as of a sequence while it existed (or now, if it still
    exists), and searches of a random namespace as of a random past sequence (or now)."""

    def __init__(self, facts: LogFacts, target: int, namespaces: int):
        self.rng = random.Random(17)
        self.facts, self.target, self.namespaces = facts, target, namespaces
        self.mids = list(facts.created)

    def get(self, as_of: bool) -> GetMemory:
        rng, facts = self.rng, self.facts
        mid = self.mids[rng.randrange(len(self.mids))]
        end = facts.ended.get(mid, self.target + 1) - 1
        at = AsOf(seq=rng.randint(facts.created[mid], end)) if as_of else None
        if not as_of and end < self.target:  # deleted by now: pick another one
            return self.get(False)
        return GetMemory(namespace=facts.ns[mid], now=datetime.now(UTC), memory_id=mid, as_of=at)

    def search(self, mode: Any, as_of: bool) -> SearchMemories:
        rng = self.rng
        text = " ".join(rng.choices(VOCAB, k=rng.randint(2, 5)))
        at = AsOf(seq=rng.randint(1, self.target)) if as_of else None
        ns = f"ns{rng.randrange(self.namespaces)}"
        return SearchMemories(namespace=ns, now=datetime.now(UTC), mode=mode, query=text, limit=10, as_of=at)

    def kinds(self) -> tuple[dict[str, Callable[[], Any]], dict[str, Callable[[], Any]]]:
        """The query kinds as_of (get, each mode), and the same without as_of (get_now, each mode + _now)."""
        as_of: dict[str, Callable[[], Any]] = {"get": lambda: self.get(True)}
        now: dict[str, Callable[[], Any]] = {"get_now": lambda: self.get(False)}
        for m in MODES:
            as_of[m] = functools.partial(self.search, m, True)
            now[f"{m}_now"] = functools.partial(self.search, m, False)
        return as_of, now


@dataclass
class Asker:
    """Asks queries through QueryClient, noting each one's latency, whether a get found its memory, the hits."""

    qc: QueryClient
    samples: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    failures: list[str] = field(default_factory=list)
    found: dict[str, int] = field(default_factory=lambda: {"get": 0, "get_now": 0})
    hits: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))

    async def one(self, kind: str, make: Callable[[], Any], record: bool = True) -> None:
        q = make()
        t = time.perf_counter()
        try:
            res = await self.qc.ask(q)
        except Exception as exc:  # noqa: BLE001 - counted and reported
            self.failures.append(f"{kind}: {type(exc).__name__}: {exc}")
            return
        dt = time.perf_counter() - t
        if not record:
            return
        self.samples[kind].append(dt)
        if kind.startswith("get"):
            ok = res.item is not None and res.item.memory.id == q.memory_id
            self.found[kind] += ok
            if not ok and len(self.failures) < 20:
                self.failures.append(f"{kind}: {q.memory_id} not found as of {q.as_of}")
        else:
            self.hits[kind].append(len(res.hits))

    def figures(self) -> dict[str, Any]:
        samples = self.samples
        return {
            "latency": {k: latency_summary(v, (50, 95, 99), 2, mean=False) for k, v in samples.items()},
            "found": {k: f"{v}/{len(samples[k])}" for k, v in self.found.items()},
            "hits_mean": {k: rnd(sum(v) / len(v), 2) if v else None for k, v in self.hits.items()},
            "failures": len(self.failures),
            "first_failures": self.failures[:5],
            "missing": sum(len(samples[k]) - v for k, v in self.found.items()),
        }


async def rounds(asker: Asker, qs: Queries, n: int, nc: Any) -> None:
    """A warm-up, then `n` rounds: every as_of kind in a rotating order, every third round the kinds without
    as_of, and one echo."""
    kinds, now_kinds = qs.kinds()
    for _ in range(max(5, n // 10)):  # warm-up: the model, DuckDB and Edge caches
        for kind, make in {**kinds, **now_kinds}.items():
            await asker.one(kind, make, False)
    echo = await echo_responder(nc, "bench.replay.echo")
    names = list(kinds)
    for i in range(n):
        k = i % len(names)
        for kind in names[k:] + names[:k]:
            await asker.one(kind, kinds[kind])
        if i % 3 == 0:
            for kind, make in now_kinds.items():
                await asker.one(kind, make)
        asker.samples["echo"].append(await echo_once(nc, "bench.replay.echo", b"x"))
        if i % max(1, n // 5) == 0 and i:
            log(f"    {i} of {n} rounds")
    await echo.unsubscribe()


async def latency(bed: Bed, cfg: Config, facts: LogFacts, view_dir: Path, vec_dir: Path, tmp: Path) -> dict[str, Any]:
    """A projector serving queries on the rows of `view_dir` and the vectors of `vec_dir` (its own embedding
    cache, empty: every query text is embedded cold), asked through NATS."""
    log(f"(3) a projector serving queries on {view_dir.name} (rows) and {vec_dir.name} (vectors)")
    t0 = time.perf_counter()
    view = open_view(bed.core, bed.ps, base=view_dir)
    qcache = EmbeddingCache(tmp / "query-cache.sqlite")  # empty: every query text is embedded cold
    vectors = open_vectors(bed.core, bed.ps, base=vec_dir, cache=qcache)
    assert vectors is not None
    proj = fixtures.projector(bed.nc, view, bed.ps, vectors=vectors)  # ps: batch sizes, wait timeout, linger
    out: dict[str, Any] = {
        "rows_from": view_dir.name,
        "vectors_from": vec_dir.name,
        "versions": (view.con.execute("SELECT count(*) FROM memory_versions").fetchone() or (0,))[0],
        "points": vectors.index.count(all_points()),
    }
    try:
        await proj.start()
        await asyncio.wait_for(proj.serving.wait(), 300)
        if not await asyncio.to_thread(vectors.model.wait, 120):
            raise RuntimeError("the embedding model did not load")
        out["open_to_serving_s"] = rnd(time.perf_counter() - t0, 2)
        log(f"(3) serving after {out['open_to_serving_s']} s; {cfg.queries} queries per kind")
        asker = Asker(QueryClient(bed.nc, timeout=30))
        await rounds(asker, Queries(facts, bed.target, cfg.namespaces), cfg.queries, bed.nc)
        out.update(asker.figures())
    finally:
        await proj.stop()
        close_generation(proj.gen)
        qcache.close()
    return out
