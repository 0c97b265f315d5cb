"""Answers to the memory queries, from the projection (invariant 2): point reads from staged state
and DuckDB, everything else from DuckDB's committed rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb
import msgspec

from mneme.domain.state import MemoryState
from mneme.domain.validation import categories_of
from mneme.duck import first_row, rollback
from schemas.queries import (
    AsOf,
    AsOfResolved,
    CategoriesResult,
    CategoryCount,
    ExpiredMemories,
    GetMemory,
    GetResult,
    HistoryResult,
    ListMemories,
    ListResult,
    MemoryHistory,
    MemoryRow,
    MemoryStats,
    PathOwner,
    PathOwnerResult,
    ReindexCategories,
    ReindexResult,
    StatsResult,
    StoreCategories,
    VersionDetail,
    VersionInfo,
)
from services.projector.memories_view import (
    N_STATE,
    STATE_COLUMNS,
    VERSION_COLUMNS,
    VERSION_STATE_COLUMNS,
    MemoriesView,
    one_row,
    row_state,
)

_COLS = ", ".join("m." + c.strip() for c in STATE_COLUMNS.split(","))


def source(as_of: AsOfResolved | None) -> str:
    """The memories table now, or as it stood right after sequence `as_of.seq`: the versions whose record
    interval [seq, seq_to) contains it, deletions excluded. An indexed-and-zonemapped scan, not a log read."""
    if as_of is None:
        return "memories"
    x = int(as_of.seq)
    return (
        f"(SELECT {VERSION_STATE_COLUMNS} FROM memory_versions WHERE seq <= {x} "
        f"AND (seq_to IS NULL OR seq_to > {x}) AND NOT deleted)"
    )


def _select(as_of: AsOfResolved | None) -> str:
    return (
        f"SELECT {_COLS}, a.accessed_at, coalesce(a.access_count, 0) FROM {source(as_of)} m "
        "LEFT JOIN access_stats a ON a.id = m.id"
    )


_SELECT = _select(None)


def resolve_as_of(view: MemoriesView, as_of: AsOf | None) -> AsOfResolved | None:
    """A sequence, or a time -> the newest sequence recorded at or before it (0: before the first event). Both
    (an audited read asked again): that sequence, with expiry judged at that time, as the read judged it."""
    if as_of is None:
        return None
    if as_of.seq is not None and as_of.time is not None:
        return AsOfResolved(seq=as_of.seq, time=as_of.time)
    cur = view.reader()
    if as_of.seq is not None:
        r = first_row(cur.execute("SELECT max(recorded_at) FROM memory_versions WHERE seq <= ?", [as_of.seq]))
        return AsOfResolved(seq=as_of.seq, time=r[0] if r else None)
    r = one_row(
        cur,
        "SELECT coalesce(max(seq), 0) FROM (SELECT seq, recorded_at FROM memory_versions "
        "UNION ALL SELECT seq, recorded_at FROM graph_entities UNION ALL SELECT seq, recorded_at FROM graph_relations) "
        "WHERE recorded_at <= ?",
        [as_of.time],
    )
    return AsOfResolved(seq=int(r[0]), time=as_of.time)


def version_row_state(v: tuple[Any, ...]) -> MemoryState:
    """A memory_versions row (VERSION_COLUMNS order) as the state it recorded."""
    return row_state((v[0], *v[8:21], v[1], *v[21:28], v[2], *v[28:34]))


_SORT = {
    "created_at": "m.created_at",
    "updated_at": "m.updated_at",
    "accessed_at": "a.accessed_at",
    "importance": "m.importance",
    "access_count": "coalesce(a.access_count, 0)",
}


def _row(r: tuple[Any, ...], past: bool = False) -> MemoryRow:
    """A row as a memory with its access statistics; a past read (as_of) carries none: statistics are folded
    from read records as they are now, and today's count is no answer to 'what did it look like then'."""
    if past:
        return MemoryRow(memory=row_state(r[:N_STATE]), accessed_at=None, access_count=None)
    return MemoryRow(memory=row_state(r[:N_STATE]), accessed_at=r[N_STATE], access_count=r[N_STATE + 1])


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
    return version_row_state(rows[0])


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


def _get_as_of(view: MemoriesView, q: GetMemory) -> GetResult:
    at = resolve_as_of(view, q.as_of)
    assert at is not None
    where = ["m.namespace = ?"]
    args: list[Any] = [q.namespace]
    if q.memory_id is not None:
        where.append("m.id = ?")
        args.append(q.memory_id)
    else:
        where += ["m.store = ?", "m.path = ?"]
        args += [q.store, q.path]
    if not q.include_expired and at.time is not None:
        where.append("(m.expires_at IS NULL OR m.expires_at > ?)")
        args.append(at.time)
    r = first_row(view.reader().execute(f"{_select(at)} WHERE {' AND '.join(where)}", args))
    if r is None:
        return GetResult(item=None, as_of=at)
    row = _row(r, past=True)
    history = []
    if q.history:
        versions = (
            view.reader()
            .execute(
                "SELECT version, seq, recorded_at, event_type, request_id, agent_id, deleted FROM memory_versions "
                "WHERE id = ? AND seq <= ? ORDER BY version DESC LIMIT ?",
                [row.memory.id, at.seq, q.history],
            )
            .fetchall()
        )
        history = [
            VersionInfo(
                version=v[0], seq=v[1], recorded_at=v[2], event_type=v[3], request_id=v[4], agent_id=v[5], deleted=v[6]
            )
            for v in versions
        ]
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
                state=version_row_state(r),
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
    cur = view.reader()
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
    r = first_row(cur.execute(f"{_SELECT} WHERE {' AND '.join(where)}", args))
    if r is None or (q.memory_id is None and view.staged_state(r[0])[0]):
        return GetResult(item=None)  # (by path) the committed holder has since moved away or gone
    row = _row(r)
    if epoch is not None:  # what it read, for the next point read (refused if a commit ran meanwhile)
        view.known.offer(row.memory.id, row.memory, epoch)
        view.known_access.offer(row.memory.id, (row.accessed_at, row.access_count or 0), epoch_access)
    return GetResult(item=row)


def _filters(q: ListMemories, then: Any = None) -> tuple[list[str], list[Any]]:
    where = ["m.namespace = ?"]
    args: list[Any] = [q.namespace]
    if q.store is not None:
        where.append("m.store = ?")
        args.append(q.store)
    if q.category_path is not None:
        prefix = q.category_path + "/" if q.category_path else ""  # "": the store's root
        where.append("starts_with(m.path, ?)")
        args.append(prefix)
        if not q.recursive:
            where.append("NOT contains(substr(m.path, ?), '/')")
            args.append(len(prefix) + 1)
    for col, val in (("kind", q.kind), ("category", q.category)):
        if val is not None:
            where.append(f"m.{col} = ?")
            args.append(val)
    for kinds, op in ((q.kinds, "IN"), (q.kinds_not, "NOT IN")):
        if kinds:
            where.append(f"m.kind {op} ({', '.join('?' * len(kinds))})")
            args.extend(kinds)
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
        args.append(then or q.now)
    if q.valid_at is not None:  # valid time: from inclusive, until exclusive
        where.append("(m.valid_from IS NULL OR m.valid_from <= ?) AND (m.valid_until IS NULL OR m.valid_until > ?)")
        args += [q.valid_at, q.valid_at]
    if q.created_by is not None:
        where.append("m.created_by = ?")
        args.append(q.created_by)
    if q.ids is not None:
        where.append("list_contains(?, m.id)")
        args.append(list(q.ids))
    return where, args


def list_(view: MemoriesView, q: ListMemories) -> ListResult:
    cur = view.reader()
    at = resolve_as_of(view, q.as_of)
    where, args = _filters(q, at.time if at is not None else None)
    key = (
        "coalesce(a.accessed_at, m.created_at)"
        if q.sort_by == "accessed_at" and q.unread_as_created
        else _SORT[q.sort_by]
    )
    order = f"{key} {q.sort_order.upper()} NULLS LAST, m.id"
    sql = f"{_select(at)} WHERE {' AND '.join(where)} ORDER BY {order} LIMIT ? OFFSET ?"
    rows = cur.execute(sql, [*args, q.limit, q.offset]).fetchall()
    if q.offset == 0 and len(rows) < q.limit:
        total = len(rows)
    else:
        total = one_row(
            cur,
            f"SELECT count(*) FROM {source(at)} m LEFT JOIN access_stats a ON a.id = m.id WHERE {' AND '.join(where)}",
            args,
        )[0]
    return ListResult(items=[_row(r, past=at is not None) for r in rows], total=total, as_of=at)


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


def _counts(cur: duckdb.DuckDBPyConnection, expr: str, scope: str, args: list[Any], src: str) -> dict[str, int]:
    rows = cur.execute(
        f"SELECT {expr} AS k, count(*) FROM {src} m WHERE {scope} AND m.status <> 'archived' GROUP BY k ORDER BY k",
        args,
    ).fetchall()
    return {str(k) if k is not None else "(none)": n for k, n in rows}


def stats(view: MemoriesView, q: MemoryStats) -> StatsResult:
    cur = view.reader()
    at = resolve_as_of(view, q.as_of)
    src = source(at)
    now = at.time if at is not None and at.time is not None else q.now
    upto = f" AND created_seq <= {int(at.seq)}" if at is not None else ""
    scope = "m.namespace = ?" + (" AND m.store = ?" if q.store is not None else "")
    args: list[Any] = [q.namespace] + ([q.store] if q.store is not None else [])
    if q.subject is not None:  # normalized as ListMemories does
        scope += " AND lower(m.subject) = lower(?)"
        args.append(" ".join(q.subject.split()))
    total, active, archived, deprecated, expired_n, oldest, newest, size = one_row(
        cur,
        "SELECT count(*), count(*) FILTER (m.status = 'active'), count(*) FILTER (m.status = 'archived'), "
        "count(*) FILTER (m.status = 'deprecated'), "
        "count(*) FILTER (m.expires_at IS NOT NULL AND m.expires_at <= ?), min(m.created_at), max(m.created_at), "
        f"coalesce(sum(strlen(m.content) + strlen(m.metadata)), 0) FROM {src} m WHERE {scope}",
        [now, *args],
    )
    importance = "CASE WHEN m.importance >= 0.7 THEN 'high' WHEN m.importance >= 0.4 THEN 'medium' ELSE 'low' END"
    tags = cur.execute(
        f"SELECT t, count(*) AS n FROM (SELECT unnest(m.tags) AS t FROM {src} m WHERE {scope} "
        "AND m.status <> 'archived') GROUP BY t ORDER BY n DESC, t LIMIT ?",
        [*args, q.top_tags],
    ).fetchall()
    most = (
        []
        if at is not None
        else cur.execute(  # statistics are not kept per moment (see _row)
            f"SELECT m.id, a.access_count FROM {src} m JOIN access_stats a ON a.id = m.id WHERE {scope} "
            "ORDER BY a.access_count DESC, m.id LIMIT 5",
            args,
        ).fetchall()
    )
    ns_store = [q.namespace] + ([q.store] if q.store is not None else [])
    stores_n = one_row(
        cur,
        "SELECT count(*) FROM stores WHERE namespace = ?" + (" AND name = ?" if q.store is not None else "") + upto,
        ns_store,
    )[0]
    cats_n = one_row(
        cur,
        "SELECT count(*) FROM categories WHERE namespace = ?"
        + (" AND store = ?" if q.store is not None else "")
        + upto,
        ns_store,
    )[0]
    return StatsResult(
        total=total,
        active=active,
        archived=archived,
        deprecated=deprecated,
        expired=expired_n,
        by_kind=_counts(cur, "m.kind", scope, args, src),
        by_importance=_counts(cur, importance, scope, args, src),
        by_category=_counts(cur, "m.category", scope, args, src),
        by_subject=_counts(cur, "lower(m.subject)", scope, args, src),
        subject_names=dict(
            cur.execute(
                f"SELECT lower(m.subject), arg_min(m.subject, m.created_at) FROM {src} m WHERE {scope} "
                "AND m.status <> 'archived' AND m.subject IS NOT NULL GROUP BY 1",
                args,
            ).fetchall()
        ),
        top_tags=[(t, n) for t, n in tags],
        most_accessed=[(i, n) for i, n in most],
        oldest=oldest,
        newest=newest,
        stores=stores_n,
        categories=cats_n,
        content_bytes=int(size),
        as_of=at,
    )


def categories(view: MemoriesView, q: StoreCategories) -> CategoriesResult:
    """The direct subcategories of `q.parent` in the store's category index, with their live memory counts."""
    cur = view.reader()
    if q.parent:
        matches = one_row(
            cur,
            "SELECT count(*) FROM categories WHERE namespace = ? AND store = ? AND path = ?",
            [q.namespace, q.store, q.parent],
        )[0]
        exists = matches > 0
        child = "starts_with(c.path, ?) AND NOT contains(substr(c.path, ?), '/')"
        child_args: list[Any] = [q.parent + "/", len(q.parent) + 2]
    else:
        exists, child, child_args = True, "NOT contains(c.path, '/')", []
    live = "m.status <> 'archived'" + ("" if q.include_expired else " AND (m.expires_at IS NULL OR m.expires_at > ?)")
    rows = cur.execute(
        f"SELECT c.path, count(m.id) FROM categories c LEFT JOIN memories m ON m.namespace = c.namespace "
        f"AND m.store = c.store AND starts_with(m.path, c.path || '/') AND {live} "
        f"WHERE c.namespace = ? AND c.store = ? AND {child} GROUP BY c.path ORDER BY c.path",
        [*([] if q.include_expired else [q.now]), q.namespace, q.store, *child_args],
    ).fetchall()
    return CategoriesResult(exists=exists, categories=[CategoryCount(path=p, memory_count=n) for p, n in rows])


def reindex_categories(view: MemoriesView, q: ReindexCategories) -> ReindexResult:
    """Rebuild the store's category rows as the fold writes them (services/projector/memories_view.py): every
    category of every path a memory of the store held, created at the first sequence that put one there.
    Call with the view's commits held (service.py): the rebuild is its own transaction."""
    cur = view.reader()
    cur.execute("BEGIN TRANSACTION")
    try:
        want: dict[str, int] = {}
        for path, seq in cur.execute(
            "SELECT path, min(seq) FROM memory_versions WHERE namespace = ? AND store = ? AND path IS NOT NULL "
            "AND NOT deleted GROUP BY path",
            [q.namespace, q.store],
        ).fetchall():
            for c in categories_of(path):
                want[c] = min(want.get(c, seq), seq)
        have = dict(
            cur.execute(
                "SELECT path, created_seq FROM categories WHERE namespace = ? AND store = ?", [q.namespace, q.store]
            ).fetchall()
        )
        stale = [p for p, seq in have.items() if want.get(p) != seq]
        missing = [p for p, seq in want.items() if have.get(p) != seq]
        if stale:
            cur.execute(
                "DELETE FROM categories WHERE namespace = ? AND store = ? AND path IN (SELECT unnest(?))",
                [q.namespace, q.store, stale],
            )
        if missing:
            cur.execute(
                "INSERT INTO categories SELECT ?, ?, unnest(?), unnest(?)",
                [q.namespace, q.store, missing, [want[p] for p in missing]],
            )
        memories = one_row(
            cur,
            "SELECT count(*) FROM memories WHERE namespace = ? AND store = ? AND status <> 'archived'",
            [q.namespace, q.store],
        )[0]
        cur.execute("COMMIT")
    except BaseException:
        rollback(cur)
        raise
    return ReindexResult(
        categories=len(want), added=len(missing), removed=len([p for p in stale if p not in want]), memories=memories
    )


# Answered from staged state: they do not wait for a commit.
STAGED_READS = frozenset({GetMemory, PathOwner})  # (a get with as_of waits for the commit: see service.py)

# query type -> its answer (each handler takes its own query type)
HANDLERS: dict[type[msgspec.Struct], Callable[[MemoriesView, Any], Any]] = {
    GetMemory: get,
    ListMemories: list_,
    ExpiredMemories: expired,
    PathOwner: path_owner,
    MemoryStats: stats,
    MemoryHistory: history,
    StoreCategories: categories,
    ReindexCategories: reindex_categories,
}
