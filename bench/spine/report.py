"""bench.spine's tables and its JSON object."""

from __future__ import annotations

from typing import Any

from bench.common import print_table, ratio, rnd, verdict
from bench.spine.config import TARGETS, Config, Series, paired_ratio


def report(
    cfg: Config,
    mode: str,
    machine: dict[str, Any],
    a: dict[str, Any],
    e1: dict[str, Any],
    c: dict[str, Any],
    e2: dict[str, Any],
    wall: float,
) -> dict[str, Any]:
    ser: dict[str, Series] = a["_series"]
    fa, fh, fp, b, bp = (
        ser[k] for k in ("a_floor_awaited", "a_floor_awaited_headers", "a_floor_pipelined", "b_add", "b_add_path")
    )
    noop, add = c["_noop"], c["_add"]
    b_ratio = paired_ratio(b, fa)
    c_ratio = paired_ratio(add, noop)
    d_in, d_io = a["d_inproc"], c["d_stdio"]
    e_in, e_io = e1, e2

    targets = {
        "b_add_vs_floor_awaited": {
            "ratio": rnd(b_ratio, 3),
            "target": f">= {TARGETS['b_vs_floor_awaited']}",
            "pass": b_ratio is not None and b_ratio >= TARGETS["b_vs_floor_awaited"],
        },
        "c_add_vs_noop_stdio": {
            "ratio": rnd(c_ratio, 3),
            "target": f">= {TARGETS['c_vs_noop']}",
            "pass": c_ratio is not None and c_ratio >= TARGETS["c_vs_noop"],
        },
        "d_inproc_p50": {
            "p50_ms": d_in["p50_ms"],
            "failures": d_in["failures"],
            "target": "p50 < 5 ms, 0 failures",
            "pass": d_in["p50_ms"] < TARGETS["d_p50_ms"] and d_in["failures"] == 0,
        },
        "d_stdio_p50": {
            "p50_ms": d_io["p50_ms"],
            "failures": d_io["failures"],
            "target": "p50 < 5 ms, 0 failures",
            "pass": d_io["p50_ms"] < TARGETS["d_p50_ms"] and d_io["failures"] == 0,
        },
        "e_gets_found": {
            "failures": e_in["get"]["failures"] + e_io["get"]["failures"],
            "target": "0 failures",
            "pass": e_in["get"]["failures"] + e_io["get"]["failures"] == 0,
        },
    }

    print(
        f"mneme bench.spine ({mode}) — {machine['nproc']} cores, {machine['cpu_model']}, "
        f"{machine['ram_gb']} GB RAM, Python {machine['python']}, {machine['date']}"
    )
    print(
        f"rounds={cfg.rounds}; rates are medians of per-round blocks; ratios are medians of same-round ratios; "
        f"envelope {a['envelope_bytes']} B"
    )

    def cpu(s: dict[str, Any], *keys: str) -> list[Any]:
        return [s["cpu_ms_per_op"].get(k) for k in keys]

    sa = a["series"]
    rows = [
        ["(a) raw publish, awaited", sa["a_floor_awaited"]["rate_per_s"], sa["a_floor_awaited"]["p50_ms"],
         sa["a_floor_awaited"]["p99_ms"], 1.0, "floor", "", *cpu(sa["a_floor_awaited"], "bench", "nats")],
        ["(a) raw publish, awaited + mneme headers", sa["a_floor_awaited_headers"]["rate_per_s"],
         sa["a_floor_awaited_headers"]["p50_ms"], sa["a_floor_awaited_headers"]["p99_ms"],
         rnd(paired_ratio(fh, fa), 3), "", "", *cpu(sa["a_floor_awaited_headers"], "bench", "nats")],
        ["(a) raw publish, pipelined", sa["a_floor_pipelined"]["rate_per_s"], None, None,
         rnd(paired_ratio(fp, fa), 3), "", "", *cpu(sa["a_floor_pipelined"], "bench", "nats")],
        ["(b) CommandService.create, no path", sa["b_add"]["rate_per_s"], sa["b_add"]["p50_ms"],
         sa["b_add"]["p99_ms"], rnd(b_ratio, 3), ">= 0.50", verdict(targets["b_add_vs_floor_awaited"]["pass"]),
         *cpu(sa["b_add"], "bench", "nats")],
        ["(b) CommandService.create, store+path", sa["b_add_path"]["rate_per_s"], sa["b_add_path"]["p50_ms"],
         sa["b_add_path"]["p99_ms"], rnd(paired_ratio(bp, fa), 3), "", "", *cpu(sa["b_add_path"], "bench", "nats")],
    ]  # fmt: skip
    print_table(
        "In-process write path (ratio = vs awaited raw publish, same round)",
        ["measure", "ops/s", "p50 ms", "p99 ms", "ratio", "target", "", "cpu ms/op bench", "cpu ms/op nats"],
        rows,
    )
    bb, bpp = sa["b_add"], sa["b_add_path"]
    print_table("Where (b)'s time goes (wall ms per add, in this process)",
                ["measure", "total", "append (publish)", "projector ask", "rest (domain + loop)", "conflicts"],
                [["no path", bb["mean_ms"], bb["append_ms_per_op"], bb["projector_ask_ms_per_op"], bb["rest_ms_per_op"],
                  int(bb["conflicts"])],
                 ["store+path", bpp["mean_ms"], bpp["append_ms_per_op"], bpp["projector_ask_ms_per_op"],
                  bpp["rest_ms_per_op"], int(bpp["conflicts"])]])  # fmt: skip

    cn, ca = c["c_noop_stdio"], c["c_add_stdio"]
    print_table("MCP over stdio (ratio = vs no-op tool, same round)",
                ["measure", "calls/s", "p50 ms", "p99 ms", "ratio", "target", "", "cpu ms/op client",
                 "cpu ms/op server", "cpu ms/op nats"],
                [["no-op MCPServer tool (floor)", cn["rate_per_s"], cn["p50_ms"], cn["p99_ms"], 1.0, "floor", "",
                  *cpu(cn, "client", "server", "nats")],
                 ["(c) memory_add via mneme serve", ca["rate_per_s"], ca["p50_ms"], ca["p99_ms"], rnd(c_ratio, 3),
                  ">= 0.60", verdict(targets["c_add_vs_noop_stdio"]["pass"]),
                  *cpu(ca, "client", "server", "nats")]])  # fmt: skip

    bd = c.get("breakdown") or {}
    if bd:
        rows = [["no-op MCPServer tool", cn["rate_per_s"], cn["p50_ms"], 1.0, *cpu(cn, "client", "server", "nats")],
                ["memory_add, mneme serve as shipped", ca["rate_per_s"], ca["p50_ms"], rnd(c_ratio, 3),
                 *cpu(ca, "client", "server", "nats")]]  # fmt: skip
        for variant, label in (
            ("noop+publish", "no-op tool + one awaited JetStream publish"),
            ("no-auditor", "memory_add, auditor off"),
            ("no-auditor-no-fold", "memory_add, auditor off + no DuckDB fold"),
        ):
            if variant in bd:
                va = bd[variant]["memory_add"]
                rows.append([label, va["rate_per_s"], va["p50_ms"], bd[variant]["add_vs_noop"],
                             *cpu(va, "client", "server", "nats")])  # fmt: skip
        print_table(
            "Where (c)'s time goes: `mneme serve` with its log consumers switched off (diagnostic)",
            ["measure", "calls/s", "p50 ms", "vs no-op", "cpu ms/op client", "cpu ms/op server", "cpu ms/op nats"],
            rows,
        )

    rr = e_in["floor_request_reply"]
    print_table("Read-your-writes: add then get the same memory at once",
                ["measure", "pairs/s", "p50 ms", "p99 ms", "add p50", "get p50", "get p99", "failures", "target", ""],
                [["(d) in-process create + GetMemory(min_seq)", d_in["rate_per_s"], d_in["p50_ms"], d_in["p99_ms"],
                  d_in["add_p50_ms"], d_in["get_p50_ms"], d_in["get_p99_ms"], d_in["failures"], "p50 < 5 ms",
                  verdict(targets["d_inproc_p50"]["pass"])],
                 ["(d) stdio memory_add + memory_get", d_io["rate_per_s"], d_io["p50_ms"], d_io["p99_ms"],
                  d_io["add_p50_ms"], d_io["get_p50_ms"], d_io["get_p99_ms"], d_io["failures"], "p50 < 5 ms",
                  verdict(targets["d_stdio_p50"]["pass"])]])  # fmt: skip

    gi, go = e_in["get"], e_io["get"]
    print_table(f"Gets at {cfg.memories:,} memories (log of {e_in['log_events']:,} events)",
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
    print("\nTargets: " + ", ".join(f"{k} {verdict(v['pass'])}" for k, v in targets.items()))
    print(f"wall time {wall:.1f} s")

    return {
        "bench": "spine",
        "mode": mode,
        "machine": machine,
        "config": cfg.__dict__,
        "envelope_bytes": a["envelope_bytes"],
        "a_floor": {k: sa[k] for k in ("a_floor_awaited", "a_floor_awaited_headers", "a_floor_pipelined")},
        "b_domain": {
            "no_path": sa["b_add"],
            "store_path": sa["b_add_path"],
            "no_path_vs_floor_awaited": rnd(b_ratio, 3),
            "store_path_vs_floor_awaited": rnd(paired_ratio(bp, fa), 3),
        },
        "c_stdio": {"noop": cn, "memory_add": ca, "add_vs_noop": rnd(c_ratio, 3), "breakdown": bd},
        "index_lag": c.get("index_lag"),
        "search_while_adding": c.get("search_while_adding"),
        "d_read_your_writes": {"inproc": d_in, "stdio": d_io},
        "e_get_at_scale": {"inproc": e_in, "stdio": e_io},
        "targets": targets,
        "wall_seconds": rnd(wall, 1),
    }
