"""Publishing access records (reads, denied attempts) without holding up the call.

Each record goes to the MNEME_ACCESS stream with `Nats-Msg-Id` = its record id (derived
from the request id and the tool), so a retried call leaves one record. Publishing runs
in the background; `flush` waits for what is in flight (at shutdown, and in tests).

A read record says what the read saw, precisely enough to ask it again (`audit_reread`): the
query client notes every projector answer of a call (`answers`), and `read_record` keeps the
log position of the answer, each returned memory's version (and score, for a search) and the
query whose answer was exactly what the tool returned: a get, list or search of memories, a read of
graph entities (search_nodes, open_nodes, graph_get, ...), a memory's history (memory_history,
memory_diff: the versions it listed) or its stats (memory_stats: a digest of the figures).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec
from nats.js import JetStreamContext

from schemas import subjects as S
from schemas.access import AccessDenied, AccessRecord, AskedQuery, ReadRecorded, encode_access
from schemas.queries import (
    GetMemory,
    GetResult,
    GraphEntities,
    GraphResult,
    GraphTraverse,
    HistoryResult,
    ListMemories,
    ListResult,
    MemoryHistory,
    MemoryStats,
    SearchMemories,
    SearchResult,
    StatsResult,
)

log = logging.getLogger("mneme.gateway")


@dataclass(frozen=True)
class Answered:
    """One projector answer: the query as asked, the position the projector answered at, the result. The
    application layer (services/gateway/application/reads.py) keeps a call's answers for its read record."""

    query: Any
    applied_seq: int
    result: Any


# the queries a read record can keep to be asked again (services/gateway/reread.py asks them)
READ_QUERIES = (GetMemory, ListMemories, SearchMemories, GraphEntities, GraphTraverse, MemoryHistory, MemoryStats)
# a stats answer's figures that the log fixes at a position: not the most read memories (access statistics are
# kept only as they are now), nor the counts of stores and categories (their index keeps only current rows)
UNPINNED_STATS = ("most_accessed", "stores", "categories", "as_of")


def answer_items(result: Any) -> list[tuple[str, int, float | None]]:
    """(id, version, score) of each memory (or graph entity) a get, list, search or graph read answered, in
    order."""
    if isinstance(result, GetResult):
        return [(result.item.memory.id, result.item.memory.version, None)] if result.item is not None else []
    if isinstance(result, ListResult):
        return [(r.memory.id, r.memory.version, None) for r in result.items]
    if isinstance(result, SearchResult):
        return [(h.memory.id, h.memory.version, h.score) for h in result.hits]
    if isinstance(result, GraphResult):
        return [(e.id, e.version, None) for e in result.entities]
    return []


def stats_digest(result: StatsResult) -> str:
    """SHA-256 of a stats answer's figures that the log fixes at its position (the same figures asked again
    as of that position give the same digest)."""
    figures = {k: v for k, v in msgspec.structs.asdict(result).items() if k not in UNPINNED_STATS}
    return hashlib.sha256(msgspec.json.encode(figures, order="sorted")).hexdigest()


def position(a: Answered) -> int:
    """The log position an answer reflects: the past position it was asked for, else where the projector was."""
    at = getattr(a.result, "as_of", None)
    if at is not None:
        return int(at.seq)
    asked = getattr(a.query, "as_of", None)  # (a graph answer does not repeat it)
    return int(asked.seq) if asked is not None and asked.seq is not None else a.applied_seq


def read_record(
    *,
    record_id: str,
    at: datetime,
    agent_id: str,
    role: str,
    request_id: str,
    namespace: str,
    operation: str,
    memory_ids: list[str],
    answered: list[Answered],
) -> ReadRecorded:
    seq: int | None = position(answered[-1]) if answered else None
    versions: tuple[int, ...] = ()
    scores: tuple[float, ...] = ()
    query: AskedQuery | None = None
    digest: str | None = None
    reads = [a for a in answered if isinstance(a.query, READ_QUERIES)]
    if reads:
        last = reads[-1]
        seq = position(last)
        kept = False
        if isinstance(last.result, HistoryResult):  # one memory's versions: those it listed
            kept = memory_ids == [last.query.memory_id]
            versions = tuple(v.version for v in last.result.versions) if kept else ()
        elif isinstance(last.result, StatsResult):  # figures, no memories
            kept = not memory_ids
            digest = stats_digest(last.result) if kept else None
        else:
            seen: dict[str, tuple[int, float | None]] = {}
            for a in reads:
                seen.update({i: (ver, score) for i, ver, score in answer_items(a.result)})
            versions = tuple(seen.get(i, (0, None))[0] for i in memory_ids)
            if isinstance(last.query, SearchMemories):
                scores = tuple(float(seen.get(i, (0, 0.0))[1] or 0.0) for i in memory_ids)
            kept = [i for i, _, _ in answer_items(last.result)] == memory_ids
        if kept:
            query = AskedQuery(operation=last.query.OPERATION, arguments=msgspec.to_builtins(last.query))
    return ReadRecorded(
        record_id=record_id,
        at=at,
        agent_id=agent_id,
        role=role,
        request_id=request_id,
        namespace=namespace,
        operation=operation,
        memory_ids=tuple(memory_ids),
        seq=seq,
        versions=versions,
        scores=scores,
        query=query,
        digest=digest,
    )


class AccessLog:
    def __init__(self, js: JetStreamContext, *, max_in_flight: int = 10_000):
        self.js = js
        self.max_in_flight = max_in_flight
        self._in_flight: set[asyncio.Task[None]] = set()
        self.last_seq = 0  # the access stream's sequence of the newest record this gateway published

    async def published(self) -> int:
        """The access stream's sequence up to which every record this gateway has recorded so far is published:
        a read that must count this gateway's earlier reads (access statistics) waits for the projection to
        have folded it."""
        await self.flush()
        return self.last_seq

    async def record(self, rec: AccessRecord) -> None:
        kind = "denied" if isinstance(rec, AccessDenied) else "read"
        if len(self._in_flight) >= self.max_in_flight:  # back-pressure instead of unbounded memory
            await asyncio.wait(set(self._in_flight), return_when=asyncio.FIRST_COMPLETED)
        task = asyncio.create_task(self._publish(S.access_subject(kind, rec.namespace), rec))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _publish(self, subject: str, rec: AccessRecord) -> None:
        try:
            ack = await self.js.publish(subject, encode_access(rec), timeout=10, headers={S.HDR_MSG_ID: rec.record_id})
            self.last_seq = max(self.last_seq, ack.seq)
        except Exception as exc:  # noqa: BLE001 - the call already answered; say loudly that the trail lost it
            log.error("access record %s (%s by %s) not recorded: %s", rec.record_id, rec.operation, rec.agent_id, exc)

    async def flush(self) -> None:
        if self._in_flight:
            await asyncio.wait(set(self._in_flight))
