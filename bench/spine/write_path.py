"""bench.spine (a), (b) and (d) in-process: raw publishes, the gateway's domain path, read-your-writes, against
one embedded nats-server with the projector live in this process.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import time
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import fixtures
from bench.common import CpuMeter, log, percentile, rnd
from bench.floors import publish_awaited, publish_pipelined
from bench.spine.config import ACTOR, NS, TAGS, Config, Series, pre_encode
from bench.workload import Corpus, TimedEventLog, TimedQueryClient
from mneme.ids import new_id
from schemas.commands import CreateMemory
from schemas.queries import GetMemory
from services.gateway.commands import CommandService


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


async def phase_inproc(cfg: Config, root: Path, corpus: Corpus, profile: bool) -> dict[str, Any]:
    """(a), (b) and (d) in-process, against one embedded nats-server, with the projector live in this process."""
    out: dict[str, Any] = {}
    async with AsyncExitStack() as stack:
        log(f"starting nats-server under {root / 'nats'}")
        srv = await fixtures.start_nats(stack, root / "nats", "bench-spine")
        nc, js = srv.nc, srv.js
        pids = {"bench": os.getpid(), "nats": srv.pid}

        elog = TimedEventLog(js, timeout=5.0)
        queries = TimedQueryClient(nc, timeout=10.0)
        commands = CommandService(elog, queries)

        sample = pre_encode(corpus.texts(1), "size-probe")[0]
        out["envelope_bytes"] = len(sample.data)
        log(f"a memory_created envelope is {len(sample.data)} bytes on subject {sample.subject}")

        # -- the live projector (as in `mneme serve`: same process, folding every event written) --
        live = AsyncExitStack()
        stack.push_async_callback(live.aclose)
        view = fixtures.memories_view(root / "inproc-live.duckdb")
        live.callback(view.close)
        projector = fixtures.projector(nc, view)
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
