"""bench.spine — the write and read spine of mneme, each figure beside its floor, measured in one run.

    python -m bench.spine            # full run (a few minutes on 2 cores)
    python -m bench.spine --quick    # short run (well under 2 minutes)

What it measures (medians over interleaved rounds; latencies pooled over the rounds):

(a) floor: raw nats-py JetStream publishes of real, pre-encoded memory_created envelopes to
    MNEME_EVENTS, awaited one by one and pipelined (js.publish_async, many in flight);
(b) memory adds through the gateway's domain path in-process (CommandService.create), without
    store/path and with store+path (which asks the projector who owns the path first);
(c) memory_add over MCP stdio (ClientSession -> `mneme serve`) against a no-op MCPServer tool over
    stdio (bench/noop_server.py), in alternating blocks;
(d) add-then-get read-your-writes latency, in-process (create, then GetMemory with min_seq) and over
    MCP stdio (memory_add, then memory_get), counting every get that did not find its memory;
(e) get latency at 100,000 memories (10,000 with --quick): the log is loaded with pipelined,
    pre-encoded envelopes, a fresh projector folds it (fold rate), then gets by random id through the
    projector query path in-process and through MCP stdio (a `mneme serve` cold-started on that log).
(f) what an agent pays in context (bench.surface): each profile's tools/list in bytes, and the bytes of
    one 10-result memory_search (brief and full) and memory_list response over stdio.

Everything runs on 127.0.0.1 under one temporary directory that is removed at the end; every child
process (nats-server, `mneme serve`, the no-op server) is stopped, even on error. Progress goes to
stderr; stdout is the tables, then one JSON object with all figures as its LAST line.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent

from bench.common import (
    CpuMeter,
    emit_json,
    find_child,
    latency_summary,
    log,
    machine_info,
    median,
    percentile,
    print_table,
    ratio,
    rnd,
    verdict,
)
from bench.surface import measure as measure_surface
from bench.surface import report as report_surface
from mneme.compose import close_nats, connect
from mneme.embedded_nats import EmbeddedNats
from mneme.eventlog import EventLog, ensure_streams
from mneme.ids import memory_id_for, new_id
from schemas import subjects as S
from schemas.commands import CreateMemory
from schemas.events import Actor, Envelope, MemoryCreated, encode_envelope
from schemas.queries import GetMemory
from schemas.queries import encoder as query_encoder
from services.gateway.commands import CommandService
from services.gateway.queries import QueryClient
from services.projector.memories_view import MemoriesView
from services.projector.service import Projector

REPO = Path(__file__).resolve().parent.parent
MNEME = str(Path(sys.executable).parent / "mneme")
NOOP_SERVER = str(Path(__file__).resolve().parent / "noop_server.py")
NS = "default"  # the stdio gateway's default namespace, so in-process and stdio write alike
ACTOR = Actor(agent_id="bench", role="agent")
TAGS = ("bench", "spine")

TARGETS = {
    "b_vs_floor_awaited": 0.50,  # (b) adds without path >= 50% of awaited raw publishes
    "c_vs_noop": 0.60,  # (c) memory_add over stdio >= 60% of a no-op tool over stdio
    "d_p50_ms": 5.0,  # (d) add-then-get p50 < 5 ms, and every get finds its memory
}


@dataclass(frozen=True)
class Config:
    rounds: int
    floor_n: int  # per block: awaited raw publishes
    pipe_n: int  # per block: pipelined raw publishes
    add_n: int  # per block: domain adds without path
    path_n: int  # per block: domain adds with store+path
    mcp_n: int  # per block: stdio calls (no-op and memory_add)
    rw_inproc_n: int  # (d) in-process pairs
    rw_stdio_n: int  # (d) stdio pairs
    memories: int  # (e) memories loaded
    get_inproc_n: int
    get_stdio_n: int
    echo_n: int  # core NATS request/reply floor for the query path
    warmup: int
    lag_n: int = 1000  # index lag: memory_add flat out over stdio, then the last one searched semantically

    @staticmethod
    def full() -> Config:
        return Config(
            rounds=7,
            floor_n=1500,
            pipe_n=20000,
            add_n=1500,
            path_n=300,
            mcp_n=600,
            rw_inproc_n=2000,
            rw_stdio_n=1000,
            memories=100_000,
            get_inproc_n=5000,
            get_stdio_n=2000,
            echo_n=3000,
            warmup=200,
            lag_n=10_000,
        )

    @staticmethod
    def quick() -> Config:
        return Config(
            rounds=3,
            floor_n=500,
            pipe_n=5000,
            add_n=500,
            path_n=100,
            mcp_n=200,
            rw_inproc_n=500,
            rw_stdio_n=300,
            memories=10_000,
            get_inproc_n=1000,
            get_stdio_n=500,
            echo_n=1000,
            warmup=100,
        )


# -- workload -----------------------------------------------------------------------------------

_WORDS = (
    "agent memory project decision database schema latency index query cache user prefers dark mode "
    "deploy friday never release branch main review tests flaky retry timeout network gateway projector "
    "stream sequence event log replay snapshot vector search embedding model token budget context window "
    "meeting notes customer asked about pricing tier enterprise invoice quarterly report revenue forecast "
    "python rust typescript golang async await thread lock mutex channel queue worker pool backpressure "
    "kubernetes container image registry secret config environment staging production rollback incident "
    "postmortem root cause alert pager oncall runbook dashboard metric trace span sampling budget error "
    "the a an of to in on for with by from about after before during while because so but and or not "
    "always usually sometimes rarely important remember note that this should must could would might"
).split()


class Corpus:
    """Varied, reproducible memory texts of roughly 150-400 characters."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def text(self, i: int) -> str:
        words = self.rng.choices(_WORDS, k=self.rng.randint(25, 60))
        return f"Note {i}: " + " ".join(words) + "."

    def texts(self, n: int, start: int = 0) -> list[str]:
        return [self.text(start + i) for i in range(n)]


@dataclass(frozen=True, slots=True)
class PreEncoded:
    subject: str
    data: bytes
    memory_id: str
    msg_id: str


def pre_encode(texts: list[str], prefix: str, *, store: str | None = None) -> list[PreEncoded]:
    """memory_created envelopes exactly as the gateway would write them, encoded ahead of timing."""
    now = datetime.now(UTC)
    out = []
    for i, text in enumerate(texts):
        request_id = f"{prefix}-{i}"
        mid = memory_id_for(NS, request_id)
        ev = MemoryCreated(memory_id=mid, version=1, store=store, content=text, kind="note", tags=TAGS)
        env = Envelope(
            event_id=new_id(),
            schema_version=1,
            namespace=NS,
            aggregate_id=mid,
            occurred_at=now,
            actor=ACTOR,
            request_id=request_id,
            event=ev,
        )
        out.append(PreEncoded(S.memory_subject(NS, store, mid), encode_envelope(env), mid, f"{request_id}:{mid}"))
    return out


# -- instrumented gateway parts (bench-side subclasses; core code untouched) -----------------------


class TimedEventLog(EventLog):
    """EventLog that also adds up the time spent in append (the JetStream publish round trip)."""

    def __init__(self, *a: Any, **kw: Any):
        super().__init__(*a, **kw)
        self.append_s = 0.0
        self.appends = 0
        self.conflicts = 0

    async def append(self, *a: Any, **kw: Any) -> tuple[int, bool]:
        t = time.perf_counter()
        try:
            return await super().append(*a, **kw)
        except Exception as exc:
            if type(exc).__name__ == "WrongLastSequence":
                self.conflicts += 1
            raise
        finally:
            self.append_s += time.perf_counter() - t
            self.appends += 1

    def reset(self) -> None:
        self.append_s, self.appends, self.conflicts = 0.0, 0, 0


class TimedQueryClient(QueryClient):
    def __init__(self, *a: Any, **kw: Any):
        super().__init__(*a, **kw)
        self.ask_s = 0.0
        self.asks = 0

    async def ask(self, query: Any) -> Any:
        t = time.perf_counter()
        try:
            return await super().ask(query)
        finally:
            self.ask_s += time.perf_counter() - t
            self.asks += 1

    def reset(self) -> None:
        self.ask_s, self.asks = 0.0, 0


# -- block results ------------------------------------------------------------------------------


@dataclass
class Series:
    """Blocks of one measurement: rate per block, latencies pooled, CPU seconds per process."""

    name: str
    rates: list[float] = field(default_factory=list)
    lat: list[float] = field(default_factory=list)
    ops: int = 0
    cpu: dict[str, float] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)
    failures: int = 0

    def add(self, n: int, seconds: float, lat: list[float], cpu: dict[str, float] | None = None) -> None:
        self.rates.append(n / seconds)
        self.lat.extend(lat)
        self.ops += n
        for k, v in (cpu or {}).items():
            self.cpu[k] = self.cpu.get(k, 0.0) + v

    @property
    def rate(self) -> float:
        return median(self.rates)

    def cpu_ms_per_op(self) -> dict[str, float | None]:
        return {k: rnd(v * 1000 / self.ops, 3) if self.ops else None for k, v in self.cpu.items()}

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rate_per_s": rnd(self.rate, 1),
            "rates_per_block": [rnd(r, 1) for r in self.rates],
            **latency_summary(self.lat),
            "ops": self.ops,
            "cpu_ms_per_op": self.cpu_ms_per_op(),
        }
        if self.extra:
            out.update({k: rnd(v, 4) for k, v in self.extra.items()})
        if self.failures or self.name.startswith(("d_", "e_")):
            out["failures"] = self.failures
        return out


def paired_ratio(num: Series, den: Series) -> float | None:
    """Median over rounds of num/den in the same round: robust to drift in a noisy machine."""
    rs = [a / b for a, b in zip(num.rates, den.rates, strict=False) if b]
    return median(rs) if rs else None


# -- (a) floors ---------------------------------------------------------------------------------


async def publish_awaited(js: Any, msgs: list[PreEncoded], *, headers: bool = False) -> tuple[float, list[float]]:
    lat = []
    pub = js.publish
    t0 = time.perf_counter()
    for m in msgs:
        t = time.perf_counter()
        if headers:  # the same headers the domain path sends (dedupe id + expected subject sequence)
            await pub(
                m.subject, m.data, timeout=5.0, headers={S.HDR_MSG_ID: m.msg_id, S.HDR_EXPECTED_LAST_SUBJECT_SEQ: "0"}
            )
        else:
            await pub(m.subject, m.data, timeout=5.0)
        lat.append(time.perf_counter() - t)
    return time.perf_counter() - t0, lat


async def publish_pipelined(js: Any, msgs: list[PreEncoded]) -> float:
    """Many in flight: js.publish_async (bounded by its pending semaphore), then wait for every ack."""
    t0 = time.perf_counter()
    futs = [await js.publish_async(m.subject, m.data) for m in msgs]
    acks = await asyncio.gather(*futs)
    elapsed = time.perf_counter() - t0
    bad = [a for a in acks if getattr(a, "seq", None) is None]
    if bad:
        raise RuntimeError(f"{len(bad)} pipelined publishes were not acknowledged")
    return elapsed


async def load_log(js: Any, msgs: list[PreEncoded], chunk: int = 20000) -> float:
    t0 = time.perf_counter()
    for i in range(0, len(msgs), chunk):
        await publish_pipelined(js, msgs[i : i + chunk])
    return time.perf_counter() - t0


# -- (b) domain adds ----------------------------------------------------------------------------


async def domain_adds(
    commands: CommandService, texts: list[str], *, store: str | None = None, path_prefix: str = "", min_seq: int = 0
) -> tuple[float, list[float], int]:
    lat = []
    last = min_seq
    create = commands.create
    t0 = time.perf_counter()
    for i, text in enumerate(texts):
        t = time.perf_counter()
        cmd = CreateMemory(
            namespace=NS, content=text, tags=TAGS, store=store, path=f"{path_prefix}/m{i}" if store else None
        )
        w = await create(cmd, actor=ACTOR, request_id=new_id(), min_seq=last)
        lat.append(time.perf_counter() - t)
        last = max(last, w.seq)
    return time.perf_counter() - t0, lat, last


# -- MCP stdio ------------------------------------------------------------------------------------


@asynccontextmanager
async def mcp_session(params: StdioServerParameters, errlog: Any) -> AsyncIterator[ClientSession]:
    async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def serve_params(data_dir: Path) -> StdioServerParameters:
    # the whole environment: the SDK passes a child only a few variables by default, and PYTHONPATH (a
    # baseline worktree measured side by side) must reach `mneme serve`, or it runs the installed tree
    return StdioServerParameters(
        command=MNEME, args=["serve", "--data-dir", str(data_dir)], cwd=str(REPO), env=dict(os.environ)
    )


def noop_params() -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[NOOP_SERVER], cwd=str(REPO))


class ToolFailed(Exception):
    pass


def structured(res: Any) -> dict[str, Any]:
    if res.is_error:
        raise ToolFailed(res.content[0].text if res.content else "tool error")
    return res.structured_content


async def mcp_block(session: ClientSession, tool: str, args_list: list[dict[str, Any]]) -> tuple[float, list[float]]:
    lat = []
    call = session.call_tool
    t0 = time.perf_counter()
    for args in args_list:
        t = time.perf_counter()
        structured(await call(tool, args))
        lat.append(time.perf_counter() - t)
    return time.perf_counter() - t0, lat


# -- phases ---------------------------------------------------------------------------------------


async def phase_inproc(cfg: Config, root: Path, corpus: Corpus, profile: bool) -> dict[str, Any]:
    """(a), (b) and (d) in-process, against one embedded nats-server, with the projector live in this process."""
    out: dict[str, Any] = {}
    async with AsyncExitStack() as stack:
        server = EmbeddedNats(root / "nats")
        log(f"starting nats-server under {root / 'nats'}")
        await server.start()
        stack.push_async_callback(server.stop)  # graceful: phase (e) over stdio reopens this log
        assert server.pid is not None and server.url is not None
        nc = await connect(server.url, "bench-spine")
        stack.push_async_callback(close_nats, nc)
        js = nc.jetstream()
        await ensure_streams(js)
        pids = {"bench": os.getpid(), "nats": server.pid}

        elog = TimedEventLog(js, timeout=5.0)
        queries = TimedQueryClient(nc, timeout=10.0)
        commands = CommandService(elog, queries)

        sample = pre_encode(corpus.texts(1), "size-probe")[0]
        out["envelope_bytes"] = len(sample.data)
        log(f"a memory_created envelope is {len(sample.data)} bytes on subject {sample.subject}")

        # -- the live projector (as in `mneme serve`: same process, folding every event written) --
        live = AsyncExitStack()
        stack.push_async_callback(live.aclose)
        view = MemoriesView(str(root / "inproc-live.duckdb"))
        live.callback(view.close)
        projector = Projector(nc, view)
        await projector.start()
        live.push_async_callback(projector.stop)
        await projector.serving.wait()

        series = {
            k: Series(k)
            for k in ("a_floor_awaited", "a_floor_awaited_headers", "a_floor_pipelined", "b_add", "b_add_path")
        }
        meter = CpuMeter(pids)

        # warm-up: every path once, untimed
        log("warming up (in-process)")
        await publish_awaited(js, pre_encode(corpus.texts(cfg.warmup), f"w-a-{new_id()}"))
        await publish_pipelined(js, pre_encode(corpus.texts(cfg.warmup * 5), f"w-p-{new_id()}"))
        _, _, last = await domain_adds(commands, corpus.texts(cfg.warmup))
        _, _, last = await domain_adds(
            commands, corpus.texts(cfg.warmup // 4), store="bench", path_prefix="warm", min_seq=last
        )

        append_s = {"b_add": 0.0, "b_add_path": 0.0}
        ask_s = {"b_add": 0.0, "b_add_path": 0.0}
        conflicts = {"b_add": 0, "b_add_path": 0}
        last_box = [last]

        async def step_floor(r: int, headers: bool) -> None:
            msgs = pre_encode(corpus.texts(cfg.floor_n), f"f{int(headers)}-{r}-{new_id()}")
            await settle()
            meter.start()
            secs, lat = await publish_awaited(js, msgs, headers=headers)
            series["a_floor_awaited_headers" if headers else "a_floor_awaited"].add(len(msgs), secs, lat, meter.stop())

        async def step_pipelined(r: int) -> None:
            msgs = pre_encode(corpus.texts(cfg.pipe_n), f"fp-{r}-{new_id()}")
            await settle()
            meter.start()
            secs = await publish_pipelined(js, msgs)
            series["a_floor_pipelined"].add(len(msgs), secs, [], meter.stop())

        async def step_add(r: int, with_path: bool) -> None:
            key = "b_add_path" if with_path else "b_add"
            texts = corpus.texts(cfg.path_n if with_path else cfg.add_n)
            await settle()
            elog.reset()
            queries.reset()
            meter.start()
            secs, lat, last_box[0] = await domain_adds(
                commands, texts, store="bench" if with_path else None, path_prefix=f"r{r}", min_seq=last_box[0]
            )
            series[key].add(len(texts), secs, lat, meter.stop())
            append_s[key] += elog.append_s
            ask_s[key] += queries.ask_s
            conflicts[key] += elog.conflicts

        async def settle() -> None:
            """Start every block with the live projector idle (it has folded everything written so far)."""
            await projector.follower.wait_for(await elog.last_seq(), 120)

        steps = [
            lambda r: step_floor(r, False),
            lambda r: step_add(r, False),
            lambda r: step_floor(r, True),
            lambda r: step_add(r, True),
            step_pipelined,
        ]
        for r in range(cfg.rounds):
            log(f"round {r + 1}/{cfg.rounds}: floors and domain adds")
            k = r % len(steps)  # rotate the order each round: no measure always runs first or after another
            for step in steps[k:] + steps[:k]:
                await step(r)
        last = last_box[0]

        for key in ("b_add", "b_add_path"):
            s = series[key]
            s.extra["append_ms_per_op"] = append_s[key] * 1000 / s.ops
            s.extra["projector_ask_ms_per_op"] = ask_s[key] * 1000 / s.ops
            s.extra["rest_ms_per_op"] = (sum(s.lat) - append_s[key] - ask_s[key]) * 1000 / s.ops
            s.extra["conflicts"] = conflicts[key]

        # -- (d) in-process: add then get with min_seq = the write's sequence --
        log(f"(d) in-process add-then-get x{cfg.rw_inproc_n}")
        d = Series("d_inproc")
        d_add, d_get = [], []
        texts = corpus.texts(cfg.rw_inproc_n + cfg.warmup)
        await projector.follower.wait_for(await elog.last_seq(), 60)
        meter.start()
        t_start = time.perf_counter()
        for i, text in enumerate(texts):
            if i == cfg.warmup:
                meter.start()
                t_start = time.perf_counter()
            t = time.perf_counter()
            w = await commands.create(
                CreateMemory(namespace=NS, content=text, tags=TAGS), actor=ACTOR, request_id=new_id(), min_seq=last
            )
            t1 = time.perf_counter()
            assert w.memory is not None
            got = await queries.ask(
                GetMemory(namespace=NS, now=datetime.now(UTC), min_seq=w.seq, memory_id=w.memory.id)
            )
            t2 = time.perf_counter()
            last = max(last, w.seq)
            if i >= cfg.warmup:
                d.lat.append(t2 - t)
                d_add.append(t1 - t)
                d_get.append(t2 - t1)
                if got.item is None or got.item.memory.id != w.memory.id or got.item.memory.content != text:
                    d.failures += 1
        n = len(texts) - cfg.warmup
        d.rates.append(n / (time.perf_counter() - t_start))
        d.ops = n
        d.cpu = meter.stop()
        d.extra["add_p50_ms"] = percentile(d_add, 50) * 1000
        d.extra["get_p50_ms"] = percentile(d_get, 50) * 1000
        d.extra["get_p99_ms"] = percentile(d_get, 99) * 1000

        # -- optional cProfile of the domain add path (b), for the report --
        if profile:
            out["profile_b"] = await profile_domain_adds(commands, corpus, cfg, last)

        out.update({"series": {k: s.summary() for k, s in series.items()}, "d_inproc": d.summary(), "_series": series})
        log("stopping the in-process stack")
    return out


async def phase_scale_inproc(cfg: Config, root: Path, corpus: Corpus) -> dict[str, Any]:
    """(e) in-process: a fresh log holding exactly `cfg.memories` memories, folded by a fresh projector.

    The load is pipelined, pre-encoded memory_created envelopes straight into the log; the projector
    starts after the load, so the fold is timed alone (start → caught up and serving queries). Then
    gets by random id through QueryClient.ask(GetMemory), beside a core NATS request/reply echo floor.
    """
    async with AsyncExitStack() as stack:
        server = EmbeddedNats(root / "nats")
        log(f"(e) starting a second nats-server under {root / 'nats'}")
        await server.start()
        stack.push_async_callback(server.stop)  # graceful: (e) over stdio reopens this log
        assert server.pid is not None and server.url is not None
        nc = await connect(server.url, "bench-spine-scale")
        stack.push_async_callback(close_nats, nc)
        js = nc.jetstream()
        await ensure_streams(js)
        meter = CpuMeter({"bench": os.getpid(), "nats": server.pid})
        queries = QueryClient(nc, timeout=10.0)

        log(f"(e) encoding {cfg.memories:,} memory_created envelopes")
        load_msgs = pre_encode(corpus.texts(cfg.memories), f"load-{new_id()}")
        log(f"(e) loading {cfg.memories:,} memories into the log (pipelined)")
        meter.start()
        load_s = await load_log(js, load_msgs)
        load_cpu = meter.stop()
        log_events = (await js.stream_info(S.EVENTS_STREAM)).state.last_seq
        log(f"(e) loaded in {load_s:.2f} s ({cfg.memories / load_s:,.0f}/s); folding with a fresh projector")
        view = MemoriesView(str(root / "inproc-fold.duckdb"))
        stack.callback(view.close)
        meter.start()
        t0 = time.perf_counter()
        projector = Projector(nc, view)
        await projector.start()
        stack.push_async_callback(projector.stop)
        await projector.serving.wait()
        fold_s = time.perf_counter() - t0
        fold_cpu = meter.stop()
        row = view.reader().execute("SELECT count(*) FROM memories").fetchone()
        assert row is not None  # count(*) answers one row
        rows = row[0]
        log(f"(e) folded {log_events:,} events in {fold_s:.2f} s ({log_events / fold_s:,.0f}/s); {rows:,} memories")

        # core request/reply floor for the query path: an echo responder in this process
        async def echo(msg: Any) -> None:
            await msg.respond(msg.data)

        sub = await nc.subscribe("bench.echo", cb=echo)
        payload = query_encoder.encode(GetMemory(namespace=NS, now=datetime.now(UTC), memory_id=new_id()))
        ids = [m.memory_id for m in load_msgs]
        rng = random.Random(7)
        for mid in rng.sample(ids, min(cfg.warmup, len(ids))):
            await nc.request("bench.echo", payload, timeout=5)
            await queries.ask(GetMemory(namespace=NS, now=datetime.now(UTC), memory_id=mid))
        echo_s, e = Series("floor_request_reply"), Series("e_get_inproc")
        per_round_echo = max(1, cfg.echo_n // cfg.rounds)
        per_round_get = max(1, cfg.get_inproc_n // cfg.rounds)
        log(
            f"(e) in-process gets x{per_round_get * cfg.rounds} beside "
            f"request/reply echo x{per_round_echo * cfg.rounds}"
        )
        for _ in range(cfg.rounds):
            lat = []
            meter.start()
            t0 = time.perf_counter()
            for _ in range(per_round_echo):
                t = time.perf_counter()
                await nc.request("bench.echo", payload, timeout=5)
                lat.append(time.perf_counter() - t)
            echo_s.add(per_round_echo, time.perf_counter() - t0, lat, meter.stop())
            picks = [rng.choice(ids) for _ in range(per_round_get)]
            lat = []
            meter.start()
            t0 = time.perf_counter()
            for mid in picks:
                t = time.perf_counter()
                got = await queries.ask(GetMemory(namespace=NS, now=datetime.now(UTC), memory_id=mid))
                lat.append(time.perf_counter() - t)
                if got.item is None or got.item.memory.id != mid:
                    e.failures += 1
            e.add(len(picks), time.perf_counter() - t0, lat, meter.stop())
        await sub.unsubscribe()
        log("(e) stopping the in-process stack")
        return {
            "memories_loaded": cfg.memories,
            "log_events": log_events,
            "memories_in_view": rows,
            "load_seconds": rnd(load_s, 3),
            "load_rate_per_s": rnd(cfg.memories / load_s, 1),
            "load_cpu_s": {k: rnd(v, 3) for k, v in load_cpu.items()},
            "fold_seconds": rnd(fold_s, 3),
            "fold_rate_events_per_s": rnd(log_events / fold_s, 1),
            "fold_cpu_s": {k: rnd(v, 3) for k, v in fold_cpu.items()},
            "get": e.summary(),
            "floor_request_reply": echo_s.summary(),
            "_ids": ids,
        }


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


async def phase_stdio(cfg: Config, root: Path, corpus: Corpus, breakdown: bool) -> dict[str, Any]:
    """(c) and (d) over stdio: `mneme serve` (fresh data dir) beside the no-op MCPServer.

    With `breakdown`, two diagnostic servers run in the same rounds: `mneme serve` with the auditor off,
    and with the auditor off and the projector's DuckDB fold skipped (events still delivered). Every
    round runs one block on each server, in a rotating order; the idle servers wait. The differences
    say what each log consumer costs a write.
    """
    out: dict[str, Any] = {}
    root.mkdir(parents=True, exist_ok=True)
    errlog = open(root / "servers-stderr.log", "w")  # noqa: SIM115 - closed by the exit stack
    me = os.getpid()
    async with AsyncExitStack() as stack:
        stack.callback(errlog.close)
        log("starting the no-op MCP server and `mneme serve` over stdio")
        noop = await stack.enter_async_context(mcp_session(noop_params(), errlog))
        mneme = await stack.enter_async_context(mcp_session(serve_params(root / "serve"), errlog))
        servers: list[tuple[str, ClientSession, str, int | None]] = [
            ("noop", noop, "noop", find_child(me, "noop_server.py")),
            ("shipped", mneme, "memory_add", find_child(me, "serve", str(root / "serve"))),
        ]
        if breakdown:
            # the floor of a tool that awaits one durable write: the no-op plus one JetStream publish
            pub_nats = EmbeddedNats(root / "noop-publish-nats")
            pub_url = await pub_nats.start()
            stack.push_async_callback(pub_nats.stop)
            pub_params = StdioServerParameters(command=sys.executable, args=[NOOP_SERVER, "--nats-url", pub_url])
            session = await stack.enter_async_context(mcp_session(pub_params, errlog))
            servers.append(("noop+publish", session, "noop", find_child(me, "noop_server.py", "--nats-url")))
            for variant in ("no-auditor", "no-auditor-no-fold"):
                log(f"starting diagnostic `mneme serve` variant {variant}")
                vdir = root / variant
                session = await stack.enter_async_context(mcp_session(variant_params(vdir, variant), errlog))
                servers.append((variant, session, "memory_add", find_child(me, "--serve-variant", str(vdir))))
        meters: dict[str, CpuMeter] = {}
        for name, _, _, pid in servers:
            pids = {"client": me}
            if pid:
                pids["server"] = pid
                nats_pid = find_child(pid, "nats-server")
                if nats_pid:
                    pids["nats"] = nats_pid
            meters[name] = CpuMeter(pids)
        out["pids_found"] = {name: sorted(m.pids) for name, m in meters.items()}

        log("warming up (stdio)")
        for _name, session, tool, _ in servers:
            await mcp_block(session, tool, [call_args(tool, t) for t in corpus.texts(cfg.warmup)])
        w = structured(await mneme.call_tool("memory_add", call_args("memory_add", corpus.text(0))))
        for _ in range(cfg.warmup // 2):
            structured(await mneme.call_tool("memory_get", {"id": w["id"]}))

        series = {name: Series(name) for name, *_ in servers}
        for r in range(cfg.rounds):
            log(f"round {r + 1}/{cfg.rounds}: " + ", ".join(name for name, *_ in servers) + " over stdio")
            texts = corpus.texts(cfg.mcp_n)
            k = r % len(servers)
            for name, session, tool, _ in servers[k:] + servers[:k]:
                await asyncio.sleep(0.3)  # let the previous server's consumers finish folding its block
                args = [call_args(tool, t) for t in texts]
                meters[name].start()
                secs, lat = await mcp_block(session, tool, args)
                series[name].add(len(args), secs, lat, meters[name].stop())

        # -- (d) over stdio: memory_add then memory_get of the same id --
        log(f"(d) stdio add-then-get x{cfg.rw_stdio_n}")
        d = Series("d_stdio")
        d_add, d_get = [], []
        texts = corpus.texts(cfg.rw_stdio_n)
        meter = meters["shipped"]
        await asyncio.sleep(0.3)
        meter.start()
        t_start = time.perf_counter()
        for text in texts:
            t = time.perf_counter()
            added = structured(await mneme.call_tool("memory_add", call_args("memory_add", text)))
            t1 = time.perf_counter()
            mid = added["id"]
            res = await mneme.call_tool("memory_get", {"id": mid})
            t2 = time.perf_counter()
            d.lat.append(t2 - t)
            d_add.append(t1 - t)
            d_get.append(t2 - t1)
            if res.is_error or res.structured_content.get("id") != mid or res.structured_content.get("content") != text:
                d.failures += 1
        d.rates.append(len(texts) / (time.perf_counter() - t_start))
        d.ops = len(texts)
        d.cpu = meter.stop()
        d.extra["add_p50_ms"] = percentile(d_add, 50) * 1000
        d.extra["get_p50_ms"] = percentile(d_get, 50) * 1000
        d.extra["get_p99_ms"] = percentile(d_get, 99) * 1000

        out["index_lag"] = await index_lag(mneme, corpus.texts(cfg.lag_n))

        s_noop, s_add = series["noop"], series["shipped"]
        out.update(
            {
                "c_noop_stdio": s_noop.summary(),
                "c_add_stdio": s_add.summary(),
                "d_stdio": d.summary(),
                "_noop": s_noop,
                "_add": s_add,
            }
        )
        out["breakdown"] = {
            name: {"memory_add": series[name].summary(), "add_vs_noop": rnd(paired_ratio(series[name], s_noop), 3)}
            for name, *_ in servers
            if name not in ("noop", "shipped")
        }
        log("stopping the stdio servers")
    return out


async def index_lag(mneme: ClientSession, texts: list[str]) -> dict[str, Any]:
    """memory_add flat out (one after the other, as an agent does), then a semantic search for the last text
    until it finds the last memory: the vector index's lag behind the acknowledged writes when they stop
    (the backlog only grows while adds outrun the embedding, so this is the largest lag of the burst), and
    memories made searchable per second against writes acknowledged per second."""
    log(f"index lag: {len(texts)} memory_add flat out over stdio, then a semantic search for the last")
    await asyncio.sleep(0.3)
    t0 = time.perf_counter()
    last = ""
    for text in texts:
        last = structured(await mneme.call_tool("memory_add", call_args("memory_add", text)))["id"]
    acked = time.perf_counter()
    answers: dict[str, int] = {}
    found = None
    while found is None and time.perf_counter() - acked < 300:
        res = await mneme.call_tool("memory_search", {"query": texts[-1], "mode": "semantic", "limit": 10})
        if res.is_error:
            code = str(json.loads(first_text(res)).get("error", {}).get("code", "?"))
            answers[code] = answers.get(code, 0) + 1
            await asyncio.sleep(0.05)
        elif last in [r["id"] for r in (res.structured_content or {}).get("results", [])]:
            found = time.perf_counter()
        else:
            answers["not found yet"] = answers.get("not found yet", 0) + 1
            await asyncio.sleep(0.05)
    n = len(texts)
    acked_rate = n / (acked - t0)
    out: dict[str, Any] = {"adds": n, "acked_per_s": rnd(acked_rate, 1), "search_answers_before": answers}
    if found is None:
        out["failed"] = "the last memory was not found by semantic search within 300 s"
        return out
    searchable_rate = n / (found - t0)
    out.update(searchable_per_s=rnd(searchable_rate, 1), searchable_vs_acked=rnd(searchable_rate / acked_rate, 3),
               lag_at_end_s=rnd(found - acked, 3))  # fmt: skip
    return out


def first_text(res: CallToolResult) -> str:
    """The text of a tool result's first content block (mneme answers with one text block), or "?"."""
    block = res.content[0] if res.content else None
    return block.text if isinstance(block, TextContent) else "?"


def call_args(tool: str, text: str) -> dict[str, Any]:
    return {"text": text} if tool == "noop" else {"content": text, "tags": list(TAGS)}


def variant_params(data_dir: Path, variant: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        cwd=str(REPO),
        args=["-m", "bench.spine", "--serve-variant", str(data_dir), "--variant", variant],
    )


def serve_variant(data_dir: Path, variant: str) -> None:
    """`mneme serve` with a log consumer switched off, for the breakdown only (never a product mode).

    no-auditor: the audit trail (fed by the projector's follower) neither chains nor writes records.
    no-auditor-no-fold: also, the projector still receives every event and stages it but skips its DuckDB
    transaction (so reads are wrong: adds only).
    """
    import logging

    from mneme import runtime
    from mneme.settings import AuditorSettings, CoreSettings, GatewaySettings, ProjectorSettings

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    from mneme.follow import Positioned
    from services.auditor.trail import Trail

    # Trail's own signatures (its sources call trail.stage(name, batch, upto), then trail.commit()): no record
    # is hashed or written, but each source's staged position and checkpoint move as they would, so the
    # followers feeding the trail go on.
    def no_stage(self: Trail, source: str, batch: list[Positioned], upto: int | None) -> None:
        with self._lock:
            self.staged[source] = max(self.staged[source], batch[-1].seq if batch else 0, upto or 0)

    def no_commit(self: Trail) -> None:
        with self._lock:
            self.checkpoints = dict(self.staged)

    Trail.stage = no_stage  # type: ignore[method-assign]
    Trail.commit = no_commit  # type: ignore[method-assign]
    if variant == "no-auditor-no-fold":

        def skip_commit(self: MemoriesView) -> int:
            self.checkpoint = self.staged
            return self.checkpoint

        MemoriesView.commit = skip_commit  # type: ignore[method-assign]
    try:
        asyncio.run(
            runtime.serve(CoreSettings(data_dir=data_dir), GatewaySettings(), ProjectorSettings(), AuditorSettings())
        )
    finally:
        sys.stderr.flush()
        os._exit(0)  # like `mneme`: the stdio reader thread cannot be interrupted


async def phase_stdio_at_scale(cfg: Config, root: Path, ids: list[str], log_events: int) -> dict[str, Any]:
    """(e) over stdio: `mneme serve` cold-starts on the loaded log, folds it, then answers memory_get."""
    out: dict[str, Any] = {}
    errlog = open(root / "serve-at-scale-stderr.log", "w")  # noqa: SIM115
    async with AsyncExitStack() as stack:
        stack.callback(errlog.close)
        log(f"(e) cold-starting `mneme serve` on the log of {log_events:,} events")
        t0 = time.perf_counter()
        session = await stack.enter_async_context(mcp_session(serve_params(root), errlog))
        t_init = time.perf_counter() - t0
        probe = ids[-1]
        tries = 0
        errors: dict[str, int] = {}  # what a client sees while the projector catches up
        while True:
            tries += 1
            res = await session.call_tool("memory_get", {"id": probe})
            if not res.is_error:
                break
            text = first_text(res)
            errors[text] = errors.get(text, 0) + 1
            if time.perf_counter() - t0 > 600:
                raise RuntimeError(f"`mneme serve` did not answer a get within 600 s: {first_text(res)}")
            await asyncio.sleep(0.05)
        ready_s = time.perf_counter() - t0
        log(f"(e) serve answered after {ready_s:.2f} s (MCP initialize {t_init:.2f} s, {tries} probe calls)")
        # keyword search answers with the rows; semantic search says INDEXING until the vectors have caught up
        kw = await session.call_tool("memory_search", {"query": "memory", "mode": "keyword", "limit": 1})
        keyword_s = time.perf_counter() - t0 if not kw.is_error else None
        indexing = 0
        while True:
            res = await session.call_tool(
                "memory_search", {"query": "what was decided", "mode": "semantic", "limit": 1}
            )
            if not res.is_error:
                break
            indexing += 1
            if time.perf_counter() - t0 > 900:
                raise RuntimeError(f"semantic search did not answer within 900 s: {first_text(res)}")
            await asyncio.sleep(0.25)
        semantic_s = time.perf_counter() - t0
        log(
            f"(e) keyword search at {keyword_s} s, semantic search after {semantic_s:.2f} s "
            f"({indexing} INDEXING answers); gets are measured from here, with nothing left to embed"
        )
        me = os.getpid()
        serve_pid = find_child(me, "serve", str(root))
        pids = {"client": me}
        if serve_pid:
            pids["server"] = serve_pid
            nats_pid = find_child(serve_pid, "nats-server")
            if nats_pid:
                pids["nats"] = nats_pid
        meter = CpuMeter(pids)
        rng = random.Random(11)
        for mid in rng.sample(ids, min(cfg.warmup, len(ids))):
            structured(await session.call_tool("memory_get", {"id": mid}))
        picks = [rng.choice(ids) for _ in range(cfg.get_stdio_n)]
        e = Series("e_get_stdio")
        lat = []
        meter.start()
        t0 = time.perf_counter()
        for mid in picks:
            t = time.perf_counter()
            res = await session.call_tool("memory_get", {"id": mid})
            lat.append(time.perf_counter() - t)
            if res.is_error or res.structured_content.get("id") != mid:
                e.failures += 1
        e.add(len(picks), time.perf_counter() - t0, lat, meter.stop())
        out = {
            "log_events": log_events,
            "cold_start_to_first_get_s": rnd(ready_s, 3),
            "cold_start_to_keyword_search_s": rnd(keyword_s, 3) if keyword_s is not None else None,
            "cold_start_to_semantic_search_s": rnd(semantic_s, 3),
            "cold_start_embed_rate_events_per_s": rnd(log_events / semantic_s, 1),
            "cold_start_fold_rate_events_per_s": rnd(log_events / ready_s, 1),
            "mcp_initialize_s": rnd(t_init, 3),
            "errors_while_catching_up": errors,
            "get": e.summary(),
        }
        log("stopping `mneme serve`")
    return out


# -- report -------------------------------------------------------------------------------------


def report(
    cfg: Config,
    mode: str,
    machine: dict[str, Any],
    a: dict[str, Any],
    e1: dict[str, Any],
    c: dict[str, Any],
    e2: dict[str, Any],
    wall: float,
) -> dict[str, Any]:
    ser: dict[str, Series] = a["_series"]
    fa, fh, fp, b, bp = (
        ser[k] for k in ("a_floor_awaited", "a_floor_awaited_headers", "a_floor_pipelined", "b_add", "b_add_path")
    )
    noop, add = c["_noop"], c["_add"]
    b_ratio = paired_ratio(b, fa)
    c_ratio = paired_ratio(add, noop)
    d_in, d_io = a["d_inproc"], c["d_stdio"]
    e_in, e_io = e1, e2

    targets = {
        "b_add_vs_floor_awaited": {
            "ratio": rnd(b_ratio, 3),
            "target": f">= {TARGETS['b_vs_floor_awaited']}",
            "pass": b_ratio is not None and b_ratio >= TARGETS["b_vs_floor_awaited"],
        },
        "c_add_vs_noop_stdio": {
            "ratio": rnd(c_ratio, 3),
            "target": f">= {TARGETS['c_vs_noop']}",
            "pass": c_ratio is not None and c_ratio >= TARGETS["c_vs_noop"],
        },
        "d_inproc_p50": {
            "p50_ms": d_in["p50_ms"],
            "failures": d_in["failures"],
            "target": "p50 < 5 ms, 0 failures",
            "pass": d_in["p50_ms"] < TARGETS["d_p50_ms"] and d_in["failures"] == 0,
        },
        "d_stdio_p50": {
            "p50_ms": d_io["p50_ms"],
            "failures": d_io["failures"],
            "target": "p50 < 5 ms, 0 failures",
            "pass": d_io["p50_ms"] < TARGETS["d_p50_ms"] and d_io["failures"] == 0,
        },
        "e_gets_found": {
            "failures": e_in["get"]["failures"] + e_io["get"]["failures"],
            "target": "0 failures",
            "pass": e_in["get"]["failures"] + e_io["get"]["failures"] == 0,
        },
    }

    print(
        f"mneme bench.spine ({mode}) — {machine['nproc']} cores, {machine['cpu_model']}, "
        f"{machine['ram_gb']} GB RAM, Python {machine['python']}, {machine['date']}"
    )
    print(
        f"rounds={cfg.rounds}; rates are medians of per-round blocks; ratios are medians of same-round ratios; "
        f"envelope {a['envelope_bytes']} B"
    )

    def cpu(s: dict[str, Any], *keys: str) -> list[Any]:
        return [s["cpu_ms_per_op"].get(k) for k in keys]

    sa = a["series"]
    rows = [
        ["(a) raw publish, awaited", sa["a_floor_awaited"]["rate_per_s"], sa["a_floor_awaited"]["p50_ms"],
         sa["a_floor_awaited"]["p99_ms"], 1.0, "floor", "", *cpu(sa["a_floor_awaited"], "bench", "nats")],
        ["(a) raw publish, awaited + mneme headers", sa["a_floor_awaited_headers"]["rate_per_s"],
         sa["a_floor_awaited_headers"]["p50_ms"], sa["a_floor_awaited_headers"]["p99_ms"],
         rnd(paired_ratio(fh, fa), 3), "", "", *cpu(sa["a_floor_awaited_headers"], "bench", "nats")],
        ["(a) raw publish, pipelined", sa["a_floor_pipelined"]["rate_per_s"], None, None,
         rnd(paired_ratio(fp, fa), 3), "", "", *cpu(sa["a_floor_pipelined"], "bench", "nats")],
        ["(b) CommandService.create, no path", sa["b_add"]["rate_per_s"], sa["b_add"]["p50_ms"],
         sa["b_add"]["p99_ms"], rnd(b_ratio, 3), ">= 0.50", verdict(targets["b_add_vs_floor_awaited"]["pass"]),
         *cpu(sa["b_add"], "bench", "nats")],
        ["(b) CommandService.create, store+path", sa["b_add_path"]["rate_per_s"], sa["b_add_path"]["p50_ms"],
         sa["b_add_path"]["p99_ms"], rnd(paired_ratio(bp, fa), 3), "", "", *cpu(sa["b_add_path"], "bench", "nats")],
    ]  # fmt: skip
    print_table(
        "In-process write path (ratio = vs awaited raw publish, same round)",
        ["measure", "ops/s", "p50 ms", "p99 ms", "ratio", "target", "", "cpu ms/op bench", "cpu ms/op nats"],
        rows,
    )
    bb, bpp = sa["b_add"], sa["b_add_path"]
    print_table("Where (b)'s time goes (wall ms per add, in this process)",
                ["measure", "total", "append (publish)", "projector ask", "rest (domain + loop)", "conflicts"],
                [["no path", bb["mean_ms"], bb["append_ms_per_op"], bb["projector_ask_ms_per_op"], bb["rest_ms_per_op"],
                  int(bb["conflicts"])],
                 ["store+path", bpp["mean_ms"], bpp["append_ms_per_op"], bpp["projector_ask_ms_per_op"],
                  bpp["rest_ms_per_op"], int(bpp["conflicts"])]])  # fmt: skip

    cn, ca = c["c_noop_stdio"], c["c_add_stdio"]
    print_table("MCP over stdio (ratio = vs no-op tool, same round)",
                ["measure", "calls/s", "p50 ms", "p99 ms", "ratio", "target", "", "cpu ms/op client",
                 "cpu ms/op server", "cpu ms/op nats"],
                [["no-op MCPServer tool (floor)", cn["rate_per_s"], cn["p50_ms"], cn["p99_ms"], 1.0, "floor", "",
                  *cpu(cn, "client", "server", "nats")],
                 ["(c) memory_add via mneme serve", ca["rate_per_s"], ca["p50_ms"], ca["p99_ms"], rnd(c_ratio, 3),
                  ">= 0.60", verdict(targets["c_add_vs_noop_stdio"]["pass"]),
                  *cpu(ca, "client", "server", "nats")]])  # fmt: skip

    bd = c.get("breakdown") or {}
    if bd:
        rows = [["no-op MCPServer tool", cn["rate_per_s"], cn["p50_ms"], 1.0, *cpu(cn, "client", "server", "nats")],
                ["memory_add, mneme serve as shipped", ca["rate_per_s"], ca["p50_ms"], rnd(c_ratio, 3),
                 *cpu(ca, "client", "server", "nats")]]  # fmt: skip
        for variant, label in (
            ("noop+publish", "no-op tool + one awaited JetStream publish"),
            ("no-auditor", "memory_add, auditor off"),
            ("no-auditor-no-fold", "memory_add, auditor off + no DuckDB fold"),
        ):
            if variant in bd:
                va = bd[variant]["memory_add"]
                rows.append([label, va["rate_per_s"], va["p50_ms"], bd[variant]["add_vs_noop"],
                             *cpu(va, "client", "server", "nats")])  # fmt: skip
        print_table(
            "Where (c)'s time goes: `mneme serve` with its log consumers switched off (diagnostic)",
            ["measure", "calls/s", "p50 ms", "vs no-op", "cpu ms/op client", "cpu ms/op server", "cpu ms/op nats"],
            rows,
        )

    rr = e_in["floor_request_reply"]
    print_table("Read-your-writes: add then get the same memory at once",
                ["measure", "pairs/s", "p50 ms", "p99 ms", "add p50", "get p50", "get p99", "failures", "target", ""],
                [["(d) in-process create + GetMemory(min_seq)", d_in["rate_per_s"], d_in["p50_ms"], d_in["p99_ms"],
                  d_in["add_p50_ms"], d_in["get_p50_ms"], d_in["get_p99_ms"], d_in["failures"], "p50 < 5 ms",
                  verdict(targets["d_inproc_p50"]["pass"])],
                 ["(d) stdio memory_add + memory_get", d_io["rate_per_s"], d_io["p50_ms"], d_io["p99_ms"],
                  d_io["add_p50_ms"], d_io["get_p50_ms"], d_io["get_p99_ms"], d_io["failures"], "p50 < 5 ms",
                  verdict(targets["d_stdio_p50"]["pass"])]])  # fmt: skip

    gi, go = e_in["get"], e_io["get"]
    print_table(f"Gets at {cfg.memories:,} memories (log of {e_in['log_events']:,} events)",
                ["measure", "gets/s", "p50 ms", "p99 ms", "vs floor p50", "failures"],
                [["core NATS request/reply echo (floor, in-process)", rr["rate_per_s"], rr["p50_ms"], rr["p99_ms"],
                  1.0, None],
                 ["(e) QueryClient.ask(GetMemory) in-process", gi["rate_per_s"], gi["p50_ms"], gi["p99_ms"],
                  rnd(ratio(gi["p50_ms"], rr["p50_ms"]), 2), gi["failures"]],
                 ["(e) memory_get over stdio (vs no-op p50)", go["rate_per_s"], go["p50_ms"], go["p99_ms"],
                  rnd(ratio(go["p50_ms"], cn["p50_ms"]), 2), go["failures"]]])  # fmt: skip
    print_table("Loading and folding",
                ["measure", "events", "seconds", "events/s"],
                [["pipelined load of pre-encoded envelopes", e_in["memories_loaded"], e_in["load_seconds"],
                  e_in["load_rate_per_s"]],
                 ["fresh in-process projector folds the whole log", e_in["log_events"], e_in["fold_seconds"],
                  e_in["fold_rate_events_per_s"]],
                 ["`mneme serve` cold start until the first get answers", e_io["log_events"],
                  e_io["cold_start_to_first_get_s"], e_io["cold_start_fold_rate_events_per_s"]]])  # fmt: skip
    print("\nTargets: " + ", ".join(f"{k} {verdict(v['pass'])}" for k, v in targets.items()))
    print(f"wall time {wall:.1f} s")

    return {
        "bench": "spine",
        "mode": mode,
        "machine": machine,
        "config": cfg.__dict__,
        "envelope_bytes": a["envelope_bytes"],
        "a_floor": {k: sa[k] for k in ("a_floor_awaited", "a_floor_awaited_headers", "a_floor_pipelined")},
        "b_domain": {
            "no_path": sa["b_add"],
            "store_path": sa["b_add_path"],
            "no_path_vs_floor_awaited": rnd(b_ratio, 3),
            "store_path_vs_floor_awaited": rnd(paired_ratio(bp, fa), 3),
        },
        "c_stdio": {"noop": cn, "memory_add": ca, "add_vs_noop": rnd(c_ratio, 3), "breakdown": bd},
        "index_lag": c.get("index_lag"),
        "d_read_your_writes": {"inproc": d_in, "stdio": d_io},
        "e_get_at_scale": {"inproc": e_in, "stdio": e_io},
        "targets": targets,
        "wall_seconds": rnd(wall, 1),
    }


async def amain(cfg: Config, mode: str, profile: bool, keep: bool, breakdown: bool) -> dict[str, Any]:
    machine = machine_info()
    started = time.perf_counter()
    main_task = asyncio.current_task()
    if main_task is not None:  # SIGTERM unwinds like Ctrl-C: servers stopped, temporary directory removed
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    tmp = Path(tempfile.mkdtemp(prefix="mneme-bench-spine-"))
    log(f"temporary directory {tmp}")
    try:
        corpus = Corpus(seed=42)
        a = await phase_inproc(cfg, tmp / "spine", corpus, profile)
        e1 = await phase_scale_inproc(cfg, tmp / "scale", corpus)
        c = await phase_stdio(cfg, tmp / "stdio", corpus, breakdown)
        e2 = await phase_stdio_at_scale(cfg, tmp / "scale", e1.pop("_ids"), e1["log_events"])
        surface = await measure_surface()  # what an agent pays in context: tool lists and result sizes
        out = report(cfg, mode, machine, a, e1, c, e2, time.perf_counter() - started)
        report_surface(surface)
        out["surface"] = surface
        return out
    finally:
        if keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.spine", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short run (10,000 memories, fewer rounds)")
    ap.add_argument("--profile", action="store_true", help="also cProfile the in-process domain adds (stderr)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (server logs, DuckDB files)")
    ap.add_argument(
        "--no-breakdown",
        action="store_true",
        help="skip the diagnostic `mneme serve` variants (auditor off; auditor and fold off)",
    )
    ap.add_argument("--serve-variant", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--variant", choices=["no-auditor", "no-auditor-no-fold"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_variant:
        serve_variant(args.serve_variant, args.variant)
        return
    cfg = Config.quick() if args.quick else Config.full()
    try:
        result = asyncio.run(
            amain(cfg, "quick" if args.quick else "full", args.profile, args.keep, not args.no_breakdown)
        )
    except (KeyboardInterrupt, asyncio.CancelledError):
        log("interrupted: servers stopped, temporary directory removed")
        sys.exit(130)
    emit_json(result)


if __name__ == "__main__":
    main()
