"""bench.spine (a), (b) and (d) in-process: raw publishes, the gateway's domain path, read-your-writes, against
one embedded nats-server with the projector live in this process.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import fixtures
from bench.common import CpuMeter, log, rnd, timed_each
from bench.floors import publish_awaited, publish_pipelined
from bench.spine.config import ACTOR, NS, TAGS, Config, Series, pre_encode, read_your_writes
from bench.workload import Corpus, TimedEventLog, TimedQueryClient
from mneme.ids import new_id
from schemas.commands import CreateMemory
from schemas.queries import GetMemory
from services.gateway.commands import CommandService
from services.projector.service import Projector


async def domain_adds(
    commands: CommandService, texts: list[str], *, store: str | None = None, path_prefix: str = "", min_seq: int = 0
) -> tuple[float, list[float], int]:
    last = min_seq

    async def add(item: tuple[int, str]) -> None:
        nonlocal last
        i, text = item
        cmd = CreateMemory(
            namespace=NS, content=text, tags=TAGS, store=store, path=f"{path_prefix}/m{i}" if store else None
        )
        w = await commands.create(cmd, actor=ACTOR, request_id=new_id(), min_seq=last)
        last = max(last, w.seq)

    secs, lat = await timed_each(enumerate(texts), add)
    return secs, lat, last


ADDS = ("b_add", "b_add_path")


@dataclass
class InProc:
    """(a), (b) and (d) in-process: the gateway's write path against one nats-server, the projector live."""

    cfg: Config
    corpus: Corpus
    srv: fixtures.Nats
    projector: Projector
    meter: CpuMeter
    elog: TimedEventLog = field(init=False)
    queries: TimedQueryClient = field(init=False)
    commands: CommandService = field(init=False)
    series: dict[str, Series] = field(init=False)
    parts: dict[str, dict[str, float]] = field(init=False)  # per add series: append, projector ask, conflicts
    last: int = 0

    def __post_init__(self) -> None:
        self.elog = TimedEventLog(self.srv.js, timeout=5.0)
        self.queries = TimedQueryClient(self.srv.nc, timeout=10.0)
        self.commands = CommandService(self.elog, self.queries)
        names = ("a_floor_awaited", "a_floor_awaited_headers", "a_floor_pipelined", *ADDS)
        self.series = {k: Series(k) for k in names}
        self.parts = {k: {"append": 0.0, "ask": 0.0, "conflicts": 0} for k in ADDS}

    async def settle(self) -> None:
        """Start every block with the live projector idle (it has folded everything written so far)."""
        await self.projector.follower.wait_for(await self.elog.last_seq(), 120)

    async def warm_up(self) -> None:
        """Every path once, untimed."""
        cfg, js, corpus = self.cfg, self.srv.js, self.corpus
        await publish_awaited(js, pre_encode(corpus.texts(cfg.warmup), f"w-a-{new_id()}"))
        await publish_pipelined(js, pre_encode(corpus.texts(cfg.warmup * 5), f"w-p-{new_id()}"))
        _, _, self.last = await domain_adds(self.commands, corpus.texts(cfg.warmup))
        _, _, self.last = await domain_adds(
            self.commands, corpus.texts(cfg.warmup // 4), store="bench", path_prefix="warm", min_seq=self.last
        )

    async def floor(self, r: int, headers: bool) -> None:
        msgs = pre_encode(self.corpus.texts(self.cfg.floor_n), f"f{int(headers)}-{r}-{new_id()}")
        await self.settle()
        self.meter.start()
        secs, lat = await publish_awaited(self.srv.js, msgs, headers=headers)
        key = "a_floor_awaited_headers" if headers else "a_floor_awaited"
        self.series[key].add(len(msgs), secs, lat, self.meter.stop())

    async def pipelined(self, r: int) -> None:
        msgs = pre_encode(self.corpus.texts(self.cfg.pipe_n), f"fp-{r}-{new_id()}")
        await self.settle()
        self.meter.start()
        secs = await publish_pipelined(self.srv.js, msgs)
        self.series["a_floor_pipelined"].add(len(msgs), secs, [], self.meter.stop())

    async def adds(self, r: int, with_path: bool) -> None:
        key = "b_add_path" if with_path else "b_add"
        texts = self.corpus.texts(self.cfg.path_n if with_path else self.cfg.add_n)
        await self.settle()
        self.elog.reset()
        self.queries.reset()
        self.meter.start()
        secs, lat, self.last = await domain_adds(
            self.commands, texts, store="bench" if with_path else None, path_prefix=f"r{r}", min_seq=self.last
        )
        self.series[key].add(len(texts), secs, lat, self.meter.stop())
        part = self.parts[key]
        part["append"] += self.elog.append_s
        part["ask"] += self.queries.ask_s
        part["conflicts"] += self.elog.conflicts

    async def rounds(self) -> None:
        steps: list[Callable[[int], Awaitable[None]]] = [
            lambda r: self.floor(r, False),
            lambda r: self.adds(r, False),
            lambda r: self.floor(r, True),
            lambda r: self.adds(r, True),
            self.pipelined,
        ]
        for r in range(self.cfg.rounds):
            log(f"round {r + 1}/{self.cfg.rounds}: floors and domain adds")
            k = r % len(steps)  # rotate the order each round: no measure always runs first or after another
            for step in steps[k:] + steps[:k]:
                await step(r)
        for key in ADDS:  # where (b)'s time went
            s, part = self.series[key], self.parts[key]
            s.extra["append_ms_per_op"] = part["append"] * 1000 / s.ops
            s.extra["projector_ask_ms_per_op"] = part["ask"] * 1000 / s.ops
            s.extra["rest_ms_per_op"] = (sum(s.lat) - part["append"] - part["ask"]) * 1000 / s.ops
            s.extra["conflicts"] = part["conflicts"]

    async def read_your_writes(self) -> Series:
        """(d) in-process: add, then get with min_seq = the write's sequence (the first `warmup` untimed)."""
        cfg = self.cfg
        log(f"(d) in-process add-then-get x{cfg.rw_inproc_n}")
        texts = self.corpus.texts(cfg.rw_inproc_n + cfg.warmup)
        await self.projector.follower.wait_for(await self.elog.last_seq(), 60)
        pairs: list[tuple[float, float, bool]] = []
        self.meter.start()
        t_start = time.perf_counter()
        for i, text in enumerate(texts):
            if i == cfg.warmup:
                self.meter.start()
                t_start = time.perf_counter()
            pair = await self.add_then_get(text)
            if i >= cfg.warmup:
                pairs.append(pair)
        return read_your_writes("d_inproc", pairs, time.perf_counter() - t_start, self.meter.stop())

    async def add_then_get(self, text: str) -> tuple[float, float, bool]:
        t = time.perf_counter()
        cmd = CreateMemory(namespace=NS, content=text, tags=TAGS)
        w = await self.commands.create(cmd, actor=ACTOR, request_id=new_id(), min_seq=self.last)
        t1 = time.perf_counter()
        assert w.memory is not None
        got = await self.queries.ask(
            GetMemory(namespace=NS, now=datetime.now(UTC), min_seq=w.seq, memory_id=w.memory.id)
        )
        t2 = time.perf_counter()
        self.last = max(self.last, w.seq)
        found = got.item is not None and got.item.memory.id == w.memory.id and got.item.memory.content == text
        return t1 - t, t2 - t1, found


async def live_projector(stack: AsyncExitStack, root: Path, nc: Any) -> Projector:
    """The live projector (as in `mneme serve`: same process, folding every event written), serving."""
    live = AsyncExitStack()
    stack.push_async_callback(live.aclose)
    view = fixtures.memories_view(root / "inproc-live.duckdb")
    live.callback(view.close)
    projector = fixtures.projector(nc, view)
    await projector.start()
    live.push_async_callback(projector.stop)
    await projector.serving.wait()
    return projector


async def phase_inproc(cfg: Config, root: Path, corpus: Corpus, profile: bool) -> dict[str, Any]:
    """(a), (b) and (d) in-process, against one embedded nats-server, with the projector live in this process."""
    out: dict[str, Any] = {}
    async with AsyncExitStack() as stack:
        log(f"starting nats-server under {root / 'nats'}")
        srv = await fixtures.start_nats(stack, root / "nats", "bench-spine")
        sample = pre_encode(corpus.texts(1), "size-probe")[0]
        out["envelope_bytes"] = len(sample.data)
        log(f"a memory_created envelope is {len(sample.data)} bytes on subject {sample.subject}")
        projector = await live_projector(stack, root, srv.nc)
        run = InProc(cfg, corpus, srv, projector, CpuMeter({"bench": os.getpid(), "nats": srv.pid}))
        log("warming up (in-process)")
        await run.warm_up()
        await run.rounds()
        d = await run.read_your_writes()
        if profile:  # optional cProfile of the domain add path (b), for the report
            out["profile_b"] = await profile_domain_adds(run.commands, corpus, cfg, run.last)
        series = run.series
        out.update({"series": {k: s.summary() for k, s in series.items()}, "d_inproc": d.summary(), "_series": series})
        log("stopping the in-process stack")
    return out


async def profile_domain_adds(commands: CommandService, corpus: Corpus, cfg: Config, last: int) -> dict[str, Any]:
    """cProfile over sequential domain adds: where this process's time goes (includes the live projector)."""
    texts = corpus.texts(cfg.add_n)
    prof = cProfile.Profile()
    prof.enable()
    t0 = time.perf_counter()
    await domain_adds(commands, texts, min_seq=last)
    wall = time.perf_counter() - t0
    prof.disable()
    buf = io.StringIO()
    st = pstats.Stats(prof, stream=buf)
    st.sort_stats("tottime").print_stats(25)
    buf.write("\n--- cumulative ---\n")
    st.sort_stats("cumulative").print_stats(40)
    log("cProfile of domain adds:\n" + buf.getvalue())
    return {"n": len(texts), "wall_s": rnd(wall, 3), "note": "printed to stderr"}
