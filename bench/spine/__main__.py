"""bench.spine's entry point: `python -m bench.spine [--quick] [--profile] [--keep] [--no-breakdown]`."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import bench.spine
from bench.common import machine_info
from bench.fixtures import run_dir
from bench.runner import Bench, mode_of
from bench.spine.config import Config
from bench.spine.report import SpineRun, report
from bench.spine.scale import phase_scale_inproc, phase_stdio_at_scale
from bench.spine.stdio_path import phase_stdio, serve_variant
from bench.spine.write_path import phase_inproc
from bench.surface import measure as measure_surface
from bench.surface import report as report_surface
from bench.workload import Corpus

BENCH = Bench(
    "spine",
    bench.spine.__doc__,
    quick="short run (10,000 memories, fewer rounds)",
    keep="keep the temporary directory (server logs, DuckDB files)",
)


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    cfg = BENCH.config(args, Config.quick, Config.full)
    machine = machine_info()
    started = time.perf_counter()
    async with run_dir("spine", args.keep) as tmp:  # SIGTERM unwinds like Ctrl-C: servers stopped, directory removed
        corpus = Corpus(seed=42)
        a = await phase_inproc(cfg, tmp / "spine", corpus, args.profile)
        e1 = await phase_scale_inproc(cfg, tmp / "scale", corpus)
        c = await phase_stdio(cfg, tmp / "stdio", corpus, not args.no_breakdown)
        e2 = await phase_stdio_at_scale(cfg, tmp / "scale", e1.pop("_ids"), e1["log_events"])
        surface = await measure_surface()  # what an agent pays in context: tool lists and result sizes
        out = report(SpineRun(cfg, mode_of(args), machine, a, e1, c, e2, time.perf_counter() - started))
        report_surface(surface)
        out["surface"] = surface
        return out


def main(argv: list[str] | None = None) -> None:
    ap = BENCH.parser()
    ap.add_argument("--profile", action="store_true", help="also cProfile the in-process domain adds (stderr)")
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
    BENCH.run(amain, args)


if __name__ == "__main__":
    main()
