"""bench.audit's entry point: `python -m bench.audit [--quick] [--keep] [--paced-only] [--rate N] [--seconds N]
[--path-every N] [--stores N] [--read-every N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import bench.audit
from bench.audit.auditor import probe_main
from bench.audit.catchup import phase_catchup
from bench.audit.config import Config
from bench.audit.paced import phase_paced
from bench.audit.report import report
from bench.common import emit_json, log, machine_info
from bench.fixtures import run_dir


async def amain(cfg: Config, mode: str, keep: bool, paced_only: bool = False) -> tuple[dict[str, Any], list[str]]:
    machine = machine_info()
    started = time.perf_counter()
    async with run_dir("audit", keep) as tmp:  # SIGTERM unwinds like Ctrl-C: children stopped, directory removed
        p = {shape: await phase_paced(cfg, tmp / shape, shape) for shape in ("distributed", "serve")}
        c = None if paced_only else await phase_catchup(cfg, tmp / "catchup")
        return report(cfg, mode, machine, p, c, time.perf_counter() - started)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.audit", description=(bench.audit.__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short run (5 s paced, a 20,000-event backlog)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, DuckDB files)")
    ap.add_argument("--rate", type=float, help="writes/s (default 1000)")
    ap.add_argument("--seconds", type=float, help="measured seconds of paced writes (default 20, quick 5)")
    ap.add_argument("--path-every", type=int, help="every n-th write claims a store+path (default 10; 0: none)")
    ap.add_argument("--stores", type=int, help="stores the path writes are spread over (default 64)")
    ap.add_argument("--read-every", type=int, help="a memory_get after every n-th write (default 20; 0: none)")
    ap.add_argument("--paced-only", action="store_true", help="skip the catch-up phase")
    ap.add_argument("--probe-auditor", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--nats-url", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.probe_auditor:
        probe_main(args.probe_auditor, args.nats_url)
        return
    cfg = Config.quick() if args.quick else Config.full()
    over = {
        k: v
        for k, v in (
            ("rate", args.rate),
            ("paced_s", args.seconds),
            ("path_every", args.path_every),
            ("stores", args.stores),
            ("read_every", args.read_every),
        )
        if v is not None
    }
    if over:
        cfg = dataclasses.replace(cfg, **over)
    try:
        result, problems = asyncio.run(amain(cfg, "quick" if args.quick else "full", args.keep, args.paced_only))
    except (KeyboardInterrupt, asyncio.CancelledError):
        log("interrupted: children stopped, temporary directory removed")
        sys.exit(130)
    emit_json(result)
    if problems:
        for line in problems:
            log(f"FAILED: {line}")
        sys.exit(1)


if __name__ == "__main__":
    main()
