"""bench.replay's tables and its JSON object."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from bench.common import header, median, print_table, rnd, targets_line, verdict
from bench.replay.corpus import MODES, PROFILE_HZ, TARGET_P95_MS, TARGET_RATIO, Config
from mneme.app.settings import ProjectorSettings


@dataclass
class ReplayRun:
    """What one run measured: the cache and the log (0), the floor rounds (1), the replays (2), the latency (3)."""

    cfg: Config
    mode: str
    machine: dict[str, Any]
    pre: dict[str, Any]
    logd: dict[str, Any]
    floors: list[float]  # seconds per floor round
    floor_cpu: list[dict[str, Any]]
    full: dict[str, Any]
    duck: dict[str, Any]
    vec: dict[str, Any] | None
    lat: dict[str, Any]
    wall: float

    @property
    def target(self) -> int:
        return self.logd["events"]

    @property
    def f_rates(self) -> list[float]:
        return [self.target / s for s in self.floors]


def intro(run: ReplayRun) -> None:
    logd, pre, cfg = run.logd, run.pre, run.cfg
    header("replay", run.mode, run.machine, f", load average at start {run.machine['loadavg_at_start']}")
    print(
        f"log: {run.target:,} events ({logd['bytes'] / 1e6:,.0f} MB, {logd['mean_event_bytes']} B/event) over "
        f"{logd['memories_created']:,} memories in {cfg.namespaces} namespaces: "
        + ", ".join(f"{k} {v:,}" for k, v in logd["by_type"].items())
        + f"; contents from a pool of {cfg.pool:,} sentences ({logd['distinct_texts_used']:,} used)"
    )
    print(
        f"embedding cache {pre['cache']}: {pre['already_cached']:,} of {pre['pool_texts']:,} pool texts were "
        f"there, {pre['embedded_now']:,} embedded in this run ({pre['embed_seconds']} s)"
    )


def replay_row(name: str, r: dict[str, Any], floor_rate: float, is_target: bool) -> list[Any]:
    """One replay beside the floor (its ratio noted in it as `vs_floor`)."""
    ratio = r["events_per_s"] / floor_rate if r["events_per_s"] else None
    st = (r.get("folded") or {}).get("folded_per_s") or (r.get("stalled") or {}).get("points_per_s")
    if st is not None:
        at = r["verify"].get("stalled_at") if r.get("verify") else r.get("stalled_at")
        unit = "points" if r.get("stalled") else "DuckDB rows"
        name += f" — STALLED at {at or r.get('stalled_at'):,}; {unit} written until then: {st:,.0f}/s"
    r["vs_floor"] = rnd(ratio, 3)
    ok = ratio is not None and ratio >= TARGET_RATIO
    nn = r.get("nats") or {}
    trouble = (
        f"{nn.get('server_slow_consumer', 0)} / {nn.get('disconnected_unexpected_eof', 0)} / "
        f"{nn.get('client_dropped_slow_consumer', 0):,}"
    )
    return [name, r["events_per_s"], r["seconds"], rnd(ratio, 3), r["embedded"],
            f">= {TARGET_RATIO:.2f} {verdict(ok)}" if is_target else "", trouble, r["cpu_share_of_a_core"]]  # fmt: skip


def replay_table(run: ReplayRun) -> dict[str, dict[str, Any]]:
    """(1)+(2): every replay beside the floor; the target (the full replay's ratio)."""
    floor_rate = median(run.f_rates)
    rows: list[list[Any]] = [["floor: ordered push consumer, callback: receive + seq + decode_envelope", floor_rate,
                              rnd(run.target / floor_rate, 2), 1.0, None, "", "-", run.floor_cpu[0]]]  # fmt: skip
    rows.append(replay_row("full replay(): DuckDB + Edge vectors, cache warm", run.full, floor_rate, True))
    rows.append(replay_row("DuckDB only: replay(), vectors='off'", run.duck, floor_rate, False))
    if run.vec is not None:
        rows.append(replay_row("vectors only: LogFollower into VectorView", run.vec, floor_rate, False))
    print_table(
        f"(1)+(2) Replay of {run.target:,} events beside the floor (floor: median of {len(run.floors)} rounds "
        f"{', '.join(f'{x:,.0f}' for x in run.f_rates)} events/s)",
        ["measure", "events/s", "seconds", "ratio to floor", "embedded", "target",
         "NATS: server slow consumer / disconnects / client drops", "cpu share of a core"],
        [[*r[:7], ", ".join(f"{k} {v}" for k, v in (r[7] or {}).items())] for r in rows],
    )  # fmt: skip
    rate = run.full["events_per_s"]
    ratio = rate / floor_rate if rate else None
    ok = ratio is not None and ratio >= TARGET_RATIO
    full = {"ratio": rnd(ratio, 3), "target": TARGET_RATIO, "pass": ok, "replay_events_per_s": rate,
            "floor_events_per_s": rnd(floor_rate, 1)}  # fmt: skip
    return {"replay_vs_floor": full}


def vector_tables(vec: dict[str, Any]) -> None:
    us = vec["us_per_event"]
    total = vec["seconds"] * 1e6 / max(vec["events_done"], 1)
    prow = [[k, v, rnd(v / total, 3), vec["calls"].get(k)] for k, v in us.items()]
    prow.append(["total wall per event", rnd(total, 2), 1.0, None])
    print_table(
        "(2) vectors only: where the wall time goes (instance wrappers; µs per event)",
        ["part", "µs/event", "share of wall", "calls"],
        prow,
    )
    keys = ("upto", "events_per_s", "commits", "commit_ms", "upsert_ms", "flush_ms")
    print_table(
        "(2) vectors only, per tenth of the log: does it slow down as the shard grows? (ms per commit)",
        ["up to seq", "events/s", "commits", "commit ms", "Edge upsert ms", "Edge flush ms"],
        [[x[k] for k in keys] for x in vec["by_tenth"]],
    )


def profile_tables(run: ReplayRun) -> None:
    for name, rr in (("DuckDB only", run.duck), ("vectors only", run.vec)):
        p = (rr or {}).get("profile")
        if not p or not p.get("samples"):
            continue
        print_table(
            f"(2) {name}: py-spy, on-CPU samples of all threads at {PROFILE_HZ} Hz "
            f"({p['cpu_seconds_sampled']} CPU s; by thread {p['by_thread']})",
            ["category", "share of samples"],
            list(p["categories"].items()),
        )
        print_table(
            f"(2) {name}: top frames (the leaf-most frame that decided the category)",
            ["frame", "share"],
            p["top_frames"],
        )


def replay_problems(run: ReplayRun, problems: list[str]) -> bool | None:
    """What the replays did wrong (failed, embedded, skipped events, stalled, disagreed); whether the two DuckDB
    replays have the same canonical digest (None: not both known)."""
    full, duck, vec, target = run.full, run.duck, run.vec, run.target
    for name, r in (("full", full), ("DuckDB only", duck)):
        if r.get("failed"):
            problems.append(f"{name} replay failed: {r['failed']}")
        if r["embedded"]:
            problems.append(f"{name} replay embedded {r['embedded']} texts: the cache was not warm")
        fo = r.get("folded") or {}
        if fo.get("missing_events"):
            problems.append(
                f"{name} replay: the DuckDB view has no version for {fo['missing_events']:,} of "
                f"{target:,} events although its checkpoint is {fo.get('checkpoint')} (events skipped; "
                f"{fo['gaps']} gaps, first {fo['first_gaps'][:3]})"
            )
    if vec is not None and vec["embedded"]:
        problems.append(f"vectors-only replay embedded {vec['embedded']} texts")
    if vec is not None and vec.get("stalled_at") is not None:
        problems.append(f"vectors only: stalled at {vec['stalled_at']} of {target}")
    same = None
    if full["digest"] is not None and duck["digest"] is not None:
        same = full["digest"] == duck["digest"]
        if not same:
            problems.append("the DuckDB tables of the full and the DuckDB-only replays differ (canonical digests)")
    if vec is not None and full["verify"].get("points") is not None and vec["points"] != full["verify"]["points"]:
        problems.append(f"vectors only: {vec['points']} points, the full replay {full['verify'].get('points')}")
    return same


def latency_table(run: ReplayRun, targets: dict[str, dict[str, Any]]) -> None:
    """(3): as_of queries against the target, beside the same without as_of and the echo."""
    lat, L = run.lat, run.lat["latency"]
    keys = ("n", "p50_ms", "p95_ms", "p99_ms", "max_ms")
    lrows = []
    for kind in ("get", *MODES):
        x = L.get(kind, {})
        ok = x.get("p95_ms") is not None and x["p95_ms"] < TARGET_P95_MS
        targets[f"as_of_{kind}_p95"] = {"p95_ms": x.get("p95_ms"), "target_ms": TARGET_P95_MS, "pass": ok}
        label = "GetMemory" if kind == "get" else "SearchMemories " + kind
        lrows.append([f"{label}, as_of=AsOf(seq=random)", *(x.get(k) for k in keys),
                      f"< {TARGET_P95_MS:.0f} ms {verdict(ok)}"])  # fmt: skip
    for kind in ("get_now", *(f"{m}_now" for m in MODES)):
        lrows.append(
            [f"  the same without as_of: {kind.replace('_now', '')}", *(L.get(kind, {}).get(k) for k in keys), ""]
        )
    lrows.append(["core NATS request/reply echo (floor)", *(L.get("echo", {}).get(k) for k in keys), ""])
    print_table(
        f"(3) Query latency at {run.target:,} events ({lat.get('versions') or 0:,} versions from "
        f"{lat.get('rows_from')}, {lat.get('points') or 0:,} points from {lat.get('vectors_from')}) "
        "through QueryClient.ask (ms)",
        ["query", "n", "p50", "p95", "p99", "max", "target"],
        lrows,
    )
    print(f"gets found: {lat['found']}; search hits per query (mean): {lat['hits_mean']}; failures {lat['failures']}")


def report(run: ReplayRun, problems: list[str]) -> dict[str, Any]:
    intro(run)
    targets = replay_table(run)
    if run.vec is not None:
        vector_tables(run.vec)
    profile_tables(run)
    same = replay_problems(run, problems)
    latency_table(run, targets)
    if run.lat["failures"]:
        problems.append(f"{run.lat['failures']} queries failed or missed: {run.lat['first_failures']}")
    targets["verified"] = {"pass": not problems, "problems": list(problems), "digests_equal": same}
    targets_line(targets, run.wall)
    for rr in (run.full, run.duck, run.vec):
        if rr is not None:
            rr.pop("digest", None)
    ps = ProjectorSettings()
    return {
        "bench": "replay",
        "mode": run.mode,
        "machine": run.machine,
        "config": dataclasses.asdict(run.cfg),
        "cache": run.pre,
        "log": run.logd,
        "floor": {
            "events_per_s": rnd(median(run.f_rates), 1),
            "per_round": [rnd(x, 1) for x in run.f_rates],
            "cpu_share_of_a_core": run.floor_cpu,
        },
        "replay_full": run.full,
        "replay_duckdb_only": run.duck,
        "vectors_only": run.vec,
        "latency": run.lat,
        "settings": {
            "batch_max": ps.batch_max,
            "vector_batch_max": ps.vector_batch_max,
            "linger_s": ps.linger,
            "model": ps.embedding_model,
        },
        "targets": targets,
        "wall_seconds": rnd(run.wall, 1),
    }
