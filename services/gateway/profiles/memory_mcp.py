"""The `memory-mcp` profile (../shared/seeds/memory-mcp-contract.md): an agent memory server with a knowledge
graph, bi-temporal validity, hybrid recall and code search, over the one log: the contract's 21 tools.

A thin translation onto the domain: memories are the domain's memories (memory_type is their kind), entities
and relations the knowledge graph's, searches the projector's. The tools are listed with the contract's own
input schemas (memory_mcp_schemas.py); errors are the contract's plain text. docs/profiles.md maps every tool
and records every choice. memory_mcp_graph.py: the knowledge-graph tools; memory_mcp_models.py: arguments and
results; memory_mcp_ops.py: tenants, status, reset; memory_mcp_code.py: the code-index tools.
"""

from __future__ import annotations

import inspect
import json
import math
from typing import Annotated, Any, get_args, get_origin

from mcp.types import CallToolResult, TextContent
from pydantic import Field, TypeAdapter

from mneme.domain import validation as v
from mneme.errors import InvalidInput, MemoryNotFound
from schemas.commands import CreateMemory, DeleteMemory, InvalidateMemory, UpdateMemory
from schemas.queries import SearchCode, SearchMemories
from services.gateway.error_styles import PlainErrors
from services.gateway.gateway import Call
from services.gateway.params import CREATE, DESTRUCTIVE, READ, WRITE, UtcTime
from services.gateway.profiles import memory_mcp_code, memory_mcp_graph
from services.gateway.profiles import memory_mcp_ops as ops
from services.gateway.profiles.memory_mcp_models import (
    Deleted,
    Invalidated,
    ListLimit,
    MemoryList,
    MemoryOut,
    MemoryType,
    Offset,
    RecallItem,
    RecallOut,
    Reset,
    SearchItem,
    SearchLimit,
    SearchOut,
    SignalWeight,
    Status,
    Stored,
    UserId,
    Valid,
    ValidAt,
)
from services.gateway.profiles.memory_mcp_schemas import CONTRACT
from services.gateway.profiles.vocab import MEMORY_MCP
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
    w = await gw.commands.create(
        cmd, actor=call.principal.actor, request_id=call.request_id, min_seq=await gw.min_seq()
    )
    gw.noted(w.seq)
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
    gw = call.gw
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
    w = await gw.commands.update(
        cmd, actor=call.principal.actor, request_id=call.request_id, min_seq=await gw.min_seq()
    )
    gw.noted(w.seq)
    return MemoryOut.of(w.memory or row.memory)


@_own.tool(intent="write", hints=DESTRUCTIVE)
async def delete_memory(call: Call, id: str) -> Deleted:
    """Delete a memory by ID (hard delete)."""
    gw = call.gw
    try:
        row = await ops.memory_row(call, id)
    except MemoryNotFound:  # already gone (or never there): nothing was deleted
        return Deleted(deleted=False)
    cmd = DeleteMemory(namespace=call.namespace, memory_id=row.memory.id, permanent=True)
    w = await gw.commands.delete(
        cmd, actor=call.principal.actor, request_id=call.request_id, min_seq=await gw.min_seq()
    )
    gw.noted(w.seq)
    return Deleted(deleted=True)


@_own.tool(intent="read", hints=READ)
async def list_memories(call: Call, limit: ListLimit = 20, offset: Offset = 0) -> MemoryList:
    """List memories with pagination, sorted by newest first."""
    rows, total = await ops.memory_rows(call, limit=limit, offset=offset, sort_order="desc")
    return MemoryList(memories=[MemoryOut.of(r.memory) for r in rows], total=total, limit=limit, offset=offset)


# == search ==================================================================================================
async def _search(call: Call, mode: str, query: str, limit: int) -> SearchOut:
    gw = call.gw
    got = await gw.queries.ask(
        SearchMemories(
            namespace=call.namespace,
            now=gw.now(),
            min_seq=await gw.min_seq(),
            mode=mode,  # type: ignore[arg-type]
            query=query,
            limit=limit,
        )
    )
    call.read([h.memory.id for h in got.hits])
    results = [
        SearchItem(
            id=h.memory.id, content=h.memory.content, memory_type=MEMORY_MCP.name_of(h.memory.kind), score=h.score
        )
        for h in got.hits
    ]
    return SearchOut(results=results, count=len(results), query=query)


@_own.tool(intent="read", hints=READ)
async def search(call: Call, query: str, limit: SearchLimit = 10) -> SearchOut:
    """Semantic vector search over memories using HNSW index."""
    return await _search(call, "semantic", query, limit)


@_own.tool(intent="read", hints=READ)
async def search_text(call: Call, query: str, limit: SearchLimit = 10) -> SearchOut:
    """Full-text keyword search using BM25 algorithm."""
    return await _search(call, "keyword", query, limit)


MAX_SIGNAL_WEIGHT = 10.0


def _bounded_weights(*weights: float) -> tuple[float, ...]:
    """recall's weights, each at most MAX_SIGNAL_WEIGHT: larger ones are scaled down together, keeping their
    proportions (the ranking is the same). The contract bounds them by nothing, but the fused score is a logistic
    of the weighted z-scores, and weights like 1e308 put that past what a float holds."""
    top = max(weights)
    if top <= MAX_SIGNAL_WEIGHT:
        return weights
    return tuple(w / top * MAX_SIGNAL_WEIGHT for w in weights)


@_own.tool(intent="read", hints=READ)
async def recall(
    call: Call,
    query: str,
    limit: SearchLimit = 10,
    include_memories: bool = True,
    include_code: bool = False,
    project_id: str | None = None,
    language: str | None = None,
    vector_weight: SignalWeight = 0.40,
    bm25_weight: SignalWeight = 0.15,
    ppr_weight: SignalWeight = 0.45,
) -> RecallOut:
    """Hybrid search combining vector similarity, BM25 keywords, and graph context (PPR). Can search memories, code, or both with Z-Score normalization."""  # noqa: E501
    gw = call.gw
    vector_weight, bm25_weight, ppr_weight = _bounded_weights(vector_weight, bm25_weight, ppr_weight)
    memories: list[RecallItem] = []
    nodes = 0
    if include_memories:
        got = await gw.queries.ask(
            SearchMemories(
                namespace=call.namespace,
                now=gw.now(),
                min_seq=await gw.min_seq(),
                mode="hybrid",
                fusion="zscore",
                query=query,
                limit=limit,
                semantic_weight=vector_weight,
                keyword_weight=bm25_weight,
                graph_weight=ppr_weight,
            )
        )
        call.read([h.memory.id for h in got.hits])
        nodes = got.subgraph_nodes
        memories = [
            RecallItem(
                id=h.memory.id,
                content=h.memory.content,
                source="memory",
                score=h.score,
                vector_score=h.semantic or 0.0,
                bm25_score=h.keyword or 0.0,
                ppr_score=h.graph or 0.0,
            )
            for h in got.hits
        ]
    code: list[RecallItem] = []
    if include_code:
        found = await gw.queries.ask(
            SearchCode(
                namespace=call.namespace,
                now=gw.now(),
                min_seq=await gw.min_seq(),
                query=query,
                project_id=project_id,
                language=language,
                limit=limit,
            )
        )
        code = [
            RecallItem(
                id=h.id,
                content=h.content,
                source="code",
                score=h.score,
                vector_score=h.score,
                bm25_score=0.0,
                ppr_score=0.0,
                file_path=h.path,
                start_line=h.start_line,
                end_line=h.end_line,
            )
            for h in found.hits
        ]
    results = merge_by_zscore(memories, code, limit) if memories and code else (memories or code)[:limit]
    return RecallOut(
        results=results,
        query=query,
        subgraph_nodes=nodes,
        memories_count=sum(1 for r in results if r.source == "memory"),
        code_count=sum(1 for r in results if r.source == "code"),
    )


def merge_by_zscore(memories: list[RecallItem], code: list[RecallItem], limit: int) -> list[RecallItem]:
    """Memories and code chunks on one list: each side's scores standardised over its own results (the two
    scales differ), then merged by that z-score, best first. Each merged result's `score` is its normalised
    score, the standard normal CDF of its z-score (0..1, 0.5 at its side's mean), so the list reads in
    `score` order; `vector_score`, `bm25_score` and `ppr_score` keep the raw signals."""

    def z(items: list[RecallItem]) -> list[tuple[float, RecallItem]]:
        xs = [r.score for r in items]
        mean = sum(xs) / len(xs)
        std = (sum((x - mean) ** 2 for x in xs) / len(xs)) ** 0.5 or 1.0
        return [((r.score - mean) / std, r) for r in items]

    both = z(memories) + z(code)
    both.sort(key=lambda t: -t[0])
    return [
        r.model_copy(update={"score": round(0.5 * (1.0 + math.erf(zs / math.sqrt(2.0))), 6)}) for zs, r in both[:limit]
    ]


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
    gw = call.gw
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
        at=gw.now(),
        reason=ops.given(reason),
        superseded_by=successor,
    )
    w = await gw.commands.govern(
        cmd, actor=call.principal.actor, request_id=call.request_id, min_seq=await gw.min_seq()
    )
    gw.noted(w.seq)
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
    *_own.pick("search", "search_text", "recall"),
    *memory_mcp_graph.tools.specs,
    *_own.pick("get_valid", "get_valid_at", "invalidate"),
    *memory_mcp_code.tools.specs,
    *_own.pick("get_status", "reset_all_memory"),
]
assert len(tools.specs) == len(_own.specs) + len(memory_mcp_graph.tools.specs) + len(memory_mcp_code.tools.specs), (
    "a tool is missing from the order"
)


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
