"""bench.replay's entry point: `python -m bench.replay [--quick] [--keep] [--no-profile] [--no-vectors-only]
[--cache PATH] [--fresh-cache] [--events N] [--memories N] [--pool N] [--queries N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import bench.replay
from bench import fixtures
from bench.common import emit_json, log, machine_info, rnd
from bench.fixtures import run_dir
from bench.replay import replays
from bench.replay.corpus import DEFAULT_CACHE, Config, LogFacts, log_events, pool_texts, prefill_cache
from bench.replay.instruments import Meter, Noise, Profiler
from bench.replay.latency import latency
from bench.replay.replays import floor_once, run_replay, vectors_only
from bench.replay.report import report
from bench.synthetic import publish
from mneme.app import gc_policy
from mneme.app.settings import CoreSettings, ProjectorSettings
from schemas import subjects as S


async def amain(cfg: Config, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    machine = machine_info()
    started = time.perf_counter()
    problems: list[str] = []
    # SIGTERM unwinds like Ctrl-C: children stopped, temporary directory removed
    async with run_dir("replay", args.keep) as tmp:
        cache_path = tmp / "embeddings.sqlite" if args.fresh_cache else Path(args.cache).expanduser()
        noise = Noise(tmp / "nats" / "nats-server.log")
        mlog = logging.getLogger("mneme")
        mlog.addHandler(noise)
        mlog.propagate = False  # counted instead of printed (a replay can log hundreds of thousands)
        async with AsyncExitStack() as stack:  # the connection closed, then the server stopped
            srv = await fixtures.start_nats(stack, tmp / "nats", "bench-replay")
            url, nc, js, nats_pid = srv.url, srv.nc, srv.js, srv.pid
            core = CoreSettings(data_dir=tmp / "data", nats_url=url)
            ps = ProjectorSettings(embedding_cache=str(cache_path.resolve()))
            ps_off = ps.model_copy(update={"vectors": "off"})

            # (0) the pool, the cache, the log
            pool = pool_texts(cfg.pool)
            log(f"(0) {len(pool):,} pool texts; filling the embedding cache {cache_path}")
            pre = await asyncio.to_thread(prefill_cache, cache_path, ps.embedding_model, pool, ps.embedding_threads)
            log(
                f"(0) cache: {pre['already_cached']:,} already there, {pre['embedded_now']:,} embedded now in "
                f"{pre['embed_seconds']} s"
            )
            facts = LogFacts()
            log(f"(0) publishing {cfg.events:,} events over {cfg.memories:,} memories")
            t = time.perf_counter()
            last = await publish(js, log_events(cfg, pool, facts), window=1024)
            pub_s = time.perf_counter() - t
            info = (await js.stream_info(S.EVENTS_STREAM)).state
            if info.last_seq != cfg.events or info.messages != cfg.events or last != cfg.events:
                raise RuntimeError(f"the log holds {info.messages} messages up to {info.last_seq}, not {cfg.events}")
            target = info.last_seq
            log(f"(0) published {target:,} events ({info.bytes / 1e6:,.0f} MB) in {pub_s:.1f} s")
            logd = {
                "events": target,
                "bytes": info.bytes,
                "mean_event_bytes": rnd(info.bytes / target, 1),
                "publish_seconds": rnd(pub_s, 2),
                "publish_per_s": rnd(target / pub_s, 1),
                "memories_created": len(facts.created),
                "memories_deleted": len(facts.ended),
                "by_type": dict(sorted(facts.by_type.items(), key=lambda x: -x[1])),
                "content_updates": facts.content_changes,
                "distinct_texts_used": len(facts.texts_used),
                "namespaces": cfg.namespaces,
                "pool": cfg.pool,
            }

            meter = Meter({"bench": os.getpid(), "nats": nats_pid})
            floors: list[float] = []
            floor_cpu: list[dict[str, Any]] = []
            floor_noise: list[dict[str, int]] = []

            async def floor(r: int) -> None:
                await asyncio.sleep(0.5)
                mark = noise.mark()
                meter.start()
                floors.append(await floor_once(js, target))
                floor_cpu.append(meter.stop())
                if noise.since(mark):
                    log(f"(1) floor round {r + 1}: NATS: {noise.since(mark)}")
                floor_noise.append(noise.since(mark))
                log(f"(1) floor round {r + 1}: {target / floors[-1]:,.0f} events/s ({floors[-1]:.2f} s)")

            def profiler(name: str) -> Profiler | None:
                return Profiler(tmp / f"profile-{name}.txt", not args.no_profile)

            await floor(0)
            full = await run_replay("full (DuckDB + vectors)", core, ps, tmp / "gen-full", meter, None, noise, target)
            await floor(1)
            duck = await run_replay(
                "DuckDB only", core, ps_off, tmp / "gen-duckdb", meter, profiler("duckdb"), noise, target
            )
            vec = None
            if not args.no_vectors_only:
                vec = await vectors_only(core, ps, js, tmp / "gen-vectors", target, meter, profiler("vectors"), noise)
            for r in range(2, cfg.floor_rounds):
                await floor(r)
            mark = noise.mark()

            def whole(r: dict[str, Any] | None) -> bool:
                if not r:
                    return False
                return (
                    not r.get("failed")
                    and not r.get("stalled_at")
                    and not (r.get("folded") or {}).get("missing_events")
                )

            view_dir, vec_dir, note = tmp / "gen-full", tmp / "gen-full", None
            if not whole(full):  # (a stalled replay still holds its files: serve the other two generations)
                view_dir, vec_dir = tmp / "gen-duckdb", tmp / "gen-vectors"
                note = "the full replay is not whole: served the DuckDB-only rows with the vectors-only index"
                if not (whole(duck) and whole(vec)):
                    note += " (NOT whole either: figures at a smaller effective size)"
                log(f"(3) {note}")
            try:
                lat = await latency(nc, core, ps, view_dir, vec_dir, facts, cfg, target, tmp)
            except Exception as exc:  # noqa: BLE001 - reported
                log(f"(3) latency phase failed: {type(exc).__name__}: {exc}")
                lat = {
                    "skipped": f"{type(exc).__name__}: {exc}",
                    "latency": {},
                    "found": {},
                    "hits_mean": {},
                    "failures": 0,
                    "first_failures": [],
                }
            lat["note"] = note
            lat["nats"] = noise.since(mark)
        wall = time.perf_counter() - started
        try:
            result = report(cfg, machine, args, pre, logd, floors, floor_cpu, full, duck, vec, lat, wall, problems)
            result["floor"]["nats"] = floor_noise
        except Exception as exc:  # noqa: BLE001 - the figures still go out as JSON
            import traceback

            traceback.print_exc()
            problems.append(f"report failed: {type(exc).__name__}: {exc}")
            result = {
                "bench": "replay",
                "report_error": str(exc),
                "machine": machine,
                "config": dataclasses.asdict(cfg),
                "cache": pre,
                "log": logd,
                "floor_seconds": floors,
                "floor_nats": floor_noise,
                "replay_full": full,
                "replay_duckdb_only": duck,
                "vectors_only": vec,
                "latency": lat,
            }
        return result, problems


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.replay", description=(bench.replay.__doc__ or "").split("\n\n")[0]
    )
    ap.add_argument("--quick", action="store_true", help="100,000 events over 20,000 memories, 100 queries per kind")
    ap.add_argument(
        "--keep", action="store_true", help="keep the temporary directory (DuckDB files, Edge shards, profiles)"
    )
    ap.add_argument("--no-profile", action="store_true", help="do not sample with py-spy")
    ap.add_argument("--no-vectors-only", action="store_true", help="skip the vectors-only replay")
    ap.add_argument("--cache", default=str(DEFAULT_CACHE), help=f"embedding cache file (default {DEFAULT_CACHE})")
    ap.add_argument(
        "--fresh-cache",
        action="store_true",
        help="an empty cache in the temporary directory, filled before anything is timed",
    )
    ap.add_argument("--events", type=int)
    ap.add_argument("--memories", type=int)
    ap.add_argument("--pool", type=int)
    ap.add_argument("--queries", type=int)
    ap.add_argument("--stall-seconds", type=float, help=argparse.SUPPRESS)  # (to test the stalled path)
    args = ap.parse_args(argv)
    if args.stall_seconds:
        replays.STALL_S = args.stall_seconds
    cfg = Config.quick() if args.quick else Config.full()
    over = {k: getattr(args, k) for k in ("events", "memories", "pool", "queries") if getattr(args, k) is not None}
    if over:
        cfg = dataclasses.replace(cfg, **over)
    gc_policy.tune()  # the replays run in this process, with the GC settings `mneme replay` has
    try:
        result, problems = asyncio.run(amain(cfg, args))
    except (KeyboardInterrupt, asyncio.CancelledError):
        log("interrupted: children stopped" + ("" if args.keep else ", temporary directory removed"))
        sys.exit(130)
    emit_json(result)
    if problems:
        for line in problems:
            log(f"FAILED: {line}")
        sys.exit(1)


if __name__ == "__main__":
    main()
