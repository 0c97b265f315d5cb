"""bench.audit — the compliance trail under write load: its lag and its throughput, each beside a floor.

    python -m bench.audit            # full run (about 2 minutes on 2 cores)
    python -m bench.audit --quick    # short run (well under 2 minutes)
    options: --keep (keep the temporary directory), --paced-only, and for experiments
    --rate, --seconds, --path-every, --stores, --read-every

Two phases, each against its own embedded nats-server on 127.0.0.1 (streams from ensure_streams):

(1) paced writes. Writes at a fixed rate (1,000/s: 20 s measured after 2 s of warm-up; 5 s after 1 s
    with --quick) go through the gateway's core (`Gateway.run` around `CommandService.create`, the
    body of the memory_add tool without MCP framing); every 10th write claims a store+path (a
    PathOwner query to a projector first; 64 stores); after every 20th write a memory_get body (two
    GetMemory queries) leaves a read record through the gateway's AccessLog. Open loop: a write that
    waits on a slow projector does not delay the next one. The run says whether the rate held and how
    much CPU other processes on the machine took meanwhile. Twice, one deployment shape each:
    (1a) distributed: this process is the gateway only; `mneme projector --nats-url` answers the write
      path's queries; the real `mneme auditor --nats-url URL --data-dir DIR` (untouched: verified and
      counted afterwards, and asked one audit query for the last write) and a probe auditor
      (`python -m bench.audit --probe-auditor`: the Auditor's two followers with AuditorSettings
      defaults, around a trail that notes when each commit finished) each run in their own process;
    (1b) serve: this process holds the gateway and a projector whose followers also feed the trail,
      with an Auditor answering audit queries through them, wired as in `mneme serve`; nothing else
      follows the log.
    Lag of a record = wall time its commit finished − the log's timestamp for it (`recorded_at`, the
    stream's own time). DuckDB lets one process hold a file, so the probe notes (first, last trail
    sequence, wall time) per commit and the lags are read from the file after it closes. Floor: the
    delivery lag of a raw ordered consumer in this process (receive time − stream time).
(2) catch-up from a backlog: a fresh log of 100,000 events (20,000 with --quick; mneme.synthetic
    history: creates, updates, moves, archives, deletes) plus one read record per 10 events. Per
    round, in a rotating order: the floor (two raw ordered consumers, events and access, receiving and
    decoding every message in this process), the Auditor's followers into a fresh trail in this
    process, and the real `mneme auditor` on a fresh data dir (timed from when it first answers an
    audit query, i.e. its followers are running, until an audit query shows every record committed).

Every trail is verified at the end (hash chain unbroken; records = events + access records, per
source); a failure is printed and the process exits 1 after the JSON line. Everything runs under
one temporary directory that is removed at the end; every child process is stopped, even on error.
Progress goes to stderr; stdout is the tables, then one JSON object with all figures as its LAST line.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from bisect import bisect_left
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import nats.errors
from nats.aio.client import Client as NATS
from nats.js.api import ConsumerConfig, DeliverPolicy

from bench.common import (
    CpuMeter,
    cpu_seconds,
    emit_json,
    latency_summary,
    log,
    machine_info,
    median,
    percentile,
    print_table,
    rnd,
    spawn,
    stop_process,
    system_cpu_seconds,
    verdict,
)
from bench.workload import Corpus, TimedEventLog
from mneme.embedded_nats import EmbeddedNats
from mneme.eventlog import ensure_streams
from mneme.ids import event_id_for, new_id
from mneme.principals import Principal
from mneme.runtime import close_nats, connect
from mneme.settings import AuditorSettings, GatewaySettings, ProjectorSettings
from mneme.synthetic import history, publish
from schemas import subjects as S
from schemas.access import ReadRecorded, decode_access, encode_access
from schemas.commands import CreateMemory
from schemas.events import decode_envelope
from schemas.queries import AuditQuery, AuditResult, GetMemory, PathOwner, Reply
from schemas.queries import encoder as query_encoder
from services.auditor.service import Auditor
from services.auditor.trail import ACCESS, EVENTS, Trail
from services.gateway.access_log import AccessLog
from services.gateway.commands import CommandService
from services.gateway.gateway import Call, Gateway
from services.gateway.queries import QueryClient
from services.projector.memories_view import MemoriesView
from services.projector.service import Projector

REPO = Path(__file__).resolve().parent.parent
MNEME = str(Path(sys.executable).parent / "mneme")
NS = "default"
TAGS = ("bench", "audit")
LAG_P99_TARGET_MS = 200.0
TRAIL_FILE = AuditorSettings().db_name
SLICES = 4  # lag p99 is also given per quarter of the window, to show drift and noise


@dataclass(frozen=True)
class Config:
    rate: float  # writes/s, paced
    warmup_s: float
    paced_s: float
    path_every: int  # every n-th write claims a store+path
    stores: int  # path writes spread over this many stores (each store is one expected-sequence guard)
    read_every: int  # a memory_get after every n-th write
    max_in_flight: int  # open loop: a write waiting on a lagging projector does not hold back the next
    backlog_events: int
    backlog_access: int
    rounds: int

    @staticmethod
    def full() -> Config:
        return Config(
            rate=1000,
            warmup_s=2,
            paced_s=20,
            path_every=10,
            stores=64,
            read_every=20,
            max_in_flight=2000,
            backlog_events=100_000,
            backlog_access=10_000,
            rounds=3,
        )

    @staticmethod
    def quick() -> Config:
        return Config(
            rate=1000,
            warmup_s=1,
            paced_s=5,
            path_every=10,
            stores=64,
            read_every=20,
            max_in_flight=2000,
            backlog_events=20_000,
            backlog_access=2_000,
            rounds=2,
        )


# -- the trail, with commit times noted (bench-side subclass; the core Trail is untouched) -----------


class TimedTrail(Trail):
    """A Trail that notes, per commit, which trail sequences it wrote and the wall time it finished."""

    def __init__(self, path: str):
        super().__init__(path)
        self.commits: list[tuple[int, int, float, float]] = []  # (after seq, up to seq, wall end, seconds)
        self._noting = threading.Lock()  # commits are serialized by the Trail anyway; this keeps `before` exact
        self.stage_s = 0.0  # time spent staging (chaining and hashing records)

    def stage(self, source: str, batch: list[Any], upto: int | None) -> None:
        t = time.perf_counter()
        super().stage(source, batch, upto)
        self.stage_s += time.perf_counter() - t

    def commit(self) -> None:
        with self._noting:
            before = self.last_seq
            t = time.perf_counter()
            super().commit()
            wall = time.time()
            if self.last_seq > before:
                self.commits.append((before, self.last_seq, wall, time.perf_counter() - t))


def trail_lags(
    con: Any, commits: list[tuple[int, int, float, float]], since: float, until: float
) -> tuple[dict[str, list[tuple[float, float]]], int]:
    """(recorded_at, lag) of every record the log recorded in [since, until), by source, where lag =
    end of the commit that wrote it − recorded_at (seconds); and how many such records no noted
    commit covers (must be 0)."""
    rows = (
        con.cursor()
        .execute("SELECT trail_seq, source, epoch_us(recorded_at) FROM audit_trail ORDER BY trail_seq")
        .fetchall()
    )
    ups = [c[1] for c in commits]
    out: dict[str, list[tuple[float, float]]] = {EVENTS: [], ACCESS: []}
    uncovered = 0
    for seq, source, rec_us in rows:
        rec = rec_us / 1e6
        if not since <= rec < until:
            continue
        k = bisect_left(ups, seq)
        if k == len(ups) or commits[k][0] >= seq:
            uncovered += 1
            continue
        out[source].append((rec, commits[k][2] - rec))
    return out, uncovered


def commit_stats(commits: list[tuple[int, int, float, float]], since: float, until: float) -> dict[str, Any]:
    inside = [c for c in commits if since <= c[2] < until + 1.0]
    rows = [c[1] - c[0] for c in inside]
    secs = [c[3] for c in inside]
    return {
        "commits": len(inside),
        "records_per_commit_mean": rnd(sum(rows) / len(rows), 1) if rows else None,
        "commit_ms_p50": rnd(percentile(secs, 50) * 1000, 2),
        "commit_ms_p99": rnd(percentile(secs, 99) * 1000, 2),
        "commit_ms_max": rnd(max(secs) * 1000, 2) if secs else None,
    }


def check_trail(path: Path, events: int, access: int) -> dict[str, Any]:
    """Open a closed trail file: verify the chain and count records per source."""
    trail = Trail(str(path))
    try:
        return _check(trail, events, access)
    finally:
        trail.close()


def _check(trail: Trail, events: int, access: int) -> dict[str, Any]:
    t = time.perf_counter()
    checked, broken = trail.verify()
    by_source = dict(trail.con.cursor().execute("SELECT source, count(*) FROM audit_trail GROUP BY source").fetchall())
    got_e, got_a = by_source.get(EVENTS, 0), by_source.get(ACCESS, 0)
    ok = broken is None and checked == events + access and got_e == events and got_a == access
    return {
        "records": checked,
        "expected": events + access,
        "events": got_e,
        "access": got_a,
        "expected_events": events,
        "expected_access": access,
        "first_broken_seq": broken,
        "ok": ok,
        "verify_s": rnd(time.perf_counter() - t, 2),
    }


# -- the auditor-shape probe: its own process --------------------------------------------------------


def probe_main(data_dir: Path, url: str) -> None:
    """`--probe-auditor`: the Auditor's two followers (AuditorSettings) into a TimedTrail, until SIGTERM;
    then the commit notes go to commits.json. It answers no audit queries (the real auditor does)."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")

    async def run() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        nc = await connect(url, "bench-audit-probe")
        trail = TimedTrail(str(data_dir / TRAIL_FILE))
        aus = AuditorSettings()
        aud = Auditor(nc, trail, batch_max=aus.batch_max, linger=aus.linger)
        try:
            for f in aud.followers:
                await f.start()
            (data_dir / "ready").write_text(str(os.getpid()))
            await stop.wait()
        finally:
            await aud.stop()
            (data_dir / "commits.json").write_text(json.dumps(trail.commits))
            trail.close()
            await close_nats(nc)

    asyncio.run(run())


# -- talking to the real auditor ------------------------------------------------------------------------

_reply = msgspec.msgpack.Decoder(Reply)
_audit_result = msgspec.msgpack.Decoder(AuditResult)


async def audit_ask(nc: NATS, *, timeout: float = 30.0, **filters: Any) -> tuple[int, int]:
    """One audit query over all namespaces: (the auditor's committed event checkpoint, matching records).
    The auditor commits what it has staged before it answers (and waits for `min_seq`, up to 10 s)."""
    q = AuditQuery(namespace=NS, now=datetime.now(UTC), namespaces=("*",), limit=1, **filters)
    msg = await nc.request(S.query_subject(AuditQuery.OPERATION), query_encoder.encode(q), timeout=timeout)
    reply = _reply.decode(msg.data)
    if reply.error is not None:
        raise RuntimeError(f"audit query failed: {reply.error}")
    return reply.applied_seq, _audit_result.decode(reply.result).total


async def wait_auditor_ready(
    nc: NATS, proc: subprocess.Popen[bytes], log_path: Path, timeout: float = 60
) -> tuple[float, float]:
    """When the real auditor first answered: (perf_counter time the answered query was sent, the
    process's CPU seconds then). It subscribes to audit queries right after starting its followers."""
    deadline = time.perf_counter() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"`mneme auditor` exited with {proc.returncode}: {tail(log_path)}")
        cpu = cpu_seconds(proc.pid)
        sent = time.perf_counter()
        try:
            await audit_ask(nc, timeout=15)
            return sent, cpu
        except (TimeoutError, nats.errors.NoRespondersError, nats.errors.TimeoutError):
            pass
        if time.perf_counter() > deadline:
            raise RuntimeError(f"`mneme auditor` did not answer within {timeout} s: {tail(log_path)}")
        await asyncio.sleep(0.01)


async def wait_file(path: Path, proc: subprocess.Popen[bytes], log_path: Path, timeout: float = 60) -> None:
    deadline = time.perf_counter() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"child exited with {proc.returncode}: {tail(log_path)}")
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{path} did not appear within {timeout} s: {tail(log_path)}")
        await asyncio.sleep(0.02)


async def until(cond: Callable[[], bool], timeout: float, what: str, step: float = 0.005) -> float:
    t0 = time.perf_counter()
    while not cond():
        if time.perf_counter() - t0 > timeout:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(step)
    return time.perf_counter() - t0


def tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


async def stop_child(proc: subprocess.Popen[bytes]) -> int | None:
    return await asyncio.to_thread(stop_process, proc)


# -- the paced write load through the gateway's core ---------------------------------------------------


@dataclass
class Load:
    gw: Gateway
    elog: TimedEventLog
    texts: list[str]
    rng: random.Random
    ids: list[str] = field(default_factory=list)
    write_lat: list[float] = field(default_factory=list)
    read_lat: list[float] = field(default_factory=list)
    writes: int = 0
    path_writes: int = 0
    reads: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    first_failure: str | None = None
    throttled: int = 0
    counter: int = 0

    def reset(self) -> None:
        self.write_lat, self.read_lat = [], []
        self.writes = self.path_writes = self.reads = self.throttled = 0
        self.failures, self.first_failure = {}, None
        self.elog.reset()

    def failed(self, exc: BaseException) -> None:
        name = type(exc).__name__
        self.failures[name] = self.failures.get(name, 0) + 1
        if self.first_failure is None:
            self.first_failure = f"{name}: {exc}"
            log(f"first failure: {self.first_failure}")


async def one_write(load: Load, i: int, due: float, store: str | None) -> None:
    gw = load.gw
    path = f"bench/w{i}" if store else None
    text = load.texts[i % len(load.texts)]

    async def body(call: Call) -> str:  # memory_add's body
        cmd = CreateMemory(namespace=call.namespace, store=store, path=path, content=text, kind="note", tags=TAGS)
        w = await gw.commands.create(
            cmd, actor=call.principal.actor, request_id=call.request_id, min_seq=await gw.min_seq()
        )
        gw.noted(w.seq)
        assert w.memory is not None
        return w.memory.id

    try:
        mid = await gw.run(None, "memory_add", "write", None, None, body)
    except Exception as exc:  # noqa: BLE001 - counted and reported
        load.failed(exc)
        return
    load.write_lat.append(asyncio.get_running_loop().time() - due)
    load.writes += 1
    load.path_writes += store is not None
    load.ids.append(mid)


async def one_read(load: Load, mid: str) -> None:
    gw = load.gw
    t = time.perf_counter()

    async def body(call: Call) -> None:  # memory_get's body (leaves one read record via the AccessLog)
        row = await gw.resolve(call.namespace, mid, None, None, await gw.min_seq())
        got = await gw.queries.ask(
            GetMemory(
                namespace=call.namespace,
                now=gw.now(),
                memory_id=row.memory.id,
                min_seq=row.memory.last_seq,
                include_expired=True,
                history=5,
            )
        )
        if got.item is None:
            raise RuntimeError(f"memory {mid} not found")
        call.read([row.memory.id])

    try:
        await gw.run(None, "memory_get", "read", None, None, body)
    except Exception as exc:  # noqa: BLE001
        load.failed(exc)
        return
    load.read_lat.append(time.perf_counter() - t)
    load.reads += 1


async def drive(load: Load, cfg: Config, seconds: float) -> tuple[int, float]:
    """Open-loop pacing: write i starts at t0 + i/rate whatever the earlier ones are doing (at most
    `max_in_flight` at once). Returns (writes started, seconds from the first start to the last answer)."""
    loop = asyncio.get_running_loop()
    n = round(cfg.rate * seconds)
    in_flight: set[asyncio.Task[None]] = set()

    def track(coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        in_flight.add(task)
        task.add_done_callback(in_flight.discard)

    t0 = loop.time() + 0.005
    for k in range(n):
        due = t0 + k / cfg.rate
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        if len(in_flight) >= cfg.max_in_flight:
            load.throttled += 1
            await asyncio.wait(set(in_flight), return_when=asyncio.FIRST_COMPLETED)
        i = load.counter
        load.counter += 1
        with_path = cfg.path_every > 0 and i % cfg.path_every == 0
        track(one_write(load, i, due, f"s{(i // cfg.path_every) % cfg.stores}" if with_path else None))
        if cfg.read_every and i % cfg.read_every == cfg.read_every - 1 and load.ids:
            recent = load.ids[-2000:]
            track(one_read(load, recent[load.rng.randrange(len(recent))]))
    if in_flight:
        await asyncio.wait(set(in_flight))
    return n, loop.time() - t0


def time_commits(sink: Any) -> list[tuple[float, float]]:
    """Note (wall end, seconds) of each commit of a follower's sink (an instance attribute wraps it)."""
    notes: list[tuple[float, float]] = []
    orig = sink.commit

    def timed() -> Any:
        t = time.perf_counter()
        r = orig()
        notes.append((time.time(), time.perf_counter() - t))
        return r

    sink.commit = timed
    return notes


class LoopDelay:
    """How late this process's event loop wakes a 10 ms sleeper: how congested the loop is."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []

    async def run(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.01)
            self.samples.append((time.time(), time.perf_counter() - t - 0.01))

    def summary(self, since: float, until: float) -> dict[str, Any]:
        return latency_summary([d for w, d in self.samples if since <= w < until])


class DeliveryFloor:
    """A raw ordered consumer on both streams in this process: receive time − stream time per message."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []  # (recorded_at, lag)
        self.subs: list[Any] = []

    async def start(self, js: Any) -> None:
        async def cb(m: Any) -> None:
            now = time.time()
            rec = m.metadata.timestamp.timestamp()
            self.samples.append((rec, now - rec))

        for stream, subjects in ((S.EVENTS_STREAM, S.EVENTS_SUBJECTS), (S.ACCESS_STREAM, S.ACCESS_SUBJECTS)):
            self.subs.append(
                await js.subscribe(
                    subjects,
                    stream=stream,
                    cb=cb,
                    ordered_consumer=True,
                    config=ConsumerConfig(deliver_policy=DeliverPolicy.NEW),
                    idle_heartbeat=1.0,
                )
            )

    async def stop(self) -> None:
        for s in self.subs:
            try:
                await s.unsubscribe()
            except Exception:  # noqa: BLE001
                pass
        self.subs = []

    def lags(self, since: float, until: float) -> list[tuple[float, float]]:
        return [(rec, lag) for rec, lag in self.samples if since <= rec < until]


def lag_summary(pairs: list[tuple[float, float]], since: float, until: float) -> dict[str, Any]:
    """Lag percentiles (ms) over (recorded_at, lag) pairs, overall and p99 per SLICES-th of [since, until)."""
    ms = [lag * 1000 for _, lag in pairs]
    slices: dict[int, list[float]] = {}
    width = (until - since) / SLICES
    for rec, lag in pairs:
        slices.setdefault(min(SLICES - 1, int((rec - since) // width)), []).append(lag * 1000)
    return {
        "n": len(ms),
        "p50_ms": rnd(percentile(ms, 50), 2),
        "p95_ms": rnd(percentile(ms, 95), 2),
        "p99_ms": rnd(percentile(ms, 99), 2),
        "max_ms": rnd(max(ms), 2) if ms else None,
        "p99_ms_per_slice": [rnd(percentile(slices[k], 99), 1) for k in sorted(slices)],
    }


def lag_block(lags: dict[str, list[tuple[float, float]]], since: float, until: float) -> dict[str, Any]:
    return {
        "lag_all": lag_summary(lags[EVENTS] + lags[ACCESS], since, until),
        "lag_events": lag_summary(lags[EVENTS], since, until),
        "lag_access": lag_summary(lags[ACCESS], since, until),
    }


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
    serve: this process is the gateway's core and a projector whose followers also feed a TimedTrail
    (runtime.serve's wiring); nothing else follows the log.
    """
    distributed = shape == "distributed"
    tag = "(1a)" if distributed else "(1b)"
    out: dict[str, Any] = {"shape": shape}
    root.mkdir(parents=True, exist_ok=True)
    async with AsyncExitStack() as stack:
        server = EmbeddedNats(root / "nats")
        url = await server.start()
        stack.push_async_callback(server.stop)
        assert server.pid is not None
        log(f"{tag} {shape} shape; nats-server at {url}")
        nc = await connect(url, f"bench-audit-{shape}")
        stack.push_async_callback(close_nats, nc)
        js = nc.jetstream()
        await ensure_streams(js)
        pids = {"bench": os.getpid(), "nats": server.pid}

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
            view = MemoriesView(str(serve_dir / ps.db_name))
            stack.callback(view.close)
            trail = TimedTrail(str(serve_dir / TRAIL_FILE))
            stack.callback(trail.close)
            projector = Projector(
                nc,
                view,
                batch_max=ps.batch_max,
                wait_timeout=ps.wait_timeout,
                linger=ps.linger,
                also=(trail.source(EVENTS),),
                also_access=(trail.source(ACCESS),),
            )
            serve_commits = time_commits(projector.follower.sink)  # the whole commit: view + trail
            await projector.start()
            stack.push_async_callback(projector.stop)
            auditor = Auditor(nc, trail, fed_by=[projector.follower, projector.access_follower])  # audit queries
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
                lambda: projector.follower.committed >= last_evt and projector.access_follower.committed >= last_acc,
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
            ptrail = Trail(str(probe_dir / TRAIL_FILE))
            try:
                lags, uncovered = trail_lags(ptrail.con, commits, since, until_wall)
                out["trail"] = {
                    **lag_block(lags, since, until_wall),
                    "uncovered": uncovered,
                    **commit_stats(commits, since, until_wall),
                    "verify": _check(ptrail, last_evt, last_acc),
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
                "follower_commit_view_and_trail": latency_summary(
                    [d for w, d in serve_commits if since <= w < until_wall]
                ),
                "verify": _check(trail, last_evt, last_acc),
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


async def until_total(nc: NATS, access: int, timeout: float = 30) -> None:
    """Ask the real auditor until its trail holds every access record."""
    deadline = time.perf_counter() + timeout
    while True:
        _, total = await audit_ask(nc, action="read:")
        if total >= access:
            return
        if time.perf_counter() > deadline:
            raise RuntimeError(f"`mneme auditor` holds {total} of {access} read records after {timeout} s")
        await asyncio.sleep(0.01)


# -- phase 2: catch-up from a backlog ----------------------------------------------------------------------


async def load_backlog(js: Any, cfg: Config) -> tuple[int, int, float]:
    t = time.perf_counter()
    last_evt = await publish(js, history(cfg.backlog_events, namespaces=4, seed=11))
    now = datetime.now(UTC)
    pending = []
    last_acc = 0
    for i in range(cfg.backlog_access):
        ns = f"ns{i % 4}"
        rec = ReadRecorded(
            record_id=event_id_for(f"access:bench-{i}:memory_get"),
            at=now,
            agent_id=f"agent-{i % 3}",
            role="agent",
            request_id=f"bench-{i}",
            namespace=ns,
            operation="memory_get",
            memory_ids=(new_id(),),
        )
        pending.append(
            asyncio.ensure_future(
                js.publish(
                    S.access_subject("read", ns), encode_access(rec), timeout=30, headers={S.HDR_MSG_ID: rec.record_id}
                )
            )
        )
        if len(pending) >= 512:
            last_acc = max(last_acc, *(a.seq for a in await asyncio.gather(*pending)))
            pending = []
    if pending:
        last_acc = max(last_acc, *(a.seq for a in await asyncio.gather(*pending)))
    return last_evt, last_acc, time.perf_counter() - t


async def floor_catchup(js: Any, last_evt: int, last_acc: int) -> float:
    """Two raw ordered consumers (as the auditor's followers are) receive every message from the start,
    read its metadata and decode it. Seconds until both have the last one."""
    done = {EVENTS: asyncio.Event(), ACCESS: asyncio.Event()}
    subs = []
    t0 = time.perf_counter()
    for name, stream, subjects, decode, target in (
        (EVENTS, S.EVENTS_STREAM, S.EVENTS_SUBJECTS, decode_envelope, last_evt),
        (ACCESS, S.ACCESS_STREAM, S.ACCESS_SUBJECTS, decode_access, last_acc),
    ):

        async def cb(m: Any, decode: Any = decode, target: int = target, ev: asyncio.Event = done[name]) -> None:
            md = m.metadata
            decode(m.data)
            if md.sequence.stream >= target:
                ev.set()

        subs.append(
            await js.subscribe(
                subjects,
                stream=stream,
                cb=cb,
                ordered_consumer=True,
                config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
                idle_heartbeat=1.0,
            )
        )
    try:
        await asyncio.wait_for(asyncio.gather(done[EVENTS].wait(), done[ACCESS].wait()), 300)
        return time.perf_counter() - t0
    finally:
        for s in subs:
            try:
                await s.unsubscribe()
            except Exception:  # noqa: BLE001
                pass


async def inproc_catchup(nc: NATS, path: Path, last_evt: int, last_acc: int) -> dict[str, Any]:
    """The Auditor's followers (AuditorSettings) into a fresh trail in this process: start → all committed."""
    trail = TimedTrail(str(path))
    aus = AuditorSettings()
    aud = Auditor(nc, trail, batch_max=aus.batch_max, linger=aus.linger)
    cpu0 = time.process_time()
    try:
        t0 = time.perf_counter()
        for f in aud.followers:
            await f.start()
        ev, ac = aud.followers
        await until(
            lambda: ev.committed >= last_evt and ac.committed >= last_acc, 600, "the in-process auditor to catch up"
        )
        secs = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        await aud.stop()
        return {
            "seconds": secs,
            "cpu_s": cpu,
            "stage_s": trail.stage_s,
            "commit_s": sum(c[3] for c in trail.commits),
            "commits": len(trail.commits),
            "verify": _check(trail, last_evt, last_acc),
        }
    finally:
        await aud.stop()
        trail.close()


async def subprocess_catchup(
    nc: NATS, url: str, data_dir: Path, log_path: Path, last_evt: int, last_acc: int
) -> dict[str, Any]:
    """The real `mneme auditor` on a fresh data dir: from its first answer (followers running) until an
    audit query shows every event and every read record committed."""
    data_dir.mkdir(parents=True)
    t_spawn = time.perf_counter()
    proc = spawn([MNEME, "auditor", "--nats-url", url, "--data-dir", str(data_dir)], log_path=log_path, cwd=REPO)
    try:
        t_ready, cpu0 = await wait_auditor_ready(nc, proc, log_path)
        while True:
            applied, _ = await audit_ask(nc, min_seq=last_evt, timeout=60)
            if applied >= last_evt:
                break
        await until_total(nc, last_acc, timeout=300)
        t_done = time.perf_counter()
        cpu = cpu_seconds(proc.pid) - cpu0
    finally:
        code = await stop_child(proc)
    return {
        "seconds": t_done - t_ready,
        "from_spawn_s": t_done - t_spawn,
        "startup_s": t_ready - t_spawn,
        "cpu_s": cpu,
        "exit_code": code,
        "verify": check_trail(data_dir / TRAIL_FILE, last_evt, last_acc),
    }


async def phase_catchup(cfg: Config, root: Path) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    async with AsyncExitStack() as stack:
        server = EmbeddedNats(root / "nats")
        url = await server.start()
        stack.push_async_callback(server.stop)
        nc = await connect(url, "bench-audit-catchup")
        stack.push_async_callback(close_nats, nc)
        js = nc.jetstream()
        await ensure_streams(js)
        log(f"(2) loading a backlog of {cfg.backlog_events:,} events and {cfg.backlog_access:,} read records")
        last_evt, last_acc, load_s = await load_backlog(js, cfg)
        total = last_evt + last_acc
        log(f"(2) loaded {total:,} messages in {load_s:.2f} s")

        floor_s: list[float] = []
        inproc: list[dict[str, Any]] = []
        sub: list[dict[str, Any]] = []

        async def do_floor(r: int) -> None:
            floor_s.append(await floor_catchup(js, last_evt, last_acc))
            log(f"(2) round {r + 1}: floor {total / floor_s[-1]:,.0f} records/s")

        async def do_inproc(r: int) -> None:
            inproc.append(await inproc_catchup(nc, root / f"inproc-{r}.duckdb", last_evt, last_acc))
            log(f"(2) round {r + 1}: in-process auditor {total / inproc[-1]['seconds']:,.0f} records/s")

        async def do_sub(r: int) -> None:
            sub.append(
                await subprocess_catchup(nc, url, root / f"auditor-{r}", root / f"auditor-{r}.log", last_evt, last_acc)
            )
            log(
                f"(2) round {r + 1}: `mneme auditor` {total / sub[-1]['seconds']:,.0f} records/s "
                f"(startup {sub[-1]['startup_s']:.2f} s)"
            )

        steps = [do_floor, do_inproc, do_sub]
        for r in range(cfg.rounds):
            k = r % len(steps)
            for step in steps[k:] + steps[:k]:
                await asyncio.sleep(0.5)  # the previous consumer's deliveries settle
                await step(r)

        def rates(secs: list[float]) -> list[float]:
            return [total / s for s in secs]

        f_rates = rates(floor_s)
        i_rates = rates([x["seconds"] for x in inproc])
        s_rates = rates([x["seconds"] for x in sub])
        return {
            "backlog_events": last_evt,
            "backlog_access": last_acc,
            "records": total,
            "load_seconds": rnd(load_s, 3),
            "load_rate_per_s": rnd(total / load_s, 1),
            "floor": {
                "records_per_s": rnd(median(f_rates), 1),
                "per_round": [rnd(x, 1) for x in f_rates],
                "seconds": [rnd(x, 3) for x in floor_s],
            },
            "inproc_auditor": {
                "records_per_s": rnd(median(i_rates), 1),
                "per_round": [rnd(x, 1) for x in i_rates],
                "vs_floor": rnd(median([a / b for a, b in zip(i_rates, f_rates, strict=False)]), 3),
                "cpu_ms_per_record": rnd(median([x["cpu_s"] for x in inproc]) * 1000 / total, 4),
                "seconds": rnd(median([x["seconds"] for x in inproc]), 3),
                "stage_us_per_record": rnd(median([x["stage_s"] for x in inproc]) * 1e6 / total, 2),
                "commit_us_per_record": rnd(median([x["commit_s"] for x in inproc]) * 1e6 / total, 2),
                "commits": int(median([x["commits"] for x in inproc])),
                "verify": [x["verify"] for x in inproc],
            },
            "mneme_auditor": {
                "records_per_s": rnd(median(s_rates), 1),
                "per_round": [rnd(x, 1) for x in s_rates],
                "vs_floor": rnd(median([a / b for a, b in zip(s_rates, f_rates, strict=False)]), 3),
                "seconds": rnd(median([x["seconds"] for x in sub]), 3),
                "from_spawn_s": rnd(median([x["from_spawn_s"] for x in sub]), 3),
                "startup_s": rnd(median([x["startup_s"] for x in sub]), 3),
                "cpu_ms_per_record": rnd(median([x["cpu_s"] for x in sub]) * 1000 / total, 4),
                "exit_codes": [x["exit_code"] for x in sub],
                "verify": [x["verify"] for x in sub],
            },
        }


# -- report -------------------------------------------------------------------------------------------------


def catchup_table(cfg: Config, c: dict[str, Any], checks: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    fl, ia, sa = c["floor"], c["inproc_auditor"], c["mneme_auditor"]
    print_table(f"(2) Catch-up from a backlog of {c['backlog_events']:,} events + {c['backlog_access']:,} read "
                f"records ({c['records']:,} records; median of {cfg.rounds} rounds)",
                ["measure", "records/s", "seconds", "ratio to floor", "cpu ms/record"],
                [["floor: 2 raw ordered consumers, receive + metadata + decode", fl["records_per_s"],
                  median(fl["seconds"]), 1.0, None],
                 ["Auditor followers into a fresh trail, bench process", ia["records_per_s"],
                  rnd(c["records"] / ia["records_per_s"], 3), ia["vs_floor"], ia["cpu_ms_per_record"]],
                 ["`mneme auditor` subprocess, from its first answer", sa["records_per_s"], sa["seconds"],
                  sa["vs_floor"], sa["cpu_ms_per_record"]],
                 ["  the same from spawn (process start included)", rnd(c["records"] / sa["from_spawn_s"], 1),
                  sa["from_spawn_s"], None, None]])  # fmt: skip

    us_all = 1e6 / ia["records_per_s"]
    us_floor = 1e6 / fl["records_per_s"]
    rest = us_all - ia["stage_us_per_record"] - ia["commit_us_per_record"]
    print_table(
        "(2) Where the in-process auditor's time goes while catching up (µs per record, wall)",
        ["part", "µs/record", "share"],
        [
            [
                "stage: chain + SHA-256 per record (event loop)",
                ia["stage_us_per_record"],
                rnd(ia["stage_us_per_record"] / us_all, 2),
            ],
            [
                f"commit: {ia['commits']} DuckDB transactions (worker thread; the follower waits)",
                ia["commit_us_per_record"],
                rnd(ia["commit_us_per_record"] / us_all, 2),
            ],
            ["the rest: receive, metadata, decode, queue, loop", rnd(rest, 2), rnd(rest / us_all, 2)],
            ["total", rnd(us_all, 2), 1.0],
            ["floor (receive + metadata + decode, nothing else)", rnd(us_floor, 2), rnd(us_floor / us_all, 2)],
        ],
    )
    checks += [(f"catch-up in-process, round {i + 1}", v) for i, v in enumerate(ia["verify"])]
    checks += [(f"catch-up `mneme auditor`, round {i + 1}", v) for i, v in enumerate(sa["verify"])]
    return list(sa["exit_codes"])


def report(
    cfg: Config, mode: str, machine: dict[str, Any], p: dict[str, dict[str, Any]], c: dict[str, Any] | None, wall: float
) -> tuple[dict[str, Any], list[str]]:
    d, sv = p["distributed"], p["serve"]
    print(
        f"mneme bench.audit ({mode}) — {machine['nproc']} cores, {machine['cpu_model']}, "
        f"{machine['ram_gb']} GB RAM, Python {machine['python']}, {machine['date']}"
    )
    print(
        f"auditor linger {AuditorSettings().linger} s, batch_max {AuditorSettings().batch_max}; projector linger "
        f"{ProjectorSettings().linger} s; (1a) distributed: gateway core here, `mneme projector`, `mneme auditor` "
        "and the probe auditor in their own processes; (1b) serve: gateway core + projector feeding the trail, "
        "all in this process"
    )

    def held(x: dict[str, Any]) -> bool:
        ld = x["load"]
        return ld["writes_per_s"] is not None and ld["writes_per_s"] >= 0.95 * cfg.rate and not ld["failures"]

    def wl(x: dict[str, Any], k: str) -> Any:
        return x["load"]["write_latency_from_schedule"][k]

    rows = [["writes (memory_add body: Gateway.run + CommandService.create)", d["load"]["writes"],
             sv["load"]["writes"]],
            ["writes/s achieved", d["load"]["writes_per_s"], sv["load"]["writes_per_s"]],
            ["  of which store+path (PathOwner query first)", d["load"]["path_writes"], sv["load"]["path_writes"]],
            ["reads (memory_get body, one read record each)", d["load"]["reads"], sv["load"]["reads"]],
            ["failures", sum(d["load"]["failures"].values()), sum(sv["load"]["failures"].values())],
            ["write p50 ms, from its scheduled start", wl(d, "p50_ms"), wl(sv, "p50_ms")],
            ["write p99 ms, from its scheduled start", wl(d, "p99_ms"), wl(sv, "p99_ms")],
            ["concurrency conflicts retried", d["load"]["conflicts"], sv["load"]["conflicts"]],
            ["trail records in the window (events + read records)", d["load"]["records_in_window"],
             sv["load"]["records_in_window"]],
            ["trail records/s in the window", d["load"]["records_per_s"], sv["load"]["records_per_s"]],
            ["this process's event loop: 10 ms sleep woken late, p99 ms", d["bench_event_loop_delay"]["p99_ms"],
             sv["bench_event_loop_delay"]["p99_ms"]],
            ["rate held (>= 95%, no failures)", verdict(held(d)), verdict(held(sv))]]  # fmt: skip
    print_table(
        f"(1) Write load through the gateway's core, paced at {cfg.rate:,.0f}/s for {cfg.paced_s:.0f} s",
        ["measure", "(1a) distributed", "(1b) serve"],
        rows,
    )

    def lag_row(name: str, x: dict[str, Any], target: bool) -> list[Any]:
        a = x["lag_all"]
        ok = a["p99_ms"] is not None and a["p99_ms"] < LAG_P99_TARGET_MS
        sl = [v for v in a["p99_ms_per_slice"] if v is not None]
        return [name, a["n"], a["p50_ms"], a["p95_ms"], a["p99_ms"], a["max_ms"],
                x.get("lag_events", {}).get("p99_ms"), x.get("lag_access", {}).get("p99_ms"),
                f"{min(sl):.0f}–{max(sl):.0f}" if sl else "-",
                "< 200 ms" if target else "floor", verdict(ok) if target else ""]  # fmt: skip

    targets: dict[str, dict[str, Any]] = {
        "write_load_held_distributed": {
            "writes_per_s": d["load"]["writes_per_s"],
            "pass": held(d),
            "target": f">= 0.95 x {cfg.rate:,.0f}/s, 0 failures",
        },
        "write_load_held_serve": {
            "writes_per_s": sv["load"]["writes_per_s"],
            "pass": held(sv),
            "target": f">= 0.95 x {cfg.rate:,.0f}/s, 0 failures",
        },
        "auditor_lag_p99": {
            "p99_ms": d["trail"]["lag_all"]["p99_ms"],
            "target_ms": LAG_P99_TARGET_MS,
            "pass": (d["trail"]["lag_all"]["p99_ms"] or 1e9) < LAG_P99_TARGET_MS,
        },
        "serve_trail_lag_p99": {
            "p99_ms": sv["trail"]["lag_all"]["p99_ms"],
            "target_ms": LAG_P99_TARGET_MS,
            "pass": (sv["trail"]["lag_all"]["p99_ms"] or 1e9) < LAG_P99_TARGET_MS,
        },
    }
    print_table("(1) Trail lag = commit finished − log timestamp, per record written in the window (ms)",
                ["measure", "records", "p50", "p95", "p99", "max", "p99 events", "p99 reads",
                 f"p99 per {cfg.paced_s / SLICES:.3g} s", "target", ""],
                [lag_row("(1a) delivery floor: raw ordered consumer, gateway process", d["floor_delivery"], False),
                 lag_row("(1a) auditor: Auditor followers, own process", d["trail"], True),
                 lag_row("(1b) delivery floor: raw ordered consumer, serve process", sv["floor_delivery"], False),
                 lag_row("(1b) serve: projector follower feeds the trail", sv["trail"], True)])  # fmt: skip

    fc = sv["trail"]["follower_commit_view_and_trail"]
    print_table("(1) Trail commits while writing (ms)",
                ["trail", "commits", "records/commit", "commit p50", "commit p99", "commit max"],
                [["(1a) auditor (probe process)", d["trail"]["commits"], d["trail"]["records_per_commit_mean"],
                  d["trail"]["commit_ms_p50"], d["trail"]["commit_ms_p99"], d["trail"]["commit_ms_max"]],
                 ["(1b) serve: the trail's part", sv["trail"]["commits"], sv["trail"]["records_per_commit_mean"],
                  sv["trail"]["commit_ms_p50"], sv["trail"]["commit_ms_p99"], sv["trail"]["commit_ms_max"]],
                 ["(1b) serve: the follower's whole commit (view + trail)", fc["n"], None, fc["p50_ms"], fc["p99_ms"],
                  fc["max_ms"]]])  # fmt: skip
    procs = ("bench", "nats", "projector", "auditor", "probe", "others")
    print_table("(1) CPU while writing: ms per trail record, and share of one core",
                ["process", "(1a) ms/record", "(1a) share", "(1b) ms/record", "(1b) share"],
                [[k, d["cpu_ms_per_record"].get(k), d["cpu_share_of_a_core"].get(k),
                  sv["cpu_ms_per_record"].get(k), sv["cpu_share_of_a_core"].get(k)] for k in procs])  # fmt: skip
    for name, x in (("(1a)", d), ("(1b)", sv)):
        if not held(x):
            print(
                f"NOTE {name}: the write load was not held ({x['load']['writes_per_s']:,.0f} writes/s of "
                f"{cfg.rate:,.0f}, failures {x['load']['failures']}): its lag is not at the target's rate"
            )
        others = x["cpu_share_of_a_core"].get("others") or 0
        if others > 0.25:
            print(f"NOTE {name}: other processes on this machine used {others:.2f} of a core meanwhile (contended)")
    ma = d["mneme_auditor"]
    print(
        f"`mneme auditor` (real, untouched): an audit query after the last write saw it committed after "
        f"{ma['audit_query_saw_last_write_ms']} ms (the query makes it commit what it has staged)"
    )

    checks = [
        ("(1a) auditor (probe)", d["trail"]["verify"]),
        ("(1a) `mneme auditor` while writing", ma["verify"]),
        ("(1b) serve (in-process)", sv["trail"]["verify"]),
    ]
    exit_codes = [ma["exit_code"], d["mneme_projector_exit_code"]]
    if c is not None:
        exit_codes += catchup_table(cfg, c, checks)
    print_table(
        "Trail verification (hash chain; records = events + read records, per source)",
        ["trail", "records", "expected", "events", "reads", "first broken", "ok"],
        [
            [n, v["records"], v["expected"], v["events"], v["access"], v["first_broken_seq"], verdict(v["ok"])]
            for n, v in checks
        ],
    )
    problems = [f"trail {n}: {v}" for n, v in checks if not v["ok"]]
    for name, x in (("(1a)", d), ("(1b)", sv)):
        if x["trail"]["uncovered"]:
            problems.append(f"{name}: {x['trail']['uncovered']} records without a noted commit")
        if x["load"]["failures"]:
            problems.append(
                f"{name} write/read failures: {x['load']['failures']} (first: {x['load']['first_failure']})"
            )
    if any(x != 0 for x in exit_codes):
        problems.append(f"`mneme auditor` / `mneme projector` exit codes: {exit_codes}")
    targets["trails_verified"] = {"pass": not problems, "problems": problems}
    print("\nTargets: " + ", ".join(f"{k} {verdict(v['pass'])}" for k, v in targets.items()))
    print(f"wall time {wall:.1f} s")
    result = {
        "bench": "audit",
        "mode": mode,
        "machine": machine,
        "config": cfg.__dict__,
        "settings": {
            "auditor_linger_s": AuditorSettings().linger,
            "auditor_batch_max": AuditorSettings().batch_max,
            "projector_linger_s": ProjectorSettings().linger,
        },
        "paced": p,
        "catchup": c,
        "targets": targets,
        "wall_seconds": rnd(wall, 1),
    }
    return result, problems


async def amain(cfg: Config, mode: str, keep: bool, paced_only: bool = False) -> tuple[dict[str, Any], list[str]]:
    machine = machine_info()
    started = time.perf_counter()
    main_task = asyncio.current_task()
    if main_task is not None:  # SIGTERM unwinds like Ctrl-C: children stopped, temporary directory removed
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    tmp = Path(tempfile.mkdtemp(prefix="mneme-bench-audit-"))
    log(f"temporary directory {tmp}")
    try:
        p = {shape: await phase_paced(cfg, tmp / shape, shape) for shape in ("distributed", "serve")}
        c = None if paced_only else await phase_catchup(cfg, tmp / "catchup")
        return report(cfg, mode, machine, p, c, time.perf_counter() - started)
    finally:
        if keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.audit", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short run (5 s paced, a 20,000-event backlog)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, DuckDB files)")
    ap.add_argument("--rate", type=float, help="writes/s (default 1000)")
    ap.add_argument("--seconds", type=float, help="measured seconds of paced writes (default 20, quick 5)")
    ap.add_argument("--path-every", type=int, help="every n-th write claims a store+path (default 10; 0: none)")
    ap.add_argument("--stores", type=int, help="stores the path writes are spread over (default 64)")
    ap.add_argument("--read-every", type=int, help="a memory_get after every n-th write (default 20; 0: none)")
    ap.add_argument("--paced-only", action="store_true", help="skip the catch-up phase")
    ap.add_argument("--probe-auditor", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--nats-url", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.probe_auditor:
        probe_main(args.probe_auditor, args.nats_url)
        return
    cfg = Config.quick() if args.quick else Config.full()
    over = {
        k: v
        for k, v in (
            ("rate", args.rate),
            ("paced_s", args.seconds),
            ("path_every", args.path_every),
            ("stores", args.stores),
            ("read_every", args.read_every),
        )
        if v is not None
    }
    if over:
        cfg = dataclasses.replace(cfg, **over)
    try:
        result, problems = asyncio.run(amain(cfg, "quick" if args.quick else "full", args.keep, args.paced_only))
    except (KeyboardInterrupt, asyncio.CancelledError):
        log("interrupted: children stopped, temporary directory removed")
        sys.exit(130)
    emit_json(result)
    if problems:
        for line in problems:
            log(f"FAILED: {line}")
        sys.exit(1)


if __name__ == "__main__":
    main()
