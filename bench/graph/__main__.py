"""bench.graph's entry point: `python -m bench.graph [--quick] [--keep] [--queries N] [--entities N]
[--memories N] [--stdio-entities N] [--only recall|stdio]`."""

from __future__ import annotations

import argparse
from typing import Any

import bench.graph
from bench.common import machine_info, print_table, verdict
from bench.fixtures import run_dir
from bench.graph.recall import GraphConfig, phase_recall
from bench.graph.server_memory import phase_server_memory
from bench.runner import Bench, Size, mode_of

TARGET_P95_MS = 50.0
OPS = ("create_entities", "add_observations", "search_nodes", "open_nodes")

BENCH = Bench(
    "graph",
    bench.graph.__doc__,
    quick="5,000 entities, 2,000 memories; 2,000 over stdio",
    sizes={
        "queries": Size("--queries", int, "queries per size and series (default 300; quick 100)"),
        "entities": Size("--entities", int, "entities in the recall graph (default 20,000; quick 5,000)"),
        "memories": Size("--memories", int, "memories naming them (default 10,000; quick 2,000)"),
        "stdio_entities": Size("--stdio-entities", int, "entities created over stdio (default 10,000; quick 2,000)"),
    },
    wall=True,
)


def recall_table(cfg: GraphConfig, recall: dict[str, Any]) -> dict[str, Any]:
    """The recall table; the targets (p95 with the graph signal at each size)."""
    targets: dict[str, Any] = {}
    rows = []
    for size in cfg.sizes:
        r = recall[f"relations_{size}"]
        p95 = r["graph"]["p95_ms"]
        targets[f"recall_graph_p95_{size}"] = {"p95_ms": p95, "target": "< 50", "pass": p95 < TARGET_P95_MS}
        rows.append([f"{size:,} relations", r["graph"]["p50_ms"], p95, r["plain"]["p50_ms"], r["plain"]["p95_ms"],
                     r["first_query_after_fold_ms"], r["subgraph_nodes"], verdict(p95 < TARGET_P95_MS)])  # fmt: skip
    print_table(
        f"Hybrid recall with the graph signal (PPR, weight 0.45) vs plain hybrid, {cfg.memories:,} memories, "
        f"{cfg.entities:,} entities",
        ["graph", "graph p50", "graph p95", "plain p50", "plain p95", "first after fold", "nodes", "p95 < 50"],
        rows,
    )
    return targets


def server_memory_table(cfg: GraphConfig, sm: dict[str, Any]) -> None:
    print_table(
        f"server-memory profile over stdio, {cfg.stdio_entities:,} entities (each block beside the no-op tool)",
        ["operation", "calls", "calls/s", "p50 ms", "no-op/s", "no-op p50", "vs no-op"],
        [[op, sm[op]["calls"], sm[op]["calls_per_s"], sm[op]["p50_ms"], sm[op]["noop"]["calls_per_s"],
          sm[op]["noop"]["p50_ms"], sm[op]["vs_noop"]] for op in OPS],
    )  # fmt: skip


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    cfg = BENCH.config(args, GraphConfig.quick, GraphConfig.full)
    out: dict[str, Any] = {"mode": mode_of(args), "machine": machine_info()}
    async with run_dir("graph", args.keep) as tmp:
        if args.only in (None, "recall"):
            (tmp / "recall").mkdir()
            out["recall"] = await phase_recall(cfg, tmp / "recall")
        if args.only in (None, "stdio"):
            (tmp / "stdio").mkdir()
            n = cfg.stdio_entities
            out["server_memory"] = await phase_server_memory(n, min(500, n), tmp / "stdio")
    targets = recall_table(cfg, out["recall"]) if "recall" in out else {}
    if "server_memory" in out:
        server_memory_table(cfg, out["server_memory"])
    out["targets"] = targets
    return out


def main(argv: list[str] | None = None) -> None:
    ap = BENCH.parser()
    ap.add_argument("--only", choices=("recall", "stdio"), help="one phase")
    BENCH.run(amain, ap.parse_args(argv))


if __name__ == "__main__":
    main()
