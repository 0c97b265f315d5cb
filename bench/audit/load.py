"""bench.audit's paced write load through the gateway's core (open loop), and what it is set beside: the event
loop's delay and the raw delivery floor.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

from nats.js.api import DeliverPolicy

from bench.audit.config import TAGS, Config
from bench.common import latency_summary, log
from bench.floors import ordered_subscribe
from bench.workload import TimedEventLog
from schemas import subjects as S
from schemas.commands import CreateMemory
from services.gateway.gateway import Call, Gateway

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

    async def body(call: Call) -> str:  # memory_add's body (the application's create: after the mark, raises it)
        cmd = CreateMemory(namespace=call.namespace, store=store, path=path, content=text, kind="note", tags=TAGS)
        w = await call.app.memories.create(call, cmd)
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
        row, _, _ = await call.app.reads.resolve_with_history(call, mid, history=5)
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
            self.subs.append(await ordered_subscribe(js, stream, subjects, cb, DeliverPolicy.NEW))

    async def stop(self) -> None:
        for s in self.subs:
            try:
                await s.unsubscribe()
            except Exception:  # noqa: BLE001
                pass
        self.subs = []

    def lags(self, since: float, until: float) -> list[tuple[float, float]]:
        return [(rec, lag) for rec, lag in self.samples if since <= rec < until]
