"""bench.durability — what syncing the log before acknowledging costs (issue 29), measured in one run.

    python -m bench.durability [--quick]

Side by side in one sitting, in alternating blocks so that the machine's load falls on both alike:
- the awaited-publish floor: a nats-server with `sync_interval: always` (mneme's default) and one with a
  timer (`2m`, nats-server's own default), 1 KiB events, one publish awaited at a time;
- memory_add over stdio, and add -> get p50 over stdio: two `mneme serve`, MNEME_NATS_SYNC=always and 2m,
  each driven by the mcp package's client.
The last line is one JSON object: each figure both ways, and `cost` = 1 - always / timer for rates (the
share lost) and always / timer - 1 for latencies. Target (issue 29): memory_add over stdio loses at most 15%.
bench.cluster's writes both ways: run `MNEME_NATS_SYNC=2m python -m bench.cluster --quick` beside the default.
"""

from __future__ import annotations

import argparse
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from bench.common import latency_summary, log, machine_info, median, rnd
from bench.fixtures import connect_nats, run_dir
from bench.floors import publish_awaited
from bench.runner import Bench, mode_of
from bench.stdio import mcp_session, serve_params, structured
from bench.workload import PreEncoded
from mneme.embedded_nats import EmbeddedNats
from mneme.eventlog import ensure_streams

MODES = {"always": "always", "timer": "2m"}
TARGET_COST = 0.15


def _events(n: int, tag: str) -> list[PreEncoded]:
    body = b"x" * 1024
    return [PreEncoded(f"mneme.evt.bench.mem.{tag}.{i}", body, f"{tag}-{i}", f"{tag}-{i}") for i in range(n)]


async def publish_floor(stack: AsyncExitStack, root: Path, rounds: int, n: int) -> dict[str, Any]:
    js = {}
    for mode, sync in MODES.items():
        server = EmbeddedNats(root / f"nats-{mode}", sync=sync)
        await server.start()
        stack.push_async_callback(server.stop)
        assert server.url is not None
        nc = await connect_nats(stack, server.url, f"bench-{mode}")
        js[mode] = nc.jetstream()
        await ensure_streams(js[mode])
    rates: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(rounds):
        for mode in MODES if r % 2 == 0 else reversed(list(MODES)):
            elapsed, _ = await publish_awaited(js[mode], _events(n, f"{mode}{r}"))
            rates[mode].append(n / elapsed)
    return _rates(rates)


async def stdio_figures(stack: AsyncExitStack, root: Path, rounds: int, n: int) -> dict[str, Any]:
    sessions = {}
    for mode, sync in MODES.items():
        params = serve_params(root / f"serve-{mode}", MNEME_NATS_SYNC=sync)
        errlog = stack.enter_context((root / f"serve-{mode}.stderr").open("w"))
        sessions[mode] = await stack.enter_async_context(mcp_session(params, errlog))
        structured(await sessions[mode].call_tool("memory_add", {"content": "warm up"}))
    adds: dict[str, list[float]] = {m: [] for m in MODES}
    pairs: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(rounds):
        for mode in MODES if r % 2 == 0 else reversed(list(MODES)):
            s = sessions[mode]
            t0 = time.perf_counter()
            for i in range(n):
                structured(await s.call_tool("memory_add", {"content": f"round {r} fact {i} about {mode}"}))
            adds[mode].append(n / (time.perf_counter() - t0))
            for i in range(n // 2):
                t = time.perf_counter()
                got = structured(await s.call_tool("memory_add", {"content": f"pair {r}.{i}"}))
                structured(await s.call_tool("memory_get", {"id": got["id"]}))
                pairs[mode].append(time.perf_counter() - t)
    return {
        "memory_add_per_s": _rates(adds),
        "add_get_p50_ms": {
            **{m: latency_summary(v)["p50_ms"] for m, v in pairs.items()},
            "cost": rnd(median(pairs["always"]) / median(pairs["timer"]) - 1, 3),
        },
    }


def _rates(rates: dict[str, list[float]]) -> dict[str, Any]:
    med = {m: median(v) for m, v in rates.items()}
    return {**{m: rnd(v, 1) for m, v in med.items()}, "cost": rnd(1 - med["always"] / med["timer"], 3)}


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    rounds, n_pub, n_add = (4, 500, 100) if args.quick else (8, 2000, 300)
    async with run_dir("durability", args.keep) as root, AsyncExitStack() as stack:
        log(f"awaited publishes: {rounds} rounds of {n_pub}, sync always / 2m")
        floor = await publish_floor(stack, root, rounds, n_pub)
        log(f"memory_add and add -> get over stdio: {rounds} rounds of {n_add}")
        stdio = await stdio_figures(stack, root, rounds, n_add)
    cost = stdio["memory_add_per_s"]["cost"]
    return {
        "bench": "durability",
        "mode": mode_of(args),
        "machine": machine_info(),
        "publish_awaited_per_s": floor,
        **stdio,
        "targets": {
            "memory_add_cost": {"value": cost, "target": f"<= {TARGET_COST}", "met": cost <= TARGET_COST},
        },
    }


BENCH = Bench("durability", __doc__, quick="short run (4 rounds)")


def main(argv: list[str] | None = None) -> None:
    BENCH.main(amain, argv)


if __name__ == "__main__":
    main()
