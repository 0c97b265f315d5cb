"""Listing memories (services/projector/memories_queries.py): a namespace's memories by the caller's filters
(store, category path, kind, subject, tags, importance, status, expiry, valid time, author, ids), sorted and
paged, now or as of a past position; and the memories whose expiry has passed.
"""

from __future__ import annotations

from typing import Any

from schemas.queries import ExpiredMemories, ListMemories, ListResult
from services.projector.duck_sql import one_row
from services.projector.memories_sql import SELECT, resolve_as_of, select, source, to_memory_row
from services.projector.memories_view import MemoriesView

_SORT = {
    "created_at": "m.created_at",
    "updated_at": "m.updated_at",
    "accessed_at": "a.accessed_at",
    "importance": "m.importance",
    "access_count": "coalesce(a.access_count, 0)",
}


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
    sql = f"{select(at)} WHERE {' AND '.join(where)} ORDER BY {order} LIMIT ? OFFSET ?"
    rows = cur.execute(sql, [*args, q.limit, q.offset]).fetchall()
    if q.offset == 0 and len(rows) < q.limit:
        total = len(rows)
    else:
        total = one_row(
            cur,
            f"SELECT count(*) FROM {source(at)} m LEFT JOIN access_stats a ON a.id = m.id WHERE {' AND '.join(where)}",
            args,
        )[0]
    return ListResult(items=[to_memory_row(r, past=at is not None) for r in rows], total=total, as_of=at)


def expired(view: MemoriesView, q: ExpiredMemories) -> ListResult:
    cur = view.reader()
    where = ["m.namespace = ?", "m.expires_at IS NOT NULL", "m.expires_at <= ?"]
    args: list[Any] = [q.namespace, q.now]
    if q.store is not None:
        where.append("m.store = ?")
        args.append(q.store)
    rows = cur.execute(f"{SELECT} WHERE {' AND '.join(where)} ORDER BY m.id LIMIT ?", [*args, q.limit]).fetchall()
    return ListResult(items=[to_memory_row(r) for r in rows], total=len(rows))
