"""bench.audit (1): paced writes with the trail followed, in one deployment shape (distributed or serve)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats.errors
from nats.aio.client import Client as NATS

from bench import fixtures
from bench.audit.auditor import audit_ask, until_total, wait_auditor_ready
from bench.audit.config import NS, TRAIL_FILE, Config
from bench.audit.load import DeliveryFloor, Load, LoopDelay, drive, time_commits
from bench.audit.trail import TimedTrail, check_trail, commit_stats, lag_block, lag_summary, trail_lags, verify_trail
from bench.common import CpuMeter, latency_summary, log, rnd, spawn, system_cpu_seconds
from bench.fixtures import MNEME, REPO, stop_child, tail, until, wait_file
from bench.workload import Corpus, TimedEventLog
from mneme.app import compose
from mneme.app.settings import GatewaySettings, ProjectorSettings
from mneme.principals import Principal
from schemas import subjects as S
from schemas.queries import PathOwner
from schemas.queries import encoder as query_encoder
from services.auditor.trail import Trail
from services.gateway.access_log import AccessLog
from services.gateway.commands import CommandService
from services.gateway.gateway import Gateway
from services.gateway.queries import QueryClient

# -- phase 1: paced writes, three trails following -----------------------------------------------------------


async def wait_projector_ready(nc: NATS, proc: subprocess.Popen[bytes], log_path: Path, timeout: float = 60) -> None:
    """Until `mneme projector` answers a PathOwner query (it joins the query group once caught up)."""
    deadline = time.perf_counter() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"`mneme projector` exited with {proc.returncode}: {tail(log_path)}")
        q = PathOwner(namespace=NS, now=datetime.now(UTC), store="s0", path="probe")
        try:
            await nc.request(S.query_subject(PathOwner.OPERATION), query_encoder.encode(q), timeout=5)
            return
        except (TimeoutError, nats.errors.NoRespondersError, nats.errors.TimeoutError):
            pass
        if time.perf_counter() > deadline:
            raise RuntimeError(f"`mneme projector` did not answer within {timeout} s: {tail(log_path)}")
        await asyncio.sleep(0.01)


@dataclass
class Window:
    """The measured window: wall times, and the log's heads when the writes ended."""

    since: float
    until: float
    last_evt: int
    last_acc: int


class Distributed:
    """(1a): this process is the gateway's core only; `mneme projector` (it answers the write path's queries),
    the real `mneme auditor` and the probe auditor each run in their own process."""

    tag = "(1a)"

    def __init__(self, root: Path):
        self.root = root
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def path(self, name: str, suffix: str = "") -> Path:
        return self.root / f"{name}{suffix}"

    async def start(self, stack: AsyncExitStack, srv: fixtures.Nats, pids: dict[str, int]) -> None:
        url = srv.url
        argv = {
            "projector": [MNEME, "projector", "--nats-url", url, "--data-dir", str(self.path("projector"))],
            "auditor": [MNEME, "auditor", "--nats-url", url, "--data-dir", str(self.path("auditor"))],
            "probe": [
                sys.executable,
                "-m",
                "bench.audit",
                "--probe-auditor",
                str(self.path("probe")),
                "--nats-url",
                url,
            ],
        }
        for name in argv:
            self.path(name).mkdir()
        for name, args in argv.items():
            self.procs[name] = spawn(args, log_path=self.path(name, ".log"), cwd=REPO)
            stack.push_async_callback(stop_child, self.procs[name])
        pids.update({name: proc.pid for name, proc in self.procs.items()})

    async def ready(self, nc: NATS) -> None:
        await wait_projector_ready(nc, self.procs["projector"], self.path("projector", ".log"))
        await wait_auditor_ready(nc, self.procs["auditor"], self.path("auditor", ".log"))
        await wait_file(self.path("probe") / "ready", self.procs["probe"], self.path("probe", ".log"))
        log(f"{self.tag} `mneme projector`, `mneme auditor` and the probe auditor are following the log")

    async def drain(self, w: Window, out: dict[str, Any]) -> None:
        await asyncio.sleep(0.3)  # the auditors commit the tail on their own (linger)

    async def finish(self, nc: NATS, floor: DeliveryFloor, w: Window, out: dict[str, Any]) -> None:
        # the real auditor: an admin's audit query for the last write (it commits what it has staged first)
        t = time.perf_counter()
        applied, _ = await audit_ask(nc, min_seq=w.last_evt)
        real_visible = time.perf_counter() - t
        if applied < w.last_evt:
            raise RuntimeError(f"`mneme auditor` had committed {applied} of {w.last_evt} events 10 s after asked")
        await until_total(nc, w.last_acc)
        await asyncio.sleep(1.0)  # the probe commits on its own (linger) before it is stopped
        log(f"{self.tag} stopping the probe, `mneme auditor` and `mneme projector`")
        codes = {name: await stop_child(self.procs[name]) for name in ("probe", "auditor", "projector")}
        await floor.stop()
        if codes["probe"] != 0:
            raise RuntimeError(f"probe auditor exited with {codes['probe']}: {tail(self.path('probe', '.log'))}")
        commits = [tuple(c) for c in json.loads((self.path("probe") / "commits.json").read_text())]
        ptrail = fixtures.trail(self.path("probe") / TRAIL_FILE)
        try:
            out["trail"] = trail_figures(ptrail, commits, w)
        finally:
            ptrail.close()
        out["mneme_auditor"] = {
            "exit_code": codes["auditor"],
            "audit_query_saw_last_write_ms": rnd(real_visible * 1000, 1),
            "verify": check_trail(self.path("auditor") / TRAIL_FILE, w.last_evt, w.last_acc),
        }
        out["mneme_projector_exit_code"] = codes["projector"]


class Serve:
    """(1b): this process is the gateway's core, a projector, and an auditor whose own followers fold into a
    TimedTrail (runtime.serve's wiring)."""

    tag = "(1b)"

    def __init__(self, root: Path):
        self.root = root

    async def start(self, stack: AsyncExitStack, srv: fixtures.Nats, pids: dict[str, int]) -> None:
        serve_dir = self.root / "serve"
        serve_dir.mkdir()
        ps = ProjectorSettings()
        view = fixtures.memories_view(serve_dir / ps.db_name)
        stack.callback(view.close)
        self.trail = fixtures.trail(serve_dir / TRAIL_FILE, TimedTrail)
        stack.callback(self.trail.close)
        # runtime.serve's wiring: the projector, and the auditor on followers of its own
        self.projector = fixtures.projector(srv.nc, view, ps)
        self.commits = time_commits(self.projector.follower.sink)  # the projection's commit
        await self.projector.start()
        stack.push_async_callback(self.projector.stop)
        self.auditor = compose.auditor(srv.nc, self.trail)
        await self.auditor.start()
        stack.push_async_callback(self.auditor.stop)
        await self.projector.serving.wait()

    async def ready(self, nc: NATS) -> None:
        pass

    async def drain(self, w: Window, out: dict[str, Any]) -> None:
        """The serve shape commits on its own (linger): no query forces it."""
        ev, ac = self.auditor.followers
        drain = await until(
            lambda: ev.committed >= w.last_evt and ac.committed >= w.last_acc, 60, "the serve-shape trail to commit"
        )
        out["drain_after_last_write_ms"] = rnd(drain * 1000, 1)

    async def finish(self, nc: NATS, floor: DeliveryFloor, w: Window, out: dict[str, Any]) -> None:
        log(f"{self.tag} stopping the in-process projector")
        await floor.stop()
        await self.auditor.stop()
        await self.projector.stop()
        out["trail"] = {
            **trail_figures(self.trail, self.trail.commits, w),
            "projection_commit": latency_summary([d for t, d in self.commits if w.since <= t < w.until]),
        }
        out["trail"]["verify"] = out["trail"].pop("verify")  # (last, as it was)


def trail_figures(trail: Trail, commits: list[Any], w: Window) -> dict[str, Any]:
    """Each record's lag, the records no noted commit covers, the commits, and the chain verified."""
    lags, uncovered = trail_lags(trail.con, commits, w.since, w.until)
    return {
        **lag_block(lags, w.since, w.until),
        "uncovered": uncovered,
        **commit_stats(commits, w.since, w.until),
        "verify": verify_trail(trail, w.last_evt, w.last_acc),
    }


def gateway(srv: fixtures.Nats) -> tuple[Gateway, TimedEventLog]:
    """The gateway's core as `mneme serve` builds it, and its event log (timed)."""
    gs = GatewaySettings()
    nc = srv.nc
    elog = TimedEventLog(srv.js, timeout=gs.publish_timeout, connected=lambda: nc.is_connected)
    queries = QueryClient(nc, timeout=gs.query_timeout)
    gw = Gateway(
        commands=CommandService(elog, queries),
        queries=queries,
        log=elog,
        access=AccessLog(srv.js),
        principal=Principal(agent_id="bench-agent"),
    )
    return gw, elog


async def paced(
    cfg: Config, load: Load, shape: Distributed | Serve, js: Any, meter: CpuMeter
) -> tuple[Window, dict[str, Any]]:
    """The warm-up, then the measured writes and the trail's drain: the window, and what the load did."""
    gw, tag = load.gw, shape.tag
    log(f"{tag} warm-up: {cfg.warmup_s:.0f} s at {cfg.rate:,.0f} writes/s")
    await drive(load, cfg, cfg.warmup_s)
    await gw.access.flush()
    await asyncio.sleep(0.5)
    load.reset()
    log(f"{tag} measuring: {cfg.paced_s:.0f} s at {cfg.rate:,.0f} writes/s")
    since = time.time()
    sys0 = system_cpu_seconds()
    meter.start()
    started, elapsed = await drive(load, cfg, cfg.paced_s)
    await gw.access.flush()
    w = Window(since, time.time(), 0, 0)
    w.last_evt = (await js.stream_info(S.EVENTS_STREAM)).state.last_seq
    w.last_acc = (await js.stream_info(S.ACCESS_STREAM)).state.last_seq
    log(f"{tag} {load.writes:,} writes and {load.reads:,} reads in {elapsed:.2f} s; log at {w.last_evt:,} events, "
        f"{w.last_acc:,} access records")  # fmt: skip
    run: dict[str, Any] = {"started": started, "elapsed": elapsed}
    await shape.drain(w, run)
    cpu = meter.stop()
    run["span"] = time.time() - since  # the window and the drain
    cpu["others"] = max(0.0, system_cpu_seconds() - sys0 - sum(cpu.values()))  # other processes on this machine
    run["cpu"] = cpu
    return w, run


def load_figures(cfg: Config, load: Load, w: Window, run: dict[str, Any], n_rec: int) -> dict[str, Any]:
    window = w.until - w.since
    return {
        "rate_target": cfg.rate,
        "seconds": rnd(run["elapsed"], 3),
        "writes_started": run["started"],
        "writes": load.writes,
        "writes_per_s": rnd(load.writes / run["elapsed"], 1),
        "path_writes": load.path_writes,
        "reads": load.reads,
        "failures": load.failures,
        "first_failure": load.first_failure,
        "throttled": load.throttled,
        "conflicts": load.elog.conflicts,
        "write_latency_from_schedule": latency_summary(load.write_lat),
        "read_latency": latency_summary(load.read_lat),
        "log_events": w.last_evt,
        "log_access_records": w.last_acc,
        "window_s": rnd(window, 3),
        "records_in_window": n_rec,
        "records_per_s": rnd(n_rec / window, 1),
    }


async def phase_paced(cfg: Config, root: Path, shape_name: str) -> dict[str, Any]:
    """Paced writes with the trail followed in one deployment shape: distributed (Distributed) or serve (Serve)."""
    shape = Distributed(root) if shape_name == "distributed" else Serve(root)
    out: dict[str, Any] = {"shape": shape_name}
    root.mkdir(parents=True, exist_ok=True)
    async with AsyncExitStack() as stack:
        srv = await fixtures.start_nats(stack, root / "nats", f"bench-audit-{shape_name}")
        log(f"{shape.tag} {shape_name} shape; nats-server at {srv.url}")
        pids = {"bench": os.getpid(), "nats": srv.pid}
        await shape.start(stack, srv, pids)
        loop_delay = LoopDelay()
        delay_task = asyncio.create_task(loop_delay.run())
        stack.callback(delay_task.cancel)
        floor = DeliveryFloor()
        await floor.start(srv.js)
        stack.push_async_callback(floor.stop)
        await shape.ready(srv.nc)
        gw, elog = gateway(srv)
        load = Load(gw, elog, Corpus(seed=42).texts(2000), random.Random(5))
        w, run = await paced(cfg, load, shape, srv.js, CpuMeter(pids))
        out.update({k: v for k, v in run.items() if k == "drain_after_last_write_ms"})
        await shape.finish(srv.nc, floor, w, out)
        n_rec = out["trail"]["lag_all"]["n"]
        out["floor_delivery"] = {"lag_all": lag_summary(floor.lags(w.since, w.until), w.since, w.until)}
        out["bench_event_loop_delay"] = loop_delay.summary(w.since, w.until)
        out["load"] = load_figures(cfg, load, w, run, n_rec)
        cpu, span = run["cpu"], run["span"]
        out["cpu_ms_per_record"] = {k: rnd(v * 1000 / n_rec, 4) if n_rec else None for k, v in cpu.items()}
        out["cpu_share_of_a_core"] = {k: rnd(v / span, 3) for k, v in cpu.items()}
        log(f"{shape.tag} done")
    return out
