"""Questions to the trail: who touched memory X, what did agent Y do between T1 and T2, exports, and pages of
its records with their hashes (`mneme audit verify|export` beside the process that holds the trail)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from mneme.duck import first_row
from schemas.control import TrailRecord, TrailRequest
from schemas.queries import AuditQuery, AuditResult, AuditRow
from services.auditor.trail import COLUMNS, Trail

PAGE_MAX = 10_000


def _namespace_clause(patterns: tuple[str, ...]) -> tuple[str, list[Any]]:
    """Namespace patterns as the principals use them: exact, `base/*` (it and below), `*`."""
    ors, args = [], []
    for p in patterns:
        if p == "*":
            return "TRUE", []
        if p.endswith("/*"):
            ors.append("(namespace = ? OR starts_with(namespace, ?))")
            args += [p[:-2], p[:-1]]
        else:
            ors.append("namespace = ?")
            args.append(p)
    return "(" + " OR ".join(ors or ["FALSE"]) + ")", args


def _where(q: AuditQuery) -> tuple[str, list[Any]]:
    clause, args = _namespace_clause(q.namespaces or (q.namespace,))
    where = [clause]
    for cond, val in (
        ("list_contains(memory_ids, ?)", q.memory_id),
        ("agent_id = ?", q.agent_id),
        ("outcome = ?", q.outcome),
        ("starts_with(action, ?)", q.action),  # a prefix
        ("occurred_at >= ?", q.since),
        ("occurred_at < ?", q.until),
        ("trail_seq = ?", q.trail_seq),
    ):
        if val is not None:
            where.append(cond)
            args.append(val)
    return " AND ".join(where), args


def _count(cur: duckdb.DuckDBPyConnection, where: str, args: list[Any]) -> int:
    row = first_row(cur.execute(f"SELECT count(*) FROM audit_trail WHERE {where}", args))
    assert row is not None  # count(*) answers one row
    n: int = row[0]
    return n


def query(trail: Trail, q: AuditQuery) -> AuditResult:
    where, args = _where(q)
    cur = trail.con.cursor()
    total = _count(cur, where, args)
    fields = AuditRow.__struct_fields__  # (columns of the trail, all but the record id and the hashes)
    rows = cur.execute(
        f"SELECT {', '.join(fields)} FROM audit_trail WHERE {where} ORDER BY trail_seq LIMIT ? OFFSET ?",
        [*args, q.limit, q.offset],
    ).fetchall()
    records = [AuditRow(**dict(zip(fields, r, strict=True))) for r in rows]
    return AuditResult(records=records, total=total)


def _filtered(filters: dict[str, Any]) -> AuditQuery:
    """Every namespace's records, with the export's filters: agent_id, memory_id, action (prefix), since, until."""
    return AuditQuery(
        namespace="*",
        now=datetime.now(UTC),
        namespaces=("*",),
        agent_id=filters.get("agent_id"),
        memory_id=filters.get("memory_id"),
        action=filters.get("action"),
        since=filters.get("since"),
        until=filters.get("until"),
    )


def page(trail: Trail, req: TrailRequest) -> tuple[int, list[TrailRecord]]:
    """The trail's last committed record, and the records `req` asks for (after `after`, up to `upto` or that
    last one, matching its filters), oldest first, with their hashes."""
    head = trail.last_seq
    where, args = _where(_filtered({k: getattr(req, k) for k in ("agent_id", "memory_id", "action", "since", "until")}))
    upto = min(req.upto, head) if req.upto else head
    rows = (
        trail.con.cursor()
        .execute(
            f"SELECT {', '.join(COLUMNS)}, prev_hash, hash FROM audit_trail WHERE trail_seq > ? AND trail_seq <= ? "
            f"AND {where} ORDER BY trail_seq LIMIT ?",
            [req.after, upto, *args, max(1, min(req.limit, PAGE_MAX))],
        )
        .fetchall()
    )
    names = (*COLUMNS, "prev_hash", "hash")
    return head, [TrailRecord(**dict(zip(names, r, strict=True))) for r in rows]


def export(con: duckdb.DuckDBPyConnection, out: Path, fmt: str, filters: dict[str, Any]) -> int:
    """Write the matching records (with their hashes) as JSON Lines or Parquet. Returns the count.

    `filters`: agent_id, memory_id, action (prefix), since, until (datetimes): the audit query's filters.
    The file appears whole or not at all (written beside it, then renamed).
    """
    where, args = _where(_filtered(filters))
    cur = con.cursor()
    n = _count(cur, where, args)
    option = "(FORMAT PARQUET)" if fmt == "parquet" else "(FORMAT JSON)"
    tmp = out.with_name(f".{out.name}.partial")
    target = str(tmp).replace("'", "''")
    try:
        cur.execute(f"COPY (SELECT * FROM audit_trail WHERE {where} ORDER BY trail_seq) TO '{target}' {option}", args)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return n
