"""Snapshots of a projector's read models, and the checks a rebuilt generation must pass.

A snapshot is a copy of one generation's files (the DuckDB file after a CHECKPOINT, the
Qdrant Edge shard after a flush) taken while the generation's followers hold their commits,
with a manifest: the sequence each read model covers, the projection version, the model,
and the SHA-256 of every file. A replay starts from the newest snapshot whose manifest
matches and whose files hash as recorded, and folds only the rest of the log.

Files are copied sparsely (an Edge shard is ~240 MB of preallocated holes), both into a
snapshot and out of it; whoever asked for one gets a summary, the hashes stay in the manifest.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import shutil
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from mneme.sparse import copy_sparse, copytree_sparse, disk_usage
from schemas.control import SnapshotReply, SnapshotRequest
from services.projector.duck_sql import one_row
from services.projector.generation import Generation
from services.projector.memories_schema import PROJECTION_VERSION
from services.projector.memories_view import MemoriesView
from services.projector.vector_index import DENSE, OPEN, Cond, EdgeIndex, Where
from services.projector.vector_view import VectorView

log = logging.getLogger("mneme.snapshot")
MANIFEST = "manifest.json"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): _sha256(p) for p in sorted(root.rglob("*")) if p.is_file() and p.name != MANIFEST}


@contextlib.asynccontextmanager
async def held(gen: Any) -> AsyncIterator[None]:
    """Every follower of the generation holds its commits (staging goes on) while inside."""
    async with contextlib.AsyncExitStack() as stack:
        for f in gen.followers:
            await stack.enter_async_context(f.paused())
        yield


def write_snapshot(view: MemoriesView, vectors: VectorView | None, root: Path, *, keep: int = 2) -> dict[str, Any]:
    """Copy the (held) generation's files into root/snap-<seq>; returns a summary (the manifest without the
    per-file hashes, with the path, the number of files and their size as read and on disk). Call inside
    `held`."""
    seq = view.checkpoint
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-{seq}-{time.monotonic_ns()}"
    tmp.mkdir()
    try:
        # a transactional copy (MVCC): readers go on, and no CHECKPOINT has to wait for them
        cur = view.con.cursor()
        try:
            db = one_row(cur, "SELECT current_database()")[0]
            cur.execute(f"ATTACH '{tmp / Path(view.path).name}' AS mneme_snapshot")
            cur.execute(f'COPY FROM DATABASE "{db}" TO mneme_snapshot')
            cur.execute("DETACH mneme_snapshot")
        finally:
            cur.close()
        manifest: dict[str, Any] = {
            "seq": seq,
            "projection_version": PROJECTION_VERSION,
            "db": Path(view.path).name,
            "created_at": datetime.now(UTC).isoformat(),
            "model": None,
            "vector_seq": None,
            "vectors": None,
        }
        if vectors is not None and isinstance(vectors.index, EdgeIndex):
            with vectors.lock:  # the embedding filler writes dense vectors outside the followers' pauses
                vectors.save()  # flushes the shard and writes the position it covers
                idx = vectors.index
                idx.shard.flush()
                copytree_sparse(idx.path, tmp / idx.path.name)
                if idx.checkpoint_file.exists():
                    copy_sparse(idx.checkpoint_file, tmp / idx.checkpoint_file.name)
                manifest.update(model=vectors.model.name, vector_seq=vectors.checkpoint, vectors=idx.path.name)
        manifest["files"] = _files(tmp)
        files, size, disk = disk_usage(tmp)
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # no half-written snapshot is left behind
        raise
    final = root / f"snap-{seq:012d}"
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    for old in sorted(root.glob("snap-*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    log.info("snapshot at sequence %d in %s", seq, final)
    summary = {k: v for k, v in manifest.items() if k != "files"}
    return {
        **summary,
        "path": str(final),
        "files": files,
        "bytes": size,
        "disk_bytes": disk,
        "manifest": str(final / MANIFEST),
    }


def valid_snapshot(path: Path) -> dict[str, Any] | None:
    try:
        manifest: dict[str, Any] = json.loads((path / MANIFEST).read_text())
    except (FileNotFoundError, ValueError):
        return None
    if manifest.get("projection_version") != PROJECTION_VERSION or _files(path) != manifest.get("files"):
        return None
    return manifest


def newest_snapshot(root: Path, *, upto: int, model: str | None) -> tuple[Path, dict[str, Any]] | None:
    """The newest snapshot at or before `upto` for this model whose files hash as its manifest says."""
    for snap in sorted(root.glob("snap-*"), reverse=True):
        m = valid_snapshot(snap)
        if m is None:
            log.warning("snapshot %s is damaged or of another projection version: skipped", snap)
            continue
        if (
            m["seq"] <= upto
            and (m.get("vector_seq") or 0) <= upto
            and (model is None or m.get("model") in (None, model))
        ):
            return snap, m
    return None


def restore_snapshot(snap: Path, manifest: dict[str, Any], target: Path, db_name: str) -> None:
    """Copy a snapshot's files into an empty generation directory."""
    target.mkdir(parents=True, exist_ok=True)
    copy_sparse(snap / manifest["db"], target / db_name)
    if manifest.get("vectors"):
        copytree_sparse(snap / manifest["vectors"], target / manifest["vectors"])
        ck = snap / f"{manifest['vectors']}.checkpoint.json"
        if ck.exists():
            copy_sparse(ck, target / ck.name)


def vector_facts(vectors: VectorView) -> dict[str, Any]:
    """What verify_generation checks of a vector index: its points, current points, position, pending."""
    return {
        "points": vectors.index.count(Where(must=(Cond("seq_from", "range", gte=1),))),
        "live_points": vectors.index.count(Where(must=(Cond("seq_to", "range", gte=OPEN),))),
        "vector_checkpoint": vectors.checkpoint,
        "pending_dense": vectors.pending_dense,
        # points the position passed without their dense vector (semantic search would never find them)
        "without_dense": vectors.index.count(
            Where(must=(Cond("seq_from", "range", gte=1),), must_not=(Cond(DENSE, "vector"),))
        ),
    }


def verify_generation(view: MemoriesView, vectors: VectorView | dict[str, Any] | None, target: int) -> dict[str, Any]:
    """The checks a rebuilt generation passes before it may serve. `vectors`: the index, or its
    `vector_facts` (a replay builds it in another process)."""
    cur = view.reader()
    problems = []
    if view.checkpoint != target:
        problems.append(f"rows cover sequence {view.checkpoint}, not {target}")
    memories = one_row(cur, "SELECT count(*) FROM memories")[0]
    versions = one_row(cur, "SELECT count(*) FROM memory_versions")[0]
    open_versions = one_row(cur, "SELECT count(*) FROM memory_versions WHERE seq_to IS NULL AND NOT deleted")[0]
    if open_versions != memories:
        problems.append(f"{memories} memories but {open_versions} current versions")
    stale = one_row(
        cur,
        "SELECT count(*) FROM memories m LEFT JOIN memory_versions v ON v.id = m.id AND v.version = m.version "
        "WHERE v.id IS NULL OR v.seq_to IS NOT NULL OR v.deleted OR v.content <> m.content",
    )[0]
    if stale:
        problems.append(f"{stale} memories differ from their latest version")
    out: dict[str, Any] = {"memories": memories, "versions": versions}
    if vectors is not None:
        facts = vectors if isinstance(vectors, dict) else vector_facts(vectors)
        live_points, all_points, checkpoint = facts["live_points"], facts["points"], facts["vector_checkpoint"]
        out.update(points=all_points, live_points=live_points, vector_checkpoint=checkpoint)
        if checkpoint != target or facts["pending_dense"]:
            problems.append(f"vectors cover sequence {checkpoint} ({facts['pending_dense']} without a vector)")
        if facts.get("without_dense"):
            problems.append(f"{facts['without_dense']} points without their dense vector")
        if live_points != memories:
            problems.append(f"{memories} memories but {live_points} current points")
        nondeleted = one_row(cur, "SELECT count(*) FROM memory_versions WHERE NOT deleted")[0]
        if all_points != nondeleted:
            problems.append(f"{nondeleted} versions but {all_points} points")
    out["ok"] = not problems
    out["problems"] = problems
    return out


class Snapshotted(Protocol):
    """What snapshots need of their projector: the serving generation, and the lock a swap holds."""

    gen: Generation
    swap_lock: asyncio.Lock


class Snapshots:
    """Snapshots of a projector's serving generation into `directory`: on request (`mneme snapshot`, on the
    control plane) and every `every` events (0: never by itself)."""

    def __init__(self, projector: Snapshotted, directory: Path, every: int):
        self.p, self.directory, self.every = projector, directory, every

    async def take(self) -> dict[str, Any]:
        """Write a snapshot of the serving generation (its followers hold their commits meanwhile)."""
        async with self.p.swap_lock:
            gen = self.p.gen
            async with held(gen):
                return await asyncio.to_thread(write_snapshot, gen.view, gen.vectors, self.directory)

    async def periodically(self) -> None:
        last = 0
        while True:
            await asyncio.sleep(5)
            if self.p.gen.view.checkpoint - last >= self.every:
                try:
                    last = (await self.take())["seq"]
                except Exception:  # a failed snapshot must not stop the projector
                    log.exception("snapshot failed")

    async def answer(self, req: SnapshotRequest) -> SnapshotReply:
        return SnapshotReply(ok=True, **(await self.take()))


def snapshot_failed(exc: Exception) -> SnapshotReply:  # reported to the snapshot command
    return SnapshotReply(ok=False, error=f"{type(exc).__name__}: {exc}")
