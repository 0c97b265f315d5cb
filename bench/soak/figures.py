"""The soak's figures: per kind, by thirds, RSS, distributions, errors by code."""

from __future__ import annotations

from typing import Any

from bench.common import (
    latency_summary,
    percentile,
    rnd,
)
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
