"""Aggregates over a namespace's memories (services/projector/memories_queries.py): the stats (counts by
status, kind, importance, category and subject, top tags, the most read, sizes), now or as of a past position;
and a store's category index: its subcategories with their memory counts, and its rebuild from the versions.
"""

from __future__ import annotations

from typing import Any

import duckdb

from mneme.domain.validation import categories_of
from mneme.duck import rollback
from schemas.queries import (
    CategoriesResult,
    CategoryCount,
    MemoryStats,
    ReindexCategories,
    ReindexResult,
    StatsResult,
    StoreCategories,
)
from services.projector.duck_sql import one_row
from services.projector.memories_sql import resolve_as_of, source
from services.projector.memories_view import MemoriesView


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
