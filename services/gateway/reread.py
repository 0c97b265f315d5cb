"""What did this agent see? Recorded reads, and one of them asked again as it was answered.

The audit trail keeps one hash-chained row per read (who, which tool, which namespace, which request, the
ids it returned), and points at the read's full access record on MNEME_ACCESS (`source_seq`), which also
holds the log position the answer reflected, each returned memory's version (and score, for a search) and
the projector query whose answer was exactly what the tool returned (services/gateway/access_log.py).

`reread` asks that query again as of that position (`as_of` = the sequence, with expiry judged at the time
the read judged it), and sets its results beside the recorded ones: ids, ranks, versions, scores with each
signal (semantic cosine, raw BM25, graph), and the content as it was then. Any difference is listed, and
`match` is true only when the ids, their order and their versions are the same; the access record is also
checked against the trail row that chains it. Used by the `audit_reads` / `audit_reread` tools and by
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
    AsOf,
    AuditQuery,
    AuditResult,
    AuditRow,
    GetMemory,
    GetResult,
    ListMemories,
    ListResult,
    SearchMemories,
    SearchResult,
)
from services.gateway.access_log import unnoted
from services.gateway.models import AsOfInfo
from services.gateway.queries import QueryClient

RERUNNABLE = {q.OPERATION: q for q in (GetMemory, ListMemories, SearchMemories)}
SCORE_TOLERANCE = 1e-4


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


class RerunResult(BaseModel):
    id: str
    rank: int | None = Field(None, description="In the re-run (absent: not in it).")
    recorded_rank: int | None = None
    version: int | None = None
    recorded_version: int | None = None
    score: float | None = None
    recorded_score: float | None = None
    semantic_score: float | None = None
    keyword_score: float | None = None
    graph_score: float | None = None
    content: str | None = None


class Reread(BaseModel):
    read: RecordedRead
    as_of: AsOfInfo | None = None
    results: list[RerunResult]
    match: bool = Field(description="The same ids, in the same order, with the same versions.")
    differences: list[str]
    score_drift: float | None = None
    model: str | None = None
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


def _answer(result: Any) -> list[RerunResult]:
    if isinstance(result, GetResult):
        rows = [result.item.memory] if result.item is not None else []
        return [RerunResult(id=m.id, rank=1, version=m.version, content=m.content) for m in rows]
    if isinstance(result, ListResult):
        return [
            RerunResult(id=r.memory.id, rank=n, version=r.memory.version, content=r.memory.content)
            for n, r in enumerate(result.items, 1)
        ]
    assert isinstance(result, SearchResult)
    return [
        RerunResult(
            id=h.memory.id,
            rank=n,
            version=h.memory.version,
            score=h.score,
            semantic_score=h.semantic,
            keyword_score=h.keyword,
            graph_score=h.graph,
            content=h.memory.content,
        )
        for n, h in enumerate(result.hits, 1)
    ]


def compare(
    ids: list[str], versions: tuple[int, ...], scores: tuple[float, ...], rerun: list[RerunResult]
) -> tuple[list[RerunResult], list[str], float | None]:
    """The re-run's results with the recorded rank, version and score of each beside its own (then the recorded
    ones it lacks), the differences that break the match, and the largest change of a score."""
    recorded = {
        i: (
            n,
            versions[n - 1] if len(versions) == len(ids) else None,
            scores[n - 1] if len(scores) == len(ids) else None,
        )
        for n, i in enumerate(ids, 1)
    }
    differences: list[str] = []
    drift: float | None = None
    out = []
    for r in rerun:
        if r.id in recorded:
            rank, version, score = recorded[r.id]
            r.recorded_rank, r.recorded_version = rank, version or None
            if score is not None:
                r.recorded_score = score
                if r.score is not None:
                    drift = max(drift or 0.0, abs(r.score - score))
            if r.recorded_version is not None and r.recorded_version != r.version:
                differences.append(f"{r.id}: version {r.recorded_version} recorded, {r.version} in the re-run")
        else:
            differences.append(f"{r.id}: in the re-run (rank {r.rank}, version {r.version}), not recorded")
        out.append(r)
    again = {r.id for r in rerun}
    for i, (rank, version, score) in recorded.items():
        if i not in again:
            out.append(RerunResult(id=i, recorded_rank=rank, recorded_version=version or None, recorded_score=score))
            differences.append(f"{i}: recorded (rank {rank}, version {version or '?'}), not in the re-run")
    common = [r.id for r in rerun if r.id in recorded]
    if common != [i for i in ids if i in again]:
        differences.append("another order: recorded " + ", ".join(ids) + "; re-run " + ", ".join(r.id for r in rerun))
    return out, differences, (round(drift, 6) if drift is not None else None)


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

    def unanswered(why: str) -> Reread:
        return Reread(read=read, results=[], match=False, differences=[why])

    if rec is None:
        return unanswered(f"its access record ({S.ACCESS_STREAM} sequence {row.source_seq}) is gone or unreadable")
    differs = _trail_differs(row, rec)
    if rec.query is None or rec.seq is None:
        return unanswered(
            "kept no query to ask again (recorded before reads kept one, or an answer built from several queries)"
        )
    query_type = RERUNNABLE.get(rec.query.operation)
    if query_type is None or QUERY_TYPES.get(rec.query.operation) is not query_type:
        return unanswered(f"a {rec.query.operation} query is not asked again (only get, list and search)")
    try:
        q: Any = msgspec.convert(rec.query.arguments, query_type)
    except msgspec.ValidationError as exc:
        return unanswered(f"its query no longer decodes: {exc}")
    for ns in (q.namespace, *getattr(q, "rule_namespaces", ())):
        if not can_read(ns):
            raise PermissionDenied(f"re-run a read of namespace {ns!r}")
    note = None
    if isinstance(q, GetMemory) and q.version is not None:
        again = msgspec.structs.replace(q, min_seq=0)  # a version never changes: asked as it was
    elif q.as_of is not None:
        again = msgspec.structs.replace(q, min_seq=0)  # it asked for a past moment: the same one again
    else:
        again = msgspec.structs.replace(q, min_seq=0, as_of=AsOf(seq=rec.seq, time=q.now))
    if isinstance(q, ListMemories) and q.sort_by in ("accessed_at", "access_count"):
        note = f"sorted by {q.sort_by}: access statistics are kept only as they are now, so the order may differ"
    elif isinstance(q, SearchMemories) and q.mode != "semantic":
        note = "keyword scores use the word statistics of the index as it is now: they may drift from the recorded"
    with unnoted():
        result = await queries.ask(again)
    results, differences, drift = compare(list(row.memory_ids), rec.versions, rec.scores, _answer(result))
    if differs:
        differences.insert(0, f"the access record differs from the trail row that chains it: {', '.join(differs)}")
    return Reread(
        read=read,
        as_of=AsOfInfo.of(result.as_of),
        results=results,
        match=not differences,
        differences=differences,
        score_drift=drift,
        model=result.model if isinstance(result, SearchResult) else None,
        note=note,
    )
