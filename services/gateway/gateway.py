"""The gateway's state-free core: who is calling, which log position they have seen, and the
two sides (commands, queries). Tools call it; it owns no read model."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from mneme.domain import validation as v
from mneme.errors import InvalidInput, MemoryNotFound
from mneme.eventlog import EventLog
from schemas.events import Actor
from schemas.queries import GetMemory, MemoryRow
from services.gateway.commands import Clock, CommandService, utc_now
from services.gateway.queries import QueryClient

Consistency = Literal["session", "linearizable"]


@dataclass
class Principal:
    agent_id: str = "local-agent"
    role: str = "agent"
    default_namespace: str = "default"

    @property
    def actor(self) -> Actor:
        return Actor(agent_id=self.agent_id, role=self.role)


@dataclass
class Gateway:
    commands: CommandService
    queries: QueryClient
    log: EventLog
    principal: Principal = field(default_factory=Principal)
    consistency: Consistency = "session"
    clock: Clock = utc_now
    _seen: weakref.WeakKeyDictionary[Any, int] = field(default_factory=weakref.WeakKeyDictionary)
    _seen_here: int = 0

    # -- read-your-writes (invariant 3) -------------------------------------------------
    def noted(self, session: Any, seq: int) -> None:
        self._seen_here = max(self._seen_here, seq)
        if session is not None:
            try:
                self._seen[session] = max(self._seen.get(session, 0), seq)
            except TypeError:  # not weak-referenceable: the gateway-wide mark covers it
                pass

    async def min_seq(self, session: Any) -> int:
        if self.consistency == "linearizable":
            return await self.log.last_seq()
        if session is None:
            return self._seen_here
        try:
            return self._seen.get(session, 0)
        except TypeError:
            return self._seen_here

    # -- helpers shared by tools ---------------------------------------------------------
    def namespace(self, ns: str | None) -> str:
        return v.namespace(ns if ns is not None else self.principal.default_namespace)

    def now(self) -> datetime:
        return self.clock()

    async def resolve(
        self, ns: str, memory_id: str | None, store: str | None, path: str | None, min_seq: int
    ) -> MemoryRow:
        """A memory by id, or by store + path (expired ones included: writes may touch them)."""
        if memory_id is not None:
            query = GetMemory(namespace=ns, now=self.now(), min_seq=min_seq, memory_id=v.memory_id(memory_id),
                              include_expired=True)  # fmt: skip
            ref = memory_id
        elif store is not None and path is not None:
            query = GetMemory(namespace=ns, now=self.now(), min_seq=min_seq, store=v.store(store), path=v.path(path),
                              include_expired=True)  # fmt: skip
            ref = f"{store}:{path}"
        else:
            raise InvalidInput("id", "give id, or store and path")
        got = await self.queries.ask(query)
        if got.item is None:
            raise MemoryNotFound(ref)
        return got.item
