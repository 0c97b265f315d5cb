"""Every query a tool asks, asked one way: in the call's namespace, at the gateway's clock, after the gateway's
read-your-writes mark, and kept for the call's read record (the audit trail shows what the caller saw). A miss
is confirmed at the head of the log (another gateway may have written it a moment ago)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from mneme.domain import validation as v
from mneme.errors import InvalidInput, MemoryNotFound, ProjectionLag
from mneme.eventlog import EventLogInterface
from schemas.queries import AsOf, AsOfResolved, GetMemory, MemoryRow, Query, VersionInfo
from services.gateway.application.caller import Caller
from services.gateway.application.consistency import ReadYourWrites
from services.gateway.commands import Clock
from services.gateway.queries import QueryClient

Q = TypeVar("Q", bound=Query)


class Reads:
    def __init__(self, queries: QueryClient, log: EventLogInterface, marks: ReadYourWrites, clock: Clock) -> None:
        self.queries, self.log, self.marks, self.clock = queries, log, marks, clock

    async def ask(self, call: Caller, kind: type[Query], /, *, wait_model: bool = True, **fields: Any) -> Any:
        """Ask a `kind` query with these fields (the namespace defaults to the call's)."""
        fields.setdefault("namespace", call.namespace)
        return await self.send(call, kind(now=self.clock(), **fields), wait_model=wait_model)

    async def send(self, call: Caller, query: Query, *, wait_model: bool = True) -> Any:
        """Ask a query built by the caller (its `min_seq` raised to the mark)."""
        got = await self.queries.answer(await self._after_mark(query), wait_model=wait_model)
        call.answered.append(got)
        return got.result

    async def confirmed(self, call: Caller, query: Query, missed: Callable[[Any], bool]) -> Any:
        """Ask; when `missed(answer)`, ask again at the head of the log."""
        got = await self.queries.answer_confirmed(await self._after_mark(query), missed, self.log.last_seq)
        call.answered.append(got)
        return got.result

    async def status(self, call: Caller, query: Query) -> Any:
        """A code-index status or project list: read-your-writes when the projector keeps up; while it folds a
        large run (a status is asked often, and must not fail then), the projector's state as it stands."""
        try:
            return await self.send(call, query)
        except ProjectionLag:
            got = await self.queries.answer(msgspec.structs.replace(query, min_seq=0))
            call.answered.append(got)
            return got.result

    async def probe(self, call: Caller, query: Query) -> Any:
        """A health probe answered by the projector as it stands, at once: not after the mark (a semantic probe
        would wait for the vector index to embed this gateway's writes, and report a busy index as failed),
        nor after the embedding model (it says "loading" instead of waiting)."""
        got = await self.queries.answer(msgspec.structs.replace(query, min_seq=0), wait_model=False)
        call.answered.append(got)
        return got.result

    async def _after_mark(self, query: Q) -> Q:
        mark = await self.marks.mark()
        return msgspec.structs.replace(query, min_seq=mark) if mark > query.min_seq else query

    async def resolve(
        self,
        call: Caller,
        memory_id: str | None,
        store: str | None = None,
        path: str | None = None,
        *,
        namespace: str | None = None,
        history: int = 0,
        version: int | None = None,
    ) -> MemoryRow:
        """One memory, by id or by store + path (MEMORY_NOT_FOUND when there is none)."""
        got = await self.resolve_with_history(
            call, memory_id, store, path, namespace=namespace, history=history, version=version
        )
        return got[0]

    async def resolve_with_history(
        self,
        call: Caller,
        memory_id: str | None,
        store: str | None = None,
        path: str | None = None,
        *,
        namespace: str | None = None,
        history: int = 0,
        version: int | None = None,
        as_of: AsOf | None = None,
    ) -> tuple[MemoryRow, list[VersionInfo], AsOfResolved | None]:
        """`resolve`, with the memory's last `history` versions (newest first), or one `version` of it, or the
        memory as it was at a past position (`as_of`: then there is no history)."""
        common: dict[str, Any] = {"include_expired": True, "history": history, "version": version, "as_of": as_of}
        ns = namespace or call.namespace
        if memory_id is not None:
            query = GetMemory(namespace=ns, now=self.clock(), memory_id=v.memory_id(memory_id), **common)
            ref = memory_id
        elif store is not None and path is not None:
            query = GetMemory(namespace=ns, now=self.clock(), store=v.store(store), path=v.path(path), **common)
            ref = f"{store}:{path}"
        elif store is not None:
            raise InvalidInput("path", "give path with store (or give id)")
        elif path is not None:
            raise InvalidInput("store", "give store with path (or give id)")
        else:
            raise InvalidInput("id", "give id, or store and path")
        if as_of is None:  # a miss is confirmed at the head of the log (not in the past: that is fixed)
            got = await self.confirmed(call, query, lambda got: got.item is None)
        else:
            got = await self.send(call, query)
        if got.item is None:
            raise MemoryNotFound(ref if version is None else f"{ref} version {version}")
        return got.item, got.history, got.as_of
