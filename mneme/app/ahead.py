"""No read model ahead of the log: what a projector does when its read models hold events the log does not.

After a power cut with a lazy sync (MNEME_NATS_SYNC), or when an older copy of the log's store is put back,
the DuckDB file, the vector shard or the code index can hold positions the log lost, and the log then takes
new events under the same sequences. Each follower compares its sink's checkpoint (its sequence, and the mark of
the event it applied there) with the log when it starts and whenever its connection comes back
(LogFollower.check_log). A projector whose read models are ahead:

- at start: opens nothing for queries, rebuilds every read model from the log through the one rebuild path
  (mneme.app.maintenance.rebuild, what `mneme projector --rebuild` runs), then starts on the rebuilt files;
- while running: refuses every read at once (REBUILDING), stops its followers, rebuilds the same way, and
  answers again once the rebuilt files have caught up with the log.

Each rebuild is one ERROR log line and an entry in `mneme status` (the projector's `rebuilds`). The code index
is rebuilt (deleted, folded again) only when it is itself ahead. The audit trail is not rebuilt: it keeps
what it recorded as evidence (services/auditor/realign.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS

from mneme.app import compose
from mneme.app.settings import CoreSettings, ProjectorSettings
from services.projector.code_view import CodeView
from services.projector.generation import close_generation
from services.projector.memories_view import MemoriesView
from services.projector.service import Projector
from services.projector.vector_view import VectorView

log = logging.getLogger("mneme")


def open_read_models(
    core: CoreSettings, ps: ProjectorSettings, like: Projector | None = None
) -> tuple[MemoriesView, VectorView | None, CodeView | None]:
    """The serving generation's read models (with `like`'s embedding model and cache: loaded once)."""
    old = like.vectors if like is not None else None
    view = compose.open_view(core, ps)
    model, cache = (old.model, old.cache) if old is not None else (None, None)
    vectors = compose.open_vectors(core, ps, background=True, model=model, cache=cache)
    return view, vectors, compose.open_code(core, vectors)


def open_projector(
    core: CoreSettings, ps: ProjectorSettings, nc: NATS, log_nc: NATS | None, like: Projector | None = None
) -> Projector:
    """The serving generation's read models and a live projector on them (not started)."""
    view, vectors, code = open_read_models(core, ps, like)
    return compose.projector(nc, view, ps, vectors=vectors, live=core, log_nc=log_nc, code=code)


async def code_ahead(proj: Projector) -> bool:
    """Whether the code index itself is ahead of the log (it is rebuilt only then: its embeddings are dear)."""
    if proj.code is None:
        return False
    return await proj.follower.check_log(proj.code.positions()) is not None


async def rebuild(core: CoreSettings, ps: ProjectorSettings, nc: NATS, proj: Projector, why: str) -> dict[str, Any]:
    """Close `proj`'s read models (their followers stopped) and rebuild them from the log in place."""
    from mneme.app.maintenance import rebuild as rebuild_read_models

    log.error("read models ahead of the log (%s): rebuilding them from the log; no read is answered meanwhile", why)
    started = time.monotonic()
    redo_code = await code_ahead(proj)
    close_generation(proj.gen)
    if proj.code is not None:
        proj.code.close()
        if redo_code:
            for name in ("code.duckdb", "code.duckdb.wal"):
                Path(core.data_dir / name).unlink(missing_ok=True)
    done = await rebuild_read_models(core, ps, vectors=True, nc=nc)
    entry = {
        "at": datetime.now(UTC).isoformat(),
        "why": why,
        "events": done["events"],
        "code_index": "folded again" if redo_code else "kept",
        "seconds": round(time.monotonic() - started, 2),
    }
    log.warning("read models rebuilt from the log: %d events in %.1f s", done["events"], entry["seconds"])
    return entry


async def start_checked(
    stack: AsyncExitStack, core: CoreSettings, ps: ProjectorSettings, nc: NATS, log_nc: NATS | None
) -> Projector:
    """Open the serving read models, rebuild them first if they are ahead of the log, start the projector on
    them (stopped, then closed, when `stack` unwinds), and rebuild again if that is found while it runs."""
    proj = open_projector(core, ps, nc, log_nc)
    rebuilds: list[dict[str, Any]] = []
    if (why := await proj.check_log()) is not None:
        rebuilds.append(await rebuild(core, ps, nc, proj, why))
        proj = open_projector(core, ps, nc, log_nc, like=proj)
    proj.rebuilds = rebuilds
    stack.callback(lambda: proj.code.close() if proj.code is not None else None)
    stack.callback(lambda: close_generation(proj.gen))
    running: set[asyncio.Task[None]] = set()

    async def in_place(why: str) -> None:
        try:
            await proj.stop_generation()
            proj.rebuilds.append(await rebuild(core, ps, nc, proj, why))
            proj.reopen(*open_read_models(core, ps, like=proj))
            target = await proj.start_generation()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # reads stay refused (never answered from that state); a restart rebuilds
            proj.rebuilding = f"{why}; the rebuild failed ({type(exc).__name__}: {exc}): restart mneme"
            log.exception("rebuilding the read models failed; no read is answered until a restart")
            return
        await proj.serve_again_when_caught_up(target)

    def on_ahead(why: str) -> None:
        task = asyncio.create_task(in_place(why), name="projector-rebuild")
        running.add(task)
        task.add_done_callback(running.discard)

    async def cancel_rebuild() -> None:
        for task in list(running):
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    proj.on_ahead = on_ahead
    await proj.start()
    stack.push_async_callback(proj.stop)
    stack.push_async_callback(cancel_rebuild)
    return proj
