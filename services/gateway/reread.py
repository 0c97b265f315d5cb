"""What did this agent see? Recorded reads, and one of them asked again as it was answered.

The audit trail keeps one hash-chained row per read (who, which tool, which namespace, which request, the
ids it returned), and points at the read's full access record on MNEME_ACCESS (`source_seq`), which also
holds the log position the answer reflected, each returned memory's version (and score, for a search) and
the projector query whose answer was exactly what the tool returned (services/gateway/access_log.py).

`reread` asks that query again as of that position (`as_of` = the sequence, with expiry judged at the time
the read judged it), and sets its results beside the recorded ones (services/gateway/reread_answers.py):
ids, ranks, versions, scores with each signal (semantic cosine, raw BM25, graph), and the content as it was
then. Any difference is listed, and `match` is true only when the ids, their order and their versions are
the same; the access record is also checked against the trail row that chains it. A read that cannot be
asked again (it kept no query: a status, an answer built from several queries, a record older than the
query; its access record is gone) says so: `rerunnable` false with the `reason`, and no `match` (unless the
access record contradicts the trail row: that is a difference whatever the read). A mismatch means only
that what was recorded differs. Used by the `audit_reads` / `audit_reread` tools and by
`mneme audit reads|reread`, over the same NATS queries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec
import nats.js.errors
from msgspec import NODEFAULT
from nats.js import JetStreamContext
from pydantic import BaseModel, Field

from mneme.errors import InvalidInput, PermissionDenied
from schemas import subjects as S
from schemas.access import ReadRecorded, decode_access
from schemas.queries import (
    QUERY_TYPES,
    AuditQuery,
    AuditResult,
    AuditRow,
    HistoryResult,
    ListMemories,
    MemoryHistory,
    SearchMemories,
    SearchResult,
    StatsResult,
)
from services.gateway.models import AsOfInfo
from services.gateway.queries import QueryClient
from services.gateway.reread_answers import (
    RerunResult,
    again,
    answer,
    compare,
    compare_history,
    compare_stats,
    decoded,
    not_rerunnable,
)


class RecordedRead(BaseModel):
    trail_seq: int = Field(description="The read's record in the trail: audit_reread takes it.")
    operation: str
    at: datetime
    agent_id: str
    role: str
    namespace: str
    request_id: str
    seq: int | None = Field(None, description="The log position the answer reflected.")
    memory_ids: list[str]
    versions: list[int] | None = None
    arguments: dict[str, Any] | None = Field(None, description="The query asked; absent: it cannot be re-run.")


class ReadsPage(BaseModel):
    results: list[RecordedRead]
    total: int
    has_more: bool


class Reread(BaseModel):
    read: RecordedRead
    rerunnable: bool = Field(
        True, description="False: this read cannot be asked again (`reason` says why); it is then not judged."
    )
    reason: str | None = Field(None, description="Why it cannot be asked again.")
    as_of: AsOfInfo | None = None
    results: list[RerunResult]
    match: bool | None = Field(
        None,
        description="The same ids, in the same order, with the same versions (stats: the same figures). "
        "Absent when the read is not re-run; false also when its access record contradicts the trail.",
    )
    differences: list[str]
    score_drift: float | None = None
    model: str | None = None
    figures: dict[str, Any] | None = Field(None, description="A stats read: the figures, asked again as of then.")
    note: str | None = None


def readable(principal: Any) -> tuple[str, ...]:
    """Every namespace pattern a principal may read (its own, read-only ones, its organization's rules)."""
    p = principal
    return (*p.namespaces, *p.read_only, *([p.system_namespace] if p.system_namespace else []))


async def access_record(js: JetStreamContext, row: AuditRow) -> ReadRecorded | None:
    """The full access record a trail row chains (None: gone from the stream, or not a read)."""
    try:
        msg = await js.get_msg(S.ACCESS_STREAM, seq=row.source_seq)
        rec = decode_access(msg.data or b"")
    except (nats.js.errors.NotFoundError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    return rec if isinstance(rec, ReadRecorded) else None


KEPT = ("namespace", "now", "min_seq")


def _compact(operation: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The query's arguments a reader needs: where, when, and every one that is not the query's default."""
    query_type = QUERY_TYPES.get(operation)
    if query_type is None:
        return arguments
    fields = msgspec.structs.fields(query_type)
    defaults = msgspec.json.decode(
        msgspec.json.encode({f.name: f.default for f in fields if f.default is not NODEFAULT})
    )
    args = msgspec.json.decode(msgspec.json.encode(arguments))  # (tuples as lists, as the defaults)
    return {k: v for k, v in args.items() if k in KEPT or k not in defaults or v != defaults[k]}


def summary(row: AuditRow, rec: ReadRecorded | None) -> RecordedRead:
    """The trail row (the tamper-evident part), with what only the access record holds."""
    return RecordedRead(
        trail_seq=row.trail_seq,
        operation=row.action.removeprefix("read:"),
        at=row.occurred_at,
        agent_id=row.agent_id,
        role=row.role,
        namespace=row.namespace,
        request_id=row.request_id,
        seq=rec.seq if rec is not None else None,
        memory_ids=row.memory_ids,
        versions=list(rec.versions) if rec is not None and rec.versions else None,
        arguments=_compact(rec.query.operation, rec.query.arguments)
        if rec is not None and rec.query is not None
        else None,
    )


async def find_reads(
    queries: QueryClient,
    js: JetStreamContext,
    *,
    namespace: str,
    namespaces: tuple[str, ...],
    now: datetime,
    min_seq: int = 0,
    agent_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = 20,
    offset: int = 0,
) -> ReadsPage:
    """The reads recorded in the trail (of one agent, in a time window), oldest first."""
    got: AuditResult = await queries.ask(
        AuditQuery(
            namespace=namespace,
            now=now,
            min_seq=min_seq,
            namespaces=namespaces,
            agent_id=agent_id,
            action="read:",
            outcome="ok",
            since=since,
            until=until,
            limit=limit,
            offset=offset,
        )
    )
    recs = await asyncio.gather(*(access_record(js, r) for r in got.records))
    results = [summary(r, rec) for r, rec in zip(got.records, recs, strict=True)]
    return ReadsPage(results=results, total=got.total, has_more=offset + len(results) < got.total)


def _trail_differs(row: AuditRow, rec: ReadRecorded) -> list[str]:
    """The fields the trail chains, where the access record says otherwise."""
    pairs = {
        "operation": (row.action, f"read:{rec.operation}"),
        "agent_id": (row.agent_id, rec.agent_id),
        "role": (row.role, rec.role),
        "request_id": (row.request_id, rec.request_id),
        "namespace": (row.namespace, rec.namespace),
        "memory_ids": (list(row.memory_ids), list(rec.memory_ids)),
        "at": (row.occurred_at, rec.at),
    }
    return [name for name, (a, b) in pairs.items() if a != b]


async def reread(
    queries: QueryClient,
    js: JetStreamContext,
    *,
    trail_seq: int,
    namespace: str,
    namespaces: tuple[str, ...],
    now: datetime,
    can_read: Callable[[str], bool],
    min_seq: int = 0,
) -> Reread:
    """One recorded read asked again as of the log position it was answered at, beside what it returned."""
    got: AuditResult = await queries.ask(
        AuditQuery(
            namespace=namespace,
            now=now,
            min_seq=min_seq,
            namespaces=namespaces,
            action="read:",
            outcome="ok",
            trail_seq=trail_seq,
            limit=1,
        )
    )
    if not got.records:
        raise InvalidInput("trail_seq", f"no recorded read {trail_seq} in the namespaces you may read")
    row = got.records[0]
    rec = await access_record(js, row)
    read = summary(row, rec)
    differs = _trail_differs(row, rec) if rec is not None else []
    trail = [f"the access record differs from the trail row that chains it: {', '.join(differs)}"] if differs else []

    def cannot(why: str) -> Reread:
        return Reread(read=read, rerunnable=False, reason=why, results=[], match=False if trail else None,
                      differences=trail)  # fmt: skip

    if rec is None:
        return cannot(f"its access record ({S.ACCESS_STREAM} sequence {row.source_seq}) is gone or unreadable")
    if (why := not_rerunnable(rec)) is not None:
        return cannot(why)
    assert rec.seq is not None
    try:
        q: Any = decoded(rec)
    except msgspec.ValidationError as exc:
        return cannot(f"its query no longer decodes: {exc}")
    for ns in (q.namespace, *getattr(q, "rule_namespaces", ())):
        if not can_read(ns):
            raise PermissionDenied(f"re-run a read of namespace {ns!r}")
    note = None
    if isinstance(q, ListMemories) and q.sort_by in ("accessed_at", "access_count"):
        note = f"sorted by {q.sort_by}: access statistics are kept only as they are now, so the order may differ"
    elif isinstance(q, SearchMemories) and q.mode != "semantic":
        note = "keyword scores use the word statistics of the index as it is now: they may drift from the recorded"
    asked = again(q, rec.seq)
    result = await queries.ask(asked)  # (not through the application's reads: an audit re-run is not a read)
    drift, figures = None, None
    at: AsOfInfo | None
    if isinstance(result, HistoryResult):
        assert isinstance(q, MemoryHistory)
        results, differences = compare_history(q.memory_id, rec.versions, result, rec.seq)
        at = AsOfInfo(seq=rec.seq)
    elif isinstance(result, StatsResult):
        results, (figures, differences) = [], compare_stats(rec.digest, result)
        at = AsOfInfo.of(result.as_of)
    else:
        results, differences, drift = compare(list(row.memory_ids), rec.versions, rec.scores, answer(result))
        at = AsOfInfo.of(getattr(result, "as_of", None))
        if at is None and asked.as_of is not None and asked.as_of.seq is not None:  # (a graph answer says none)
            at = AsOfInfo(seq=asked.as_of.seq, time=asked.as_of.time)
    return Reread(
        read=read,
        as_of=at,
        results=results,
        match=not (trail or differences),
        differences=trail + differences,
        score_drift=drift,
        model=result.model if isinstance(result, SearchResult) else None,
        figures=figures,
        note=note,
    )
