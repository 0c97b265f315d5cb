"""The soak's figures: per kind, by thirds, RSS, distributions, errors by code."""

from __future__ import annotations

from typing import Any

from bench.common import latency_summary, percentile, ratio, rnd
from bench.soak.config import Samples
from bench.soak.workload import Tally

# -- figures -----------------------------------------------------------------------------------------------


def per_kind(tally: Tally, lo: float, hi: float) -> dict[str, Any]:
    secs = hi - lo
    by: dict[str, list[float]] = {}
    for t, kind, lat in tally.calls:
        if lo <= t < hi:
            by.setdefault(kind, []).append(lat)
    out = {}
    for kind in sorted(by, key=lambda k: -len(by[k])):
        s = latency_summary(by[kind])
        out[kind] = {
            "n": len(by[kind]),
            "per_s": rnd(len(by[kind]) / secs, 2),
            "p50_ms": s["p50_ms"],
            "p99_ms": s["p99_ms"],
            "max_ms": s["max_ms"],
        }
    return out


def thirds(tally: Tally, smp: Samples, lo: float, hi: float) -> list[dict[str, Any]]:
    """All calls' rate and latency in each third of the measured window (drift over the run), with the CPU
    the target's processes spent per call and the cores other processes of the machine took meanwhile (a rate
    that falls while the CPU per call holds is the machine, not the product)."""
    out = []
    step = (hi - lo) / 3
    bounds = ["start", "third1", "third2", "end"]
    for i in range(3):
        a, b = lo + i * step, lo + (i + 1) * step
        lat = [c[2] for c in tally.calls if a <= c[0] < b]
        s = latency_summary(lat)
        row: dict[str, Any] = {"per_s": rnd(len(lat) / step, 1), "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"]}
        c0, c1 = smp.cpu.get(bounds[i], {}), smp.cpu.get(bounds[i + 1], {})
        if c0 and c1:
            d = {n: c1[n] - c0[n] for n in c1 if n in c0}
            bench, machine = d.pop("bench (the clients)", 0.0), d.pop("machine (every process)", 0.0)
            target = sum(d.values())
            row["target_cpu_ms_per_call"] = rnd(1000 * target / len(lat), 2) if lat else None
            row["others_cores"] = rnd((machine - target - bench) / step, 2)
        out.append(row)
    return out


def rss_figures(smp: Samples) -> dict[str, Any]:
    start, mid, end = (smp.marks.get(k, {}) for k in ("start", "middle", "end"))
    out: dict[str, Any] = {}
    for name in sorted(set(start) | set(mid) | set(end)):
        a, m, e = start.get(name), mid.get(name), end.get(name)
        peak = max((snap.get(name, 0.0) for _, snap in smp.rss), default=0.0)
        out[name] = {
            "start_mb": rnd(a),
            "middle_mb": rnd(m),
            "end_mb": rnd(e),
            "max_mb": rnd(max(peak, a or 0, m or 0, e or 0)),
            "start_to_end_mb": rnd(e - a) if a is not None and e is not None else None,
            "middle_to_end_mb": rnd(e - m) if m is not None and e is not None else None,
            "middle_to_end_pct": rnd(100 * (e - m) / m, 1) if m and e is not None else None,
        }
    tot = {k: sum(snap.values()) for k, snap in (("start", start), ("middle", mid), ("end", end))}
    out["total"] = {
        "start_mb": rnd(tot["start"]),
        "middle_mb": rnd(tot["middle"]),
        "end_mb": rnd(tot["end"]),
        "start_to_end_mb": rnd(tot["end"] - tot["start"]),
        "middle_to_end_mb": rnd(tot["end"] - tot["middle"]),
        "middle_to_end_pct": rnd(100 * (tot["end"] - tot["middle"]) / tot["middle"], 1) if tot["middle"] else None,
    }
    return out


def dist(xs: list[float], scale: float = 1.0, digits: int = 1) -> dict[str, Any]:
    v = [x * scale for x in xs if x is not None]
    return {
        "n": len(v),
        "p50": rnd(percentile(v, 50), digits),
        "p99": rnd(percentile(v, 99), digits),
        "max": rnd(max(v), digits) if v else None,
    }


def errors_by_code(tally: Tally) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (_kind, code, cls), n in sorted(tally.errors.items()):
        d = out.setdefault(code, {"expected": 0, "retried": 0, "unexpected": 0, "kinds": 0})
        d[cls] += n
        d["kinds"] += 1
    return out


def call_figures(tally: Tally, smp: Samples, lo: float, hi: float) -> dict[str, Any]:
    """Calls per kind over the window, by thirds, and each kind's p50 in the first third against the last."""
    window = hi - lo
    kinds = per_kind(tally, lo, hi)
    total = sum(k["n"] for k in kinds.values())
    step = window / 3
    first, last = per_kind(tally, lo, lo + step), per_kind(tally, hi - step, hi)
    return {
        "calls": {"total": total, "per_s": rnd(total / window, 1), "window_s": rnd(window, 1)},
        "kinds": kinds,
        "thirds": thirds(tally, smp, lo, hi),
        "p50_ms_first_vs_last_third": {
            k: [first[k]["p50_ms"], last[k]["p50_ms"], rnd(ratio(last[k]["p50_ms"], first[k]["p50_ms"]), 2)]
            for k in kinds
            if k in first and k in last
        },
    }


def cpu_cores(smp: Samples, lo: float, hi: float) -> dict[str, Any]:
    """Cores each process used over the measured window, and what the rest of the machine took."""
    a, b = smp.cpu.get("start", {}), smp.cpu.get("end", {})
    cores = {n: (b[n] - a[n]) / (hi - lo) for n in b if n in a}
    cores["others (not this run)"] = cores.get("machine (every process)", 0.0) - sum(
        v for n, v in cores.items() if n != "machine (every process)"
    )
    return {n: rnd(v, 2) for n, v in cores.items()}


def lag_figures(smp: Samples, lo: float) -> dict[str, Any]:
    in_window = [x for x in smp.lag if x["t"] >= lo]
    return {
        "samples": len(in_window),
        "projection_events": dist([x["events"] for x in in_window], digits=0),
        "projection_s": dist([x["seconds"] for x in in_window], digits=3),
        "vector_events": dist([x["vector_events"] for x in in_window if x["vector_events"] is not None], digits=0),
        "probe_visible_ms": dist(smp.visible_s, 1000),
        "probe_audited_ms": dist(smp.audited_s, 1000),
        "projection_lag_p99_ms": rnd(percentile(smp.visible_s, 99) * 1000, 1),
        "audit_lag_p99_ms": rnd(percentile(smp.audited_s, 99) * 1000, 1),
    }


def floor_ratios(out: dict[str, Any]) -> dict[str, Any]:
    noop, kinds = out["floors"]["noop_http"], out["kinds"]
    get, add = kinds.get("get", {}), kinds.get("add", {})
    return {
        "all_calls_per_s_over_noop_per_s": rnd(ratio(out["calls"]["per_s"], noop["per_s"]), 3),
        "get_p50_over_noop_p50": rnd(ratio(get.get("p50_ms"), noop["p50_ms"]), 2),
        "add_p50_over_noop_p50": rnd(ratio(add.get("p50_ms"), noop["p50_ms"]), 2),
    }


def checks(v: dict[str, Any], tally: Tally, log_errors: list[str], exited: list[str]) -> dict[str, int]:
    """What must all be 0."""
    return {
        "lost_acknowledged_writes": v["lost_total"],
        "deleted_still_readable": v["deleted_checked"] - v["deleted_not_found"],
        "writes_missing_from_audit": v["audit"]["missing"],
        "unexpected_errors": tally.unexpected(),
        "failed_checks": sum(tally.failures.values()),
        "dead_letters": tally.dead_letters,
        "server_log_errors": len(log_errors),
        "processes_exited": len(exited),
    }
