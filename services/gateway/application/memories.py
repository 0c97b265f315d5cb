"""The memory aggregate's use cases: each runs one command through the write side (services/gateway/commands.py:
the decider, the optimistic append, its retries, idempotency) after the gateway's mark, and raises the mark to
where it landed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from mneme.domain import decider
from mneme.domain.state import MemoryState
from mneme.errors import IdempotencyKeyReused, MnemeError
from mneme.ids import memory_id_for
from schemas.commands import CreateMemory, DeleteMemory
from schemas.events import Actor
from schemas.queries import ExpiredMemories, GetMemory, MemoryRow, PathOwner
from services.gateway.application.caller import Caller
from services.gateway.application.consistency import ReadYourWrites
from services.gateway.application.graph import Graph
from services.gateway.application.reads import Reads
from services.gateway.commands import Change, CommandService, Request, Written
from services.gateway.graph_commands import NewEntity

Op = Literal["update", "move", "delete", "restore", "govern"]
PRUNE_SKIPS = ("MEMORY_NOT_FOUND", "MEMORY_LOCKED", "WRITE_NOT_ALLOWED")


class Memories:
    def __init__(self, commands: CommandService, reads: Reads, graph: Graph, marks: ReadYourWrites) -> None:
        self.commands, self.reads, self.graph, self.marks = commands, reads, graph, marks

    async def create(
        self,
        call: Caller,
        cmd: CreateMemory,
        *,
        request_id: str | None = None,
        with_entities: bool = False,
        **options: Any,
    ) -> Written:
        """Add a memory (`options`: correlation_id). `with_entities`: the graph entities it names exist before
        it mentions them (created as concepts, unless the create would be refused or is a retry)."""
        if with_entities and cmd.entities:
            rid = request_id or call.request_id
            if await self._entities_first(cmd, call.principal.actor, rid):
                named = [NewEntity(n, "concept") for n in cmd.entities]
                await self.graph.create_entities(call, named, request_id=f"{rid}:entities")
        return await self._write(self.commands.create, call, cmd, request_id, options)

    async def _entities_first(self, cmd: CreateMemory, actor: Actor, request_id: str) -> bool:
        """Whether to create a new memory's entities before it: not when the create is refused (a refused call
        writes nothing: bad input, a protected kind, an occupied path, a request_id used for other arguments),
        nor when this request was made before (a retry: its entities were made first then)."""
        c = self.commands
        memory_id = memory_id_for(cmd.namespace, Request.of(cmd, actor, request_id).key)
        decider.decide_create(cmd, memory_id=memory_id, path_owner=None, max_content=c.max_content, actor=actor)
        head = await c.log.last_seq()  # as commands.create confirms a miss: at the head of the log
        now = c.clock()
        got = await c.queries.ask(
            GetMemory(namespace=cmd.namespace, now=now, min_seq=head, memory_id=memory_id, include_expired=True)
        )
        if got.item is not None:  # a retry, or the request_id reused: commands.create answers either
            return False
        if cmd.store is not None and cmd.path is not None:
            po = await c.queries.ask(
                PathOwner(namespace=cmd.namespace, now=now, min_seq=head, store=cmd.store, path=cmd.path)
            )
            return po.memory_id is None  # occupied: commands.create refuses it (ALREADY_EXISTS)
        return True

    async def apply(
        self, op: Op, call: Caller, cmd: Change, *, request_id: str | None = None, **options: Any
    ) -> Written:
        """Change a memory whose id the command names (`options`: e.g. locked_for_all for an update)."""
        return await self._write(getattr(self.commands, op), call, cmd, request_id, options)

    async def change(
        self,
        op: Op,
        call: Caller,
        ref: tuple[str | None, str | None, str | None],
        build: Callable[[str], Change],
        *,
        request_id: str | None = None,
        **options: Any,
    ) -> tuple[MemoryRow, Written]:
        """Change an existing memory named by `ref` (id, store, path: by id or by store + path): resolve it,
        build the command for its id, run it. Returns the row it found and the write."""
        row = await self.reads.resolve(call, *ref)
        w = await self.apply(op, call, build(row.memory.id), request_id=request_id, **options)
        return row, w

    async def prune_expired(self, call: Caller, store: str | None, request_id: str | None = None) -> list[MemoryState]:
        """Permanently delete every expired memory of the call's namespace (or of one store), one event each.
        Returns the memories pruned; one pruned by someone else meanwhile, or not this caller's to delete
        (locked, protected), is skipped."""
        pruned: list[MemoryState] = []
        seen: set[str] = set()
        while True:
            got = await self.reads.ask(call, ExpiredMemories, store=store, limit=500)
            batch = [r.memory for r in got.items if r.memory.id not in seen]
            if not batch:
                return pruned
            for m in batch:
                seen.add(m.id)
                cmd = DeleteMemory(namespace=call.namespace, memory_id=m.id, permanent=True, reason="expired")
                try:
                    await self.apply("delete", call, cmd, request_id=request_id)
                except MnemeError as exc:
                    if exc.code in PRUNE_SKIPS:
                        continue
                    raise
                pruned.append(m)

    async def _write(
        self, run: Callable[..., Any], call: Caller, cmd: Any, request_id: str | None, options: dict[str, Any]
    ) -> Written:
        rid = request_id or call.request_id
        try:
            w: Written = await run(
                cmd, actor=call.principal.actor, request_id=rid, min_seq=await self.marks.mark(), **options
            )
        except IdempotencyKeyReused as reused:  # the request was made before (maybe through another gateway):
            self.marks.wrote(reused.details["seq"])  # a read of what it wrote then waits for it
            raise
        self.marks.wrote(w.seq)
        return w
