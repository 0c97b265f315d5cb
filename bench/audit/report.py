"""bench.audit's tables and its JSON object."""

from __future__ import annotations

from typing import Any

from bench.audit.config import LAG_P99_TARGET_MS, SLICES, Config
from bench.common import median, print_table, rnd, verdict
from mneme.app.settings import AuditorSettings, ProjectorSettings


def catchup_table(cfg: Config, c: dict[str, Any], checks: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    fl, ia, sa = c["floor"], c["inproc_auditor"], c["mneme_auditor"]
    print_table(f"(2) Catch-up from a backlog of {c['backlog_events']:,} events + {c['backlog_access']:,} read "
                f"records ({c['records']:,} records; median of {cfg.rounds} rounds)",
                ["measure", "records/s", "seconds", "ratio to floor", "cpu ms/record"],
                [["floor: 2 raw ordered consumers, receive + metadata + decode", fl["records_per_s"],
                  median(fl["seconds"]), 1.0, None],
                 ["Auditor followers into a fresh trail, bench process", ia["records_per_s"],
                  rnd(c["records"] / ia["records_per_s"], 3), ia["vs_floor"], ia["cpu_ms_per_record"]],
                 ["`mneme auditor` subprocess, from its first answer", sa["records_per_s"], sa["seconds"],
                  sa["vs_floor"], sa["cpu_ms_per_record"]],
                 ["  the same from spawn (process start included)", rnd(c["records"] / sa["from_spawn_s"], 1),
                  sa["from_spawn_s"], None, None]])  # fmt: skip

    us_all = 1e6 / ia["records_per_s"]
    us_floor = 1e6 / fl["records_per_s"]
    rest = us_all - ia["stage_us_per_record"] - ia["commit_us_per_record"]
    print_table(
        "(2) Where the in-process auditor's time goes while catching up (µs per record, wall)",
        ["part", "µs/record", "share"],
        [
            [
                "stage: chain + SHA-256 per record (event loop)",
                ia["stage_us_per_record"],
                rnd(ia["stage_us_per_record"] / us_all, 2),
            ],
            [
                f"commit: {ia['commits']} DuckDB transactions (worker thread; the follower waits)",
                ia["commit_us_per_record"],
                rnd(ia["commit_us_per_record"] / us_all, 2),
            ],
            ["the rest: receive, metadata, decode, queue, loop", rnd(rest, 2), rnd(rest / us_all, 2)],
            ["total", rnd(us_all, 2), 1.0],
            ["floor (receive + metadata + decode, nothing else)", rnd(us_floor, 2), rnd(us_floor / us_all, 2)],
        ],
    )
    checks += [(f"catch-up in-process, round {i + 1}", v) for i, v in enumerate(ia["verify"])]
    checks += [(f"catch-up `mneme auditor`, round {i + 1}", v) for i, v in enumerate(sa["verify"])]
    return list(sa["exit_codes"])


def report(
    cfg: Config, mode: str, machine: dict[str, Any], p: dict[str, dict[str, Any]], c: dict[str, Any] | None, wall: float
) -> tuple[dict[str, Any], list[str]]:
    d, sv = p["distributed"], p["serve"]
    print(
        f"mneme bench.audit ({mode}) — {machine['nproc']} cores, {machine['cpu_model']}, "
        f"{machine['ram_gb']} GB RAM, Python {machine['python']}, {machine['date']}"
    )
    print(
        f"auditor linger {AuditorSettings().linger} s, batch_max {AuditorSettings().batch_max}; projector linger "
        f"{ProjectorSettings().linger} s; (1a) distributed: gateway core here, `mneme projector`, `mneme auditor` "
        "and the probe auditor in their own processes; (1b) serve: gateway core, projector and auditor (on followers "
        "of its own), "
        "all in this process"
    )

    def held(x: dict[str, Any]) -> bool:
        ld = x["load"]
        return ld["writes_per_s"] is not None and ld["writes_per_s"] >= 0.95 * cfg.rate and not ld["failures"]

    def wl(x: dict[str, Any], k: str) -> Any:
        return x["load"]["write_latency_from_schedule"][k]

    rows = [["writes (memory_add body: Gateway.run + CommandService.create)", d["load"]["writes"],
             sv["load"]["writes"]],
            ["writes/s achieved", d["load"]["writes_per_s"], sv["load"]["writes_per_s"]],
            ["  of which store+path (PathOwner query first)", d["load"]["path_writes"], sv["load"]["path_writes"]],
            ["reads (memory_get body, one read record each)", d["load"]["reads"], sv["load"]["reads"]],
            ["failures", sum(d["load"]["failures"].values()), sum(sv["load"]["failures"].values())],
            ["write p50 ms, from its scheduled start", wl(d, "p50_ms"), wl(sv, "p50_ms")],
            ["write p99 ms, from its scheduled start", wl(d, "p99_ms"), wl(sv, "p99_ms")],
            ["concurrency conflicts retried", d["load"]["conflicts"], sv["load"]["conflicts"]],
            ["trail records in the window (events + read records)", d["load"]["records_in_window"],
             sv["load"]["records_in_window"]],
            ["trail records/s in the window", d["load"]["records_per_s"], sv["load"]["records_per_s"]],
            ["this process's event loop: 10 ms sleep woken late, p99 ms", d["bench_event_loop_delay"]["p99_ms"],
             sv["bench_event_loop_delay"]["p99_ms"]],
            ["rate held (>= 95%, no failures)", verdict(held(d)), verdict(held(sv))]]  # fmt: skip
    print_table(
        f"(1) Write load through the gateway's core, paced at {cfg.rate:,.0f}/s for {cfg.paced_s:.0f} s",
        ["measure", "(1a) distributed", "(1b) serve"],
        rows,
    )

    def lag_row(name: str, x: dict[str, Any], target: bool) -> list[Any]:
        a = x["lag_all"]
        ok = a["p99_ms"] is not None and a["p99_ms"] < LAG_P99_TARGET_MS
        sl = [v for v in a["p99_ms_per_slice"] if v is not None]
        return [name, a["n"], a["p50_ms"], a["p95_ms"], a["p99_ms"], a["max_ms"],
                x.get("lag_events", {}).get("p99_ms"), x.get("lag_access", {}).get("p99_ms"),
                f"{min(sl):.0f}–{max(sl):.0f}" if sl else "-",
                "< 200 ms" if target else "floor", verdict(ok) if target else ""]  # fmt: skip

    targets: dict[str, dict[str, Any]] = {
        "write_load_held_distributed": {
            "writes_per_s": d["load"]["writes_per_s"],
            "pass": held(d),
            "target": f">= 0.95 x {cfg.rate:,.0f}/s, 0 failures",
        },
        "write_load_held_serve": {
            "writes_per_s": sv["load"]["writes_per_s"],
            "pass": held(sv),
            "target": f">= 0.95 x {cfg.rate:,.0f}/s, 0 failures",
        },
        "auditor_lag_p99": {
            "p99_ms": d["trail"]["lag_all"]["p99_ms"],
            "target_ms": LAG_P99_TARGET_MS,
            "pass": (d["trail"]["lag_all"]["p99_ms"] or 1e9) < LAG_P99_TARGET_MS,
        },
        "serve_trail_lag_p99": {
            "p99_ms": sv["trail"]["lag_all"]["p99_ms"],
            "target_ms": LAG_P99_TARGET_MS,
            "pass": (sv["trail"]["lag_all"]["p99_ms"] or 1e9) < LAG_P99_TARGET_MS,
        },
    }
    print_table("(1) Trail lag = commit finished − log timestamp, per record written in the window (ms)",
                ["measure", "records", "p50", "p95", "p99", "max", "p99 events", "p99 reads",
                 f"p99 per {cfg.paced_s / SLICES:.3g} s", "target", ""],
                [lag_row("(1a) delivery floor: raw ordered consumer, gateway process", d["floor_delivery"], False),
                 lag_row("(1a) auditor: Auditor followers, own process", d["trail"], True),
                 lag_row("(1b) delivery floor: raw ordered consumer, serve process", sv["floor_delivery"], False),
                 lag_row("(1b) serve: the auditor's followers, in process", sv["trail"], True)])  # fmt: skip

    fc = sv["trail"]["projection_commit"]
    print_table("(1) Trail commits while writing (ms)",
                ["trail", "commits", "records/commit", "commit p50", "commit p99", "commit max"],
                [["(1a) auditor (probe process)", d["trail"]["commits"], d["trail"]["records_per_commit_mean"],
                  d["trail"]["commit_ms_p50"], d["trail"]["commit_ms_p99"], d["trail"]["commit_ms_max"]],
                 ["(1b) serve: the trail", sv["trail"]["commits"], sv["trail"]["records_per_commit_mean"],
                  sv["trail"]["commit_ms_p50"], sv["trail"]["commit_ms_p99"], sv["trail"]["commit_ms_max"]],
                 ["(1b) serve: the projection's commit (beside it)", fc["n"], None, fc["p50_ms"], fc["p99_ms"],
                  fc["max_ms"]]])  # fmt: skip
    procs = ("bench", "nats", "projector", "auditor", "probe", "others")
    print_table("(1) CPU while writing: ms per trail record, and share of one core",
                ["process", "(1a) ms/record", "(1a) share", "(1b) ms/record", "(1b) share"],
                [[k, d["cpu_ms_per_record"].get(k), d["cpu_share_of_a_core"].get(k),
                  sv["cpu_ms_per_record"].get(k), sv["cpu_share_of_a_core"].get(k)] for k in procs])  # fmt: skip
    for name, x in (("(1a)", d), ("(1b)", sv)):
        if not held(x):
            print(
                f"NOTE {name}: the write load was not held ({x['load']['writes_per_s']:,.0f} writes/s of "
                f"{cfg.rate:,.0f}, failures {x['load']['failures']}): its lag is not at the target's rate"
            )
        others = x["cpu_share_of_a_core"].get("others") or 0
        if others > 0.25:
            print(f"NOTE {name}: other processes on this machine used {others:.2f} of a core meanwhile (contended)")
    ma = d["mneme_auditor"]
    print(
        f"`mneme auditor` (real, untouched): an audit query after the last write saw it committed after "
        f"{ma['audit_query_saw_last_write_ms']} ms (the query makes it commit what it has staged)"
    )

    checks = [
        ("(1a) auditor (probe)", d["trail"]["verify"]),
        ("(1a) `mneme auditor` while writing", ma["verify"]),
        ("(1b) serve (in-process)", sv["trail"]["verify"]),
    ]
    exit_codes = [ma["exit_code"], d["mneme_projector_exit_code"]]
    if c is not None:
        exit_codes += catchup_table(cfg, c, checks)
    print_table(
        "Trail verification (hash chain; records = events + read records, per source)",
        ["trail", "records", "expected", "events", "reads", "first broken", "ok"],
        [
            [n, v["records"], v["expected"], v["events"], v["access"], v["first_broken_seq"], verdict(v["ok"])]
            for n, v in checks
        ],
    )
    problems = [f"trail {n}: {v}" for n, v in checks if not v["ok"]]
    for name, x in (("(1a)", d), ("(1b)", sv)):
        if x["trail"]["uncovered"]:
            problems.append(f"{name}: {x['trail']['uncovered']} records without a noted commit")
        if x["load"]["failures"]:
            problems.append(
                f"{name} write/read failures: {x['load']['failures']} (first: {x['load']['first_failure']})"
            )
    if any(x != 0 for x in exit_codes):
        problems.append(f"`mneme auditor` / `mneme projector` exit codes: {exit_codes}")
    targets["trails_verified"] = {"pass": not problems, "problems": problems}
    print("\nTargets: " + ", ".join(f"{k} {verdict(v['pass'])}" for k, v in targets.items()))
    print(f"wall time {wall:.1f} s")
    result = {
        "bench": "audit",
        "mode": mode,
        "machine": machine,
        "config": cfg.__dict__,
        "settings": {
            "auditor_linger_s": AuditorSettings().linger,
            "auditor_batch_max": AuditorSettings().batch_max,
            "projector_linger_s": ProjectorSettings().linger,
        },
        "paced": p,
        "catchup": c,
        "targets": targets,
        "wall_seconds": rnd(wall, 1),
    }
    return result, problems
