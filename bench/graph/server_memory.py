"""bench.graph (2): the `server-memory` profile under the reference knowledge-graph server's own workload,
over stdio, beside the no-op MCP tool in the same run.

`mneme serve --profile server-memory --data-dir <tmp>` (its own embedded nats-server and projector) under the
mcp client; the workload is what an agent does with that server: create_entities one entity per call, then
add_observations (one entity, two observations per call), search_nodes (a substring of a name, a type or an
observation) and open_nodes (three names per call). Each block of tool calls is followed by a block of no-op
calls of the same count (the stdio floor of a Python MCP tool); per operation: calls/s, p50 and p95, and the
ratio of its rate to the no-op's.
"""

from __future__ import annotations

import random
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from mcp import ClientSession

from bench.common import CpuMeter, log, percentiles_ms, rnd
from bench.graph.recall import TYPES, names
from bench.stdio import mcp_block, mcp_session, noop_params, serve_child, serve_params, server_pids
from bench.workload import _WORDS


def summary(secs: float, lat: list[float]) -> dict[str, Any]:
    return {"calls": len(lat), "seconds": rnd(secs, 2), "calls_per_s": rnd(len(lat) / secs, 1),
            **percentiles_ms(lat, (50, 95))}  # fmt: skip


def workload(n: int, reads: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    rng = random.Random(seed)
    ents = names(n, seed + 100)
    obs = lambda: " ".join(rng.choices(_WORDS, k=8))  # noqa: E731
    return {
        "create_entities": [
            {"entities": [{"name": e, "entityType": TYPES[k % len(TYPES)], "observations": [obs()]}]}
            for k, e in enumerate(ents)
        ],
        "add_observations": [
            {"observations": [{"entityName": e, "contents": [obs(), obs()]}]} for e in rng.sample(ents, reads)
        ],
        "search_nodes": [{"query": rng.choice(ents)[1:5].lower()} for _ in range(reads)],
        "open_nodes": [{"names": rng.sample(ents, 3)} for _ in range(reads)],
    }


async def beside_noop(
    mneme: ClientSession, noop: ClientSession, op: str, calls: list[dict[str, Any]], chunk: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """`op` with each of `calls`, block by block, each block followed by as many no-op calls: both summaries."""
    secs, nsecs = 0.0, 0.0
    lat: list[float] = []
    nlat: list[float] = []
    for i in range(0, len(calls), chunk):
        s, ls = await mcp_block(mneme, op, calls[i : i + chunk])
        secs, lat = secs + s, lat + ls
        s, ls = await mcp_block(noop, "noop", [{"text": str(a)[:200]} for a in calls[i : i + chunk]])
        nsecs, nlat = nsecs + s, nlat + ls
    return summary(secs, lat), summary(nsecs, nlat)


async def phase_server_memory(n: int, reads: int, tmp: Path, chunk: int = 500) -> dict[str, Any]:
    work = workload(n, reads, 9)
    errlog = open(tmp / "servers-stderr.log", "w")  # noqa: SIM115 - closed by the exit stack
    out: dict[str, Any] = {"entities": n, "reads_per_operation": reads}
    async with AsyncExitStack() as stack:
        stack.callback(errlog.close)
        noop = await stack.enter_async_context(mcp_session(noop_params(), errlog))
        mneme = await stack.enter_async_context(mcp_session(serve_params(tmp / "serve", "server-memory"), errlog))
        meter = CpuMeter(server_pids(serve_child(tmp / "serve")))
        for args in work["open_nodes"][:20]:  # warm-up (nothing exists yet: empty answers)
            await mneme.call_tool("open_nodes", args)
            await noop.call_tool("noop", {"text": "warm"})
        for op, calls in work.items():
            log(f"(2) server-memory: {len(calls):,} {op} calls, each block of {chunk} beside as many no-op calls")
            meter.start()
            got, floor = await beside_noop(mneme, noop, op, calls, chunk)
            cpu = meter.stop()
            got["vs_noop"] = rnd(got["calls_per_s"] / floor["calls_per_s"], 3)
            got["cpu_s"] = {k: rnd(v, 2) for k, v in cpu.items()}
            out[op] = {**got, "noop": floor}
            log(f"    {got['calls_per_s']}/s, p50 {got['p50_ms']} ms (no-op {floor['calls_per_s']}/s, "
                f"p50 {floor['p50_ms']} ms)")  # fmt: skip
        res = await mneme.call_tool("search_nodes", {"query": work["search_nodes"][0]["query"]})
        out["check_search_nodes_entities"] = len((res.structured_content or {}).get("entities", []))
    return out
