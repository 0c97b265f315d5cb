"""The one rebuild path: fold the log into a directory of read models, verify it, and report.

`mneme replay` (a new generation, swapped in beside a live projector), `mneme rebuild` (a fresh DuckDB
file over the serving one) and `mneme projector --rebuild` (every read model, before the replica starts
serving) all build with `build`; they differ only in what they fold (rows, vectors, up to where) and in
how the result takes over (mneme/app/generations.py: `promote` or `install`).

The rows fold in this process in batches; the vectors fold in a process of their own
(`python -m mneme.app.vector_build`), beside them, so a build uses both cores. A killed build leaves its
directory for the next run with the same settings to resume; a failed one leaves nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS

from mneme.app import compose
from mneme.app.generations import read_meta, write_meta
from mneme.app.settings import CoreSettings, ProjectorSettings
from mneme.app.vector_build import VectorBuild
from mneme.catch_up import StallWatch
from schemas import subjects as S
from services.projector.memories_view import PROJECTION_VERSION
from services.projector.service import catch_up
from services.projector.snapshot import newest_snapshot, restore_snapshot, verify_generation

log = logging.getLogger("mneme.app.build")

Progress = Callable[[int, int, float], None]


def build_settings(ps: ProjectorSettings, *, upto: int | None) -> dict[str, Any]:
    """What a build records in its generation.json (a killed build resumes only with the same ones)."""
    return {
        "model": ps.embedding_model if ps.vectors != "off" else None,
        "upto": upto,
        "projection_version": PROJECTION_VERSION,
        "vectors": ps.vectors,
    }


class BuildFailed(Exception):
    """A build that folded but did not verify: `result` says what disagreed."""

    def __init__(self, result: dict[str, Any]):
        super().__init__(json.dumps(result.get("verify", result), default=str))
        self.result = result


async def build(
    core: CoreSettings,
    ps: ProjectorSettings,
    nc: NATS,
    out: Path,
    *,
    target: int,
    frozen: bool = False,
    resumable: bool = True,
    use_snapshots: bool = True,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Fold the log into `out` up to `target` (resuming a killed build with the same settings), verify it.

    `frozen`: a point-in-time copy (no access statistics past the target). `use_snapshots`: start from the
    newest snapshot at or before the target. `ps.vectors == "off"`: rows only. A fold that fails, or rows that
    do not advance for `ps.catch_up_stall_s` seconds, end the build with CatchUpStalled (never a wait for
    ever; a commit that keeps failing, e.g. on a full disk, says so)."""
    settings = build_settings(ps, upto=target if frozen else None)
    resumed = False
    if out.exists():
        old = read_meta(out)
        resumed = bool(old) and {k: old.get(k) for k in settings} == settings and resumable
        if not resumed:
            shutil.rmtree(out, ignore_errors=True)
    snapshot = None
    if not resumed and use_snapshots:
        found = newest_snapshot(compose.snapshot_dir(core, ps), upto=target, model=settings["model"])
        if found:
            snapshot = found[1]["seq"]
            restore_snapshot(found[0], found[1], out, ps.db_name)
    out.mkdir(parents=True, exist_ok=True)
    write_meta(out, settings)
    view = compose.open_view(core, ps, base=out)
    child = VectorBuild(core, ps, out, target, nats_url=compose.url_of(nc)) if ps.vectors != "off" else None
    try:
        if child is not None:
            await child.start()
        proj = compose.projector(nc, view, ps, stop_at=target, access=not frozen)
        start_seq = view.checkpoint
        t0 = time.monotonic()

        def both(done: int, tgt: int, secs: float) -> None:
            if progress:
                progress(min(done, child.applied) if child is not None else done, tgt, secs)

        await proj.start(serve_queries=False)
        try:
            await catch_up(proj, progress=both, target=target, stall_after=ps.catch_up_stall_s)
            if not frozen:  # access statistics up to the head of the access stream, too (bounded the same way)
                acc_head = (await nc.jetstream().stream_info(S.ACCESS_STREAM)).state.last_seq
                watch = StallWatch([proj.access_follower], ps.catch_up_stall_s)
                while not await proj.access_follower.wait_for(acc_head, 0.5):
                    watch.check(acc_head)
        finally:
            await proj.stop()
        facts = None
        if child is not None:
            pending = asyncio.ensure_future(child.result())
            while not pending.done():
                await asyncio.wait({pending}, timeout=0.5)
                both(view.checkpoint, target, time.monotonic() - t0)
            facts = pending.result()
        seconds = time.monotonic() - t0
        report = verify_generation(view, facts, target)
        digest = view.canonical_digest()
        view.con.execute("CHECKPOINT")
        embedded = facts["embedded"] if facts is not None else 0
    finally:
        view.close()
        if child is not None:
            await child.kill()
    return {
        "target_seq": target,
        "resumed_from": start_seq,
        "snapshot_seq": snapshot,
        "events": target - start_seq,
        "seconds": round(seconds, 3),
        "events_per_s": round((target - start_seq) / seconds, 1) if seconds else None,
        "embedded": embedded,
        "model": settings["model"],
        "verify": report,
        "digest": digest,
    }


async def head_of(nc: NATS) -> int:
    return (await nc.jetstream().stream_info(S.EVENTS_STREAM)).state.last_seq


async def seed_from_snapshot(core: CoreSettings, ps: ProjectorSettings, nc: NATS) -> dict[str, Any] | None:
    """A replica that starts with no read models (a new one, or one whose directory was lost) starts from the
    newest valid snapshot in the snapshot directory (MNEME_PROJECTOR_SNAPSHOT_DIR: one the replicas share,
    written by another replica or `mneme snapshot`) instead of the whole log; its followers then fold the
    rest, and it joins the queue group once caught up, as always. The snapshot's manifest, or None."""
    from mneme.app.generations import projection_dir

    base = projection_dir(core)
    if (base / ps.db_name).exists():
        return None
    head = (await nc.jetstream().stream_info(S.EVENTS_STREAM)).state.last_seq
    model = ps.embedding_model if ps.vectors == "edge" else None
    found = await asyncio.to_thread(newest_snapshot, compose.snapshot_dir(core, ps), upto=head, model=model)
    if found is None:
        return None
    snap, manifest = found  # (for an Edge replica, of its model or without vectors: newest_snapshot checks)
    if ps.vectors != "edge":
        manifest = {**manifest, "vectors": None}  # its vectors are elsewhere (a Qdrant server) or off: rows only
    await asyncio.to_thread(restore_snapshot, snap, manifest, base, ps.db_name)
    log.info("starting from snapshot %s (sequence %d)", snap, manifest["seq"])
    return manifest
