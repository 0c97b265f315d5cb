"""The gateway's application layer over the in-memory event log (mneme/memory_log.py): no nats-server, no
projector process. Reads are answered by `FoldedRows`, a fake projector for these unit tests only: it folds
the whole log with the domain's `evolve` at every query (so it is never behind, and `applied_seq` is the head),
and answers the two queries the memory write side and `Reads.resolve` ask (GetMemory, PathOwner)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from mneme.domain.state import MemoryState, evolve
from mneme.memory_log import InMemoryEventLog
from mneme.principals import Principal
from mneme.query_server import Answer
from schemas.events import decode_envelope
from schemas.queries import GetMemory, GetResult, MemoryRow, PathOwner, PathOwnerResult, Query
from services.gateway.access_log import Answered
from services.gateway.application import Graph, Memories, Reads, ReadYourWrites
from services.gateway.commands import CommandService
from services.gateway.graph_commands import GraphCommands
from services.gateway.queries import QueryClient


class FoldedRows:
    """Answers GetMemory and PathOwner from a fold of every memory event in the log."""

    def __init__(self, log: InMemoryEventLog) -> None:
        self.log = log
        self.asked: list[Query] = []

    async def states(self) -> tuple[int, dict[str, MemoryState], dict[str, int]]:
        """(head, memory id -> state, store -> its last sequence)."""
        states: dict[str, MemoryState | None] = {}
        store_seq: dict[str, int] = {}
        async for msg in self.log.after("mneme.evt.>", 0, limit=1_000_000):
            assert msg.data is not None
            env = decode_envelope(msg.data)
            mid = getattr(env.event, "memory_id", None)
            if mid is None:
                continue
            states[mid] = evolve(states.get(mid), env, msg.seq)
            st = states[mid]
            if st is not None and st.store is not None:
                store_seq[st.store] = msg.seq
        return await self.log.last_seq(), {k: v for k, v in states.items() if v is not None}, store_seq

    async def __call__(self, query: Query) -> Answer:
        self.asked.append(query)
        head, states, store_seq = await self.states()
        assert query.min_seq <= head, "a query waited for a position past the log's head"
        in_ns = [s for s in states.values() if s.namespace == query.namespace]
        if isinstance(query, GetMemory):
            by_path = query.memory_id is None
            hit = next((s for s in in_ns if s.id == query.memory_id or (by_path and s.store == query.store
                                                                         and s.path == query.path)), None)  # fmt: skip
            return Answer(head, GetResult(item=MemoryRow(memory=hit) if hit is not None else None))
        if isinstance(query, PathOwner):
            owner = next((s.id for s in in_ns if (s.store, s.path) == (query.store, query.path)
                          and s.status != "deleted"), None)  # fmt: skip
            return Answer(head, PathOwnerResult(memory_id=owner, store_seq=store_seq.get(query.store, 0)))
        raise NotImplementedError(type(query).__name__)


@dataclass
class Caller:
    principal: Principal
    namespace: str = "default"
    request_id: str = "r-1"
    answered: list[Answered] = field(default_factory=list)


@dataclass
class App:
    """One gateway's application over the shared in-memory log."""

    log: InMemoryEventLog
    rows: FoldedRows
    marks: ReadYourWrites
    reads: Reads
    memories: Memories
    graph: Graph

    @classmethod
    def over(cls, log: InMemoryEventLog) -> App:
        rows = FoldedRows(log)
        nc: Any = SimpleNamespace(is_connected=False)  # no NATS: every query is answered in process
        queries = QueryClient(nc, timeout=0.5, local=rows)
        marks = ReadYourWrites(log)
        clock = lambda: datetime.now(UTC)  # noqa: E731
        reads = Reads(queries, log, marks, clock)
        graph = Graph(GraphCommands(log, queries, clock), marks)
        memories = Memories(CommandService(log, queries, clock=clock), reads, graph, marks)
        return cls(log, rows, marks, reads, memories, graph)
