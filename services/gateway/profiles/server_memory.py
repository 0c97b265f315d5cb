"""The `server-memory` profile: the reference knowledge-graph MCP server's nine tools, over the one log.

@modelcontextprotocol/server-memory (npm 2026.8.31, serverInfo memory-server 0.6.3) is the most used MCP
memory server. It keeps its graph in one JSONL file that every call reads and rewrites, so two processes
sharing the file lose each other's writes. Here every change is an event with optimistic concurrency on its
entity's or relation's subject: any number of gateways write one namespace and nothing is lost.

The tools are listed exactly as that server lists them (services/gateway/profiles/server_memory_tools.json,
its tools/list as captured): names, titles, input and output schemas, annotations. Results carry the same
structured content and the same text (the JSON pretty-printed with two spaces, or the delete message); an
error is its message as plain text ("Entity with name X not found").

Behaviour kept from the reference: create_entities skips names that exist (and repeats within the call) and
returns only the new ones; create_relations fails, writing nothing, when an end does not exist, and skips
relations that exist; add_observations fails when an entity does not exist and returns only the observations
it added; the deletes are idempotent and say what matched nothing; search_nodes is a case-insensitive
substring match over names, types and observations; search_nodes and open_nodes return the relations with
at least one end among the entities found. Entities list in the order they were created.

Where mneme differs, on purpose (docs/profiles.md): names compare by their normalized key (case, Unicode
form and spacing ignored), so "Alice" and "alice" are one entity; a deleted entity's history stays in the
log and `as_of` reads of the native tools still see it; every profile's agents share this graph.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from schemas.queries import GraphEntities, GraphResult
from services.gateway.error_styles import PlainErrors
from services.gateway.gateway import Call
from services.gateway.graph_commands import NewEntity, NewRelation, entity_name, observation, relation_type
from services.gateway.toolkit import Profile, Toolset

TOOLS_JSON = Path(__file__).with_name("server_memory_tools.json")
LISTED: dict[str, dict[str, Any]] = {t["name"]: t for t in json.loads(TOOLS_JSON.read_text())["tools"]}


def _hints(name: str) -> ToolAnnotations:
    a = LISTED[name]["annotations"]
    return ToolAnnotations(
        read_only_hint=a["readOnlyHint"],
        destructive_hint=a["destructiveHint"],
        idempotent_hint=a["idempotentHint"],
        open_world_hint=a["openWorldHint"],
    )


class EntityIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    entityType: str
    observations: list[str]


class RelationIn(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    from_: str = Field(alias="from")
    to: str
    relationType: str


class ObservationsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entityName: str
    contents: list[str]


class DeletionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entityName: str
    observations: list[str]


tools = Toolset(group="graph")

Query = Annotated[str, Field(max_length=2048)]


def _result(structured: dict[str, Any], shown: Any) -> CallToolResult:
    """The reference's answer: the structured content, and `shown` (the JSON with two-space indents, or a
    message) as the text."""
    text = shown if isinstance(shown, str) else json.dumps(shown, indent=2, ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


def _entity(e: Any) -> dict[str, Any]:
    return {"name": e.name, "entityType": e.entity_type, "observations": list(e.observations)}


def _relation(r: Any) -> dict[str, Any]:
    return {"from": r.from_name, "to": r.to_name, "relationType": r.relation_type}


def _graph(got: GraphResult) -> CallToolResult:
    graph = {"entities": [_entity(e) for e in got.entities], "relations": [_relation(r) for r in got.relations]}
    return _result(graph, graph)


async def _read(call: Call, **filters: Any) -> CallToolResult:
    got = await call.app.reads.ask(call, GraphEntities, **filters)
    call.read([e.id for e in got.entities])
    return _graph(got)


@tools.tool(intent="write", hints=_hints("create_entities"))
async def create_entities(call: Call, entities: list[EntityIn]) -> CallToolResult:
    """Create multiple new entities in the knowledge graph"""
    items = [
        NewEntity(
            name=entity_name(e.name, f"entities[{i}].name"),
            entity_type=e.entityType,
            observations=tuple(
                observation(o, f"entities[{i}].observations[{j}]") for j, o in enumerate(e.observations)
            ),
        )
        for i, e in enumerate(entities)
    ]
    w = await call.app.graph.create_entities(call, items)
    created = [_entity(e) for e in w.created]
    return _result({"entities": created}, created)


@tools.tool(intent="write", hints=_hints("create_relations"))
async def create_relations(call: Call, relations: list[RelationIn]) -> CallToolResult:
    """Create multiple new relations between entities in the knowledge graph. Relations should be in active voice"""
    items = [
        NewRelation(
            from_name=entity_name(r.from_, f"relations[{i}].from"),
            to_name=entity_name(r.to, f"relations[{i}].to"),
            relation_type=relation_type(r.relationType, f"relations[{i}].relationType"),
        )
        for i, r in enumerate(relations)
    ]
    w = await call.app.graph.create_relations(call, items)
    created = [_relation(r) for r in w.created]
    return _result({"relations": created}, created)


@tools.tool(intent="write", hints=_hints("add_observations"))
async def add_observations(call: Call, observations: list[ObservationsIn]) -> CallToolResult:
    """Add new observations to existing entities in the knowledge graph"""
    changes = [
        (
            entity_name(o.entityName, f"observations[{i}].entityName"),
            [observation(c, f"observations[{i}].contents[{j}]") for j, c in enumerate(o.contents)],
        )
        for i, o in enumerate(observations)
    ]
    w = await call.app.graph.change_observations(call, changes, remove=False, strict=True)
    results = [{"entityName": name, "addedObservations": w.changed.get(name, [])} for name, _ in changes]
    return _result({"results": results}, results)


@tools.tool(intent="write", hints=_hints("delete_entities"))
async def delete_entities(call: Call, entityNames: list[str]) -> CallToolResult:
    """Delete multiple entities and their associated relations from the knowledge graph"""
    names = [entity_name(n, f"entityNames[{i}]") for i, n in enumerate(entityNames)]
    w = await call.app.graph.delete_entities(call, names)
    missing = [n for n in names if n in w.missing]
    message = (
        "Entities deleted successfully"
        if not missing
        else f"Deleted {len(names) - len(missing)} of {len(names)} entities. Not found: {', '.join(missing)}"
    )
    return _result({"success": True, "message": message}, message)


@tools.tool(intent="write", hints=_hints("delete_observations"))
async def delete_observations(call: Call, deletions: list[DeletionIn]) -> CallToolResult:
    """Delete specific observations from entities in the knowledge graph"""
    changes = [
        (entity_name(d.entityName, f"deletions[{i}].entityName"), list(d.observations)) for i, d in enumerate(deletions)
    ]
    w = await call.app.graph.change_observations(call, changes, remove=True, strict=False)
    requested = sum(len(obs) for _, obs in changes)
    if w.deleted == requested:
        message = "Observations deleted successfully"
    else:
        message = f"Deleted {w.deleted} of {requested} observations." + (
            f" Entities not found: {', '.join(w.missing)}" if w.missing else ""
        )
    return _result({"success": True, "message": message}, message)


@tools.tool(intent="write", hints=_hints("delete_relations"))
async def delete_relations(call: Call, relations: list[RelationIn]) -> CallToolResult:
    """Delete multiple relations from the knowledge graph"""
    items = [NewRelation(from_name=r.from_, to_name=r.to, relation_type=r.relationType) for r in relations]
    w = await call.app.graph.delete_relations(call, items)
    message = (
        "Relations deleted successfully"
        if w.deleted == len(items)
        else f"Deleted {w.deleted} of {len(items)} relations. The rest matched nothing."
    )
    return _result({"success": True, "message": message}, message)


@tools.tool(intent="read", hints=_hints("read_graph"))
async def read_graph(call: Call) -> CallToolResult:
    """Read the entire knowledge graph"""
    return await _read(call, relations="both")


@tools.tool(intent="read", hints=_hints("search_nodes"))
async def search_nodes(call: Call, query: Query) -> CallToolResult:
    """Search for nodes in the knowledge graph based on a query"""
    return await _read(call, text=query, relations="either")


@tools.tool(intent="read", hints=_hints("open_nodes"))
async def open_nodes(call: Call, names: list[str]) -> CallToolResult:
    """Open specific nodes in the knowledge graph by their names"""
    return await _read(call, names=tuple(names), relations="either")


PROFILE = Profile(
    name="server-memory",
    tools=tools,
    instructions="",
    errors=PlainErrors(),
    context="never",
    listed=LISTED,
    server=("memory-server", "0.6.3"),  # as the reference answers initialize
)
