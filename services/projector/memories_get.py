"""Point reads of one memory (services/projector/memories_queries.py): by id or by path, now, at a version or
as of a past position, with its recent history; its every version (history); and who holds a path now (the
gateway's path-uniqueness guard). Now-reads take staged state first (read-your-writes without waiting for a
commit), then committed states the view knows, then DuckDB; `get_known` answers from memory alone.
"""

from __future__ import annotations

from typing import Any

from mneme.domain.state import MemoryState
from mneme.duck import first_row
from schemas.queries import (
    GetMemory,
    GetResult,
    HistoryResult,
    MemoryHistory,
    MemoryRow,
    PathOwner,
    PathOwnerResult,
    VersionDetail,
    VersionInfo,
)
from services.projector.duck_sql import one_row
from services.projector.memories_rows import version_state
from services.projector.memories_schema import VERSION_COLUMNS
from services.projector.memories_sql import SELECT, resolve_as_of, select, to_memory_row
from services.projector.memories_view import MemoriesView


def _access(view: MemoriesView, memory_id: str) -> tuple[Any, int]:
    hit, epoch = view.known_access.lookup(memory_id)
    if hit is not None:
        return hit
    r = first_row(view.reader().execute("SELECT accessed_at, access_count FROM access_stats WHERE id = ?", [memory_id]))
    stats = (r[0], r[1]) if r else (None, 0)
    view.known_access.offer(memory_id, stats, epoch)
    return stats


def _visible(s: MemoryState | None, q: GetMemory) -> bool:
    return s is not None and s.namespace == q.namespace and (q.include_expired or not s.is_expired(q.now))


def _history(view: MemoriesView, memory_id: str, newest: int) -> list[VersionInfo]:
    return _infos(view.recent_versions(memory_id, newest))


def _infos(summaries: list[tuple[Any, ...]]) -> list[VersionInfo]:
    """Version summaries (id, version, seq, recorded_at, event_type, request_id, agent_id, deleted)."""
    return [
        VersionInfo(
            version=r[1], seq=r[2], recorded_at=r[3], event_type=r[4], request_id=r[5], agent_id=r[6], deleted=r[7]
        )
        for r in summaries
    ]


def _version_state(view: MemoriesView, current: MemoryState, version: int) -> MemoryState | None:
    """The memory as it was at `version` (None if there is no such version, or it was the deletion)."""
    rows = view.reader().execute(
        f"SELECT {VERSION_COLUMNS} FROM memory_versions WHERE id = ? AND version = ?", [current.id, version]
    ).fetchall() or [r for r in view.staged_versions(current.id) if r[1] == version]
    if not rows or rows[0][7]:
        return None
    return version_state(rows[0])


def get_known(view: MemoriesView, q: GetMemory) -> GetResult | None:
    """`get` of the current version by id answered from memory alone (a staged or known state, known access
    statistics, cached history), cheap enough for the event loop; None when it needs DuckDB."""
    if q.as_of is not None or q.memory_id is None:
        return None
    known = view.known_now(q.memory_id, q.history)
    if known is None:
        return None
    state, recent = known
    if not _visible(state, q):
        return GetResult(item=None)
    assert state is not None
    if q.version is not None and q.version != state.version:
        return None
    stats = view.known_access.lookup(state.id)[0]
    if stats is None:
        return None
    return GetResult(item=MemoryRow(memory=state, accessed_at=stats[0], access_count=stats[1]), history=_infos(recent))


def get(view: MemoriesView, q: GetMemory) -> GetResult:
    """The memory (a given version of it, on request) with its recent history."""
    if q.as_of is not None:
        return _get_as_of(view, q)
    found = _get_current(view, q)
    if found.item is None or (q.version is None and not q.history):
        return found
    row = found.item
    history = _history(view, row.memory.id, q.history) if q.history else []
    if q.version is not None and q.version != row.memory.version:
        past = _version_state(view, row.memory, q.version)
        if past is None:
            return GetResult(item=None)
        row = MemoryRow(memory=past, accessed_at=row.accessed_at, access_count=row.access_count)
    return GetResult(item=row, history=history)


def _where_one(q: GetMemory, then: Any) -> tuple[str, list[Any]]:
    """The WHERE clause of a point read: the memory by id, else by (store, path), in the namespace; unexpired
    at `then` unless expired ones are asked for too (or `then` is None)."""
    where = ["m.namespace = ?"]
    args: list[Any] = [q.namespace]
    if q.memory_id is not None:
        where.append("m.id = ?")
        args.append(q.memory_id)
    else:
        where += ["m.store = ?", "m.path = ?"]
        args += [q.store, q.path]
    if not q.include_expired and then is not None:
        where.append("(m.expires_at IS NULL OR m.expires_at > ?)")
        args.append(then)
    return " AND ".join(where), args


def _get_as_of(view: MemoriesView, q: GetMemory) -> GetResult:
    at = resolve_as_of(view, q.as_of)
    assert at is not None
    where, args = _where_one(q, at.time)
    r = first_row(view.reader().execute(f"{select(at)} WHERE {where}", args))
    if r is None:
        return GetResult(item=None, as_of=at)
    row = to_memory_row(r, past=True)
    history = []
    if q.history:
        versions = view.reader().execute(
            "SELECT id, version, seq, recorded_at, event_type, request_id, agent_id, deleted FROM memory_versions "
            "WHERE id = ? AND seq <= ? ORDER BY version DESC LIMIT ?",
            [row.memory.id, at.seq, q.history],
        )
        history = _infos(versions.fetchall())
    return GetResult(item=row, history=history, as_of=at)


def history(view: MemoriesView, q: MemoryHistory) -> HistoryResult:
    where = "id = ? AND namespace = ?" + (" AND version IN (SELECT unnest(?))" if q.versions else "")
    args: list[Any] = [q.memory_id, q.namespace] + ([list(q.versions)] if q.versions else [])
    cur = view.reader()
    total = one_row(cur, f"SELECT count(*) FROM memory_versions WHERE {where}", args)[0]
    rows = cur.execute(
        f"SELECT {VERSION_COLUMNS} FROM memory_versions WHERE {where} ORDER BY version LIMIT ? OFFSET ?",
        [*args, q.limit, q.offset],
    ).fetchall()
    return HistoryResult(
        total=total,
        versions=[
            VersionDetail(
                version=r[1],
                seq=r[2],
                seq_to=r[34],
                recorded_at=r[3],
                event_type=r[4],
                request_id=r[5],
                agent_id=r[6],
                deleted=r[7],
                state=version_state(r),
            )
            for r in rows
        ],
    )


def _get_current(view: MemoriesView, q: GetMemory) -> GetResult:
    """Staged state first (read-your-writes without waiting for a commit), then a committed state the view
    knows (by id), then DuckDB. A commit moves a state from the overlay to the known states in one step."""
    epoch = epoch_access = None
    if q.memory_id is not None:
        hit, state = view.staged_state(q.memory_id)
        if not hit:
            state, epoch = view.known.lookup(q.memory_id)
            hit = state is not None
    else:
        assert q.store is not None and q.path is not None
        staged_id = view.staged_path(q.namespace, q.store, q.path)
        hit, state = view.staged_state(staged_id) if staged_id else (False, None)
    if hit:
        if not _visible(state, q):
            return GetResult(item=None)
        assert state is not None
        accessed_at, count = _access(view, state.id)
        return GetResult(item=MemoryRow(memory=state, accessed_at=accessed_at, access_count=count))
    if epoch is not None:
        _, epoch_access = view.known_access.lookup(q.memory_id)  # type: ignore[arg-type]
    where, args = _where_one(q, q.now)
    r = first_row(view.reader().execute(f"{SELECT} WHERE {where}", args))
    if r is None or (q.memory_id is None and view.staged_state(r[0])[0]):
        return GetResult(item=None)  # (by path) the committed holder has since moved away or gone
    row = to_memory_row(r)
    if epoch is not None:  # what it read, for the next point read (refused if a commit ran meanwhile)
        view.known.offer(row.memory.id, row.memory, epoch)
        view.known_access.offer(row.memory.id, (row.accessed_at, row.access_count or 0), epoch_access)
    return GetResult(item=row)


def path_owner(view: MemoriesView, q: PathOwner) -> PathOwnerResult:
    r = one_row(
        view.reader(),
        "SELECT (SELECT id FROM memories WHERE namespace = ? AND store = ? AND path = ?), "
        "(SELECT last_seq FROM stores WHERE namespace = ? AND name = ?)",
        [q.namespace, q.store, q.path, q.namespace, q.store],
    )
    owner = view.staged_path(q.namespace, q.store, q.path)
    if owner is None and r[0] is not None and not view.staged_state(r[0])[0]:
        owner = r[0]  # the committed holder, unless it moved away or went since the commit
    return PathOwnerResult(memory_id=owner, store_seq=max(r[1] or 0, view.staged_store_seq(q.namespace, q.store)))
