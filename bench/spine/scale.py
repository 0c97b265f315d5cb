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

from bench import fixtures
from bench.common import CpuMeter, find_child, log, rnd
from bench.floors import echo_responder, load_log
from bench.spine.config import NS, Config, Series, pre_encode
from bench.stdio import first_text, mcp_session, serve_params, server_pids, structured
from bench.workload import Corpus
from mneme.ids import new_id
from schemas import subjects as S
from schemas.queries import GetMemory
from schemas.queries import encoder as query_encoder
from services.gateway.queries import QueryClient


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
        nc, js = srv.nc, srv.js
        meter = CpuMeter({"bench": os.getpid(), "nats": srv.pid})
        queries = QueryClient(nc, timeout=10.0)

        log(f"(e) encoding {cfg.memories:,} memory_created envelopes")
        load_msgs = pre_encode(corpus.texts(cfg.memories), f"load-{new_id()}")
        log(f"(e) loading {cfg.memories:,} memories into the log (pipelined)")
        meter.start()
        load_s = await load_log(js, load_msgs)
        load_cpu = meter.stop()
        log_events = (await js.stream_info(S.EVENTS_STREAM)).state.last_seq
        log(f"(e) loaded in {load_s:.2f} s ({cfg.memories / load_s:,.0f}/s); folding with a fresh projector")
        view = fixtures.memories_view(root / "inproc-fold.duckdb")
        stack.callback(view.close)
        meter.start()
        t0 = time.perf_counter()
        projector = fixtures.projector(nc, view)
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
        sub = await echo_responder(nc, "bench.echo")
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
        meter = CpuMeter(server_pids(me, find_child(me, "serve", str(root))))
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
