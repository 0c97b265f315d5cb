"""Knowledge-graph tools (group "graph"): entities with observations, directed weighted relations, reads
of the graph now or as of a past moment, and traversal. Each change is an event; names compare by their
normalized key (case, Unicode form and spacing aside), so "Alice" and "alice" are one entity; memories
whose content names an entity mention it, and hybrid memory_search uses those links (graph_weight)."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from mneme.domain.graph import name_key
from mneme.errors import EntityNotFound
from mneme.ids import entity_id_for
from schemas.queries import Entity, GraphEntities, GraphResult, GraphTraverse, Relation
from services.gateway.gateway import Call
from services.gateway.graph_commands import (
    NewEntity,
    NewRelation,
    entity_name,
    observation,
    relation_type,
)
from services.gateway.params import READ, WRITE, AsOfArg, Namespace, Unit
from services.gateway.toolkit import Toolset

tools = Toolset(group="graph", flow=True)

Name = Annotated[str, Field(min_length=1, max_length=200, description="Entity name (case and spacing aside).")]
Observations = Annotated[list[Annotated[str, Field(min_length=1, max_length=4000)]], Field(max_length=200)]
RelType = Annotated[str, Field(min_length=1, max_length=200, description="e.g. works_on, knows, uses.")]
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


class EntityOut(BaseModel):
    id: str
    name: str
    type: str
    description: str | None = None
    observations: list[str]
    depth: int | None = None

    @classmethod
    def of(cls, e: Entity) -> EntityOut:
        return cls(
            id=e.id,
            name=e.name,
            type=e.entity_type,
            description=e.description,
            observations=e.observations,
            depth=e.depth,
        )


class RelationOut(BaseModel):
    id: str
    source: str
    target: str
    type: str
    weight: float

    @classmethod
    def of(cls, r: Relation) -> RelationOut:
        return cls(id=r.id, source=r.from_name, target=r.to_name, type=r.relation_type, weight=r.weight)


class GraphOut(BaseModel):
    results: list[EntityOut] = Field(description="Entities.")
    relations: list[RelationOut]
    total: int
    truncated: bool = False

    @classmethod
    def of(cls, g: GraphResult) -> GraphOut:
        return cls(
            results=[EntityOut.of(e) for e in g.entities],
            relations=[RelationOut.of(r) for r in g.relations],
            total=g.total,
            truncated=g.truncated,
        )


class EntityReceipt(BaseModel):
    entity: EntityOut
    created: bool
    added: list[str]
    removed: list[str] = Field(default_factory=list)


class RelationReceipt(BaseModel):
    relation: RelationOut
    created: bool


class Forgotten(BaseModel):
    entities: int
    relations: int
    not_found: list[str]


@tools.tool(intent="write", hints=WRITE)
async def graph_entity(
    call: Call,
    name: Name,
    type: Annotated[
        str, Field(min_length=1, max_length=64, description="person, project, concept, file, …")
    ] = "concept",
    description: Annotated[str | None, Field(max_length=2000)] = None,
    add: Observations | None = None,
    remove: Observations | None = None,
    namespace: Namespace = None,
) -> EntityReceipt:
    """Create an entity, or find it by name and change its observations: `add` appends facts about it, `remove`
    drops them. An existing entity is returned as it is (its type and description unchanged)."""
    n = entity_name(name)
    obs = [observation(o, f"add[{i}]") for i, o in enumerate(add or [])]
    graph = call.app.graph
    w = await graph.create_entities(call, [NewEntity(n, type, tuple(obs), description)])
    created = bool(w.created)
    added: list[str] = list(obs) if created else []
    removed: list[str] = []
    if not created and obs:
        c = await graph.change_observations(call, [(n, obs)], remove=False, strict=True)
        added = c.changed.get(n, [])
    if remove:
        c = await graph.change_observations(call, [(n, list(remove))], remove=True, strict=True)
        removed = c.changed.get(n, [])
    got = await graph.entities(call, [(w.created or w.existing)[0].id])
    return EntityReceipt(entity=EntityOut.of(next(iter(got.values()))), created=created, added=added, removed=removed)


@tools.tool(intent="write", hints=WRITE)
async def graph_relate(
    call: Call,
    source: Name,
    target: Name,
    type: RelType,
    weight: Unit = 1.0,
    namespace: Namespace = None,
) -> RelationReceipt:
    """Relate two existing entities: source -[type]-> target, weighted 0-1. The same triple is one relation."""
    item = NewRelation(
        entity_name(source, "source"), entity_name(target, "target"), relation_type(type, "type"), weight
    )
    try:
        w = await call.app.graph.create_relations(call, [item])
    except EntityNotFound as exc:  # named by this tool's arguments, not the batch's relations[0].from/to
        exc.field = "source" if exc.field == "relations[0].from" else "target"
        raise
    rel = (w.created or w.existing)[0]
    assert isinstance(rel, Relation)
    return RelationReceipt(relation=RelationOut.of(rel), created=bool(w.created))


class TripleIn(BaseModel):
    source: Name
    target: Name
    type: RelType


@tools.tool(intent="write", hints=DESTRUCTIVE)
async def graph_forget(
    call: Call,
    entities: Annotated[list[Name], Field(max_length=1000)] | None = None,
    relations: Annotated[list[TripleIn], Field(max_length=1000)] | None = None,
    namespace: Namespace = None,
) -> Forgotten:
    """Delete entities (with every relation that touches them) and relations. Their history stays readable
    with as_of."""
    names = [entity_name(n, f"entities[{i}]") for i, n in enumerate(entities or [])]
    not_found: list[str] = []
    deleted_e = deleted_r = 0
    if relations:
        items = [NewRelation(r.source, r.target, r.type) for r in relations]
        w = await call.app.graph.delete_relations(call, items)
        deleted_r = w.deleted
    if names:
        w = await call.app.graph.delete_entities(call, names)
        deleted_e, not_found = w.deleted, w.missing
    return Forgotten(entities=deleted_e, relations=deleted_r, not_found=not_found)


@tools.tool(intent="read", hints=READ)
async def graph_get(
    call: Call,
    names: Annotated[list[Name], Field(max_length=200)] | None = None,
    text: Annotated[str | None, Field(max_length=2048, description="Substring of a name, type or observation.")] = None,
    type: Annotated[str | None, Field(max_length=64)] = None,
    related_to: Annotated[str | None, Field(max_length=200, description="Traverse from this entity instead.")] = None,
    depth: Annotated[int, Field(ge=1, le=3)] = 1,
    direction: Literal["outgoing", "incoming", "both"] = "outgoing",
    as_of: AsOfArg = None,
    limit: Annotated[int, Field(ge=1, le=1000)] = 100,
    offset: Annotated[int, Field(ge=0)] = 0,
    namespace: Namespace = None,
) -> GraphOut:
    """Entities with their observations and relations (those touching them), now or as of a past moment: by
    name, by text, by type, or all; or, with related_to, those within `depth` hops of one entity following
    relations out, in or both ways (each once, with its depth)."""
    gw = call.gw
    at = await gw.as_of(as_of)
    if related_to is not None:
        start = entity_name(related_to, "related_to")
        got = await call.app.reads.send(
            call,
            GraphTraverse(
                namespace=call.namespace,
                now=gw.now(),
                entity_id=entity_id_for(call.namespace, name_key(start)),
                depth=depth,
                direction=direction,
                max_nodes=limit,
                as_of=at,
            ),
        )
        if not got.entities:
            raise EntityNotFound(start, field="related_to")
    else:
        got = await call.app.reads.send(
            call,
            GraphEntities(
                namespace=call.namespace,
                now=gw.now(),
                names=tuple(names) if names is not None else None,
                text=text,
                entity_type=type,
                limit=limit,
                offset=offset,
                as_of=at,
            ),
        )
    call.read([e.id for e in got.entities])
    return GraphOut.of(got)
