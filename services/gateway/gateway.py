"""The gateway's state-free core: who is calling, which log position they have seen, and the
two sides (commands, queries). Tools call it; it owns no read model."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import msgspec

from mneme.domain import validation as v
from mneme.errors import InvalidInput, MemoryNotFound
from mneme.eventlog import EventLog
from schemas.events import Actor
from schemas.queries import GetMemory, MemoryRow
from services.gateway.commands import Clock, CommandService, utc_now
from services.gateway.queries import QueryClient

Consistency = Literal["gateway", "linearizable"]


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
    consistency: Consistency = "gateway"
    clock: Clock = utc_now
    _high_water: int = 0

    # -- read-your-writes (invariant 3) -------------------------------------------------
    # DESIGN.md keys this per client session. mcp 2.x's 2026-07-28 protocol is stateless
    # (each request stands alone, with no session to hang a mark on), so the mark is kept
    # per gateway: every read through this gateway waits for every write made through it,
    # a superset of read-your-writes that costs nothing measurable (the projector applies
    # the log in order anyway). Reads through another gateway: consistency="linearizable".
    def noted(self, seq: int) -> None:
        self._high_water = max(self._high_water, seq)

    async def min_seq(self) -> int:
        if self.consistency == "linearizable":
            return await self.log.last_seq()
        return self._high_water

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
        elif store is not None:
            raise InvalidInput("path", "give path with store (or give id)")
        elif path is not None:
            raise InvalidInput("store", "give store with path (or give id)")
        else:
            raise InvalidInput("id", "give id, or store and path")
        got = await self.queries.ask(query)
        if got.item is None:
            # A miss is confirmed at the head of the log: a memory created through another
            # gateway a moment ago is found, not reported missing.
            head = await self.log.last_seq()
            if head > min_seq:
                got = await self.queries.ask(msgspec.structs.replace(query, min_seq=head))
        if got.item is None:
            raise MemoryNotFound(ref)
        return got.item
