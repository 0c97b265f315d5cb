"""bench.spine (e): gets at 100,000 memories (10,000 with --quick), in-process on a freshly folded log, and over
stdio on a `mneme serve` cold-started on the same log.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mcp import ClientSession

from bench import fixtures
from bench.common import CpuMeter, log, rnd, timed_each
from bench.floors import echo_once, echo_responder, load_log
from bench.spine.config import NS, Config, Series, pre_encode
from bench.stdio import call, first_text, mcp_session, serve_child, serve_params, server_pids
from bench.workload import Corpus, PreEncoded
from mneme.ids import new_id
from schemas import subjects as S
from schemas.queries import GetMemory
from schemas.queries import encoder as query_encoder
from services.gateway.queries import QueryClient


async def load_and_fold(
    stack: AsyncExitStack, root: Path, srv: fixtures.Nats, msgs: list[PreEncoded], meter: CpuMeter
) -> dict[str, Any]:
    """The messages loaded into the log (pipelined), then a fresh projector started and timed until it has
    folded them and serves queries."""
    n = len(msgs)
    log(f"(e) loading {n:,} memories into the log (pipelined)")
    meter.start()
    load_s = await load_log(srv.js, msgs)
    load_cpu = meter.stop()
    log_events = (await srv.js.stream_info(S.EVENTS_STREAM)).state.last_seq
    log(f"(e) loaded in {load_s:.2f} s ({n / load_s:,.0f}/s); folding with a fresh projector")
    view = fixtures.memories_view(root / "inproc-fold.duckdb")
    stack.callback(view.close)
    meter.start()
    t0 = time.perf_counter()
    projector = fixtures.projector(srv.nc, view)
    await projector.start()
    stack.push_async_callback(projector.stop)
    await projector.serving.wait()
    fold_s = time.perf_counter() - t0
    fold_cpu = meter.stop()
    row = view.reader().execute("SELECT count(*) FROM memories").fetchone()
    assert row is not None  # count(*) answers one row
    log(f"(e) folded {log_events:,} events in {fold_s:.2f} s ({log_events / fold_s:,.0f}/s); {row[0]:,} memories")
    return {
        "memories_loaded": n,
        "log_events": log_events,
        "memories_in_view": row[0],
        "load_seconds": rnd(load_s, 3),
        "load_rate_per_s": rnd(n / load_s, 1),
        "load_cpu_s": {k: rnd(v, 3) for k, v in load_cpu.items()},
        "fold_seconds": rnd(fold_s, 3),
        "fold_rate_events_per_s": rnd(log_events / fold_s, 1),
        "fold_cpu_s": {k: rnd(v, 3) for k, v in fold_cpu.items()},
    }


async def gets_beside_echo(cfg: Config, nc: Any, ids: list[str], meter: CpuMeter) -> tuple[Series, Series]:
    """Gets by random id through QueryClient.ask(GetMemory), round by round beside a core NATS request/reply
    echo in this process (the query path's floor): (the gets, the echo)."""
    queries = QueryClient(nc, timeout=10.0)
    sub = await echo_responder(nc, "bench.echo")
    payload = query_encoder.encode(GetMemory(namespace=NS, now=datetime.now(UTC), memory_id=new_id()))
    rng = random.Random(7)

    async def get(mid: str) -> None:
        got = await queries.ask(GetMemory(namespace=NS, now=datetime.now(UTC), memory_id=mid))
        if got.item is None or got.item.memory.id != mid:
            e.failures += 1

    for mid in rng.sample(ids, min(cfg.warmup, len(ids))):
        await echo_once(nc, "bench.echo", payload)
        await queries.ask(GetMemory(namespace=NS, now=datetime.now(UTC), memory_id=mid))
    echo_s, e = Series("floor_request_reply"), Series("e_get_inproc")
    per_round_echo = max(1, cfg.echo_n // cfg.rounds)
    per_round_get = max(1, cfg.get_inproc_n // cfg.rounds)
    log(f"(e) in-process gets x{per_round_get * cfg.rounds} beside request/reply echo x{per_round_echo * cfg.rounds}")
    for _ in range(cfg.rounds):
        meter.start()
        secs, lat = await timed_each(range(per_round_echo), lambda _: nc.request("bench.echo", payload, timeout=5))
        echo_s.add(per_round_echo, secs, lat, meter.stop())
        picks = [rng.choice(ids) for _ in range(per_round_get)]
        meter.start()
        secs, lat = await timed_each(picks, get)
        e.add(len(picks), secs, lat, meter.stop())
    await sub.unsubscribe()
    return e, echo_s


async def phase_scale_inproc(cfg: Config, root: Path, corpus: Corpus) -> dict[str, Any]:
    """(e) in-process: a fresh log holding exactly `cfg.memories` memories, folded by a fresh projector.

    The load is pipelined, pre-encoded memory_created envelopes straight into the log; the projector
    starts after the load, so the fold is timed alone (start → caught up and serving queries). Then
    gets by random id through QueryClient.ask(GetMemory), beside a core NATS request/reply echo floor.
    """
    async with AsyncExitStack() as stack:
        log(f"(e) starting a second nats-server under {root / 'nats'}")
        # stopped gracefully: (e) over stdio reopens this log
        srv = await fixtures.start_nats(stack, root / "nats", "bench-spine-scale")
        meter = CpuMeter({"bench": os.getpid(), "nats": srv.pid})
        log(f"(e) encoding {cfg.memories:,} memory_created envelopes")
        load_msgs = pre_encode(corpus.texts(cfg.memories), f"load-{new_id()}")
        out = await load_and_fold(stack, root, srv, load_msgs, meter)
        ids = [m.memory_id for m in load_msgs]
        e, echo_s = await gets_beside_echo(cfg, srv.nc, ids, meter)
        log("(e) stopping the in-process stack")
        return {**out, "get": e.summary(), "floor_request_reply": echo_s.summary(), "_ids": ids}


async def until_answered(session: ClientSession, t0: float, probe: str) -> tuple[float, int, dict[str, int]]:
    """Until `mneme serve` answers a memory_get (the projector has caught up): seconds since `t0`, the calls
    it took, and the errors a client saw meanwhile."""
    tries = 0
    errors: dict[str, int] = {}
    while True:
        tries += 1
        res = await session.call_tool("memory_get", {"id": probe})
        if not res.is_error:
            return time.perf_counter() - t0, tries, errors
        text = first_text(res)
        errors[text] = errors.get(text, 0) + 1
        if time.perf_counter() - t0 > 600:
            raise RuntimeError(f"`mneme serve` did not answer a get within 600 s: {first_text(res)}")
        await asyncio.sleep(0.05)


async def until_searchable(session: ClientSession, t0: float) -> tuple[float | None, float, int]:
    """Keyword search answers with the rows; semantic search says INDEXING until the vectors have caught up:
    (seconds since `t0` to a keyword answer, to a semantic answer, the INDEXING answers before it)."""
    kw = await session.call_tool("memory_search", {"query": "memory", "mode": "keyword", "limit": 1})
    keyword_s = time.perf_counter() - t0 if not kw.is_error else None
    indexing = 0
    while True:
        res = await session.call_tool("memory_search", {"query": "what was decided", "mode": "semantic", "limit": 1})
        if not res.is_error:
            return keyword_s, time.perf_counter() - t0, indexing
        indexing += 1
        if time.perf_counter() - t0 > 900:
            raise RuntimeError(f"semantic search did not answer within 900 s: {first_text(res)}")
        await asyncio.sleep(0.25)


async def stdio_gets(cfg: Config, session: ClientSession, root: Path, ids: list[str]) -> Series:
    """memory_get by random id over stdio, after a warm-up."""
    meter = CpuMeter(server_pids(serve_child(root), client=os.getpid()))
    rng = random.Random(11)
    for mid in rng.sample(ids, min(cfg.warmup, len(ids))):
        await call(session, "memory_get", {"id": mid})
    picks = [rng.choice(ids) for _ in range(cfg.get_stdio_n)]
    e = Series("e_get_stdio")

    async def get(mid: str) -> None:
        res = await session.call_tool("memory_get", {"id": mid})
        if res.is_error or (res.structured_content or {}).get("id") != mid:
            e.failures += 1

    meter.start()
    secs, lat = await timed_each(picks, get)
    e.add(len(picks), secs, lat, meter.stop())
    return e


async def phase_stdio_at_scale(cfg: Config, root: Path, ids: list[str], log_events: int) -> dict[str, Any]:
    """(e) over stdio: `mneme serve` cold-starts on the loaded log, folds it, then answers memory_get."""
    errlog = open(root / "serve-at-scale-stderr.log", "w")  # noqa: SIM115
    async with AsyncExitStack() as stack:
        stack.callback(errlog.close)
        log(f"(e) cold-starting `mneme serve` on the log of {log_events:,} events")
        t0 = time.perf_counter()
        session = await stack.enter_async_context(mcp_session(serve_params(root), errlog))
        t_init = time.perf_counter() - t0
        ready_s, tries, errors = await until_answered(session, t0, ids[-1])
        log(f"(e) serve answered after {ready_s:.2f} s (MCP initialize {t_init:.2f} s, {tries} probe calls)")
        keyword_s, semantic_s, indexing = await until_searchable(session, t0)
        log(
            f"(e) keyword search at {keyword_s} s, semantic search after {semantic_s:.2f} s "
            f"({indexing} INDEXING answers); gets are measured from here, with nothing left to embed"
        )
        e = await stdio_gets(cfg, session, root, ids)
        log("stopping `mneme serve`")
    return {
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
