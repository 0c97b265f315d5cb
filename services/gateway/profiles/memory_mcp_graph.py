"""memory-mcp's knowledge-graph tools: entities and directed, weighted relations of the domain's graph, and
traversal. An entity of a user's graph is named `<id>@<user_id>` (memory_mcp_ops.py), so that the tools taking
entity ids reach it.
"""

from __future__ import annotations

from mneme.errors import InvalidInput
from schemas.queries import GraphTraverse
from services.gateway.gateway import Call
from services.gateway.graph_commands import NewEntity, NewRelation, entity_name
from services.gateway.graph_commands import relation_type as relation_label
from services.gateway.params import READ, WRITE
from services.gateway.profiles import memory_mcp_ops as ops
from services.gateway.profiles.memory_mcp_models import (
    Created,
    Depth,
    Direction,
    EntityOut,
    Related,
    RelationOut,
    UserId,
    Weight,
)
from services.gateway.toolkit import Toolset

tools = Toolset()


@tools.tool(intent="write", hints=WRITE)
async def create_entity(
    call: Call,
    name: str,
    entity_type: str | None = None,
    description: str | None = None,
    user_id: UserId = None,
) -> Created:
    """Create a knowledge graph entity."""
    ops.enter(call, user_id, "write")  # (the call acts in the user's namespace from here on)
    item = NewEntity(name=entity_name(name, "name"), entity_type=entity_type or "", description=ops.given(description))
    w = await call.app.graph.create_entities(call, [item])
    entity = (w.created or w.existing)[0]
    return Created(id=ops.entity_ref(entity.id, user_id))


@tools.tool(intent="write", hints=WRITE)
async def create_relation(
    call: Call, from_entity: str, to_entity: str, relation_type: str, weight: Weight = 1.0
) -> Created:
    """Create a directed relation between two entities."""
    graph = call.app.graph
    (fid, user), (tid, to_user) = ops.split_entity_ref(from_entity), ops.split_entity_ref(to_entity)
    if to_user != user:
        raise InvalidInput("to_entity", "is in another user's graph than from_entity")
    kind = relation_label(relation_type, "relation_type")
    ops.enter(call, user, "write")  # (the call acts in the user's namespace from here on)
    found = await graph.entities(call, [fid, tid])
    for eid, ref, fld in ((fid, from_entity, "from_entity"), (tid, to_entity, "to_entity")):
        if eid not in found:
            raise ops.EntityNotFound(ref, fld)
    rel = NewRelation(from_name=found[fid].name, to_name=found[tid].name, relation_type=kind, weight=weight)
    w = await graph.create_relations(call, [rel])
    return Created(id=(w.created or w.existing)[0].id)


@tools.tool(intent="read", hints=READ)
async def get_related(call: Call, entity_id: str, depth: Depth = 1, direction: Direction = "outgoing") -> Related:
    """Get entities related to a given entity via graph traversal."""
    eid, user = ops.split_entity_ref(entity_id)
    ops.enter(call, user, "read")  # (the call reads in the user's namespace from here on)
    got = await call.app.reads.ask(call, GraphTraverse, entity_id=eid, depth=depth, direction=direction)
    if not any(e.id == eid for e in got.entities):
        raise ops.EntityNotFound(entity_id, "entity_id")
    entities = [
        EntityOut(
            id=ops.entity_ref(e.id, user),
            name=e.name,
            entity_type=e.entity_type or None,
            description=e.description,
            depth=e.depth or 0,
        )
        for e in got.entities
        if e.id != eid
    ]
    relations = [
        RelationOut(
            id=r.id,
            from_entity=ops.entity_ref(r.from_id, user),
            to_entity=ops.entity_ref(r.to_id, user),
            relation_type=r.relation_type,
            weight=r.weight,
        )
        for r in got.relations
    ]
    call.read([e.id for e in got.entities])
    return Related(entities=entities, relations=relations, entity_count=len(entities), relation_count=len(relations))
