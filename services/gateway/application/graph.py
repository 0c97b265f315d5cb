"""The knowledge graph's use cases (entities, observations, relations): each runs through the graph's write
side (services/gateway/graph_commands.py) after the gateway's mark, and raises the mark to where it landed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from schemas.queries import Entity
from services.gateway.application.caller import Caller
from services.gateway.application.consistency import ReadYourWrites
from services.gateway.graph_commands import GraphCommands, GraphWrite, NewEntity, NewRelation


class Graph:
    def __init__(self, commands: GraphCommands, marks: ReadYourWrites) -> None:
        self.commands, self.marks = commands, marks

    def _wrote(self, w: GraphWrite) -> GraphWrite:
        self.marks.wrote(w.seq)
        return w

    async def entities(
        self, call: Caller, ids: Sequence[str], relations: Literal["none", "either", "both"] = "none"
    ) -> dict[str, Entity]:
        """The entities with these ids (a miss confirmed at the head of the log), by id."""
        return await self.commands.entities(call.namespace, ids, await self.marks.mark(), relations)

    async def create_entities(
        self, call: Caller, items: Sequence[NewEntity], *, namespace: str | None = None, request_id: str | None = None
    ) -> GraphWrite:
        ns, rid = namespace or call.namespace, request_id or call.request_id
        w = await self.commands.create_entities(ns, items, call.principal.actor, rid, await self.marks.mark())
        return self._wrote(w)

    async def change_observations(
        self, call: Caller, changes: Sequence[tuple[str, Sequence[str]]], *, remove: bool, strict: bool,
        namespace: str | None = None,
    ) -> GraphWrite:  # fmt: skip
        ns = namespace or call.namespace
        w = await self.commands.change_observations(
            ns, changes, call.principal.actor, call.request_id, await self.marks.mark(), remove=remove, strict=strict
        )
        return self._wrote(w)

    async def delete_entities(self, call: Caller, names: Sequence[str], *, reason: str | None = None) -> GraphWrite:
        w = await self.commands.delete_entities(
            call.namespace, names, call.principal.actor, call.request_id, await self.marks.mark(), reason=reason
        )
        return self._wrote(w)

    async def create_relations(
        self, call: Caller, items: Sequence[NewRelation], *, namespace: str | None = None
    ) -> GraphWrite:
        ns = namespace or call.namespace
        w = await self.commands.create_relations(
            ns, items, call.principal.actor, call.request_id, await self.marks.mark()
        )
        return self._wrote(w)

    async def delete_relations(self, call: Caller, items: Sequence[NewRelation]) -> GraphWrite:
        w = await self.commands.delete_relations(
            call.namespace, items, call.principal.actor, call.request_id, await self.marks.mark()
        )
        return self._wrote(w)
