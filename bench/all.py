"""bench.all — every benchmark in one go, so that a change that touches the product reruns all of them.

    python -m bench.all --quick                      # each bench with --quick; the table against bench/baseline.json
    python -m bench.all --quick --accept             # and make this run the baseline (commit it with the change)
    python -m bench.all --quick --save run.json      # keep every figure
    python -m bench.all --quick --compare base.json  # and set every figure beside an earlier run's (--all: all of them)

The headline table (HEADLINES below) gives each headline figure, its target, the baseline's figure (the last
accepted run, committed in bench/baseline.json with its commit and machine, one per mode: quick and full),
this run's, and the change; it flags every figure more than --tolerance (15%) worse than the baseline.
Floors (raw NATS, the raw Edge search, the model) are printed beside them: a figure that moved with its
floor moved with the machine.

Each benchmark runs as its own process (`python -m bench.NAME [--quick]`), exactly as a person would run
it; its last stdout line is its JSON object. Benchmarks report their own floors from the same run (raw
NATS, a no-op MCP tool, the model's raw rate), so ratios compare across noisy machines; absolute
figures do not. With --compare, every numeric figure present in both runs is printed with its change;
the table marks ratios and rates that fell, and latencies that rose, by more than --tolerance.
Progress goes to stderr; stdout is the table, then one JSON object (every bench's figures) last.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import emit_json
from bench.runner import Bench

BENCHES = ("spine", "durability", "audit", "search", "replay", "locomo", "code", "graph", "cluster")
# the figures the table shows unless --all: targets, ratios to the floor, quality, lag and rates
_HEADLINE = ("targets.", "vs_", "ratio", "recall@", "mrr", "lag", "events_per_s", "bytes")


# (label, bench, path in its JSON, target, lower is better); the floors carry no target
HEADLINES: list[tuple[str, str, str, str, bool]] = [
    ("(b) CommandService.create / awaited publish", "spine", "b_domain.no_path_vs_floor_awaited", ">= 0.50", False),
    ("(b) at store+path / awaited publish", "spine", "b_domain.store_path_vs_floor_awaited", "", False),
    ("(c) memory_add over stdio / no-op tool", "spine", "c_stdio.add_vs_noop", ">= 0.45", False),
    ("(c) server CPU per memory_add, ms", "spine", "c_stdio.memory_add.cpu_ms_per_op.server", "", True),
    ("(d) add -> get over stdio, p50 ms", "spine", "targets.d_stdio_p50.p50_ms", "< 5", True),
    ("(d) add -> get in-process, p50 ms", "spine", "targets.d_inproc_p50.p50_ms", "< 5", True),
    ("(e) memory_get over stdio at scale, p50 ms", "spine", "e_get_at_scale.stdio.get.p50_ms", "< 3.5", True),
    ("serve cold start to first get, s", "spine", "e_get_at_scale.stdio.cold_start_to_first_get_s", "< 10", True),
    ("serve cold start to semantic search, s", "spine", "e_get_at_scale.stdio.cold_start_to_semantic_search_s", "",
     True),
    ("memories searchable/s / adds acked/s, flat out", "spine", "index_lag.searchable_vs_acked", ">= 0.90", False),
    ("index lag when a flat-out burst stops, s", "spine", "index_lag.lag_at_end_s", "< 1", True),
    ("semantic search p95 while the same agent adds flat out, ms", "spine", "search_while_adding.search_p95_ms", "",
     True),
    ("native tools/list, bytes", "spine", "surface.tool_lists.native.bytes", "<= 40000", True),
    ("10-result search over stdio, bytes", "spine", "surface.results.memory_search.bytes", "<= 3000", True),
    ("memory_add over stdio lost to sync-always, share", "durability", "targets.memory_add_cost.value", "<= 0.15",
     True),
    ("add -> get p50 added by sync-always, share", "durability", "add_get_p50_ms.cost", "", True),
    ("auditor lag p99, own process, ms", "audit", "targets.auditor_lag_p99.p99_ms", "< 200", True),
    ("auditor lag p99, in serve, ms", "audit", "targets.serve_trail_lag_p99.p99_ms", "< 200", True),
    ("search p95 semantic, ms", "search", "targets.semantic_p95.p95_ms", "< 50", True),
    ("search p95 keyword, ms", "search", "targets.keyword_p95.p95_ms", "< 50", True),
    ("search p95 hybrid, ms", "search", "targets.hybrid_p95.p95_ms", "< 50", True),
    ("embedding catch-up / raw model", "search", "targets.embedding_catchup_vs_raw.ratio", ">= 0.85", False),
    ("replay full / floor", "replay", "replay_full.vs_floor", ">= 0.20", False),
    ("replay DuckDB only / floor", "replay", "replay_duckdb_only.vs_floor", ">= 0.35", False),
    ("replay vectors only / floor", "replay", "vectors_only.vs_floor", "", False),
    ("as_of p95 get, ms", "replay", "targets.as_of_get_p95.p95_ms", "< 50", True),
    ("as_of p95 hybrid, ms", "replay", "targets.as_of_hybrid_p95.p95_ms", "< 50", True),
    ("LoCoMo hybrid recall@5", "locomo", "hybrid.recall@5", "", False),
    ("LoCoMo hybrid MRR", "locomo", "hybrid.mrr", "", False),
    ("LoCoMo graph signal on - off, recall@10 points", "locomo", "graph.gain_points.recall@10", ">= 0", False),
    ("LoCoMo graph signal on - off, recall@5 points", "locomo", "graph.gain_points.recall@5", ">= 0", False),
    ("code index chunks/s / raw model", "code", "targets.chunks_vs_raw.ratio", ">= 0.70", False),
    ("code index files/s", "code", "index.files_per_s", "", False),
    ("search_code p95 over stdio, ms", "code", "targets.search_code_p95.p95_ms", "< 50", True),
    ("recall p95 with the graph, 10k relations, ms", "graph", "targets.recall_graph_p95_10000.p95_ms", "< 50", True),
    ("recall p95 with the graph, 100k relations, ms", "graph", "targets.recall_graph_p95_100000.p95_ms", "< 50",
     True),
    ("server-memory create_entities / no-op tool", "graph", "server_memory.create_entities.vs_noop", "", False),
    ("server-memory create_entities p50 ms", "graph", "server_memory.create_entities.p50_ms", "", True),
    ("server-memory add_observations p50 ms", "graph", "server_memory.add_observations.p50_ms", "", True),
    ("server-memory search_nodes p50 ms", "graph", "server_memory.search_nodes.p50_ms", "", True),
    ("server-memory open_nodes p50 ms", "graph", "server_memory.open_nodes.p50_ms", "", True),
    ("cluster writes / single node, 1 gateway", "cluster", "ratios.writes_cluster_vs_single", "", False),
    ("cluster writes, 2 gateways / 1", "cluster", "ratios.writes_two_vs_one_gateway", "", False),
    ("cluster reads, 2 replicas / 1", "cluster", "ratios.reads_two_vs_one_replica", "", False),
    ("new replica catch-up to serving, events/s", "cluster", "catch_up.events_per_s", "", False),
    ("failed-publish window, stream leader killed, s", "cluster", "leader_kill.window_s", "", True),
    ("floor: awaited NATS publish, /s", "spine", "a_floor.a_floor_awaited.rate_per_s", "", False),
    ("floor: no-op MCP tool over stdio, /s", "spine", "c_stdio.noop.rate_per_s", "", False),
    ("floor: awaited publish with sync always, /s", "durability", "publish_awaited_per_s.always", "", False),
    ("floor: raw Edge dense search, p50 ms", "search", "latency.raw_edge.dense.p50_ms", "", True),
    ("floor: replay receive-and-decode, events/s", "replay", "floor.events_per_s", "", False),
    ("floor: raw model on code chunks, texts/s", "code", "raw_per_s", "", False),
    ("floor: plain hybrid p95 beside the graph, 100k, ms", "graph", "recall.relations_100000.plain.p95_ms", "",
     True),
    ("floor: no-op tool beside server-memory, /s", "graph", "server_memory.create_entities.noop.calls_per_s", "",
     False),
]  # fmt: skip
BASELINE = Path(__file__).with_name("baseline.json")


def dig(obj: Any, path: str) -> float | None:
    for part in path.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return float(obj) if isinstance(obj, (int, float)) and not isinstance(obj, bool) else None


def headline_figures(results: dict[str, Any]) -> dict[str, float]:
    out = {}
    for label, bench, path, _, _ in HEADLINES:
        value = dig(results.get(bench, {}), path)
        if value is not None:
            out[label] = value
    return out


def headline_table(now: dict[str, float], base: dict[str, float], tolerance: float) -> tuple[str, list[str]]:
    """The markdown table of the headline figures against the baseline's, and the labels flagged worse."""
    rows = ["| figure | target | baseline | now | change |", "|---|---|---:|---:|---:|"]
    flagged = []
    for label, _, _, target, lower in HEADLINES:
        if label not in now:
            continue
        value, then = now[label], base.get(label)
        change, mark = "", ""
        if then:
            rel = (value - then) / abs(then)
            change = f"{rel:+.0%}"
            if not label.startswith("floor:") and ((rel > tolerance) if lower else (rel < -tolerance)):
                mark = " **worse**"
                flagged.append(label)
        rows.append(f"| {label} | {target} | {_fmt(then)} | {_fmt(value)} | {change}{mark} |")
    return "\n".join(rows), flagged


def _fmt(x: float | None) -> str:
    if x is None:
        return ""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}" if abs(x) < 10 else f"{x:.1f}"


def machine_of(results: dict[str, Any]) -> dict[str, Any]:
    for figures in results.values():
        if isinstance(figures, dict) and isinstance(figures.get("machine"), dict):
            m = figures["machine"]
            return {k: m.get(k) for k in ("nproc", "cpu_model", "ram_gb", "python", "date", "git_commit")}
    return {}


def headline(key: str) -> bool:
    return any(h in key for h in _HEADLINE) and not key.startswith(("config.", "machine."))


def flatten(obj: Any, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        out[prefix] = float(obj)
    return out


def run_one(name: str, quick: bool, timeout: float) -> tuple[dict[str, Any] | None, float, str]:
    cmd = [sys.executable, "-m", f"bench.{name}"] + (["--quick"] if quick else [])
    t0 = time.monotonic()
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=os.environ.copy())
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - t0, f"timed out after {timeout:.0f} s"
    took = time.monotonic() - t0
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    if res.returncode != 0 or not lines:
        return None, took, f"exit {res.returncode}: {res.stderr.strip().splitlines()[-1:] or ['no output']}"
    try:
        return json.loads(lines[-1]), took, ""
    except ValueError:
        return None, took, "last line is not JSON"


def lower_is_better(key: str) -> bool:
    """By the figure's own name: latencies, lags, sizes and durations should fall; rates, ratios and recall
    should rise."""
    last = key.split(".")[-1].lower()
    if any(t in last for t in ("ratio", "vs_", "per_s", "recall", "mrr", "rate")):
        return False
    return last.endswith(("_ms", "seconds", "_s")) or "bytes" in last or "lag" in last or last in ("p50", "p95", "p99")


def worse(key: str, before: float, after: float, tolerance: float) -> bool:
    if before == 0:
        return False
    change = (after - before) / abs(before)
    return change > tolerance if lower_is_better(key) else change < -tolerance


def run_all(names: tuple[str, ...], quick: bool, timeout: float) -> dict[str, Any]:
    """Each bench in turn, in its own process: its figures, or {"error": why}."""
    results: dict[str, Any] = {}
    for name in names:
        print(f"bench.all: bench.{name}{' --quick' if quick else ''} ...", file=sys.stderr, flush=True)
        got, took, problem = run_one(name, quick, timeout)
        results[name] = got if got is not None else {"error": problem}
        print(
            f"bench.all: bench.{name} {'ok' if got is not None else 'FAILED: ' + problem} in {took:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    return results


def headlines(args: argparse.Namespace, results: dict[str, Any]) -> list[str]:
    """The headline table against the baseline (accepted as the new baseline with --accept): the labels flagged."""
    mode = "quick" if args.quick else "full"
    accepted = json.loads(args.baseline.read_text()) if args.baseline.exists() else {}
    base_run = accepted.get(mode, {})
    now = headline_figures(results)
    table, flagged = headline_table(now, base_run.get("figures", {}), args.tolerance)
    print(
        f"\n## Headline figures ({mode}) against {args.baseline.name}"
        f" ({base_run.get('machine', {}).get('git_commit', 'none')}, {base_run.get('machine', {}).get('date', '')})"
    )
    print(table)
    if args.accept:
        accepted[mode] = {"machine": machine_of(results), "figures": now}
        args.baseline.write_text(json.dumps(accepted, indent=1, sort_keys=True) + "\n")
        print(f"accepted as the {mode} baseline: {args.baseline}")
    return flagged


def compare(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """With --compare or --all: every (headline) figure of each bench, beside the earlier run's."""
    base: dict[str, Any] = json.loads(args.compare.read_text()) if args.compare else {}
    for name, figures in results.items() if args.compare or args.all else ():
        print(f"\n## bench.{name}")
        if "error" in figures:
            print(f"  FAILED: {figures['error']}")
            continue
        now, then = flatten(figures), flatten(base.get(name, {}))
        for key, value in now.items():
            if not (args.all or headline(key)):
                continue
            if key in then:
                mark = worse(key, then[key], value, args.tolerance)
                print(f"  {key:<60} {then[key]:>14.4g} -> {value:<14.4g}{'  <-- worse' if mark else ''}")
            elif not base:
                print(f"  {key:<60} {value:>14.4g}")


def main(argv: list[str] | None = None) -> None:
    ap = Bench("all", __doc__, quick="each bench with --quick", keep=None).parser()
    ap.add_argument("--only", nargs="*", choices=BENCHES, help="a subset, in this order")
    ap.add_argument("--save", type=Path, help="write this run's figures (JSON) here")
    ap.add_argument("--compare", type=Path, help="an earlier run's saved figures to set beside these")
    ap.add_argument("--tolerance", type=float, default=0.15, help="relative change flagged as a regression")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per bench")
    ap.add_argument("--all", action="store_true", help="every numeric figure, not only the headline ones")
    ap.add_argument(
        "--baseline", type=Path, default=BASELINE, help="the accepted figures (default bench/baseline.json)"
    )
    ap.add_argument("--accept", action="store_true", help="write this run's headline figures as the baseline")
    args = ap.parse_args(argv)
    results = run_all(tuple(args.only or BENCHES), args.quick, args.timeout)
    if args.save:
        args.save.write_text(json.dumps(results, indent=1, default=str))
    flagged = headlines(args, results)
    compare(args, results)
    failed = [n for n, f in results.items() if "error" in f]
    emit_json({"results": results, "failed": failed, "worse": flagged})
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
