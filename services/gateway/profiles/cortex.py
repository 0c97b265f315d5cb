"""The `cortex` profile (../shared/seeds/mcp-memory-tools-spec.md): path- and store-addressed memories with
categories, citations, expiry, recent memories and reindex, over the one memory.

Every tool takes the required `store`, a name in the store registry (cortex_support.py): store S is the domain's
`store` S in the namespace it is registered with. Bodies speak to the application's use cases only (call.app); the
domain decides (paths, tags, citations, locks, path uniqueness) and its errors leave as the contract's McpError
codes. docs/profiles.md (cortex) maps each tool and records each choice.
"""

from __future__ import annotations

import math
from typing import Annotated

from mcp.types import CallToolResult
from pydantic import Field

from mneme.domain import validation as v
from mneme.domain.state import ARCHIVED
from mneme.errors import InvalidInput, MemoryNotFound, MnemeError
from schemas.commands import CreateMemory, DeleteMemory, MoveMemory, UpdateMemory
from schemas.queries import ListMemories, MemoryRow, ReindexCategories, StoreCategories
from services.gateway.gateway import Call, Gateway
from services.gateway.params import CREATE, DESTRUCTIVE, READ, WRITE
from services.gateway.profiles.cortex_models import (
    Citation,
    Expiry,
    IncludeExpired,
    ListedMemory,
    MemoryDocument,
    MemoryListing,
    MemoryMetadata,
    Moved,
    PathArg,
    PrunedMemory,
    PruneOutcome,
    RecentMemories,
    RecentMemory,
    ReindexOutcome,
    StoreArg,
    Subcategory,
    Written,
    receipt,
)
from services.gateway.profiles.cortex_support import (
    CORTEX_ERRORS,
    CategoryNotFound,
    cortex_words,
    parse_time,
    registered_namespace,
    reworded,
    scope,
)
from services.gateway.toolkit import Profile, Toolset

tools = Toolset()
PAGE = 1000  # rows per projector round trip when a listing has to be complete


def _gw(call: Call, store: str) -> Gateway:
    """The gateway, once the store is known to be registered (StoreNotRegistered otherwise)."""
    assert call.gw is not None
    registered_namespace(call.gw, store)
    return call.gw


def _tokens(content: str) -> int:
    return math.ceil(len(content) / 4)


async def _find(call: Call, store: str, path: str, *, archived: bool = False) -> MemoryRow:
    """The memory at store:path, expired ones included. An archived memory (deleted on the native surface,
    restorable there) is not there for cortex, except for `archived=True` (remove_memory frees its path)."""
    with cortex_words(path):
        row = await call.app.reads.resolve(call, None, store, path)
        if row.memory.status == ARCHIVED and not archived:
            raise MemoryNotFound(path)
    return row


async def _category(
    call: Call, store: str, category: str | None, include_expired: bool
) -> tuple[str | None, list[Subcategory]]:
    """The category (None: the store's root) and its direct subcategories; CategoryNotFound if the store's
    category index does not hold it."""
    path = v.category_path(category, "category") if category else None
    got = await call.app.reads.ask(call, StoreCategories, store=store, parent=path, include_expired=include_expired)
    if not got.exists:
        raise CategoryNotFound(category or "")
    return path, [Subcategory(path=c.path, memory_count=c.memory_count) for c in got.categories]


@tools.tool(intent="write", hints=CREATE)
async def add_memory(
    call: Call,
    store: StoreArg,
    path: PathArg,
    content: Annotated[str, Field(min_length=1, description="Memory content (markdown).")],
    tags: Annotated[list[str] | None, Field(description="Optional tags for categorization.")] = None,
    expires_at: Expiry = None,
    citations: Annotated[
        list[Citation] | None,
        Field(description="Optional citations referencing source material (file paths, URLs, document identifiers)."),
    ] = None,
) -> Annotated[CallToolResult, Written]:
    """Create a new memory at a path in a store; the store and the path's categories are created as needed.
    A path that already holds a memory is an error (update_memory changes it)."""
    _gw(call, store)
    cmd = CreateMemory(
        namespace=call.namespace,
        store=store,
        path=path,
        content=content,
        tags=tuple(tags or ()),
        citations=tuple(citations or ()),
        expires_at=parse_time(expires_at, "expires_at"),
    )
    with cortex_words(path):
        await call.app.memories.create(call, cmd)
    return receipt(Written(message=f"Memory created at {path}", store=store, path=path))


@tools.tool(intent="read", hints=READ)
async def get_memory(
    call: Call, store: StoreArg, path: PathArg, include_expired: IncludeExpired = False
) -> MemoryDocument:
    """Retrieve a memory's content and metadata (tags, timestamps, expiry, citations). An expired memory is
    an error unless include_expired."""
    gw = _gw(call, store)
    m = (await _find(call, store, path)).memory
    if m.is_expired(gw.now()) and not include_expired:
        raise reworded(MemoryNotFound(path), f"Memory expired: {path}")
    call.read([m.id])
    meta = MemoryMetadata(
        created_at=m.created_at,
        updated_at=m.updated_at,
        tags=list(m.tags),
        source=str(m.metadata.get("source") or "mcp"),
        expires_at=m.expires_at,
        citations=list(m.citations),
    )
    return MemoryDocument(path=path, content=m.content, metadata=meta)


@tools.tool(intent="write", hints=WRITE)
async def update_memory(
    call: Call,
    store: StoreArg,
    path: PathArg,
    content: Annotated[str | None, Field(description="New memory content.")] = None,
    tags: Annotated[list[str] | None, Field(description="New tags (replaces existing).")] = None,
    expires_at: Expiry = None,
    clear_expiry: Annotated[bool, Field(description="Remove the expiration date.")] = False,
    citations: Annotated[
        list[Citation] | None,
        Field(description="New citations (replaces existing); [] removes them all; omit to keep them."),
    ] = None,
) -> Annotated[CallToolResult, Written]:
    """Update a memory's content or metadata (tags, expiry, citations); what is omitted is kept."""
    _gw(call, store)
    if clear_expiry and expires_at is not None:
        raise InvalidInput("clear_expiry", "give expires_at or clear_expiry, not both")
    fields: dict[str, object] = {}
    if content is not None:
        fields["content"] = content
    if tags is not None:
        fields["tags"] = tuple(tags)
    if citations is not None:
        fields["citations"] = tuple(citations)
    if expires_at is not None or clear_expiry:
        fields["expires_at"] = parse_time(expires_at, "expires_at")
    row = await _find(call, store, path)
    with cortex_words(path):
        await call.app.memories.change(
            "update",
            call,
            (row.memory.id, None, None),
            lambda mid: UpdateMemory(namespace=call.namespace, memory_id=mid, **fields),  # type: ignore
        )
    return receipt(Written(message=f"Memory updated at {path}", store=store, path=path))


@tools.tool(intent="write", hints=DESTRUCTIVE)
async def remove_memory(call: Call, store: StoreArg, path: PathArg) -> Annotated[CallToolResult, Written]:
    """Delete a memory; its path is free again. (Its history stays in the log.)"""
    _gw(call, store)
    row = await _find(call, store, path, archived=True)
    with cortex_words(path):
        await call.app.memories.change(
            "delete",
            call,
            (row.memory.id, None, None),
            lambda mid: DeleteMemory(namespace=call.namespace, memory_id=mid, permanent=True),
        )
    return receipt(Written(message=f"Memory removed at {path}", store=store, path=path))


@tools.tool(intent="write", hints=WRITE)
async def move_memory(
    call: Call,
    store: StoreArg,
    from_path: Annotated[str, Field(min_length=1, description="Source memory path.")],
    to_path: Annotated[str, Field(min_length=1, description="Destination memory path.")],
) -> Annotated[CallToolResult, Moved]:
    """Move or rename a memory inside its store; the destination's categories are created as needed. An
    occupied destination is an error."""
    _gw(call, store)
    row = await _find(call, store, from_path)
    with cortex_words(from_path, to_path=to_path):
        await call.app.memories.change(
            "move",
            call,
            (row.memory.id, None, None),
            lambda mid: MoveMemory(namespace=call.namespace, memory_id=mid, to_path=to_path),
        )
    return receipt(
        Moved(message=f"Memory moved from {from_path} to {to_path}", store=store, from_path=from_path, to_path=to_path)
    )


@tools.tool(intent="read", hints=READ)
async def list_memories(
    call: Call,
    store: StoreArg,
    category: Annotated[str | None, Field(description="Category path to list (the store's root if omitted).")] = None,
    include_expired: IncludeExpired = False,
) -> MemoryListing:
    """List the memories in a category (or at the store's root) with their subcategories. Each entry has
    its path, token estimate, expiry and updated_at."""
    gw = _gw(call, store)
    cat, subcategories = await _category(call, store, category, include_expired)
    rows: list[MemoryRow] = []
    while True:
        got = await call.app.reads.ask(
            call,
            ListMemories,
            store=store,
            category_path=cat or "",
            recursive=False,
            include_expired=include_expired,
            limit=PAGE,
            offset=len(rows),
            sort_by="created_at",
            sort_order="asc",
        )
        rows += got.items
        if not got.items or len(rows) >= got.total:
            break
    now = gw.now()
    memories = sorted(
        (
            ListedMemory(
                path=r.memory.path or "",
                token_estimate=_tokens(r.memory.content),
                expires_at=r.memory.expires_at,
                is_expired=r.memory.is_expired(now),
                updated_at=r.memory.updated_at,
            )
            for r in rows
        ),
        key=lambda m: m.path,
    )
    call.read([r.memory.id for r in rows])
    return MemoryListing(category=cat or "all", count=len(memories), memories=memories, subcategories=subcategories)


@tools.tool(intent="write", hints=DESTRUCTIVE)
async def prune_memories(call: Call, store: StoreArg) -> PruneOutcome:
    """Delete every expired memory in the store. Returns how many and which (a count of zero when none)."""
    _gw(call, store)
    pruned = [
        PrunedMemory(path=m.path or "", expires_at=m.expires_at)
        for m in await call.app.memories.prune_expired(call, store)
        if m.expires_at is not None
    ]
    pruned.sort(key=lambda p: p.path)
    return PruneOutcome(pruned_count=len(pruned), pruned=pruned)


@tools.tool(intent="write", hints=WRITE)
async def reindex_store(call: Call, store: StoreArg) -> ReindexOutcome:
    """Rebuild the store's category index from the memory log (a repair: the index is always rebuildable).
    Returns the store reindexed and what the rebuild found and changed."""
    _gw(call, store)
    try:
        got = await call.app.reads.ask(call, ReindexCategories, store=store)
    except MnemeError as exc:
        raise MnemeError(f"Reindex failed for store '{store}': {exc.message}") from None  # code INTERNAL
    return ReindexOutcome(
        store=store,
        path=f"{call.namespace}/{store}",
        categories=got.categories,
        added=got.added,
        removed=got.removed,
        memories=got.memories,
        warnings=[],
    )


@tools.tool(intent="read", hints=READ)
async def cortex_get_recent_memories(
    call: Call,
    store: StoreArg,
    category: Annotated[
        str | None,
        Field(
            description="Category path to scope retrieval (all categories if omitted); its subcategories are included."
        ),
    ] = None,
    limit: Annotated[
        int, Field(ge=1, le=100, description="Maximum number of memories to return (default: 5, max: 100).")
    ] = 5,
    include_expired: IncludeExpired = False,
) -> RecentMemories:
    """The most recently updated memories of a store (or of one category and its subcategories), newest
    first, each with its full content, tags and a token estimate: context to load at the start of a session."""
    _gw(call, store)
    cat = (await _category(call, store, category, include_expired))[0] if category else None
    got = await call.app.reads.ask(
        call,
        ListMemories,
        store=store,
        category_path=cat,
        include_expired=include_expired,
        limit=limit,
        sort_by="updated_at",
        sort_order="desc",
    )
    memories = [
        RecentMemory(
            path=r.memory.path or "",
            content=r.memory.content,
            updated_at=r.memory.updated_at,
            token_estimate=_tokens(r.memory.content),
            tags=list(r.memory.tags),
        )
        for r in got.items
    ]
    call.read([r.memory.id for r in got.items])
    return RecentMemories(category=cat or "all", count=len(memories), memories=memories)


PROFILE = Profile(
    name="cortex",
    tools=tools,
    instructions=(
        "Persistent memories addressed by store and path ('category/sub/slug'). Every tool needs `store`: a "
        "store registered with the server. At the start of a session load context with "
        "cortex_get_recent_memories; browse with list_memories; read with get_memory; save with add_memory "
        "(categories are created as needed) and change with update_memory."
    ),
    errors=CORTEX_ERRORS,
    context="never",
    scope=scope,
)
