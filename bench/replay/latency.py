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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS

from bench import fixtures
from bench.common import log, percentile, rnd
from bench.floors import echo_responder
from bench.replay.corpus import MODES, VOCAB, Config, LogFacts
from bench.replay.replays import all_points
from mneme.app.compose import open_vectors, open_view
from mneme.app.settings import CoreSettings, ProjectorSettings
from mneme.embed_cache import EmbeddingCache
from schemas.queries import AsOf, GetMemory, SearchMemories
from services.gateway.queries import QueryClient
from services.projector.generation import close_generation

# -- as_of latency -----------------------------------------------------------------------------------------------


def summary_ms(samples: list[float]) -> dict[str, Any]:
    ms = [s * 1000 for s in samples]
    return {
        "n": len(ms),
        "p50_ms": rnd(percentile(ms, 50), 2),
        "p95_ms": rnd(percentile(ms, 95), 2),
        "p99_ms": rnd(percentile(ms, 99), 2),
        "max_ms": rnd(max(ms), 2) if ms else None,
    }


async def latency(
    nc: NATS,
    core: CoreSettings,
    ps: ProjectorSettings,
    view_dir: Path,
    vec_dir: Path,
    facts: LogFacts,
    cfg: Config,
    target: int,
    tmp: Path,
) -> dict[str, Any]:
    log(f"(3) a projector serving queries on {view_dir.name} (rows) and {vec_dir.name} (vectors)")
    t0 = time.perf_counter()
    view = open_view(core, ps, base=view_dir)
    qcache = EmbeddingCache(tmp / "query-cache.sqlite")  # empty: every query text is embedded cold
    vectors = open_vectors(core, ps, base=vec_dir, cache=qcache)
    assert vectors is not None
    proj = fixtures.projector(nc, view, ps, vectors=vectors)  # ps: batch sizes, wait timeout, linger
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
        qc = QueryClient(nc, timeout=30)
        rng = random.Random(17)
        mids = list(facts.created)
        n_ns = cfg.namespaces
        failures: list[str] = []
        found = {"get": 0, "get_now": 0}
        hits: dict[str, list[int]] = defaultdict(list)

        def get_q(as_of: bool) -> GetMemory:
            mid = mids[rng.randrange(len(mids))]
            end = facts.ended.get(mid, target + 1) - 1
            at = AsOf(seq=rng.randint(facts.created[mid], end)) if as_of else None
            if not as_of and end < target:  # deleted by now: pick another one
                return get_q(False)
            return GetMemory(namespace=facts.ns[mid], now=datetime.now(UTC), memory_id=mid, as_of=at)

        def search_q(mode: Any, as_of: bool) -> SearchMemories:
            text = " ".join(rng.choices(VOCAB, k=rng.randint(2, 5)))
            at = AsOf(seq=rng.randint(1, target)) if as_of else None
            return SearchMemories(
                namespace=f"ns{rng.randrange(n_ns)}", now=datetime.now(UTC), mode=mode, query=text, limit=10, as_of=at
            )

        kinds: dict[str, Callable[[], Any]] = {"get": lambda: get_q(True)}
        for m in MODES:
            kinds[m] = functools.partial(search_q, m, True)
        now_kinds: dict[str, Callable[[], Any]] = {"get_now": lambda: get_q(False)}
        for m in MODES:
            now_kinds[f"{m}_now"] = functools.partial(search_q, m, False)
        samples: dict[str, list[float]] = defaultdict(list)

        async def one(kind: str, make: Callable[[], Any], record: bool) -> None:
            q = make()
            t = time.perf_counter()
            try:
                res = await qc.ask(q)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                failures.append(f"{kind}: {type(exc).__name__}: {exc}")
                return
            dt = time.perf_counter() - t
            if not record:
                return
            samples[kind].append(dt)
            if kind.startswith("get"):
                ok = res.item is not None and res.item.memory.id == q.memory_id
                found[kind] += ok
                if not ok and len(failures) < 20:
                    failures.append(f"{kind}: {q.memory_id} not found as of {q.as_of}")
            else:
                hits[kind].append(len(res.hits))

        warm = max(5, cfg.queries // 10)
        for _ in range(warm):  # warm-up: the model, DuckDB and Edge caches
            for kind, make in {**kinds, **now_kinds}.items():
                await one(kind, make, False)

        echo = await echo_responder(nc, "bench.replay.echo")
        names = list(kinds)
        for i in range(cfg.queries):
            k = i % len(names)
            for kind in names[k:] + names[:k]:
                await one(kind, kinds[kind], True)
            if i % 3 == 0:
                for kind, make in now_kinds.items():
                    await one(kind, make, True)
            t = time.perf_counter()
            await nc.request("bench.replay.echo", b"x", timeout=5)
            samples["echo"].append(time.perf_counter() - t)
            if i % max(1, cfg.queries // 5) == 0 and i:
                log(f"    {i} of {cfg.queries} rounds")
        await echo.unsubscribe()
        out["latency"] = {k: summary_ms(v) for k, v in samples.items()}
        out["found"] = {k: f"{v}/{len(samples[k])}" for k, v in found.items()}
        out["hits_mean"] = {k: rnd(sum(v) / len(v), 2) if v else None for k, v in hits.items()}
        out["failures"] = len(failures)
        out["first_failures"] = failures[:5]
        out["missing"] = sum(len(samples[k]) - v for k, v in found.items())
    finally:
        await proj.stop()
        close_generation(proj.gen)
        qcache.close()
    return out
