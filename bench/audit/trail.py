"""bench.audit's view of a trail: commit times noted (a bench-side subclass; the core Trail is untouched), each
record's lag read back from the file, lag percentiles, and the chain verified.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from pathlib import Path
from typing import Any

from bench import fixtures
from bench.audit.config import SLICES
from bench.common import latency_summary, percentile, percentiles_ms, rnd
from services.auditor.trail import ACCESS, EVENTS, Trail

# -- the trail, with commit times noted (bench-side subclass; the core Trail is untouched) -----------


class TimedTrail(Trail):
    """A Trail that notes, per commit, which trail sequences it wrote and the wall time it finished."""

    def __init__(self, path: str):
        super().__init__(path)
        self.commits: list[tuple[int, int, float, float]] = []  # (after seq, up to seq, wall end, seconds)
        self._noting = threading.Lock()  # commits are serialized by the Trail anyway; this keeps `before` exact
        self.stage_s = 0.0  # time spent staging (chaining and hashing records)

    def stage(self, source: str, batch: list[Any], upto: int | None) -> None:
        t = time.perf_counter()
        super().stage(source, batch, upto)
        self.stage_s += time.perf_counter() - t

    def commit(self) -> None:
        with self._noting:
            before = self.last_seq
            t = time.perf_counter()
            super().commit()
            wall = time.time()
            if self.last_seq > before:
                self.commits.append((before, self.last_seq, wall, time.perf_counter() - t))


def trail_lags(
    con: Any, commits: list[tuple[int, int, float, float]], since: float, until: float
) -> tuple[dict[str, list[tuple[float, float]]], int]:
    """(recorded_at, lag) of every record the log recorded in [since, until), by source, where lag =
    end of the commit that wrote it − recorded_at (seconds); and how many such records no noted
    commit covers (must be 0)."""
    rows = (
        con.cursor()
        .execute("SELECT trail_seq, source, epoch_us(recorded_at) FROM audit_trail ORDER BY trail_seq")
        .fetchall()
    )
    ups = [c[1] for c in commits]
    out: dict[str, list[tuple[float, float]]] = {EVENTS: [], ACCESS: []}
    uncovered = 0
    for seq, source, rec_us in rows:
        rec = rec_us / 1e6
        if not since <= rec < until:
            continue
        k = bisect_left(ups, seq)
        if k == len(ups) or commits[k][0] >= seq:
            uncovered += 1
            continue
        out[source].append((rec, commits[k][2] - rec))
    return out, uncovered


def commit_stats(commits: list[tuple[int, int, float, float]], since: float, until: float) -> dict[str, Any]:
    inside = [c for c in commits if since <= c[2] < until + 1.0]
    rows = [c[1] - c[0] for c in inside]
    secs = [c[3] for c in inside]
    return {
        "commits": len(inside),
        "records_per_commit_mean": rnd(sum(rows) / len(rows), 1) if rows else None,
        **percentiles_ms(secs, (50, 99), 2, key="commit_ms_p{}"),
        "commit_ms_max": rnd(max(secs) * 1000, 2) if secs else None,
    }


def check_trail(path: Path, events: int, access: int) -> dict[str, Any]:
    """Open a closed trail file: verify the chain and count records per source."""
    trail = fixtures.trail(path)
    try:
        return verify_trail(trail, events, access)
    finally:
        trail.close()


def verify_trail(trail: Trail, events: int, access: int) -> dict[str, Any]:
    t = time.perf_counter()
    checked, broken = trail.verify()
    by_source = dict(trail.con.cursor().execute("SELECT source, count(*) FROM audit_trail GROUP BY source").fetchall())
    got_e, got_a = by_source.get(EVENTS, 0), by_source.get(ACCESS, 0)
    ok = broken is None and checked == events + access and got_e == events and got_a == access
    return {
        "records": checked,
        "expected": events + access,
        "events": got_e,
        "access": got_a,
        "expected_events": events,
        "expected_access": access,
        "first_broken_seq": broken,
        "ok": ok,
        "verify_s": rnd(time.perf_counter() - t, 2),
    }


def lag_summary(pairs: list[tuple[float, float]], since: float, until: float) -> dict[str, Any]:
    """Lag percentiles (ms) over (recorded_at, lag) pairs, overall and p99 per SLICES-th of [since, until)."""
    slices: dict[int, list[float]] = {}
    width = (until - since) / SLICES
    for rec, lag in pairs:
        slices.setdefault(min(SLICES - 1, int((rec - since) // width)), []).append(lag * 1000)
    return {
        **latency_summary([lag for _, lag in pairs], (50, 95, 99), 2, mean=False),
        "p99_ms_per_slice": [rnd(percentile(slices[k], 99), 1) for k in sorted(slices)],
    }


def lag_block(lags: dict[str, list[tuple[float, float]]], since: float, until: float) -> dict[str, Any]:
    return {
        "lag_all": lag_summary(lags[EVENTS] + lags[ACCESS], since, until),
        "lag_events": lag_summary(lags[EVENTS], since, until),
        "lag_access": lag_summary(lags[ACCESS], since, until),
    }
