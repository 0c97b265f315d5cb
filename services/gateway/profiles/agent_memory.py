"""The `agent-memory` profile: the Agent Memory Server's five tools (../shared/seeds/agent-memory-server-tools.md)
over mneme's one memory.

Typed memories (core / learning / task: the domain's `kind`) with an importance level (high / medium / low on
the native 0-1 scale), queried with filters, keyword search, sorting and pagination, archived or deleted, and
counted. Every tool is a thin translation onto the application's use cases (call.app): the domain validates and
decides, the projections answer, and what an agent stores here every other profile reads. The shapes and the
error format are in agent_memory_shapes.py; docs/profiles.md (agent-memory) maps each tool and every choice.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET
from pydantic import Field

from mneme.domain import validation as v
from mneme.domain.state import ARCHIVED
from mneme.errors import InvalidInput
from schemas.commands import CreateMemory, DeleteMemory, RestoreMemory, UpdateMemory
from schemas.queries import ListMemories, MemoryStats, SearchMemories
from services.gateway.gateway import Call, Gateway
from services.gateway.params import CREATE, DESTRUCTIVE, READ, WRITE
from services.gateway.profiles.agent_memory_shapes import (
    ERRORS,
    NO_DEFAULT,
    STORED,
    AgentMemory,
    ByImportance,
    ByType,
    Category,
    Content,
    Deleted,
    Id,
    Level,
    MemoryStatsOut,
    Page,
    SortBy,
    Stored,
    TagCount,
    Tags,
    Type,
    Updated,
    level_of,
    level_range,
    shown_default,
)
from services.gateway.profiles.vocab import AGENT_MEMORY
from services.gateway.toolkit import Profile, Toolset

SEARCH_CAP = 1000  # the most matches a search text can have (total counts at most this many)
CONTRACT_FIELD = {"kind": "type"}  # domain field -> the contract's name, in updated_fields

tools = Toolset()


def _gw(call: Call) -> Gateway:
    assert call.gw is not None
    return call.gw


def _category(value: str | None) -> str | None:
    """A category as the domain keeps it; '' (or blanks) is no category."""
    return v.label(value, "category") if value is not None and value.strip() else None


@tools.tool(intent="write", hints=CREATE)
async def store_memory(
    call: Call,
    type: Annotated[Type, Field(description="Type of memory to store")],
    content: Annotated[Content, Field(description="The memory content")],
    category: Annotated[
        Category,
        Field(description="Optional category (e.g., 'preference', 'fact', 'pattern')", json_schema_extra=NO_DEFAULT),
    ] = None,
    tags: Annotated[Tags, Field(description="Optional tags for categorization", json_schema_extra=NO_DEFAULT)] = None,
    importance: Annotated[
        Level, Field(description="Memory importance level", json_schema_extra=shown_default("medium"))
    ] = None,
    id: Annotated[
        Id, Field(description="Memory ID for updates (omit for new memories)", json_schema_extra=NO_DEFAULT)
    ] = None,
) -> Stored:
    """Store a new memory or update an existing one. Memories persist across sessions and help maintain context.
    Without id a new memory is created; with the id of an existing memory it is updated (type and content
    replaced; category, tags and importance replaced when given, kept when omitted). Returns the complete memory."""
    if id is not None:
        memory, _ = await _update(
            call, id, kind=type, content=content, category=category, tags=tags, importance=importance
        )
        return Stored(id=memory.id, created=False, memory=memory)
    cmd = CreateMemory(
        namespace=call.namespace,
        content=content,
        kind=type,
        category=_category(category),
        tags=tuple(tags or ()),
        importance=STORED[importance or "medium"],
    )
    w = await call.app.memories.create(call, cmd)
    assert w.memory is not None
    return Stored(id=w.memory.id, created=True, memory=AgentMemory.of(w.memory))


@tools.tool(intent="read", hints=READ)
async def query_memories(
    call: Call,
    type: Annotated[Type, Field(description="Filter by memory type", json_schema_extra=NO_DEFAULT)] = None,
    tags: Annotated[list[str], Field(description="Filter by tags (AND logic)", json_schema_extra=NO_DEFAULT)] = None,
    search: Annotated[
        str, Field(max_length=200, description="Search text in memory content", json_schema_extra=NO_DEFAULT)
    ] = None,
    importance: Annotated[Level, Field(description="Filter by importance level", json_schema_extra=NO_DEFAULT)] = None,
    category: Annotated[str, Field(description="Filter by category", json_schema_extra=NO_DEFAULT)] = None,
    archived: Annotated[bool, Field(description="Include archived memories")] = False,
    limit: Annotated[int, Field(ge=1, le=100, description="Maximum number of results")] = 10,
    offset: Annotated[int, Field(ge=0, description="Number of results to skip (for pagination)")] = 0,
    sort_by: Annotated[SortBy, Field(description="Field to sort by")] = "accessed_at",
    sort_order: Annotated[Literal["asc", "desc"], Field(description="Sort order")] = "desc",
) -> Page:
    """Query and filter stored memories. Filters combine (all must hold); search keeps the memories whose content
    contains any of its words (case and word endings ignored: 'tests' finds 'testing'). Results are sorted by
    sort_by (default: most recently accessed first) and paged with limit/offset; total counts every match."""
    gw, reads = _gw(call), call.app.reads
    lo, hi = level_range(importance) if importance is not None else (None, None)
    filters: dict[str, Any] = {
        **(AGENT_MEMORY.filter_of(type) if type is not None else {}),  # what shows as that type
        "tags": v.tags(tags or ()),
        "category": _category(category),
        "importance_min": lo,
        "importance_max": hi,
    }
    ids = None
    if search is not None and search.strip():
        found = await reads.ask(
            call,
            SearchMemories,
            mode="keyword",
            query=search,
            limit=SEARCH_CAP,
            threshold=0.0,
            status="any" if archived else "live",
            **filters,
        )
        ids = tuple(h.memory.id for h in found.hits if h.memory.namespace == call.namespace)
    got = await reads.ask(
        call,
        ListMemories,
        status="any" if archived else "live",
        limit=limit,
        offset=offset,
        sort_by=sort_by,
        sort_order=sort_order,
        ids=ids,
        unread_as_created=True,
        # read-your-reads: ordered by access, this client's earlier reads count
        min_access_seq=await gw.access.published() if sort_by in ("accessed_at", "access_count") else 0,
        **filters,
    )
    memories = [AgentMemory.of(r.memory, r.accessed_at, r.access_count) for r in got.items]
    call.read([m.id for m in memories])
    return Page(
        memories=memories, total=got.total, limit=limit, offset=offset, has_more=offset + len(memories) < got.total
    )


@tools.tool(intent="write", hints=WRITE)
async def update_memory(
    call: Call,
    id: Annotated[Id, Field(description="UUID of the memory to update")],
    content: Annotated[Content, Field(description="Updated content", json_schema_extra=NO_DEFAULT)] = None,
    category: Annotated[
        Category, Field(description="Updated category ('' removes it)", json_schema_extra=NO_DEFAULT)
    ] = None,
    tags: Annotated[
        Tags, Field(description="Replaces the tags ([] removes them)", json_schema_extra=NO_DEFAULT)
    ] = None,
    importance: Annotated[Level, Field(description="Updated importance level", json_schema_extra=NO_DEFAULT)] = None,
    archived: Annotated[
        bool, Field(description="Archive or unarchive the memory", json_schema_extra=NO_DEFAULT)
    ] = None,
) -> Updated:
    """Update an existing memory. Only the fields given change; updated_fields lists those whose value changed
    ([] when nothing differed)."""
    if content is None and category is None and tags is None and importance is None and archived is None:
        raise InvalidInput("id", "give at least one field to change: content, category, tags, importance or archived")
    memory, changed = await _update(
        call, id, content=content, category=category, tags=tags, importance=importance, archived=archived
    )
    return Updated(memory=memory, updated_fields=changed)


@tools.tool(intent="write", hints=DESTRUCTIVE)
async def delete_memory(
    call: Call,
    id: Annotated[Id, Field(description="UUID of the memory to delete")],
    permanent: Annotated[
        bool, Field(strict=True, description="If false (default), archives instead of deleting")
    ] = False,
) -> Deleted:
    """Delete or archive a memory. By default it is archived (hidden from queries unless archived=true, and
    restorable with update_memory archived=false); permanent=true deletes it for good."""
    row, _ = await call.app.memories.change(
        "delete",
        call,
        (id, None, None),
        lambda mid: DeleteMemory(namespace=call.namespace, memory_id=mid, permanent=permanent),
    )
    return Deleted(success=True, action="deleted" if permanent else "archived", id=row.memory.id)


@tools.tool(intent="read", hints=READ)
async def get_memory_stats(call: Call) -> MemoryStatsOut:
    """Get statistics about stored memories: counts by type and importance, archived count, storage used,
    oldest and newest, the most accessed memory and the top 10 tags."""
    gw, reads = _gw(call), call.app.reads
    r = await reads.ask(call, MemoryStats, top_tags=10)
    top = await reads.ask(
        call,
        ListMemories,
        min_access_seq=await gw.access.published(),  # read-your-reads: this client's reads count
        limit=1,
        sort_by="access_count",
        sort_order="desc",
    )
    most = None
    if top.items and (top.items[0].access_count or 0) > 0:
        most = AgentMemory.of(top.items[0].memory, top.items[0].accessed_at, top.items[0].access_count)
    return MemoryStatsOut(
        total_memories=r.total - r.archived,
        by_type=ByType(**AGENT_MEMORY.counts(r.by_kind)),
        by_importance=ByImportance(**{lv: r.by_importance.get(lv, 0) for lv in ("high", "medium", "low")}),
        archived_count=r.archived,
        total_storage_kb=round(r.content_bytes / 1024, 3),
        oldest_memory=r.oldest,
        newest_memory=r.newest,
        most_accessed=most,
        top_tags=[TagCount(tag=t, count=n) for t, n in r.top_tags],
    )


async def _update(
    call: Call,
    id: str,
    *,
    kind: str | None = None,
    content: str | None = None,
    category: str | None = None,
    tags: list[str] | None = None,
    importance: Level | None = None,
    archived: bool | None = None,
) -> tuple[AgentMemory, list[str]]:
    """Change what was given, through the domain's update (then archive or restore); returns the memory and the
    contract's names of the fields whose value changed. An importance level the memory already reads back as
    keeps its finer native value (0.95 stays 0.95 when 'high' is asked)."""
    memories = call.app.memories
    row = await call.app.reads.resolve(call, id)
    state = row.memory
    fields: dict[str, Any] = {}
    if kind is not None:
        fields["kind"] = kind
    if content is not None:
        fields["content"] = content
    if category is not None:
        fields["category"] = _category(category)
    if tags is not None:
        fields["tags"] = tuple(tags)
    if importance is not None and level_of(state.importance) != importance:
        fields["importance"] = STORED[importance]
    changed: list[str] = []
    if fields:
        w = await memories.apply("update", call, UpdateMemory(namespace=call.namespace, memory_id=state.id, **fields))
        assert w.memory is not None
        state = w.memory
        changed = [
            CONTRACT_FIELD.get(f, f) for f in fields if w.event is not None and getattr(w.event, f, UNSET) is not UNSET
        ]
    if archived is not None and archived != (state.status == ARCHIVED):
        if archived:
            w = await memories.apply("delete", call, DeleteMemory(namespace=call.namespace, memory_id=state.id))
        else:
            w = await memories.apply("restore", call, RestoreMemory(namespace=call.namespace, memory_id=state.id))
        assert w.memory is not None
        state = w.memory
        changed.append("archived")
    return AgentMemory.of(state, row.accessed_at, row.access_count), changed


PROFILE = Profile(
    name="agent-memory",
    tools=tools,
    instructions=(
        "A memory shared across sessions (and with agents on other profiles). Store typed memories (core, "
        "learning, task) with store_memory, find them with query_memories (filters, search text, sort, "
        "pagination), change them with update_memory, archive or delete them with delete_memory, and see "
        "totals with get_memory_stats."
    ),
    errors=ERRORS,
    context="never",
)
