"""Snapshots copy sparse files sparsely: a small store's snapshot takes little disk, and reads back
byte for byte."""

from __future__ import annotations

import hashlib
from pathlib import Path

import msgspec
import pytest

from mneme.embedded_nats import EmbeddedNats
from schemas.control import SnapshotReply
from services.projector.snapshot import MANIFEST, restore_snapshot, valid_snapshot
from tests.harness import start_stack

pytestmark = pytest.mark.anyio


def test_sparse_copy_keeps_holes_and_bytes(tmp_path: Path) -> None:
    from mneme.sparse import copy_sparse

    src, dst = tmp_path / "src", tmp_path / "dst"
    with src.open("wb") as f:
        f.write(b"head")
        f.seek(64 << 20)
        f.write(b"\0" * (1 << 20))  # written zeros: skipped too
        f.write(b"tail")
    copy_sparse(src, dst)
    assert dst.read_bytes() == src.read_bytes()
    assert dst.stat().st_blocks * 512 < 1 << 20


async def test_a_snapshot_of_a_small_store_is_sparse_on_disk(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    stack = await start_stack(tmp_path / "data", nats_server, vectors=True, replayable=True)
    try:
        for i in range(5):
            await stack.call("memory_add", content=f"sparse fact {i}")
        head = await stack.last_seq()
        assert await stack.projector.follower.wait_for(head, 20, committed=True)
        summary = await stack.projector.snapshot()
    finally:
        await stack.close()
    # the summary is exactly what the control plane's typed reply carries (schemas/control.py)
    assert msgspec.structs.asdict(SnapshotReply(ok=True, **summary)) == {"ok": True, "error": None, **summary}
    snap = tmp_path / "data" / "snapshots" / f"snap-{summary['seq']:012d}"
    files = [p for p in snap.rglob("*") if p.is_file() and p.name != MANIFEST]
    dense = sum(p.stat().st_size for p in files)
    on_disk = sum(p.stat().st_blocks * 512 for p in files)
    assert dense > 100 << 20, "the Edge shard preallocates (the test would prove nothing otherwise)"
    assert on_disk < dense // 20, (on_disk, dense)
    assert summary["path"] == str(snap)
    assert (summary["files"], summary["bytes"], summary["disk_bytes"]) == (len(files), dense, on_disk)
    assert "T" in summary["created_at"] and summary["created_at"].endswith("+00:00")
    manifest = valid_snapshot(snap)
    assert manifest is not None and set(manifest["files"]) == {str(p.relative_to(snap)) for p in files}
    # restoring it for a replay is sparse too, and byte-identical
    restore_snapshot(snap, manifest, tmp_path / "gen", "projector.duckdb")
    restored = [p for p in (tmp_path / "gen").rglob("*") if p.is_file()]
    assert sum(p.stat().st_blocks * 512 for p in restored) < dense // 20
    shard = next(p for p in files if p.stat().st_size > 1 << 20)
    copy = tmp_path / "gen" / shard.relative_to(snap)
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == manifest["files"][str(shard.relative_to(snap))]
