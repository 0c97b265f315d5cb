"""bench.soak's entry point (see bench/soak/__init__.py)."""

from __future__ import annotations

import argparse
import json
from typing import Any

import bench.soak
from bench.common import print_table, rows
from bench.fixtures import run_dir
from bench.runner import Bench
from bench.soak.memory import report_rows
from bench.soak.run import Config, soak


def calls_tables(out: dict[str, Any]) -> None:
    print_table(
        f"bench.soak ({out['mode']}): {out['clients']} MCP clients over streamable HTTP, "
        f"{out['calls']['window_s']} s measured after {out['warmup_s']:.0f} s warm-up",
        ["kind", "calls", "calls/s", "p50 ms", "p99 ms", "max ms"],
        [
            *rows(out["kinds"].items(), "n", "per_s", "p50_ms", "p99_ms", "max_ms"),
            ["all", out["calls"]["total"], out["calls"]["per_s"], None, None, None],
        ],
    )
    print_table(
        "drift: every call, by third of the window",
        ["third", "calls/s", "p50 ms", "p99 ms", "target CPU ms/call", "others' cores"],
        rows(((i + 1, d) for i, d in enumerate(out["thirds"])), "per_s", "p50_ms", "p99_ms", "target_cpu_ms_per_call",
             "others_cores"),
    )  # fmt: skip


def memory_tables(out: dict[str, Any]) -> None:
    print_table(
        "RSS (MB): end of warm-up, middle, end",
        ["process", "start", "middle", "end", "max", "middle→end", "%"],
        rows(out["rss"].items(), "start_mb", "middle_mb", "end_mb", "max_mb", "middle_to_end_mb", "middle_to_end_pct"),
    )
    mem = out["memory"]
    for proc in ("serve", *sorted(p for p in mem["marks"].get("end", {}).get("disk", {}) if p != "serve")):
        if any(proc in m["procs"] for m in mem["marks"].values()):
            headers, table = report_rows(mem, proc)
            print_table(f"{proc}: smaps_rollup (MB) and its data directory's parts on disk (MB)", headers, table)
    for span, g in mem["growth"].items():
        table = [
            [k, v["rss"]["mb"], v["anon"]["mb"], v["file"]["mb"], v["rss"]["mb_per_1000_events"]]
            for k, v in g.items()
            if isinstance(v, dict) and "rss" in v
        ]
        print_table(
            f"growth {span}: {g['events']:,} events, {g['memories']:+,} memories, {g['seconds']} s",
            ["process", "rss MB", "anon MB", "file MB", "rss MB / 1,000 events"],
            table,
        )
    print_table("CPU over the window, cores", ["process", "cores"], list(out["cpu_cores"].items()))


def lag_tables(out: dict[str, Any]) -> None:
    lag = out["lag"]
    print_table(
        f"lag ({lag['samples']} samples)",
        ["measure", "n", "p50", "p99", "max"],
        rows((("projection lag, events (ProjectorStatus)", lag["projection_events"]),
              ("projection lag, s (oldest unapplied event)", lag["projection_s"]),
              ("vector lag, events", lag["vector_events"]),
              ("probe: ack → row visible, ms", lag["probe_visible_ms"]),
              ("probe: ack → audit record, ms", lag["probe_audited_ms"])), "n", "p50", "p99", "max"),
    )  # fmt: skip
    if out.get("floors"):
        f = out["floors"]
        print_table(
            "floors (same run)",
            ["floor", "calls/s", "p50 ms", "p99 ms"],
            rows((("no-op MCP tool over HTTP", f["noop_http"]), ("NATS req/reply echo", f["nats_echo"])),
                 "per_s", "p50_ms", "p99_ms"),
        )  # fmt: skip


def report(out: dict[str, Any]) -> None:
    calls_tables(out)
    memory_tables(out)
    lag_tables(out)
    errors = out["errors_by_code"].items()
    print_table("errors by code", ["code", "expected", "retried", "unexpected"], rows(errors, "expected", "retried",
                                                                                       "unexpected"))  # fmt: skip
    print_table("checks (all must be 0)", ["check", "count"], list(out["checks"].items()))
    for line in out["failure_samples"] + out["log_error_samples"]:
        print(f"  {line}")
    print(
        f"\n{'PASS' if out['ok'] else 'FAIL'}: {out['verify']['acknowledged_writes']:,} acknowledged writes "
        f"on {out['verify']['acknowledged_memories']:,} memories, {out['verify']['lost_total']} lost"
    )


async def amain(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
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
    return out, [] if out["ok"] else [f"soak: {out['checks']}"]


BENCH = Bench(
    "soak", bench.soak.__doc__, quick="60 s of load", keep="keep the temporary directory (every process's log)"
)


def main(argv: list[str] | None = None) -> None:
    ap = BENCH.parser()
    ap.add_argument("--duration", type=float, help="seconds of measured load after the warm-up (default 600)")
    ap.add_argument("--clients", type=int, default=8, help="concurrent MCP clients (default 8)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the clients' random mixes")
    ap.add_argument(
        "--cluster", action="store_true", help="against the local three-node cluster (mneme/app/cluster.py)"
    )
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
    BENCH.run(amain, ap.parse_args(argv))


if __name__ == "__main__":
    main()
