"""bench.replay (1) and (2): the receive-and-decode floor, the replays through mneme.app.replay.replay() (full and
DuckDB only), and a LogFollower into a VectorView alone (vectors only).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import log, rnd
from bench.floors import receive_all
from bench.replay.instruments import Meter, Noise, Profiler, Timings
from mneme.app.compose import open_vectors
from mneme.app.replay import ReplayFailed, replay
from mneme.app.settings import CoreSettings, ProjectorSettings
from mneme.follow import LogFollower
from schemas import subjects as S
from schemas.events import decode_envelope

# -- the floor ----------------------------------------------------------------------------------------------


async def floor_once(js: Any, target: int) -> float:
    """An ordered push consumer with a callback: receive, read the sequence, decode. Seconds to the last."""
    secs, (count,) = await receive_all(js, [(S.EVENTS_STREAM, S.EVENTS_SUBJECTS, decode_envelope, target)], 900)
    if count != target:
        raise RuntimeError(f"the floor consumer received {count} messages, not {target}")
    return secs


# -- replays ---------------------------------------------------------------------------------------------------


def progress_logger(label: str) -> Callable[[int, int, float], None]:
    last = [0.0]

    def progress(done: int, target: int, secs: float) -> None:
        if secs - last[0] >= 15 or done >= target:
            last[0] = secs
            log(f"    {label}: {done:,} of {target:,} ({done / secs if secs else 0:,.0f} events/s)")

    return progress


STALL_S = 90.0  # a replay that applies nothing for this long is stopped and reported as stalled


def completeness(db: Path, target: int) -> dict[str, Any]:
    """What a DuckDB view folded: its checkpoint, its versions, and which sequences 1..target have no version
    (this log's every event makes one version, so none may be missing)."""
    import duckdb

    try:
        con = duckdb.connect(str(db))  # in this process: the instance the (stalled) view holds, or the closed file
    except Exception as exc:  # noqa: BLE001 - reported
        return {"error": f"{type(exc).__name__}: {exc}"}
    try:
        ck = con.execute("SELECT seq FROM checkpoints WHERE name = 'memories'").fetchone()
        versions = (con.execute("SELECT count(*) FROM memory_versions").fetchone() or (0,))[0]
        gaps = con.execute(
            "WITH m AS (SELECT s FROM range(1, ? + 1) t(s) ANTI JOIN memory_versions v ON v.seq = t.s), "
            "g AS (SELECT s, s - row_number() OVER (ORDER BY s) AS grp FROM m) "
            "SELECT min(s), max(s), count(*) FROM g GROUP BY grp ORDER BY 1",
            [target],
        ).fetchall()
    finally:
        con.close()
    missing = sum(g[2] for g in gaps)
    return {
        "checkpoint": ck[0] if ck else None,
        "versions": versions,
        "missing_events": missing,
        "gaps": len(gaps),
        "first_gaps": [list(g) for g in gaps[:5]],
    }


@dataclass
class Bed:
    """What every replay runs against and is measured with: the settings, the log (its NATS connection and its
    last sequence), the CPU meter and the NATS trouble counter."""

    core: CoreSettings
    ps: ProjectorSettings
    nc: Any
    target: int
    meter: Meter
    noise: Noise

    @property
    def js(self) -> Any:
        return self.nc.jetstream()


class Progress:
    """A replay's progress callback: logs every 15 s, and notes when it last moved (to see a stall)."""

    def __init__(self, label: str):
        self.log = progress_logger(label)
        self.done, self.at = -1, time.perf_counter()

    def __call__(self, done: int, target: int, secs: float) -> None:
        if done != self.done:
            self.done, self.at = done, time.perf_counter()
        self.log(done, target, secs)


async def watch(task: asyncio.Future[Any], progress: Progress, label: str, target: int) -> int | None:
    """Until the replay ends; one that applies nothing for STALL_S is cancelled: the sequence it stalled at."""
    while not task.done():
        await asyncio.wait({task}, timeout=5)
        if not task.done() and time.perf_counter() - progress.at > STALL_S:
            log(f"(2) {label}: STALLED at {progress.done:,} of {target:,}: nothing applied for {STALL_S:.0f} s; "
                "stopping it")  # fmt: skip
            task.cancel()
            try:
                await task
            except BaseException:  # noqa: BLE001 - cancelled on purpose
                pass
            return progress.done
    return None


def replay_result(
    task: asyncio.Future[Any], stalled: int | None, target: int, last_progress_s: float
) -> tuple[dict[str, Any], Any]:
    """replay()'s result and what failed (its verification, or the stall)."""
    if stalled is not None:
        verify = {"stalled_at": stalled, "last_progress_s": rnd(last_progress_s, 1)}
        res = {
            "events": target,
            "seconds": None,
            "events_per_s": None,
            "embedded": None,
            "digest": None,
            "verify": verify,
        }
        return res, f"stalled at {stalled} of {target}"
    try:
        return task.result(), None
    except ReplayFailed as exc:
        return exc.result, exc.result.get("verify")


async def run_replay(bed: Bed, label: str, ps: ProjectorSettings, out: Path, prof: Profiler | None) -> dict[str, Any]:
    log(f"(2) {label}: replay() into {out.name}")
    if prof is not None:
        await prof.start()
    mark = bed.noise.mark()
    progress = Progress(label)
    bed.meter.start()
    t0 = time.perf_counter()
    task = asyncio.ensure_future(replay(bed.core, ps, output=out, use_snapshots=False, swap=False, progress=progress))
    stalled = await watch(task, progress, label, bed.target)
    cpu = bed.meter.stop()
    nats_noise = bed.noise.since(mark)
    profile = await prof.stop() if prof is not None else None
    log(f"(2) {label}: NATS: {nats_noise or 'nothing to report'}")
    last_progress_s = progress.at - t0
    res, failed = replay_result(task, stalled, bed.target, last_progress_s)
    if stalled is None:
        log(f"(2) {label}: {res['events']:,} events in {res['seconds']:.1f} s = {res['events_per_s']:,.0f} events/s; "
            f"embedded {res['embedded']}; verify {'ok' if failed is None else failed}")  # fmt: skip
    folded = completeness(out / ps.db_name, bed.target)
    if stalled is not None and folded.get("versions") is not None:
        folded["folded_per_s"] = rnd(folded["versions"] / last_progress_s, 1)  # what it really folded, until it stopped
    if folded.get("missing_events"):
        missing, gaps = folded["missing_events"], folded["gaps"]
        log(f"(2) {label}: the DuckDB view has NO version for {missing:,} of {bed.target:,} events (checkpoint "
            f"{folded['checkpoint']:,}; {gaps} gaps, first {folded['first_gaps'][:2]})")  # fmt: skip
    keys = ("events", "seconds", "events_per_s", "embedded", "verify", "digest")
    return {**{k: res[k] for k in keys}, "folded": folded, "cpu_share_of_a_core": cpu, "profile": profile,
            "failed": failed, "nats": nats_noise, "disk_mb": rnd(du(out) / 1e6, 1)}  # fmt: skip


VECTOR_PARTS = (  # (the view's part, its method, the label)
    ("", "stage", "stage (worker thread or loop)"),
    ("index", "retrieve", "  stage: Edge retrieve (previous states)"),
    ("bm25", "document", "  stage: BM25 sparse encoding"),
    ("", "commit", "commit (worker thread)"),
    ("", "_vectors", "  commit: cache lookups + vectors to lists"),
    ("cache", "get_many", "    of which EmbeddingCache.get_many"),
    ("index", "upsert", "  commit: Edge upsert (build points + update)"),
    ("index", "set_payload", "  commit: Edge set_payload (seq_to), one call per seq"),
    ("index", "save_checkpoint", "  commit: Edge flush + checkpoint file"),
)
COMMIT, UPSERT, FLUSH = VECTOR_PARTS[3][2], VECTOR_PARTS[6][2], VECTOR_PARTS[8][2]


def timed_parts(vv: Any, tm: Timings) -> list[tuple[float, int, float, float, float]]:
    """Wrap the view's parts; the commits noted as they end (end, committed seq, commit s, upsert s, flush s)."""
    commits: list[tuple[float, int, float, float, float]] = []

    def noted(label: str, dt: float) -> None:
        commits.append((time.perf_counter(), vv.committed, dt, tm.last[UPSERT], tm.last[FLUSH]))
        tm.last[UPSERT] = tm.last[FLUSH] = 0.0

    for part, name, label in VECTOR_PARTS:
        tm.wrap(getattr(vv, part) if part else vv, name, label, noted if label == COMMIT else None)
    return commits


async def follow(follower: LogFollower, target: int) -> tuple[float, int | None, float | None]:
    """Until the follower has committed `target`: (seconds, the sequence it stalled at, seconds to its last
    progress) — a follower that commits nothing for STALL_S has stalled."""
    t0 = time.perf_counter()
    await follower.start()
    last_log = t0
    moved = (follower.committed, time.perf_counter())
    while not await follower.wait_for(target, 0.5):
        if follower.committed != moved[0]:
            moved = (follower.committed, time.perf_counter())
        elif time.perf_counter() - moved[1] > STALL_S:
            log(f"(2) vectors only: STALLED at {follower.committed:,} of {target:,}: nothing committed for "
                f"{STALL_S:.0f} s")  # fmt: skip
            return time.perf_counter() - t0, follower.committed, moved[1] - t0
        if time.perf_counter() - last_log >= 15:
            last_log = time.perf_counter()
            log(f"    vectors only: {follower.committed:,} of {target:,} "
                f"({follower.committed / (last_log - t0):,.0f} events/s)")  # fmt: skip
    return time.perf_counter() - t0, None, None


async def vectors_only(bed: Bed, out: Path, prof: Profiler | None) -> dict[str, Any]:
    """A LogFollower into a VectorView alone (what the replay's vector follower does), parts timed."""
    log(f"(2) vectors only: a LogFollower into a VectorView in {out.name}")
    out.mkdir(parents=True)
    vv = open_vectors(bed.core, bed.ps, base=out)
    assert vv is not None
    tm = Timings()
    commits = timed_parts(vv, tm)
    follower = LogFollower(bed.js, vv, batch_max=bed.ps.vector_batch_max, linger=bed.ps.linger, stop_at=bed.target)
    await asyncio.to_thread(vv.model.wait, 120)  # as in a replay, the model loads meanwhile; not needed: cache warm
    if prof is not None:
        await prof.start()
    mark = bed.noise.mark()
    bed.meter.start()
    t0 = time.perf_counter()
    secs, stalled, last_progress = await follow(follower, bed.target)
    cpu = bed.meter.stop()
    nats_noise = bed.noise.since(mark)
    log(f"(2) vectors only: NATS: {nats_noise or 'nothing to report'}")
    profile = await prof.stop() if prof is not None else None
    await follower.stop()
    points = vv.index.count(all_points())
    embedded = vv.embedded
    vv.close()
    log(f"(2) vectors only: {follower.committed:,} events in {secs:.1f} s = {follower.committed / secs:,.0f} "
        f"events/s; {points:,} points; embedded {embedded}")  # fmt: skip
    done = stalled if stalled is not None else bed.target  # per event over what it got through, until it stopped
    stall = None if stalled is None or last_progress is None else {
        "at": stalled, "last_progress_s": rnd(last_progress, 1), "points": points,
        "points_per_s": rnd(points / last_progress, 1)}  # fmt: skip
    rate = None if stalled is not None else rnd(bed.target / secs, 1)
    return {"events": bed.target, "seconds": rnd(secs, 3), "events_per_s": rate, "points": points, "embedded": embedded,
            "us_per_event": {label: rnd(tm.s[label] * 1e6 / max(done, 1), 2) for *_, label in VECTOR_PARTS},
            "calls": {label: tm.n[label] for *_, label in VECTOR_PARTS}, "cpu_share_of_a_core": cpu,
            "nats": nats_noise, "stalled_at": stalled, "events_done": done, "stalled": stall, "profile": profile,
            "disk_mb": rnd(du(out) / 1e6, 1), "by_tenth": by_tenth(commits, t0, bed.target)}  # fmt: skip


def by_tenth(commits: list[tuple[float, int, float, float, float]], t0: float, target: int) -> list[dict[str, Any]]:
    """Per tenth of the log (by the sequence a commit reached): events/s, and per commit the mean ms of the
    commit, its Edge upsert and its flush: does it slow down as the shard grows?"""
    out = []
    prev_t, prev_seq = t0, 0
    for k in range(10):
        hi = target * (k + 1) // 10
        inside = [c for c in commits if prev_seq < c[1] <= hi]
        if not inside:
            continue
        end_t, end_seq = inside[-1][0], inside[-1][1]
        n = len(inside)
        out.append(
            {
                "upto": end_seq,
                "events_per_s": rnd((end_seq - prev_seq) / (end_t - prev_t), 1),
                "commits": n,
                "commit_ms": rnd(sum(c[2] for c in inside) * 1000 / n, 1),
                "upsert_ms": rnd(sum(c[3] for c in inside) * 1000 / n, 1),
                "flush_ms": rnd(sum(c[4] for c in inside) * 1000 / n, 1),
            }
        )
        prev_t, prev_seq = end_t, end_seq
    return out


def all_points() -> Any:
    from services.projector.vector_index import Cond, Where

    return Where(must=(Cond("seq_from", "range", gte=1),))


def du(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total
