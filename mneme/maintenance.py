"""`mneme rebuild` and `mneme snapshot`: operator commands on one data directory's read models.

Both act on data that exists: neither creates a store in a directory that holds none, and
`rebuild` refuses to replace a projection file another process holds (it holds the file
itself while it folds, so no projector opens it meanwhile).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import duckdb
import msgspec
import nats.errors

from mneme.preflight import Refused, held_message, holder, require_directory, require_log, serve_url
from mneme.runtime import (
    checked,
    control_id,
    nats_connection,
    open_vectors,
    open_view,
    projection_dir,
    serving_settings,
)
from mneme.settings import CoreSettings, ProjectorSettings
from schemas import control
from schemas import subjects as S
from schemas.control import SnapshotReply, SnapshotRequest
from services.projector.memories_view import MemoriesView
from services.projector.service import Projector, catch_up


def hold(path: Path, core: CoreSettings) -> duckdb.DuckDBPyConnection | None:
    """A read-only connection on the projection file about to be replaced: Refused if a process holds it.
    While it is open, no projector can open the file either. None if there is no (readable) file."""
    if not path.exists():
        return None
    try:
        return duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        who = holder(exc)
        if who is not None:
            raise Refused(held_message(path, who, core) + "; `mneme replay` rebuilds beside a running server") from None
        return None  # damaged or not DuckDB at all: replacing it is what a rebuild is for


async def rebuild(
    core: CoreSettings,
    ps: ProjectorSettings,
    *,
    output: Path | None = None,
    progress: Callable[[int, int, float], None] | None = None,
) -> dict[str, object]:
    """Fold the whole log into a fresh DuckDB file, then swap it in (or write it to `output`).

    Refused while a process holds the file (DuckDB allows one process per file).
    """
    require_log(core)  # never start an embedded server (and create a store) in a directory without one
    target_path = output or projection_dir(core) / ps.db_name
    guard = hold(target_path, core)
    tmp = Path(str(target_path) + ".rebuild")
    try:
        tmp.parent.mkdir(parents=True, exist_ok=True)
        for f in (tmp, Path(str(tmp) + ".wal")):
            f.unlink(missing_ok=True)
        async with nats_connection(core, "mneme-rebuild", stack_embedded=True) as nc:
            view = MemoriesView(str(tmp))
            proj = Projector(nc, view, batch_max=ps.batch_max)
            loop = asyncio.get_running_loop()
            started = loop.time()
            await proj.start(serve_queries=False)
            target = await catch_up(proj, progress=progress)
            seconds = loop.time() - started
            await proj.stop()
            digest = view.canonical_digest()
            view.con.execute("CHECKPOINT")
            view.close()
    except BaseException:
        for f in (tmp, Path(str(tmp) + ".wal")):
            f.unlink(missing_ok=True)
        raise
    finally:
        if guard is not None:
            guard.close()
    Path(str(target_path) + ".wal").unlink(missing_ok=True)
    tmp.replace(target_path)
    return {
        "events": target,
        "seconds": round(seconds, 3),
        "events_per_s": round(target / seconds, 1) if seconds else None,
        "path": str(target_path),
        "digest": digest,
    }


async def snapshot(core: CoreSettings, ps: ProjectorSettings) -> dict[str, object]:
    """Ask the projector running on this data directory for a snapshot; with none running, take it from the
    files at rest. Returns a summary (the per-file hashes stay in the snapshot's manifest)."""
    from services.projector.snapshot import write_snapshot

    if core.nats_url is not None or serve_url(core) is not None:
        async with nats_connection(core, "mneme-snapshot", stack_embedded="attach") as nc:
            try:
                msg = await nc.request(
                    S.control_subject(control_id(core), "snapshot"), control.encode(SnapshotRequest()), timeout=600
                )
                reply = control.decode_as(msg.data, SnapshotReply)
                fields = msgspec.structs.asdict(reply)
                del fields["ok"]
                if reply.ok:  # a snapshot taken: its summary, as the files-at-rest path prints it
                    del fields["error"]
                else:  # a failure says why, without the summary's empty fields
                    fields = {k: v for k, v in fields.items() if v is not None}
                return {"ok": reply.ok, "live": True, **fields}
            except nats.errors.NoRespondersError:
                pass
    require_directory(core)
    ps = checked(serving_settings(core, ps))
    base = projection_dir(core)
    db = base / ps.db_name
    if not db.is_file():
        raise Refused(
            f"{core.data_dir} holds no read models to snapshot (no {ps.db_name}) and no projector "
            "runs on it: check --data-dir"
        )
    try:
        view = open_view(core, ps)
    except duckdb.Error as exc:
        who = holder(exc)
        if who is None:
            raise
        raise Refused(held_message(db, who, core)) from None
    vectors = (
        open_vectors(core, ps) if (base / f"vectors-{ps.embedding_model}").is_dir() or ps.vectors != "edge" else None
    )
    try:
        return {"ok": True, "live": False, **write_snapshot(view, vectors, core.data_dir / "snapshots")}
    finally:
        view.close()
        if vectors is not None:
            vectors.close()
