"""bench.audit's entry point: `python -m bench.audit [--quick] [--keep] [--paced-only] [--rate N] [--seconds N]
[--path-every N] [--stores N] [--read-every N]`.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import bench.audit
from bench.audit.auditor import probe_main
from bench.audit.catchup import phase_catchup
from bench.audit.config import Config
from bench.audit.paced import phase_paced
from bench.audit.report import AuditRun, report
from bench.common import machine_info
from bench.fixtures import run_dir
from bench.runner import Bench, Size, mode_of

BENCH = Bench(
    "audit",
    bench.audit.__doc__,
    quick="short run (5 s paced, a 20,000-event backlog)",
    keep="keep the temporary directory (logs, DuckDB files)",
    sizes={
        "rate": Size("--rate", float, "writes/s (default 1000)"),
        "paced_s": Size("--seconds", float, "measured seconds of paced writes (default 20, quick 5)"),
        "path_every": Size("--path-every", int, "every n-th write claims a store+path (default 10; 0: none)"),
        "stores": Size("--stores", int, "stores the path writes are spread over (default 64)"),
        "read_every": Size("--read-every", int, "a memory_get after every n-th write (default 20; 0: none)"),
    },
)


async def amain(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    cfg = BENCH.config(args, Config.quick, Config.full)
    machine = machine_info()
    started = time.perf_counter()
    async with run_dir("audit", args.keep) as tmp:  # SIGTERM unwinds like Ctrl-C: children stopped, directory removed
        p = {shape: await phase_paced(cfg, tmp / shape, shape) for shape in ("distributed", "serve")}
        c = None if args.paced_only else await phase_catchup(cfg, tmp / "catchup")
        return report(AuditRun(cfg, mode_of(args), machine, p, c, time.perf_counter() - started))


def main(argv: list[str] | None = None) -> None:
    ap = BENCH.parser()
    ap.add_argument("--paced-only", action="store_true", help="skip the catch-up phase")
    ap.add_argument("--probe-auditor", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--nats-url", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.probe_auditor:
        probe_main(args.probe_auditor, args.nats_url)
        return
    BENCH.run(amain, args)


if __name__ == "__main__":
    main()
