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


async def phase_paced(cfg: Config, root: Path, shape: str) -> dict[str, Any]:
    """Paced writes with the trail followed in one deployment shape.

    distributed: this process is the gateway's core only; `mneme projector` (it answers the write
    path's queries), the real `mneme auditor` and the probe auditor each run in their own process.
    serve: this process is the gateway's core, a projector, and an auditor whose own followers fold into
    a TimedTrail (runtime.serve's wiring).
    """
    distributed = shape == "distributed"
    tag = "(1a)" if distributed else "(1b)"
    out: dict[str, Any] = {"shape": shape}
    root.mkdir(parents=True, exist_ok=True)
    async with AsyncExitStack() as stack:
        srv = await fixtures.start_nats(stack, root / "nats", f"bench-audit-{shape}")
        url, nc, js = srv.url, srv.nc, srv.js
        log(f"{tag} {shape} shape; nats-server at {url}")
        pids = {"bench": os.getpid(), "nats": srv.pid}

        if distributed:
            proj_dir, real_dir, probe_dir = root / "projector", root / "auditor", root / "probe"
            for d in (proj_dir, real_dir, probe_dir):
                d.mkdir()
            proj_log, real_log, probe_log = root / "projector.log", root / "auditor.log", root / "probe.log"
            proj = spawn(
                [MNEME, "projector", "--nats-url", url, "--data-dir", str(proj_dir)], log_path=proj_log, cwd=REPO
            )
            stack.push_async_callback(stop_child, proj)
            real = spawn(
                [MNEME, "auditor", "--nats-url", url, "--data-dir", str(real_dir)], log_path=real_log, cwd=REPO
            )
            stack.push_async_callback(stop_child, real)
            probe = spawn(
                [sys.executable, "-m", "bench.audit", "--probe-auditor", str(probe_dir), "--nats-url", url],
                log_path=probe_log,
                cwd=REPO,
            )
            stack.push_async_callback(stop_child, probe)
            pids.update(projector=proj.pid, auditor=real.pid, probe=probe.pid)
        else:
            serve_dir = root / "serve"
            serve_dir.mkdir()
            ps = ProjectorSettings()
            view = fixtures.memories_view(serve_dir / ps.db_name)
            stack.callback(view.close)
            trail = fixtures.trail(serve_dir / TRAIL_FILE, TimedTrail)
            stack.callback(trail.close)
            # runtime.serve's wiring: the projector, and the auditor on followers of its own
            projector = fixtures.projector(nc, view, ps)
            serve_commits = time_commits(projector.follower.sink)  # the projection's commit
            await projector.start()
            stack.push_async_callback(projector.stop)
            auditor = compose.auditor(nc, trail)
            await auditor.start()
            stack.push_async_callback(auditor.stop)
            await projector.serving.wait()

        loop_delay = LoopDelay()
        delay_task = asyncio.create_task(loop_delay.run())
        stack.callback(delay_task.cancel)
        floor = DeliveryFloor()
        await floor.start(js)
        stack.push_async_callback(floor.stop)
        if distributed:
            await wait_projector_ready(nc, proj, proj_log)
            await wait_auditor_ready(nc, real, real_log)
            await wait_file(probe_dir / "ready", probe, probe_log)
            log(f"{tag} `mneme projector`, `mneme auditor` and the probe auditor are following the log")

        gs = GatewaySettings()
        elog = TimedEventLog(js, timeout=gs.publish_timeout, connected=lambda: nc.is_connected)
        queries = QueryClient(nc, timeout=gs.query_timeout)
        gw = Gateway(
            commands=CommandService(elog, queries),
            queries=queries,
            log=elog,
            access=AccessLog(js),
            principal=Principal(agent_id="bench-agent"),
        )
        load = Load(gw, elog, Corpus(seed=42).texts(2000), random.Random(5))

        log(f"{tag} warm-up: {cfg.warmup_s:.0f} s at {cfg.rate:,.0f} writes/s")
        await drive(load, cfg, cfg.warmup_s)
        await gw.access.flush()
        await asyncio.sleep(0.5)
        load.reset()

        meter = CpuMeter(pids)
        log(f"{tag} measuring: {cfg.paced_s:.0f} s at {cfg.rate:,.0f} writes/s")
        since = time.time()
        sys0 = system_cpu_seconds()
        meter.start()
        started, elapsed = await drive(load, cfg, cfg.paced_s)
        await gw.access.flush()
        until_wall = time.time()
        last_evt = (await js.stream_info(S.EVENTS_STREAM)).state.last_seq
        last_acc = (await js.stream_info(S.ACCESS_STREAM)).state.last_seq
        log(
            f"{tag} {load.writes:,} writes and {load.reads:,} reads in {elapsed:.2f} s; log at {last_evt:,} events, "
            f"{last_acc:,} access records"
        )
        if distributed:
            await asyncio.sleep(0.3)  # the auditors commit the tail on their own (linger)
        else:  # the serve shape commits on its own (linger): no query forces it
            drain = await until(
                lambda: auditor.followers[0].committed >= last_evt and auditor.followers[1].committed >= last_acc,
                60,
                "the serve-shape trail to commit",
            )
            out["drain_after_last_write_ms"] = rnd(drain * 1000, 1)
        cpu = meter.stop()
        span = time.time() - since  # the window and the drain
        busy = system_cpu_seconds() - sys0
        cpu["others"] = max(0.0, busy - sum(cpu.values()))  # other processes on this (shared) machine

        if distributed:
            # the real auditor: an admin's audit query for the last write (it commits what it has staged first)
            t = time.perf_counter()
            applied, _ = await audit_ask(nc, min_seq=last_evt)
            real_visible = time.perf_counter() - t
            if applied < last_evt:
                raise RuntimeError(f"`mneme auditor` had committed {applied} of {last_evt} events 10 s after asked")
            await until_total(nc, last_acc)
            await asyncio.sleep(1.0)  # the probe commits on its own (linger) before it is stopped
            log(f"{tag} stopping the probe, `mneme auditor` and `mneme projector`")
            probe_code = await stop_child(probe)
            real_code = await stop_child(real)
            proj_code = await stop_child(proj)
            await floor.stop()
            if probe_code != 0:
                raise RuntimeError(f"probe auditor exited with {probe_code}: {tail(probe_log)}")
            commits = [tuple(c) for c in json.loads((probe_dir / "commits.json").read_text())]
            ptrail = fixtures.trail(probe_dir / TRAIL_FILE)
            try:
                lags, uncovered = trail_lags(ptrail.con, commits, since, until_wall)
                out["trail"] = {
                    **lag_block(lags, since, until_wall),
                    "uncovered": uncovered,
                    **commit_stats(commits, since, until_wall),
                    "verify": verify_trail(ptrail, last_evt, last_acc),
                }
            finally:
                ptrail.close()
            out["mneme_auditor"] = {
                "exit_code": real_code,
                "audit_query_saw_last_write_ms": rnd(real_visible * 1000, 1),
                "verify": check_trail(real_dir / TRAIL_FILE, last_evt, last_acc),
            }
            out["mneme_projector_exit_code"] = proj_code
        else:
            log(f"{tag} stopping the in-process projector")
            await floor.stop()
            await auditor.stop()
            await projector.stop()
            lags, uncovered = trail_lags(trail.con, trail.commits, since, until_wall)
            out["trail"] = {
                **lag_block(lags, since, until_wall),
                "uncovered": uncovered,
                **commit_stats(trail.commits, since, until_wall),
                "projection_commit": latency_summary([d for w, d in serve_commits if since <= w < until_wall]),
                "verify": verify_trail(trail, last_evt, last_acc),
            }

        window = until_wall - since
        n_rec = out["trail"]["lag_all"]["n"]
        out["floor_delivery"] = {"lag_all": lag_summary(floor.lags(since, until_wall), since, until_wall)}
        out["bench_event_loop_delay"] = loop_delay.summary(since, until_wall)
        out["load"] = {
            "rate_target": cfg.rate,
            "seconds": rnd(elapsed, 3),
            "writes_started": started,
            "writes": load.writes,
            "writes_per_s": rnd(load.writes / elapsed, 1),
            "path_writes": load.path_writes,
            "reads": load.reads,
            "failures": load.failures,
            "first_failure": load.first_failure,
            "throttled": load.throttled,
            "conflicts": load.elog.conflicts,
            "write_latency_from_schedule": latency_summary(load.write_lat),
            "read_latency": latency_summary(load.read_lat),
            "log_events": last_evt,
            "log_access_records": last_acc,
            "window_s": rnd(window, 3),
            "records_in_window": n_rec,
            "records_per_s": rnd(n_rec / window, 1),
        }
        out["cpu_ms_per_record"] = {k: rnd(v * 1000 / n_rec, 4) if n_rec else None for k, v in cpu.items()}
        out["cpu_share_of_a_core"] = {k: rnd(v / span, 3) for k, v in cpu.items()}
        log(f"{tag} done")
    return out
