"""bench.soak's entry point (see bench/soak/__init__.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from bench.common import emit_json, log, print_table
from bench.fixtures import run_dir
from bench.soak.memory import report_rows
from bench.soak.run import Config, soak


def report(out: dict[str, Any]) -> None:
    print_table(
        f"bench.soak ({out['mode']}): {out['clients']} MCP clients over streamable HTTP, "
        f"{out['calls']['window_s']} s measured after {out['warmup_s']:.0f} s warm-up",
        ["kind", "calls", "calls/s", "p50 ms", "p99 ms", "max ms"],
        [[k, d["n"], d["per_s"], d["p50_ms"], d["p99_ms"], d["max_ms"]] for k, d in out["kinds"].items()]
        + [["all", out["calls"]["total"], out["calls"]["per_s"], None, None, None]],
    )
    print_table(
        "drift: every call, by third of the window",
        ["third", "calls/s", "p50 ms", "p99 ms", "target CPU ms/call", "others' cores"],
        [
            [i + 1, d["per_s"], d["p50_ms"], d["p99_ms"], d.get("target_cpu_ms_per_call"), d.get("others_cores")]
            for i, d in enumerate(out["thirds"])
        ],
    )
    print_table(
        "RSS (MB): end of warm-up, middle, end",
        ["process", "start", "middle", "end", "max", "middle→end", "%"],
        [
            [
                n,
                d.get("start_mb"),
                d.get("middle_mb"),
                d.get("end_mb"),
                d.get("max_mb"),
                d["middle_to_end_mb"],
                d["middle_to_end_pct"],
            ]
            for n, d in out["rss"].items()
        ],
    )
    for proc in ("serve", *sorted(p for p in out["memory"]["marks"].get("end", {}).get("disk", {}) if p != "serve")):
        if any(proc in m["procs"] for m in out["memory"]["marks"].values()):
            headers, rows = report_rows(out["memory"], proc)
            print_table(f"{proc}: smaps_rollup (MB) and its data directory's parts on disk (MB)", headers, rows)
    for span, g in out["memory"]["growth"].items():
        rows = [
            [k, v["rss"]["mb"], v["anon"]["mb"], v["file"]["mb"], v["rss"]["mb_per_1000_events"]]
            for k, v in g.items()
            if isinstance(v, dict) and "rss" in v
        ]
        print_table(
            f"growth {span}: {g['events']:,} events, {g['memories']:+,} memories, {g['seconds']} s",
            ["process", "rss MB", "anon MB", "file MB", "rss MB / 1,000 events"],
            rows,
        )
    print_table("CPU over the window, cores", ["process", "cores"], list(out["cpu_cores"].items()))
    lag = out["lag"]
    print_table(
        f"lag ({lag['samples']} samples)",
        ["measure", "n", "p50", "p99", "max"],
        [
            [name, d["n"], d["p50"], d["p99"], d["max"]]
            for name, d in (
                ("projection lag, events (ProjectorStatus)", lag["projection_events"]),
                ("projection lag, s (oldest unapplied event)", lag["projection_s"]),
                ("vector lag, events", lag["vector_events"]),
                ("probe: ack → row visible, ms", lag["probe_visible_ms"]),
                ("probe: ack → audit record, ms", lag["probe_audited_ms"]),
            )
        ],
    )
    if out.get("floors"):
        f = out["floors"]
        print_table(
            "floors (same run)",
            ["floor", "calls/s", "p50 ms", "p99 ms"],
            [
                [label, d["per_s"], d["p50_ms"], d["p99_ms"]]
                for label, d in (("no-op MCP tool over HTTP", f["noop_http"]), ("NATS req/reply echo", f["nats_echo"]))
            ],
        )
    errors = out["errors_by_code"].items()
    rows = [[c, d["expected"], d["retried"], d["unexpected"]] for c, d in errors]
    print_table("errors by code", ["code", "expected", "retried", "unexpected"], rows)
    print_table("checks (all must be 0)", ["check", "count"], list(out["checks"].items()))
    for line in out["failure_samples"] + out["log_error_samples"]:
        print(f"  {line}")
    print(
        f"\n{'PASS' if out['ok'] else 'FAIL'}: {out['verify']['acknowledged_writes']:,} acknowledged writes "
        f"on {out['verify']['acknowledged_memories']:,} memories, {out['verify']['lost_total']} lost"
    )


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    duration = args.duration if args.duration is not None else (60.0 if args.quick else 600.0)
    cfg = Config(
        duration=duration,
        clients=args.clients,
        seed=args.seed,
        cluster=args.cluster,
        floor_s=2.0 if args.quick else 5.0,
        reindex_every=20.0 if args.quick else 60.0,
        keep=args.keep,
        steady=args.steady,
        reads_only=args.reads_only,
        detail_every=args.detail_every,
        signal_marks=args.signal_marks,
    )
    async with run_dir("soak", args.keep) as root:
        out = await soak(cfg, root)
    out["quick"] = args.quick
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(out, f, indent=1, default=str)
    report(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.soak")
    ap.add_argument("--duration", type=float, help="seconds of measured load after the warm-up (default 600)")
    ap.add_argument("--quick", action="store_true", help="60 s of load")
    ap.add_argument("--clients", type=int, default=8, help="concurrent MCP clients (default 8)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the clients' random mixes")
    ap.add_argument(
        "--cluster", action="store_true", help="against the local three-node cluster (mneme/app/cluster.py)"
    )
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory (every process's log)")
    ap.add_argument(
        "--steady",
        type=int,
        default=0,
        metavar="N",
        help="fill to N live memories, then pair each add with a delete of an older one (and delete each probe's "
        "memory once measured): a fixed live set, a growing history",
    )
    ap.add_argument(
        "--reads-only",
        action="store_true",
        help="after the warm-up (with --steady: the fill), only calls that write nothing: growth then is per call",
    )
    ap.add_argument("--detail-every", type=float, default=30.0, help="seconds between smaps/data-dir samples")
    ap.add_argument(
        "--signal-marks", action="store_true", help="SIGUSR1 to the target's processes at each mark (diagnostic builds)"
    )
    ap.add_argument("--json-out", help="also write the result object to this file")
    out = asyncio.run(main_async(ap.parse_args()))
    emit_json(out)
    if not out["ok"]:
        log(f"soak FAILED: {out['checks']}")
        sys.exit(1)


if __name__ == "__main__":
    main()
