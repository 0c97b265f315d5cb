"""`mneme rebuild` and `mneme snapshot`: operator commands on one data directory's read models.

Both act on data that exists: neither creates a store in a directory that holds none. `rebuild` never
replaces a projection file another process holds: with nothing running it holds the file itself while it
folds (so no projector opens it meanwhile) and moves the new one over it; beside a running `mneme serve` (or a
`mneme projector` on the data directory, given its `--nats-url`), whose projector holds the file, it rebuilds
every read model from the whole log into a new generation through that server's NATS (no second nats-server)
and has the live projector swap it in, as `mneme replay` does (blue/green: reads and writes go on).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import duckdb
import msgspec
import nats.errors
from nats.aio.client import Client as NATS

from mneme.app import compose
from mneme.app.build import BuildFailed, build, head_of
from mneme.app.compose import checked, control_id, nats_connection, open_vectors, open_view
from mneme.app.generations import install, projection_dir, serving_settings
from mneme.app.preflight import Refused, held_message, holder, require_directory, require_log, serve_url
from mneme.app.settings import CoreSettings, ProjectorSettings
from schemas import control
from schemas import subjects as S
from schemas.control import SnapshotReply, SnapshotRequest


class Held(Refused):
    """The projection file is held by a running process."""


def hold(path: Path, core: CoreSettings) -> duckdb.DuckDBPyConnection | None:
    """A read-only connection on the projection file about to be replaced: Held if a process holds it.
    While it is open, no projector can open the file either. None if there is no (readable) file."""
    if not path.exists():
        return None
    try:
        return duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        who = holder(exc)
        if who is not None:
            raise Held(held_message(path, who, core)) from None
        return None  # damaged or not DuckDB at all: replacing it is what a rebuild is for


async def rebuild(
    core: CoreSettings,
    ps: ProjectorSettings,
    *,
    output: Path | None = None,
    progress: Callable[[int, int, float], None] | None = None,
    vectors: bool = False,
    nc: NATS | None = None,
) -> dict[str, object]:
    """Fold the whole log into fresh read models beside the serving ones, verify, then move them over the
    serving files (or write the DuckDB file to `output`). `mneme rebuild`: the DuckDB file only;
    `vectors` (`mneme projector --rebuild`): the vector shard too. The build is mneme.app.build's, as a replay's.

    While a process holds the serving file (DuckDB allows one process per file): beside a running serve (or
    with `--nats-url`), the blue/green rebuild (`rebuild_beside`); else refused. `nc`: a connection to the log
    to use (else one is made, starting the embedded server if the data directory's log needs one).
    """
    require_log(core)  # never start an embedded server (and create a store) in a directory without one
    serving = projection_dir(core)
    target_path = output or serving / ps.db_name
    try:
        guard = hold(target_path, core)
    except Held as held:
        if output is None and nc is None and (core.nats_url is not None or serve_url(core) is not None):
            return await rebuild_beside(core, ps, progress=progress)
        why = (
            "give --nats-url (its NATS) to rebuild beside it, or --output FILE"
            if output is None
            else "or another --output"
        )
        raise Refused(f"{held}; {why}") from None
    bps = ps if vectors and ps.vectors == "edge" else ps.model_copy(update={"vectors": "off"})
    work = target_path.parent / f".rebuild-{target_path.name}"
    try:
        async with contextlib.AsyncExitStack() as stack:
            if nc is None:
                nc = await stack.enter_async_context(nats_connection(core, "mneme-rebuild", stack_embedded="attach"))
            result = await build(
                core, bps, nc, work, target=await head_of(nc), resumable=False, use_snapshots=False, progress=progress
            )
        if not result["verify"]["ok"]:
            raise BuildFailed(result)
        if output is not None:
            Path(f"{output}.wal").unlink(missing_ok=True)
            os.replace(work / bps.db_name, output)
            installed = [output.name]
        else:
            installed = install(work, serving, bps)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if guard is not None:
            guard.close()
    return {
        "events": result["events"],
        "seconds": result["seconds"],
        "events_per_s": result["events_per_s"],
        "path": str(target_path),
        "digest": result["digest"],
        "installed": installed,
    }


async def rebuild_beside(
    core: CoreSettings, ps: ProjectorSettings, *, progress: Callable[[int, int, float], None] | None = None
) -> dict[str, object]:
    """`mneme rebuild` beside the running projector that holds the serving file: every read model of the serving
    generation's settings (its embedding model too; the embedding cache spares re-embedding unchanged content)
    folded from the whole log, no snapshot, nothing resumed, into a new generation, verified, swapped in by the
    live projector; the old generation is removed. The same report as at rest, with the swap."""
    from mneme.app.replay import replay

    out = await replay(core, serving_settings(core, ps), use_snapshots=False, fresh=True, progress=progress)
    db = Path(out["path"]) / ps.db_name
    return {
        "events": out["events"],
        "seconds": out["seconds"],
        "events_per_s": out["events_per_s"],
        "path": str(db),
        "digest": out["digest"],
        "installed": [Path(out["path"]).name],
        "swap": out["swap"],
        "removed": out["removed"],
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
        return {"ok": True, "live": False, **write_snapshot(view, vectors, compose.snapshot_dir(core, ps))}
    finally:
        view.close()
        if vectors is not None:
            vectors.close()
