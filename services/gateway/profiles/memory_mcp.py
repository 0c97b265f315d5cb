"""The `memory-mcp` profile (../shared/seeds/memory-mcp-contract.md): an agent memory server with a knowledge
graph, bi-temporal validity, hybrid recall and code search, over the one log: the contract's 21 tools.

A thin translation onto the domain: memories are the domain's memories (memory_type is their kind), entities
and relations the knowledge graph's, searches the projector's. The tools are listed with the contract's own
input schemas (memory_mcp_schemas.py); errors are the contract's plain text. docs/profiles.md maps every tool
and records every choice. memory_mcp_search.py: the search tools; memory_mcp_graph.py: the knowledge-graph tools;
memory_mcp_models.py: arguments and results; memory_mcp_ops.py: tenants, status, reset; memory_mcp_code.py: the
code-index tools.
"""

from __future__ import annotations

import inspect
import json
from typing import Annotated, Any, get_args, get_origin

from mcp.types import CallToolResult, TextContent
from pydantic import Field, TypeAdapter

from mneme.domain import validation as v
from mneme.errors import InvalidInput, MemoryNotFound
from schemas.commands import CreateMemory, DeleteMemory, InvalidateMemory, UpdateMemory
from services.gateway.error_styles import PlainErrors
from services.gateway.gateway import Call
from services.gateway.params import CREATE, DESTRUCTIVE, READ, WRITE, UtcTime
from services.gateway.profiles import memory_mcp_code, memory_mcp_graph, memory_mcp_search
from services.gateway.profiles import memory_mcp_ops as ops
from services.gateway.profiles.memory_mcp_models import (
    Deleted,
    Invalidated,
    ListLimit,
    MemoryList,
    MemoryOut,
    MemoryType,
    Offset,
    Reset,
    Status,
    Stored,
    UserId,
    Valid,
    ValidAt,
)
from services.gateway.profiles.memory_mcp_schemas import CONTRACT
from services.gateway.profiles.memory_mcp_search import merge_by_zscore as merge_by_zscore  # (its home before)
from services.gateway.server import package_version
from services.gateway.toolkit import Profile, Toolset

_own = Toolset()

DEFAULT_TYPE = "semantic"  # memory_type when store_memory is given none (the contract's example memory's)
IMPORTANCE = 1.0  # importance_score of a memory stored here (the contract's example)
RESET_MESSAGE = "Confirmation required. Set confirm=true to delete all data."


# == memory operations =======================================================================================
@_own.tool(intent="write", hints=CREATE)
async def store_memory(
    call: Call,
    content: str,
    memory_type: MemoryType | None = None,
    user_id: UserId = None,
    metadata: dict[str, Any] | None = None,
) -> Stored:
    """Store a new memory with automatic embedding generation."""
    gw = call.gw
    ns = ops.enter(call, user_id, "write")
    cmd = CreateMemory(
        namespace=ns,
        content=content,
        kind=memory_type or DEFAULT_TYPE,
        metadata=metadata or {},
        importance=IMPORTANCE,
        valid_from=gw.now(),
    )
    w = await call.app.memories.create(call, cmd)
    assert w.memory is not None
    return Stored(id=w.memory.id)


@_own.tool(intent="read", hints=READ)
async def get_memory(call: Call, id: str) -> MemoryOut:
    """Get a memory by its ID."""
    row = await ops.memory_row(call, id)
    call.read([row.memory.id])
    return MemoryOut.of(row.memory)


@_own.tool(intent="write", hints=WRITE)
async def update_memory(
    call: Call,
    id: str,
    content: str | None = None,
    memory_type: MemoryType | None = None,
    metadata: dict[str, Any] | None = None,
) -> MemoryOut:
    """Update an existing memory. Only provided fields will be updated."""
    row = await ops.memory_row(call, id)
    fields: dict[str, Any] = {}
    if content is not None:
        fields["content"] = content
    if memory_type is not None:
        fields["kind"] = memory_type
    if metadata is not None:
        fields["metadata"] = metadata
    if not fields:  # nothing provided: nothing to update
        return MemoryOut.of(row.memory)
    cmd = UpdateMemory(namespace=call.namespace, memory_id=row.memory.id, **fields)
    w = await call.app.memories.apply("update", call, cmd)
    return MemoryOut.of(w.memory or row.memory)


@_own.tool(intent="write", hints=DESTRUCTIVE)
async def delete_memory(call: Call, id: str) -> Deleted:
    """Delete a memory by ID (hard delete)."""
    try:
        row = await ops.memory_row(call, id)
    except MemoryNotFound:  # already gone (or never there): nothing was deleted
        return Deleted(deleted=False)
    cmd = DeleteMemory(namespace=call.namespace, memory_id=row.memory.id, permanent=True)
    await call.app.memories.apply("delete", call, cmd)
    return Deleted(deleted=True)


@_own.tool(intent="read", hints=READ)
async def list_memories(call: Call, limit: ListLimit = 20, offset: Offset = 0) -> MemoryList:
    """List memories with pagination, sorted by newest first."""
    rows, total = await ops.memory_rows(call, limit=limit, offset=offset, sort_order="desc")
    return MemoryList(memories=[MemoryOut.of(r.memory) for r in rows], total=total, limit=limit, offset=offset)


# == temporal ================================================================================================
@_own.tool(intent="read", hints=READ)
async def get_valid(call: Call, user_id: UserId = None, limit: ListLimit = 20) -> Valid:
    """Get all currently valid memories."""
    ops.enter(call, user_id, "read")
    rows, _ = await ops.memory_rows(call, valid_at=call.gw.now(), limit=limit, sort_order="desc")
    return Valid(results=[MemoryOut.of(r.memory) for r in rows], count=len(rows))


@_own.tool(intent="read", hints=READ)
async def get_valid_at(call: Call, timestamp: UtcTime, user_id: UserId = None, limit: ListLimit = 20) -> ValidAt:
    """Get memories valid at a specific point in time."""
    at = v.utc(timestamp, "timestamp")
    ops.enter(call, user_id, "read")
    rows, _ = await ops.memory_rows(call, valid_at=at, limit=limit, sort_order="desc")
    return ValidAt(results=[MemoryOut.of(r.memory) for r in rows], count=len(rows), timestamp=at)


@_own.tool(intent="write", hints=WRITE)
async def invalidate(call: Call, id: str, reason: str | None = None, superseded_by: str | None = None) -> Invalidated:
    """Invalidate (soft-delete) a memory. Sets valid_until to now."""
    row = await ops.memory_row(call, id)
    successor = None
    if ops.given(superseded_by) is not None:
        assert superseded_by is not None
        try:
            successor = (await ops.memory_row(call, superseded_by)).memory.id
        except MemoryNotFound:
            raise InvalidInput("superseded_by", f"no memory {superseded_by}") from None
    cmd = InvalidateMemory(
        namespace=call.namespace,
        memory_id=row.memory.id,
        at=call.gw.now(),
        reason=ops.given(reason),
        superseded_by=successor,
    )
    await call.app.memories.apply("govern", call, cmd)
    return Invalidated(invalidated=True)  # also when its valid time had already ended: it is invalid


# == system ==================================================================================================
@_own.tool(intent="read", hints=READ)
async def get_status(call: Call) -> Status:
    """Get server status and health information."""
    memories, entities = await ops.counts(call)
    embedding = await ops.embedding_status(call)
    return Status(
        version=package_version(),
        status="healthy",
        memories_count=memories,
        entities_count=entities,
        code_chunks_count=await ops.code_chunks(call),
        embedding=embedding,
        db_dimension=embedding.dimensions,
    )


@_own.tool(intent="write", hints=DESTRUCTIVE)
async def reset_all_memory(
    call: Call, confirm: Annotated[bool, Field(strict=True)] = False
) -> Annotated[CallToolResult, Reset]:
    """Delete ALL data (memories, entities, relations, code_chunks). Requires explicit confirmation."""
    if confirm is not True:
        out = Reset(reset=False, message=RESET_MESSAGE)
    else:
        out = Reset(reset=True, deleted=await ops.reset_namespace(call))
    data = out.model_dump(mode="json", exclude_none=True)
    text = json.dumps(data, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


# == the listing and the profile =============================================================================
tools = Toolset()
tools.specs = [
    *_own.pick("store_memory", "get_memory", "update_memory", "delete_memory", "list_memories"),
    *memory_mcp_search.tools.specs,
    *memory_mcp_graph.tools.specs,
    *_own.pick("get_valid", "get_valid_at", "invalidate"),
    *memory_mcp_code.tools.specs,
    *_own.pick("get_status", "reset_all_memory"),
]
assert len(tools.specs) == len(_own.specs) + sum(
    len(m.tools.specs) for m in (memory_mcp_search, memory_mcp_graph, memory_mcp_code)
), "a tool is missing from the order"


def _result_model(spec_fn: Any) -> Any:
    ann = inspect.signature(spec_fn, eval_str=True).return_annotation
    return get_args(ann)[1] if get_origin(ann) is Annotated else ann


LISTED: dict[str, dict[str, Any]] = {
    s.name: {
        "name": s.name,
        "description": CONTRACT[s.name]["description"],
        "inputSchema": CONTRACT[s.name]["inputSchema"],
        "outputSchema": TypeAdapter(_result_model(s.fn)).json_schema(),
        "annotations": s.hints.model_dump(by_alias=True, exclude_none=True),
    }
    for s in tools.specs
}


def _not_found(message: str, details: dict[str, Any]) -> str:
    return message.split(" expired at ")[0]  # "Memory not found: {id}"


NOT_READY = "Embedding service not ready. Please try again."
DB_ERROR = "Database error. Please try again."

ERRORS = PlainErrors(
    messages={
        "MEMORY_NOT_FOUND": _not_found,
        "EMBEDDING_MODEL_LOADING": lambda m, d: NOT_READY,
        "EMBEDDING_MODEL_UNAVAILABLE": lambda m, d: NOT_READY,
        "INDEXING": lambda m, d: NOT_READY,
        "CONFLICT": lambda m, d: DB_ERROR,
        "PROJECTION_LAG": lambda m, d: DB_ERROR,
        "UNAVAILABLE": lambda m, d: DB_ERROR,
    }
)

PROFILE = Profile(
    name="memory-mcp",
    tools=tools,
    instructions="AI agent memory server with knowledge graph and code search. 21 tools available.",
    errors=ERRORS,
    context="never",
    listed=LISTED,
    server=("memory-mcp", "0.1.0"),  # the contract's serverInfo
)
