"""bench.spine's tables and its JSON object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.common import header, print_table, ratio, rnd, targets_line, verdict
from bench.spine.config import TARGETS, Config, Series, paired_ratio


@dataclass
class SpineRun:
    """Everything one run measured: (a), (b), (d) in-process; (e) in-process; (c), (d) over stdio; (e) over stdio."""

    cfg: Config
    mode: str
    machine: dict[str, Any]
    a: dict[str, Any]
    e1: dict[str, Any]
    c: dict[str, Any]
    e2: dict[str, Any]
    wall: float

    def ratio_to_floor(self, key: str) -> float | None:
        """A write-path series over the awaited raw publishes of the same rounds."""
        ser: dict[str, Series] = self.a["_series"]
        return paired_ratio(ser[key], ser["a_floor_awaited"])

    @property
    def c_ratio(self) -> float | None:
        return paired_ratio(self.c["_add"], self.c["_noop"])


def _at_least(value: float | None, target: float) -> dict[str, Any]:
    return {"ratio": rnd(value, 3), "target": f">= {target}", "pass": value is not None and value >= target}


def _p50(d: dict[str, Any]) -> dict[str, Any]:
    return {"p50_ms": d["p50_ms"], "failures": d["failures"], "target": "p50 < 5 ms, 0 failures",
            "pass": d["p50_ms"] < TARGETS["d_p50_ms"] and d["failures"] == 0}  # fmt: skip


def targets_of(run: SpineRun) -> dict[str, dict[str, Any]]:
    failures = run.e1["get"]["failures"] + run.e2["get"]["failures"]
    return {
        "b_add_vs_floor_awaited": _at_least(run.ratio_to_floor("b_add"), TARGETS["b_vs_floor_awaited"]),
        "c_add_vs_noop_stdio": _at_least(run.c_ratio, TARGETS["c_vs_noop"]),
        "d_inproc_p50": _p50(run.a["d_inproc"]),
        "d_stdio_p50": _p50(run.c["d_stdio"]),
        "e_gets_found": {"failures": failures, "target": "0 failures", "pass": failures == 0},
    }


def cpu(s: dict[str, Any], *keys: str) -> list[Any]:
    return [s["cpu_ms_per_op"].get(k) for k in keys]


def write_path_tables(run: SpineRun, targets: dict[str, dict[str, Any]]) -> None:
    sa = run.a["series"]

    def row(label: str, key: str, vs: Any, target: str = "", ok: str = "", lat: bool = True) -> list[Any]:
        s = sa[key]
        return [label, s["rate_per_s"], s["p50_ms"] if lat else None, s["p99_ms"] if lat else None, vs, target, ok,
                *cpu(s, "bench", "nats")]  # fmt: skip

    b_ok = verdict(targets["b_add_vs_floor_awaited"]["pass"])
    print_table(
        "In-process write path (ratio = vs awaited raw publish, same round)",
        ["measure", "ops/s", "p50 ms", "p99 ms", "ratio", "target", "", "cpu ms/op bench", "cpu ms/op nats"],
        [
            row("(a) raw publish, awaited", "a_floor_awaited", 1.0, "floor"),
            row("(a) raw publish, awaited + mneme headers", "a_floor_awaited_headers",
                rnd(run.ratio_to_floor("a_floor_awaited_headers"), 3)),
            row("(a) raw publish, pipelined", "a_floor_pipelined", rnd(run.ratio_to_floor("a_floor_pipelined"), 3),
                lat=False),
            row("(b) CommandService.create, no path", "b_add", rnd(run.ratio_to_floor("b_add"), 3), ">= 0.50", b_ok),
            row("(b) CommandService.create, store+path", "b_add_path", rnd(run.ratio_to_floor("b_add_path"), 3)),
        ],
    )  # fmt: skip
    print_table(
        "Where (b)'s time goes (wall ms per add, in this process)",
        ["measure", "total", "append (publish)", "projector ask", "rest (domain + loop)", "conflicts"],
        [[label, s["mean_ms"], s["append_ms_per_op"], s["projector_ask_ms_per_op"], s["rest_ms_per_op"],
          int(s["conflicts"])] for label, s in (("no path", sa["b_add"]), ("store+path", sa["b_add_path"]))],
    )  # fmt: skip


def stdio_tables(run: SpineRun, targets: dict[str, dict[str, Any]]) -> None:
    cn, ca, c_ratio = run.c["c_noop_stdio"], run.c["c_add_stdio"], rnd(run.c_ratio, 3)
    procs = ("client", "server", "nats")
    print_table("MCP over stdio (ratio = vs no-op tool, same round)",
                ["measure", "calls/s", "p50 ms", "p99 ms", "ratio", "target", "", "cpu ms/op client",
                 "cpu ms/op server", "cpu ms/op nats"],
                [["no-op MCPServer tool (floor)", cn["rate_per_s"], cn["p50_ms"], cn["p99_ms"], 1.0, "floor", "",
                  *cpu(cn, *procs)],
                 ["(c) memory_add via mneme serve", ca["rate_per_s"], ca["p50_ms"], ca["p99_ms"], c_ratio,
                  ">= 0.60", verdict(targets["c_add_vs_noop_stdio"]["pass"]), *cpu(ca, *procs)]])  # fmt: skip
    bd = run.c.get("breakdown") or {}
    if not bd:
        return
    rows = [
        ["no-op MCPServer tool", cn["rate_per_s"], cn["p50_ms"], 1.0, *cpu(cn, *procs)],
        ["memory_add, mneme serve as shipped", ca["rate_per_s"], ca["p50_ms"], c_ratio, *cpu(ca, *procs)],
    ]
    for variant, label in (
        ("noop+publish", "no-op tool + one awaited JetStream publish"),
        ("no-auditor", "memory_add, auditor off"),
        ("no-auditor-no-fold", "memory_add, auditor off + no DuckDB fold"),
    ):
        if variant in bd:
            va = bd[variant]["memory_add"]
            rows.append([label, va["rate_per_s"], va["p50_ms"], bd[variant]["add_vs_noop"], *cpu(va, *procs)])
    print_table(
        "Where (c)'s time goes: `mneme serve` with its log consumers switched off (diagnostic)",
        ["measure", "calls/s", "p50 ms", "vs no-op", "cpu ms/op client", "cpu ms/op server", "cpu ms/op nats"],
        rows,
    )


def read_tables(run: SpineRun, targets: dict[str, dict[str, Any]]) -> None:
    d_in, d_io, e_in, e_io = run.a["d_inproc"], run.c["d_stdio"], run.e1, run.e2
    keys = ("rate_per_s", "p50_ms", "p99_ms", "add_p50_ms", "get_p50_ms", "get_p99_ms", "failures")
    print_table("Read-your-writes: add then get the same memory at once",
                ["measure", "pairs/s", "p50 ms", "p99 ms", "add p50", "get p50", "get p99", "failures", "target", ""],
                [["(d) in-process create + GetMemory(min_seq)", *(d_in[k] for k in keys), "p50 < 5 ms",
                  verdict(targets["d_inproc_p50"]["pass"])],
                 ["(d) stdio memory_add + memory_get", *(d_io[k] for k in keys), "p50 < 5 ms",
                  verdict(targets["d_stdio_p50"]["pass"])]])  # fmt: skip
    rr, gi, go, cn = e_in["floor_request_reply"], e_in["get"], e_io["get"], run.c["c_noop_stdio"]
    print_table(f"Gets at {run.cfg.memories:,} memories (log of {e_in['log_events']:,} events)",
                ["measure", "gets/s", "p50 ms", "p99 ms", "vs floor p50", "failures"],
                [["core NATS request/reply echo (floor, in-process)", rr["rate_per_s"], rr["p50_ms"], rr["p99_ms"],
                  1.0, None],
                 ["(e) QueryClient.ask(GetMemory) in-process", gi["rate_per_s"], gi["p50_ms"], gi["p99_ms"],
                  rnd(ratio(gi["p50_ms"], rr["p50_ms"]), 2), gi["failures"]],
                 ["(e) memory_get over stdio (vs no-op p50)", go["rate_per_s"], go["p50_ms"], go["p99_ms"],
                  rnd(ratio(go["p50_ms"], cn["p50_ms"]), 2), go["failures"]]])  # fmt: skip
    print_table("Loading and folding",
                ["measure", "events", "seconds", "events/s"],
                [["pipelined load of pre-encoded envelopes", e_in["memories_loaded"], e_in["load_seconds"],
                  e_in["load_rate_per_s"]],
                 ["fresh in-process projector folds the whole log", e_in["log_events"], e_in["fold_seconds"],
                  e_in["fold_rate_events_per_s"]],
                 ["`mneme serve` cold start until the first get answers", e_io["log_events"],
                  e_io["cold_start_to_first_get_s"], e_io["cold_start_fold_rate_events_per_s"]]])  # fmt: skip


def report(run: SpineRun) -> dict[str, Any]:
    targets = targets_of(run)
    header("spine", run.mode, run.machine)
    print(
        f"rounds={run.cfg.rounds}; rates are medians of per-round blocks; ratios are medians of same-round ratios; "
        f"envelope {run.a['envelope_bytes']} B"
    )
    write_path_tables(run, targets)
    stdio_tables(run, targets)
    read_tables(run, targets)
    targets_line(targets, run.wall)
    sa, c = run.a["series"], run.c
    return {
        "bench": "spine",
        "mode": run.mode,
        "machine": run.machine,
        "config": run.cfg.__dict__,
        "envelope_bytes": run.a["envelope_bytes"],
        "a_floor": {k: sa[k] for k in ("a_floor_awaited", "a_floor_awaited_headers", "a_floor_pipelined")},
        "b_domain": {
            "no_path": sa["b_add"],
            "store_path": sa["b_add_path"],
            "no_path_vs_floor_awaited": rnd(run.ratio_to_floor("b_add"), 3),
            "store_path_vs_floor_awaited": rnd(run.ratio_to_floor("b_add_path"), 3),
        },
        "c_stdio": {
            "noop": c["c_noop_stdio"],
            "memory_add": c["c_add_stdio"],
            "add_vs_noop": rnd(run.c_ratio, 3),
            "breakdown": c.get("breakdown") or {},
        },
        "index_lag": c.get("index_lag"),
        "search_while_adding": c.get("search_while_adding"),
        "d_read_your_writes": {"inproc": run.a["d_inproc"], "stdio": c["d_stdio"]},
        "e_get_at_scale": {"inproc": run.e1, "stdio": run.e2},
        "targets": targets,
        "wall_seconds": rnd(run.wall, 1),
    }
