"""bench.replay's tables and its JSON object."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from bench.common import median, print_table, rnd, verdict
from bench.replay.corpus import MODES, PROFILE_HZ, TARGET_P95_MS, TARGET_RATIO, Config
from mneme.app.settings import ProjectorSettings


def report(
    cfg: Config,
    machine: dict[str, Any],
    args: argparse.Namespace,
    pre: dict[str, Any],
    logd: dict[str, Any],
    floors: list[float],
    floor_cpu: list[dict[str, Any]],
    full: dict[str, Any],
    duck: dict[str, Any],
    vec: dict[str, Any] | None,
    lat: dict[str, Any],
    wall: float,
    problems: list[str],
) -> dict[str, Any]:
    target = logd["events"]
    f_rates = [target / s for s in floors]
    floor_rate = median(f_rates)
    mode = "quick" if args.quick else "full"
    print(
        f"mneme bench.replay ({mode}) — {machine['nproc']} cores, {machine['cpu_model']}, "
        f"{machine['ram_gb']} GB RAM, Python {machine['python']}, {machine['date']}, "
        f"load average at start {machine['loadavg_at_start']}"
    )
    print(
        f"log: {target:,} events ({logd['bytes'] / 1e6:,.0f} MB, {logd['mean_event_bytes']} B/event) over "
        f"{logd['memories_created']:,} memories in {cfg.namespaces} namespaces: "
        + ", ".join(f"{k} {v:,}" for k, v in logd["by_type"].items())
        + f"; contents from a pool of {cfg.pool:,} sentences ({logd['distinct_texts_used']:,} used)"
    )
    print(
        f"embedding cache {pre['cache']}: {pre['already_cached']:,} of {pre['pool_texts']:,} pool texts were "
        f"there, {pre['embedded_now']:,} embedded in this run ({pre['embed_seconds']} s)"
    )

    rows: list[list[Any]] = [["floor: ordered push consumer, callback: receive + seq + decode_envelope", floor_rate,
             rnd(target / floor_rate, 2), 1.0, None, "", "-", floor_cpu[0]]]  # fmt: skip
    runs = [
        ("full replay(): DuckDB + Edge vectors, cache warm", full, True),
        ("DuckDB only: replay(), vectors='off'", duck, False),
    ]
    if vec is not None:
        runs.append(("vectors only: LogFollower into VectorView", vec, False))
    targets: dict[str, dict[str, Any]] = {}
    for name, r, is_target in runs:
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
        rows.append([name, r["events_per_s"], r["seconds"], rnd(ratio, 3), r["embedded"],
                     f">= {TARGET_RATIO:.2f} {verdict(ok)}" if is_target else "", trouble,
                     r["cpu_share_of_a_core"]])  # fmt: skip
        if is_target:
            targets["replay_vs_floor"] = {
                "ratio": rnd(ratio, 3),
                "target": TARGET_RATIO,
                "pass": ok,
                "replay_events_per_s": r["events_per_s"],
                "floor_events_per_s": rnd(floor_rate, 1),
            }
    print_table(
        f"(1)+(2) Replay of {target:,} events beside the floor (floor: median of {len(floors)} rounds "
        f"{', '.join(f'{x:,.0f}' for x in f_rates)} events/s)",
        [
            "measure",
            "events/s",
            "seconds",
            "ratio to floor",
            "embedded",
            "target",
            "NATS: server slow consumer / disconnects / client drops",
            "cpu share of a core",
        ],
        [[*r[:7], ", ".join(f"{k} {v}" for k, v in (r[7] or {}).items())] for r in rows],
    )

    if vec is not None:
        us = vec["us_per_event"]
        total = vec["seconds"] * 1e6 / max(vec["events_done"], 1)
        prow = [[k, v, rnd(v / total, 3), vec["calls"].get(k)] for k, v in us.items()]
        prow.append(["total wall per event", rnd(total, 2), 1.0, None])
        print_table(
            "(2) vectors only: where the wall time goes (instance wrappers; µs per event)",
            ["part", "µs/event", "share of wall", "calls"],
            prow,
        )
        print_table(
            "(2) vectors only, per tenth of the log: does it slow down as the shard grows? (ms per commit)",
            ["up to seq", "events/s", "commits", "commit ms", "Edge upsert ms", "Edge flush ms"],
            [
                [x["upto"], x["events_per_s"], x["commits"], x["commit_ms"], x["upsert_ms"], x["flush_ms"]]
                for x in vec["by_tenth"]
            ],
        )
    for name, rr in (("DuckDB only", duck), ("vectors only", vec)):
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

    L = lat["latency"]
    lrows = []
    for kind in ("get", *MODES):
        x = L.get(kind, {})
        ok = x.get("p95_ms") is not None and x["p95_ms"] < TARGET_P95_MS
        targets[f"as_of_{kind}_p95"] = {"p95_ms": x.get("p95_ms"), "target_ms": TARGET_P95_MS, "pass": ok}
        lrows.append([f"{'GetMemory' if kind == 'get' else 'SearchMemories ' + kind}, as_of=AsOf(seq=random)",
                      x.get("n"), x.get("p50_ms"), x.get("p95_ms"), x.get("p99_ms"), x.get("max_ms"),
                      f"< {TARGET_P95_MS:.0f} ms {verdict(ok)}"])  # fmt: skip
    for kind in ("get_now", *(f"{m}_now" for m in MODES)):
        x = L.get(kind, {})
        lrows.append([f"  the same without as_of: {kind.replace('_now', '')}", x.get("n"), x.get("p50_ms"),
                      x.get("p95_ms"), x.get("p99_ms"), x.get("max_ms"), ""])  # fmt: skip
    x = L.get("echo", {})
    lrows.append(["core NATS request/reply echo (floor)", x.get("n"), x.get("p50_ms"), x.get("p95_ms"),
                  x.get("p99_ms"), x.get("max_ms"), ""])  # fmt: skip
    print_table(
        f"(3) Query latency at {target:,} events ({lat.get('versions') or 0:,} versions from "
        f"{lat.get('rows_from')}, {lat.get('points') or 0:,} points from {lat.get('vectors_from')}) "
        "through QueryClient.ask (ms)",
        ["query", "n", "p50", "p95", "p99", "max", "target"],
        lrows,
    )
    print(f"gets found: {lat['found']}; search hits per query (mean): {lat['hits_mean']}; failures {lat['failures']}")
    if lat["failures"]:
        problems.append(f"{lat['failures']} queries failed or missed: {lat['first_failures']}")
    targets["verified"] = {"pass": not problems, "problems": list(problems), "digests_equal": same}
    print("\nTargets: " + ", ".join(f"{k} {verdict(v['pass'])}" for k, v in targets.items()))
    print(f"wall time {wall:.1f} s")
    for rr in (full, duck, vec):
        if rr is not None:
            rr.pop("digest", None)
    return {
        "bench": "replay",
        "mode": mode,
        "machine": machine,
        "config": dataclasses.asdict(cfg),
        "cache": pre,
        "log": logd,
        "floor": {
            "events_per_s": rnd(floor_rate, 1),
            "per_round": [rnd(x, 1) for x in f_rates],
            "cpu_share_of_a_core": floor_cpu,
        },
        "replay_full": full,
        "replay_duckdb_only": duck,
        "vectors_only": vec,
        "latency": lat,
        "settings": {
            "batch_max": ProjectorSettings().batch_max,
            "vector_batch_max": ProjectorSettings().vector_batch_max,
            "linger_s": ProjectorSettings().linger,
            "model": ProjectorSettings().embedding_model,
        },
        "targets": targets,
        "wall_seconds": rnd(wall, 1),
    }
