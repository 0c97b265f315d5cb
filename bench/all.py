"""bench.all — every benchmark in one go, so that a change that touches the product reruns all of them.

    python -m bench.all --quick                      # each bench with --quick, one after another
    python -m bench.all --quick --save run.json      # keep the figures
    python -m bench.all --quick --compare base.json  # and set them beside an earlier run's

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

BENCHES = ("spine", "audit", "search", "replay", "locomo")
# the figures the table shows unless --all: targets, ratios to the floor, quality, lag and rates
_HEADLINE = ("targets.", "vs_", "ratio", "recall@", "mrr", "lag", "events_per_s", "bytes")


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
    return (last.endswith(("_ms", "seconds", "_s")) or "bytes" in last or "lag" in last
            or last in ("p50", "p95", "p99"))  # fmt: skip


def worse(key: str, before: float, after: float, tolerance: float) -> bool:
    if before == 0:
        return False
    change = (after - before) / abs(before)
    return change > tolerance if lower_is_better(key) else change < -tolerance


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="each bench with --quick")
    ap.add_argument("--only", nargs="*", choices=BENCHES, help="a subset, in this order")
    ap.add_argument("--save", type=Path, help="write this run's figures (JSON) here")
    ap.add_argument("--compare", type=Path, help="an earlier run's saved figures to set beside these")
    ap.add_argument("--tolerance", type=float, default=0.15, help="relative change flagged as a regression")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per bench")
    ap.add_argument("--all", action="store_true", help="every numeric figure, not only the headline ones")
    args = ap.parse_args()

    results: dict[str, Any] = {}
    for name in args.only or BENCHES:
        print(f"bench.all: bench.{name}{' --quick' if args.quick else ''} ...", file=sys.stderr, flush=True)
        got, took, problem = run_one(name, args.quick, args.timeout)
        results[name] = got if got is not None else {"error": problem}
        print(f"bench.all: bench.{name} {'ok' if got is not None else 'FAILED: ' + problem} in {took:.0f} s",
              file=sys.stderr, flush=True)  # fmt: skip
    if args.save:
        args.save.write_text(json.dumps(results, indent=1, default=str))

    base: dict[str, Any] = json.loads(args.compare.read_text()) if args.compare else {}
    flagged = []
    for name, figures in results.items():
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
                if mark:
                    flagged.append(f"{name}.{key}")
                print(f"  {key:<60} {then[key]:>14.4g} -> {value:<14.4g}{'  <-- worse' if mark else ''}")
            elif not base:
                print(f"  {key:<60} {value:>14.4g}")
    failed = [n for n, f in results.items() if "error" in f]
    print(json.dumps({"results": results, "failed": failed, "worse": flagged}, default=str))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
