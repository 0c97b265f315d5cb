"""bench.graph's entry point: `python -m bench.graph [--quick] [--keep] [--queries N] [--entities N]
[--memories N] [--stdio-entities N] [--only recall|stdio]`."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import bench.graph
from bench.common import emit_json, log, machine_info, print_table, rnd, verdict
from bench.fixtures import run_dir
from bench.graph.recall import GraphConfig, phase_recall
from bench.graph.server_memory import phase_server_memory

TARGET_P95_MS = 50.0
SIZES = (10_000, 100_000)
OPS = ("create_entities", "add_observations", "search_nodes", "open_nodes")


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    quick = args.quick
    cfg = GraphConfig(
        entities=args.entities or (5_000 if quick else 20_000),
        memories=args.memories or (2_000 if quick else 10_000),
        sizes=SIZES,
        queries=args.queries or (100 if quick else 300),
    )
    stdio_n = args.stdio_entities or (2_000 if quick else 10_000)
    out: dict[str, Any] = {"mode": "quick" if quick else "full", "machine": machine_info()}
    async with run_dir("graph", args.keep) as tmp:
        if args.only in (None, "recall"):
            (tmp / "recall").mkdir()
            out["recall"] = await phase_recall(cfg, tmp / "recall")
        if args.only in (None, "stdio"):
            (tmp / "stdio").mkdir()
            out["server_memory"] = await phase_server_memory(stdio_n, min(500, stdio_n), tmp / "stdio")
    targets: dict[str, Any] = {}
    rows = []
    for size in SIZES if "recall" in out else ():
        r = out["recall"][f"relations_{size}"]
        p95 = r["graph"]["p95_ms"]
        targets[f"recall_graph_p95_{size}"] = {"p95_ms": p95, "target": "< 50", "pass": p95 < TARGET_P95_MS}
        rows.append([f"{size:,} relations", r["graph"]["p50_ms"], p95, r["plain"]["p50_ms"], r["plain"]["p95_ms"],
                     r["first_query_after_fold_ms"], r["subgraph_nodes"], verdict(p95 < TARGET_P95_MS)])  # fmt: skip
    if rows:
        print_table(
            f"Hybrid recall with the graph signal (PPR, weight 0.45) vs plain hybrid, {cfg.memories:,} memories, "
            f"{cfg.entities:,} entities",
            ["graph", "graph p50", "graph p95", "plain p50", "plain p95", "first after fold", "nodes", "p95 < 50"],
            rows,
        )
    if "server_memory" in out:
        sm = out["server_memory"]
        print_table(
            f"server-memory profile over stdio, {stdio_n:,} entities (each block beside the no-op tool)",
            ["operation", "calls", "calls/s", "p50 ms", "no-op/s", "no-op p50", "vs no-op"],
            [[op, sm[op]["calls"], sm[op]["calls_per_s"], sm[op]["p50_ms"], sm[op]["noop"]["calls_per_s"],
              sm[op]["noop"]["p50_ms"], sm[op]["vs_noop"]] for op in OPS],
        )  # fmt: skip
    out["targets"] = targets
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.graph", description=(bench.graph.__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="5,000 entities, 2,000 memories; 2,000 over stdio")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--queries", type=int, help="queries per size and series (default 300; quick 100)")
    ap.add_argument("--entities", type=int, help="entities in the recall graph (default 20,000; quick 5,000)")
    ap.add_argument("--memories", type=int, help="memories naming them (default 10,000; quick 2,000)")
    ap.add_argument("--stdio-entities", type=int, help="entities created over stdio (default 10,000; quick 2,000)")
    ap.add_argument("--only", choices=("recall", "stdio"), help="one phase")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        result = asyncio.run(amain(args))
    except (KeyboardInterrupt, asyncio.CancelledError):
        log("interrupted: the servers stopped, temporary directory removed")
        sys.exit(130)
    result["wall_seconds"] = rnd(time.perf_counter() - t0, 1)
    emit_json(result)


if __name__ == "__main__":
    main()
