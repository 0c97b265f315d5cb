"""bench.replay's entry point: `python -m bench.replay [--quick] [--keep] [--no-profile] [--no-vectors-only]
[--cache PATH] [--fresh-cache] [--events N] [--memories N] [--pool N] [--queries N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bench.replay
from bench import fixtures
from bench.common import log, machine_info, rnd
from bench.fixtures import run_dir
from bench.replay import replays
from bench.replay.corpus import DEFAULT_CACHE, Config, LogFacts, log_events, pool_texts, prefill_cache
from bench.replay.instruments import Meter, Noise, Profiler
from bench.replay.latency import latency
from bench.replay.replays import Bed, floor_once, run_replay, vectors_only
from bench.replay.report import ReplayRun, report
from bench.runner import Bench, Size, mode_of
from bench.synthetic import publish
from mneme.app import gc_policy
from mneme.app.settings import CoreSettings, ProjectorSettings
from schemas import subjects as S

BENCH = Bench(
    "replay",
    bench.replay.__doc__,
    quick="100,000 events over 20,000 memories, 100 queries per kind",
    keep="keep the temporary directory (DuckDB files, Edge shards, profiles)",
    sizes={k: Size(f"--{k}", int, f"{k} (default: full or quick)") for k in ("events", "memories", "pool", "queries")},
)


async def the_log(js: Any, cfg: Config, pool: list[str], facts: LogFacts) -> dict[str, Any]:
    """(0): the log published (its facts noted as it goes) and checked."""
    log(f"(0) publishing {cfg.events:,} events over {cfg.memories:,} memories")
    t = time.perf_counter()
    last = await publish(js, log_events(cfg, pool, facts), window=1024)
    pub_s = time.perf_counter() - t
    info = (await js.stream_info(S.EVENTS_STREAM)).state
    if info.last_seq != cfg.events or info.messages != cfg.events or last != cfg.events:
        raise RuntimeError(f"the log holds {info.messages} messages up to {info.last_seq}, not {cfg.events}")
    target = info.last_seq
    log(f"(0) published {target:,} events ({info.bytes / 1e6:,.0f} MB) in {pub_s:.1f} s")
    return {"events": target, "bytes": info.bytes, "mean_event_bytes": rnd(info.bytes / target, 1),
            "publish_seconds": rnd(pub_s, 2), "publish_per_s": rnd(target / pub_s, 1),
            "memories_created": len(facts.created), "memories_deleted": len(facts.ended),
            "by_type": dict(sorted(facts.by_type.items(), key=lambda x: -x[1])),
            "content_updates": facts.content_changes, "distinct_texts_used": len(facts.texts_used),
            "namespaces": cfg.namespaces, "pool": cfg.pool}  # fmt: skip


class Floors:
    """(1): the receive-and-decode floor, round by round: seconds, CPU and NATS trouble per round."""

    def __init__(self, bed: Bed):
        self.bed = bed
        self.seconds: list[float] = []
        self.cpu: list[dict[str, Any]] = []
        self.nats: list[dict[str, int]] = []

    async def round(self, r: int) -> None:
        bed = self.bed
        await asyncio.sleep(0.5)
        mark = bed.noise.mark()
        bed.meter.start()
        self.seconds.append(await floor_once(bed.js, bed.target))
        self.cpu.append(bed.meter.stop())
        if bed.noise.since(mark):
            log(f"(1) floor round {r + 1}: NATS: {bed.noise.since(mark)}")
        self.nats.append(bed.noise.since(mark))
        log(f"(1) floor round {r + 1}: {bed.target / self.seconds[-1]:,.0f} events/s ({self.seconds[-1]:.2f} s)")


def whole(r: dict[str, Any] | None) -> bool:
    """A replay that did not fail, did not stall and skipped no event."""
    if not r:
        return False
    return not r.get("failed") and not r.get("stalled_at") and not (r.get("folded") or {}).get("missing_events")


def served(
    tmp: Path, full: dict[str, Any], duck: dict[str, Any], vec: dict[str, Any] | None
) -> tuple[Path, Path, str | None]:
    """Which generation (3) serves: the full replay's, or if it is not whole (a stalled replay still holds its
    files) the DuckDB-only rows with the vectors-only index."""
    if whole(full):
        return tmp / "gen-full", tmp / "gen-full", None
    note = "the full replay is not whole: served the DuckDB-only rows with the vectors-only index"
    if not (whole(duck) and whole(vec)):
        note += " (NOT whole either: figures at a smaller effective size)"
    log(f"(3) {note}")
    return tmp / "gen-duckdb", tmp / "gen-vectors", note


async def safe_latency(bed: Bed, cfg: Config, facts: LogFacts, tmp: Path, dirs: tuple[Path, Path]) -> dict[str, Any]:
    """(3), or why it could not run."""
    try:
        return await latency(bed, cfg, facts, dirs[0], dirs[1], tmp)
    except Exception as exc:  # noqa: BLE001 - reported
        log(f"(3) latency phase failed: {type(exc).__name__}: {exc}")
        return {"skipped": f"{type(exc).__name__}: {exc}", "latency": {}, "found": {}, "hits_mean": {}, "failures": 0,
                "first_failures": []}  # fmt: skip


@dataclass
class Measured:
    """What (0) to (3) measured: the cache, the log, the floor rounds, the replays, the latency."""

    pre: dict[str, Any] = field(default_factory=dict)
    logd: dict[str, Any] = field(default_factory=dict)
    floors: Floors | None = None
    full: dict[str, Any] = field(default_factory=dict)
    duck: dict[str, Any] = field(default_factory=dict)
    vec: dict[str, Any] | None = None
    lat: dict[str, Any] = field(default_factory=dict)


async def phases(args: argparse.Namespace, cfg: Config, tmp: Path, run: Measured) -> None:
    """(0) to (3), into `run`."""
    cache_path = tmp / "embeddings.sqlite" if args.fresh_cache else Path(args.cache).expanduser()
    noise = Noise(tmp / "nats" / "nats-server.log")
    mlog = logging.getLogger("mneme")
    mlog.addHandler(noise)
    mlog.propagate = False  # counted instead of printed (a replay can log hundreds of thousands)
    async with AsyncExitStack() as stack:  # the connection closed, then the server stopped
        srv = await fixtures.start_nats(stack, tmp / "nats", "bench-replay")
        ps = ProjectorSettings(embedding_cache=str(cache_path.resolve()))
        pool = pool_texts(cfg.pool)
        log(f"(0) {len(pool):,} pool texts; filling the embedding cache {cache_path}")
        pre = await asyncio.to_thread(prefill_cache, cache_path, ps.embedding_model, pool, ps.embedding_threads)
        run.pre = pre
        log(f"(0) cache: {pre['already_cached']:,} already there, {pre['embedded_now']:,} embedded now in "
            f"{pre['embed_seconds']} s")  # fmt: skip
        facts = LogFacts()
        run.logd = await the_log(srv.js, cfg, pool, facts)
        core = CoreSettings(data_dir=tmp / "data", nats_url=srv.url)
        bed = Bed(core, ps, srv.nc, run.logd["events"], Meter({"bench": os.getpid(), "nats": srv.pid}), noise)
        run.floors = floors = Floors(bed)

        def profiler(name: str) -> Profiler | None:
            return Profiler(tmp / f"profile-{name}.txt", not args.no_profile)

        await floors.round(0)
        run.full = await run_replay(bed, "full (DuckDB + vectors)", ps, tmp / "gen-full", None)
        await floors.round(1)
        ps_off = ps.model_copy(update={"vectors": "off"})
        run.duck = await run_replay(bed, "DuckDB only", ps_off, tmp / "gen-duckdb", profiler("duckdb"))
        run.vec = None if args.no_vectors_only else await vectors_only(bed, tmp / "gen-vectors", profiler("vectors"))
        for r in range(2, cfg.floor_rounds):
            await floors.round(r)
        mark = noise.mark()
        view_dir, vec_dir, note = served(tmp, run.full, run.duck, run.vec)
        run.lat = await safe_latency(bed, cfg, facts, tmp, (view_dir, vec_dir))
        run.lat["note"] = note
        run.lat["nats"] = noise.since(mark)


def figures(
    m: Measured, cfg: Config, mode: str, machine: dict[str, Any], wall: float, problems: list[str]
) -> dict[str, Any]:
    """The report, or if it failed the figures as they are (they still go out as JSON)."""
    assert m.floors is not None
    fl = m.floors
    try:
        run = ReplayRun(cfg, mode, machine, m.pre, m.logd, fl.seconds, fl.cpu, m.full, m.duck, m.vec, m.lat, wall)
        result = report(run, problems)
        result["floor"]["nats"] = fl.nats
        return result
    except Exception as exc:  # noqa: BLE001 - the figures still go out as JSON
        import traceback

        traceback.print_exc()
        problems.append(f"report failed: {type(exc).__name__}: {exc}")
        return {"bench": "replay", "report_error": str(exc), "machine": machine, "config": dataclasses.asdict(cfg),
                "cache": m.pre, "log": m.logd, "floor_seconds": fl.seconds, "floor_nats": fl.nats,
                "replay_full": m.full, "replay_duckdb_only": m.duck, "vectors_only": m.vec,
                "latency": m.lat}  # fmt: skip


async def amain(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    cfg = BENCH.config(args, Config.quick, Config.full)
    machine = machine_info()
    started = time.perf_counter()
    problems: list[str] = []
    measured = Measured()
    async with run_dir("replay", args.keep) as tmp:  # SIGTERM unwinds like Ctrl-C: children stopped, directory removed
        await phases(args, cfg, tmp, measured)
        wall = time.perf_counter() - started
        return figures(measured, cfg, mode_of(args), machine, wall, problems), problems


def main(argv: list[str] | None = None) -> None:
    ap = BENCH.parser()
    ap.add_argument("--no-profile", action="store_true", help="do not sample with py-spy")
    ap.add_argument("--no-vectors-only", action="store_true", help="skip the vectors-only replay")
    ap.add_argument("--cache", default=str(DEFAULT_CACHE), help=f"embedding cache file (default {DEFAULT_CACHE})")
    ap.add_argument("--fresh-cache", action="store_true",
                    help="an empty cache in the temporary directory, filled before anything is timed")  # fmt: skip
    ap.add_argument("--stall-seconds", type=float, help=argparse.SUPPRESS)  # (to test the stalled path)
    args = ap.parse_args(argv)
    if args.stall_seconds:
        replays.STALL_S = args.stall_seconds
    gc_policy.tune()  # the replays run in this process, with the GC settings `mneme replay` has
    BENCH.run(amain, args)


if __name__ == "__main__":
    main()
