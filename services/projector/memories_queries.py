"""Answers to the memory queries, from the projection (invariant 2): point reads from staged state
and DuckDB, everything else from DuckDB's committed rows."""

from __future__ import annotations

from typing import Any

import duckdb
import msgspec

from mneme.domain.state import MemoryState
from schemas.queries import (
    ExpiredMemories,
    GetMemory,
    GetResult,
    ListMemories,
    ListResult,
    MemoryRow,
    MemoryStats,
    PathOwner,
    PathOwnerResult,
    StatsResult,
    VersionInfo,
)
from services.projector.memories_view import N_STATE, STATE_COLUMNS, VERSION_COLUMNS, MemoriesView, row_state

_SELECT = (
    f"SELECT {', '.join('m.' + c.strip() for c in STATE_COLUMNS.split(','))}, a.accessed_at, "
    "coalesce(a.access_count, 0) FROM memories m LEFT JOIN access_stats a ON a.id = m.id"
)
_SORT = {
    "created_at": "m.created_at",
    "updated_at": "m.updated_at",
    "accessed_at": "a.accessed_at",
    "importance": "m.importance",
    "access_count": "coalesce(a.access_count, 0)",
}


def _row(r: tuple[Any, ...]) -> MemoryRow:
    return MemoryRow(memory=row_state(r[:N_STATE]), accessed_at=r[N_STATE], access_count=r[N_STATE + 1])


def _access(cur: duckdb.DuckDBPyConnection, memory_id: str) -> tuple[Any, int]:
    r = cur.execute("SELECT accessed_at, access_count FROM access_stats WHERE id = ?", [memory_id]).fetchone()
    return (r[0], r[1]) if r else (None, 0)


def _visible(s: MemoryState | None, q: GetMemory) -> bool:
    return s is not None and s.namespace == q.namespace and (q.include_expired or not s.is_expired(q.now))


def _history(view: MemoriesView, memory_id: str, newest: int) -> list[VersionInfo]:
    return [VersionInfo(version=r[1], seq=r[2], recorded_at=r[3], event_type=r[4], request_id=r[5], agent_id=r[6],
                        deleted=r[7]) for r in view.recent_versions(memory_id, newest)]  # fmt: skip


def _version_state(view: MemoriesView, current: MemoryState, version: int) -> MemoryState | None:
    """The memory as it was at `version` (None if there is no such version, or it was the deletion)."""
    rows = view.reader().execute(
        f"SELECT {VERSION_COLUMNS} FROM memory_versions WHERE id = ? AND version = ?", [current.id, version]
    ).fetchall() or [r for r in view.staged_versions(current.id) if r[1] == version]
    if not rows or rows[0][7]:
        return None
    r = rows[0]
    return MemoryState(
        id=r[0], namespace=r[8], store=r[9], path=r[10], content=r[11], kind=r[12], category=r[13], subject=r[14],
        tags=tuple(r[15]), importance=r[16], confidence=r[17], citations=tuple(r[18]),
        metadata=msgspec.json.decode(r[19]), status=r[20], version=r[1], created_at=current.created_at,
        updated_at=r[3], created_by=current.created_by, updated_by=r[6], expires_at=r[21], valid_from=r[22],
        valid_until=r[23], last_seq=r[2], verification=r[24], locked=r[25], status_reason=r[26], lock_reason=r[27],
    )  # fmt: skip


def get(view: MemoriesView, q: GetMemory) -> GetResult:
    """The memory (a given version of it, on request) with its recent history."""
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


def _get_current(view: MemoriesView, q: GetMemory) -> GetResult:
    """Staged state first (read-your-writes without waiting for a commit), then DuckDB."""
    cur = view.reader()
    if q.memory_id is not None:
        hit, state = view.staged_state(q.memory_id)
    else:
        assert q.store is not None and q.path is not None
        staged_id = view.staged_path(q.namespace, q.store, q.path)
        hit, state = view.staged_state(staged_id) if staged_id else (False, None)
    if hit:
        if not _visible(state, q):
            return GetResult(item=None)
        assert state is not None
        accessed_at, count = _access(cur, state.id)
        return GetResult(item=MemoryRow(memory=state, accessed_at=accessed_at, access_count=count))
    where = ["m.namespace = ?"]
    args: list[Any] = [q.namespace]
    if q.memory_id is not None:
        where.append("m.id = ?")
        args.append(q.memory_id)
    else:
        where += ["m.store = ?", "m.path = ?"]
        args += [q.store, q.path]
    if not q.include_expired:
        where.append("(m.expires_at IS NULL OR m.expires_at > ?)")
        args.append(q.now)
    r = cur.execute(f"{_SELECT} WHERE {' AND '.join(where)}", args).fetchone()
    if r is None or (q.memory_id is None and view.staged_state(r[0])[0]):
        return GetResult(item=None)  # (by path) the committed holder has since moved away or gone
    return GetResult(item=_row(r))


def _filters(q: ListMemories) -> tuple[list[str], list[Any]]:
    where = ["m.namespace = ?"]
    args: list[Any] = [q.namespace]
    if q.store is not None:
        where.append("m.store = ?")
        args.append(q.store)
    if q.category_path is not None:
        prefix = q.category_path + "/"
        where.append("starts_with(m.path, ?)")
        args.append(prefix)
        if not q.recursive:
            where.append("NOT contains(substr(m.path, ?), '/')")
            args.append(len(prefix) + 1)
    for col, val in (("kind", q.kind), ("category", q.category)):
        if val is not None:
            where.append(f"m.{col} = ?")
            args.append(val)
    if q.subject is not None:
        where.append("lower(m.subject) = lower(?)")
        args.append(" ".join(q.subject.split()))
    if q.tags:
        where.append("list_has_all(m.tags, ?)")
        args.append([t.strip().lower() for t in q.tags])
    if q.importance_min is not None:
        where.append("m.importance >= ?")
        args.append(q.importance_min)
    if q.importance_max is not None:
        where.append("m.importance <= ?")
        args.append(q.importance_max)
    if q.status == "live":
        where.append("m.status <> 'archived'")
    elif q.status != "any":
        where.append("m.status = ?")
        args.append(q.status)
    if not q.include_expired:
        where.append("(m.expires_at IS NULL OR m.expires_at > ?)")
        args.append(q.now)
    return where, args


def list_(view: MemoriesView, q: ListMemories) -> ListResult:
    cur = view.reader()
    where, args = _filters(q)
    order = f"{_SORT[q.sort_by]} {q.sort_order.upper()} NULLS LAST, m.id"
    sql = f"{_SELECT} WHERE {' AND '.join(where)} ORDER BY {order} LIMIT ? OFFSET ?"
    rows = cur.execute(sql, [*args, q.limit, q.offset]).fetchall()
    if q.offset == 0 and len(rows) < q.limit:
        total = len(rows)
    else:
        total = cur.execute(
            f"SELECT count(*) FROM memories m LEFT JOIN access_stats a ON a.id = m.id WHERE {' AND '.join(where)}",
            args,
        ).fetchone()[0]
    return ListResult(items=[_row(r) for r in rows], total=total)


def expired(view: MemoriesView, q: ExpiredMemories) -> ListResult:
    cur = view.reader()
    where = ["m.namespace = ?", "m.expires_at IS NOT NULL", "m.expires_at <= ?"]
    args: list[Any] = [q.namespace, q.now]
    if q.store is not None:
        where.append("m.store = ?")
        args.append(q.store)
    rows = cur.execute(f"{_SELECT} WHERE {' AND '.join(where)} ORDER BY m.id LIMIT ?", [*args, q.limit]).fetchall()
    return ListResult(items=[_row(r) for r in rows], total=len(rows))


def path_owner(view: MemoriesView, q: PathOwner) -> PathOwnerResult:
    r = view.reader().execute(
        "SELECT (SELECT id FROM memories WHERE namespace = ? AND store = ? AND path = ?), "
        "(SELECT last_seq FROM stores WHERE namespace = ? AND name = ?)",
        [q.namespace, q.store, q.path, q.namespace, q.store],
    ).fetchone()
    owner = view.staged_path(q.namespace, q.store, q.path)
    if owner is None and r[0] is not None and not view.staged_state(r[0])[0]:
        owner = r[0]  # the committed holder, unless it moved away or went since the commit
    return PathOwnerResult(memory_id=owner, store_seq=max(r[1] or 0, view.staged_store_seq(q.namespace, q.store)))


def _counts(cur: duckdb.DuckDBPyConnection, expr: str, scope: str, args: list[Any]) -> dict[str, int]:
    rows = cur.execute(
        f"SELECT {expr} AS k, count(*) FROM memories m WHERE {scope} AND m.status <> 'archived' GROUP BY k ORDER BY k",
        args,
    ).fetchall()
    return {str(k) if k is not None else "(none)": n for k, n in rows}


def stats(view: MemoriesView, q: MemoryStats) -> StatsResult:
    cur = view.reader()
    scope = "m.namespace = ?" + (" AND m.store = ?" if q.store is not None else "")
    args: list[Any] = [q.namespace] + ([q.store] if q.store is not None else [])
    total, active, archived, deprecated, expired_n, oldest, newest, size = cur.execute(
        "SELECT count(*), count(*) FILTER (m.status = 'active'), count(*) FILTER (m.status = 'archived'), "
        "count(*) FILTER (m.status = 'deprecated'), "
        "count(*) FILTER (m.expires_at IS NOT NULL AND m.expires_at <= ?), min(m.created_at), max(m.created_at), "
        f"coalesce(sum(octet_length(m.content::BLOB) + octet_length(m.metadata::BLOB)), 0) FROM memories m WHERE {scope}",
        [q.now, *args],
    ).fetchone()
    importance = (
        "CASE WHEN m.importance >= 0.7 THEN 'high' WHEN m.importance >= 0.4 THEN 'medium' ELSE 'low' END"
    )
    tags = cur.execute(
        f"SELECT t, count(*) AS n FROM (SELECT unnest(m.tags) AS t FROM memories m WHERE {scope} "
        "AND m.status <> 'archived') GROUP BY t ORDER BY n DESC, t LIMIT ?",
        [*args, q.top_tags],
    ).fetchall()
    most = cur.execute(
        f"SELECT m.id, a.access_count FROM memories m JOIN access_stats a ON a.id = m.id WHERE {scope} "
        "ORDER BY a.access_count DESC, m.id LIMIT 5",
        args,
    ).fetchall()
    ns_store = [q.namespace] + ([q.store] if q.store is not None else [])
    stores_n = cur.execute(
        "SELECT count(*) FROM stores WHERE namespace = ?" + (" AND name = ?" if q.store is not None else ""), ns_store
    ).fetchone()[0]
    cats_n = cur.execute(
        "SELECT count(*) FROM categories WHERE namespace = ?" + (" AND store = ?" if q.store is not None else ""),
        ns_store,
    ).fetchone()[0]
    return StatsResult(
        total=total,
        active=active,
        archived=archived,
        deprecated=deprecated,
        expired=expired_n,
        by_kind=_counts(cur, "m.kind", scope, args),
        by_importance=_counts(cur, importance, scope, args),
        by_category=_counts(cur, "m.category", scope, args),
        by_subject=_counts(cur, "lower(m.subject)", scope, args),
        top_tags=[(t, n) for t, n in tags],
        most_accessed=[(i, n) for i, n in most],
        oldest=oldest,
        newest=newest,
        stores=stores_n,
        categories=cats_n,
        content_bytes=int(size),
    )


# Answered from staged state: they do not wait for a commit.
STAGED_READS = frozenset({GetMemory, PathOwner})

HANDLERS = {
    GetMemory: get,
    ListMemories: list_,
    ExpiredMemories: expired,
    PathOwner: path_owner,
    MemoryStats: stats,
}
