"""Resetting a namespace: every memory, entity, relation and code project of it deleted, each by its own event,
then the reset itself recorded as one `namespace_reset` event (schemas/namespace_events.py).

What memory-mcp's reset_all_memory and the native memory_reset do. Each delete is an ordinary, audited event
that every projection already folds, so the history before the reset stays in the log and readable with
`as_of` at `before_seq`; the closing event gives the audit trail one entry with who, why and the counts.
Memories this caller may not delete (locked, protected kinds) stay, counted as `kept`. A retry with the same
request id records the reset once.
"""

from __future__ import annotations

from mneme.domain.reset_decider import ResetTally, decide_reset, keeps
from mneme.errors import MnemeError
from mneme.eventlog import EventLogInterface
from mneme.ids import envelope
from schemas import subjects as S
from schemas.commands import DeleteMemory
from schemas.events import encode_envelope
from schemas.namespace_events import NamespaceReset
from schemas.queries import CodeProjects, GraphEntities, ListMemories
from services.gateway.application.caller import Caller
from services.gateway.application.code import Code
from services.gateway.application.consistency import ReadYourWrites
from services.gateway.application.graph import Graph
from services.gateway.application.memories import Memories
from services.gateway.application.reads import Reads
from services.gateway.commands import Clock

BATCH = 500


class Namespaces:
    def __init__(
        self, log: EventLogInterface, reads: Reads, memories: Memories, graph: Graph, code: Code, marks: ReadYourWrites,
        clock: Clock,
    ) -> None:  # fmt: skip
        self.log, self.reads, self.memories, self.graph, self.code = log, reads, memories, graph, code
        self.marks, self.clock = marks, clock

    async def reset(self, call: Caller, reason: str) -> NamespaceReset:
        """Reset the call's namespace; the `namespace_reset` event recorded (its counts and `before_seq`)."""
        before = await self.log.last_seq()
        tally = ResetTally()
        await self._delete_memories(call, reason, tally)
        await self._delete_graph(call, reason, tally)
        projects = await self.reads.status(call, CodeProjects(namespace=call.namespace, now=self.clock()))
        for p in projects.projects:
            await self.code.delete(call, p.project_id)
            tally.code_chunks += p.total_chunks
        ev = decide_reset(reason, before, tally)
        key = f"reset:{call.namespace}:{call.request_id}"
        env = envelope(key, call.namespace, "reset", ev, call.principal.actor, call.request_id, self.clock())
        seq, _ = await self.log.append(
            S.namespace_subject(call.namespace, "reset"), encode_envelope(env), msg_id=key, expected_seq=None
        )
        self.marks.wrote(seq)
        return ev

    async def _delete_memories(self, call: Caller, reason: str, tally: ResetTally) -> None:
        """Every memory of the namespace this caller may delete (the others kept, counted)."""
        while True:
            got = await self.reads.ask(call, ListMemories, status="any", include_expired=True, sort_by="created_at",
                                       sort_order="asc", limit=BATCH, offset=tally.kept)  # fmt: skip
            if not got.items:
                return
            for row in got.items:
                cmd = DeleteMemory(namespace=call.namespace, memory_id=row.memory.id, permanent=True, reason=reason)
                try:
                    await self.memories.apply("delete", call, cmd)
                except MnemeError as exc:
                    if not keeps(exc.code):
                        raise
                    tally.kept += 1
                    continue
                tally.memories += 1

    async def _delete_graph(self, call: Caller, reason: str, tally: ResetTally) -> None:
        """Every entity of the namespace, and the relations that touch them."""
        relations: set[str] = set()
        while True:
            graph = await self.reads.ask(call, GraphEntities, limit=BATCH, relations="either")
            if not graph.entities:
                break
            relations.update(r.id for r in graph.relations)
            gone = await self.graph.delete_entities(call, [e.name for e in graph.entities], reason=reason)
            tally.entities += gone.deleted
            if gone.deleted == 0:  # nothing could be deleted: stop rather than loop
                break
        tally.relations = len(relations)
