"""bench.audit's tables and its JSON object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.audit.config import LAG_P99_TARGET_MS, SLICES, Config
from bench.common import header, median, print_table, rnd, rows, targets_line, verdict
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


@dataclass
class AuditRun:
    """What one run measured: (1) paced, per shape (distributed, serve); (2) the catch-up, unless skipped."""

    cfg: Config
    mode: str
    machine: dict[str, Any]
    p: dict[str, dict[str, Any]]
    c: dict[str, Any] | None
    wall: float

    def held(self, x: dict[str, Any]) -> bool:
        """The write load held: >= 95% of the rate, no failures."""
        ld = x["load"]
        return ld["writes_per_s"] is not None and ld["writes_per_s"] >= 0.95 * self.cfg.rate and not ld["failures"]


def load_table(run: AuditRun) -> None:
    d, sv = run.p["distributed"], run.p["serve"]

    def both(f: Any) -> list[Any]:
        return [f(d), f(sv)]

    def ld(k: str) -> Any:
        return lambda x: x["load"][k]

    def wl(k: str) -> Any:
        return lambda x: x["load"]["write_latency_from_schedule"][k]

    rows = [["writes (memory_add body: Gateway.run + CommandService.create)", *both(ld("writes"))],
            ["writes/s achieved", *both(ld("writes_per_s"))],
            ["  of which store+path (PathOwner query first)", *both(ld("path_writes"))],
            ["reads (memory_get body, one read record each)", *both(ld("reads"))],
            ["failures", *both(lambda x: sum(x["load"]["failures"].values()))],
            ["write p50 ms, from its scheduled start", *both(wl("p50_ms"))],
            ["write p99 ms, from its scheduled start", *both(wl("p99_ms"))],
            ["concurrency conflicts retried", *both(ld("conflicts"))],
            ["trail records in the window (events + read records)", *both(ld("records_in_window"))],
            ["trail records/s in the window", *both(ld("records_per_s"))],
            ["this process's event loop: 10 ms sleep woken late, p99 ms",
             *both(lambda x: x["bench_event_loop_delay"]["p99_ms"])],
            ["rate held (>= 95%, no failures)", *both(lambda x: verdict(run.held(x)))]]  # fmt: skip
    print_table(
        f"(1) Write load through the gateway's core, paced at {run.cfg.rate:,.0f}/s for {run.cfg.paced_s:.0f} s",
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


def paced_targets(run: AuditRun) -> dict[str, dict[str, Any]]:
    d, sv = run.p["distributed"], run.p["serve"]

    def held(x: dict[str, Any]) -> dict[str, Any]:
        return {"writes_per_s": x["load"]["writes_per_s"], "pass": run.held(x),
                "target": f">= 0.95 x {run.cfg.rate:,.0f}/s, 0 failures"}  # fmt: skip

    def lag(x: dict[str, Any]) -> dict[str, Any]:
        p99 = x["trail"]["lag_all"]["p99_ms"]
        return {"p99_ms": p99, "target_ms": LAG_P99_TARGET_MS, "pass": (p99 or 1e9) < LAG_P99_TARGET_MS}

    return {"write_load_held_distributed": held(d), "write_load_held_serve": held(sv),
            "auditor_lag_p99": lag(d), "serve_trail_lag_p99": lag(sv)}  # fmt: skip


def trail_tables(run: AuditRun) -> None:
    d, sv, cfg = run.p["distributed"], run.p["serve"], run.cfg
    print_table("(1) Trail lag = commit finished − log timestamp, per record written in the window (ms)",
                ["measure", "records", "p50", "p95", "p99", "max", "p99 events", "p99 reads",
                 f"p99 per {cfg.paced_s / SLICES:.3g} s", "target", ""],
                [lag_row("(1a) delivery floor: raw ordered consumer, gateway process", d["floor_delivery"], False),
                 lag_row("(1a) auditor: Auditor followers, own process", d["trail"], True),
                 lag_row("(1b) delivery floor: raw ordered consumer, serve process", sv["floor_delivery"], False),
                 lag_row("(1b) serve: the auditor's followers, in process", sv["trail"], True)])  # fmt: skip
    fc = sv["trail"]["projection_commit"]
    keys = ("commits", "records_per_commit_mean", "commit_ms_p50", "commit_ms_p99", "commit_ms_max")
    print_table("(1) Trail commits while writing (ms)",
                ["trail", "commits", "records/commit", "commit p50", "commit p99", "commit max"],
                [*rows([("(1a) auditor (probe process)", d["trail"]), ("(1b) serve: the trail", sv["trail"])], *keys),
                 ["(1b) serve: the projection's commit (beside it)", fc["n"], None, fc["p50_ms"], fc["p99_ms"],
                  fc["max_ms"]]])  # fmt: skip
    procs = ("bench", "nats", "projector", "auditor", "probe", "others")
    print_table("(1) CPU while writing: ms per trail record, and share of one core",
                ["process", "(1a) ms/record", "(1a) share", "(1b) ms/record", "(1b) share"],
                [[k, d["cpu_ms_per_record"].get(k), d["cpu_share_of_a_core"].get(k),
                  sv["cpu_ms_per_record"].get(k), sv["cpu_share_of_a_core"].get(k)] for k in procs])  # fmt: skip


def notes(run: AuditRun) -> None:
    d, cfg = run.p["distributed"], run.cfg
    for name, x in (("(1a)", d), ("(1b)", run.p["serve"])):
        if not run.held(x):
            print(
                f"NOTE {name}: the write load was not held ({x['load']['writes_per_s']:,.0f} writes/s of "
                f"{cfg.rate:,.0f}, failures {x['load']['failures']}): its lag is not at the target's rate"
            )
        others = x["cpu_share_of_a_core"].get("others") or 0
        if others > 0.25:
            print(f"NOTE {name}: other processes on this machine used {others:.2f} of a core meanwhile (contended)")
    print(
        f"`mneme auditor` (real, untouched): an audit query after the last write saw it committed after "
        f"{d['mneme_auditor']['audit_query_saw_last_write_ms']} ms (the query makes it commit what it has staged)"
    )


def verification(run: AuditRun) -> list[str]:
    """Every trail verified (the table), and the problems: broken trails, uncovered records, failed writes or
    reads, children that did not exit 0."""
    d, sv = run.p["distributed"], run.p["serve"]
    ma = d["mneme_auditor"]
    checks = [
        ("(1a) auditor (probe)", d["trail"]["verify"]),
        ("(1a) `mneme auditor` while writing", ma["verify"]),
        ("(1b) serve (in-process)", sv["trail"]["verify"]),
    ]
    exit_codes = [ma["exit_code"], d["mneme_projector_exit_code"]]
    if run.c is not None:
        exit_codes += catchup_table(run.cfg, run.c, checks)
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
    return problems


def report(run: AuditRun) -> tuple[dict[str, Any], list[str]]:
    header("audit", run.mode, run.machine)
    print(
        f"auditor linger {AuditorSettings().linger} s, batch_max {AuditorSettings().batch_max}; projector linger "
        f"{ProjectorSettings().linger} s; (1a) distributed: gateway core here, `mneme projector`, `mneme auditor` "
        "and the probe auditor in their own processes; (1b) serve: gateway core, projector and auditor (on followers "
        "of its own), "
        "all in this process"
    )
    load_table(run)
    targets = paced_targets(run)
    trail_tables(run)
    notes(run)
    problems = verification(run)
    targets["trails_verified"] = {"pass": not problems, "problems": problems}
    targets_line(targets, run.wall)
    result = {
        "bench": "audit",
        "mode": run.mode,
        "machine": run.machine,
        "config": run.cfg.__dict__,
        "settings": {
            "auditor_linger_s": AuditorSettings().linger,
            "auditor_batch_max": AuditorSettings().batch_max,
            "projector_linger_s": ProjectorSettings().linger,
        },
        "paced": run.p,
        "catchup": run.c,
        "targets": targets,
        "wall_seconds": rnd(run.wall, 1),
    }
    return result, problems
