"""The native read tools: get, list, stats, answered by a projector.

Every read goes through the application's reads (read-your-writes, the read record), is authorized by the mechanism
(toolkit.py: namespaces the principal may read) and leaves one access record with the ids returned.
Lists answer in brief (id, content, what marks each) unless `detail="full"`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field

from mneme.domain import validation as v
from mneme.domain.state import MemoryState
from mneme.errors import InvalidInput, MemoryNotFound
from schemas.queries import ListMemories, MemoryRow, MemoryStats
from services.gateway.gateway import Call, Gateway, split_ref
from services.gateway.models import AsOfInfo, Memory, Page, Result, Stats
from services.gateway.params import (
    READ,
    AsOfArg,
    Detail,
    Kind,
    Label,
    Namespace,
    Ref,
    Store,
    Tags,
    Unit,
    ValidAtArg,
)
from services.gateway.toolkit import Toolset

HISTORY = 5

tools = Toolset(flow=True)


def result(
    gw: Gateway,
    call: Call,
    s: MemoryState,
    now: datetime,
    detail: str,
    row: MemoryRow | None = None,
    score: float | None = None,
    **full_only: Any,
) -> Result:
    """One memory in a list of results: in brief, or with every field and `full_only` (detail="full")."""
    if detail == "brief":
        return Result.brief(s, now, score)
    m = gw.shown(call, Memory.of(s, now, row))
    m.score = round(score, 4) if score is not None else None
    return Result(**m.model_dump(), **full_only)


@tools.tool(intent="read", hints=READ)
async def memory_get(
    call: Call,
    id: Ref,
    namespace: Namespace = None,
    include_expired: bool = False,
    version: Annotated[int | None, Field(ge=1, description="This version instead of the latest.")] = None,
    as_of: AsOfArg = None,
) -> Memory:
    """Read one memory in full (every field and its recent versions), by id or store:path."""
    gw = call.gw
    if as_of is not None and version is not None:
        raise InvalidInput("as_of", "give as_of or version, not both")
    at = await gw.as_of(as_of)
    mid, store, path = split_ref(id)
    row, history, resolved = await call.app.reads.resolve_with_history(
        call, mid, store, path, history=HISTORY, version=version, as_of=at
    )
    now = resolved.time if resolved is not None and resolved.time is not None else gw.now()
    if version is None and row.memory.is_expired(now) and not include_expired:
        assert row.memory.expires_at is not None
        raise MemoryNotFound(id, expired_at=row.memory.expires_at.isoformat())
    call.read([row.memory.id])
    m = Memory.of(row.memory, now, row, history)
    m.as_of = AsOfInfo.of(resolved)
    return gw.shown(call, m)


@tools.tool(intent="read", hints=READ)
async def memory_list(
    call: Call,
    namespace: Namespace = None,
    store: Store = None,
    category_path: Annotated[
        str | None, Field(max_length=512, description="Only memories under this category path of the store.")
    ] = None,
    recursive: Annotated[bool, Field(description="With category_path: include subcategories.")] = True,
    kind: Kind | None = None,
    tags: Annotated[Tags, Field(description="Memories carrying ALL of these tags.")] = [],  # noqa: B006
    category: Label | None = None,
    subject: Annotated[str | None, Field(max_length=128)] = None,
    created_by: Annotated[str | None, Field(max_length=128, description="Only memories this agent wrote.")] = None,
    importance_min: Unit | None = None,
    importance_max: Unit | None = None,
    status: Annotated[
        Literal["live", "active", "deprecated", "archived", "any"],
        Field(description="live: active and deprecated (not archived)."),
    ] = "live",
    include_expired: bool = False,
    valid_at: ValidAtArg = None,
    as_of: AsOfArg = None,
    sort_by: Literal["created_at", "updated_at", "accessed_at", "importance", "access_count"] = "updated_at",
    sort_order: Literal["asc", "desc"] = "desc",
    limit: Annotated[int, Field(ge=1, le=500)] = 20,
    offset: Annotated[int, Field(ge=0)] = 0,
    detail: Detail = "brief",
) -> Page:
    """Browse memories by filters, newest first (a store's category, tags, kind, subject, author, what
    is valid at a time), with total and has_more for paging. To find memories about a topic, use
    memory_search."""
    gw = call.gw
    if as_of is not None and sort_by in ("accessed_at", "access_count"):
        raise InvalidInput(
            "sort_by",
            f"{sort_by} is not kept per moment: past reads (as_of) carry no "
            "access statistics; sort by created_at, updated_at or importance",
        )
    q = ListMemories(
        namespace=call.namespace,
        now=gw.now(),
        store=v.store(store) if store is not None else None,
        category_path=v.category_path(category_path) if category_path is not None else None,
        recursive=recursive,
        kind=kind,
        tags=tuple(tags),
        category=category,
        subject=subject,
        created_by=created_by,
        importance_min=importance_min,
        importance_max=importance_max,
        status=status,
        include_expired=include_expired,
        limit=limit,
        offset=offset,
        sort_by=sort_by,
        sort_order=sort_order,
        as_of=await gw.as_of(as_of),
        valid_at=v.utc(valid_at, "valid_at"),
        # read-your-reads: ordered by access, the reads made through this gateway count
        min_access_seq=await gw.access.published() if sort_by in ("accessed_at", "access_count") else 0,
    )
    got = await call.app.reads.send(call, q)
    now = got.as_of.time if got.as_of is not None and got.as_of.time is not None else gw.now()
    items = [result(gw, call, r.memory, now, detail, r) for r in got.items]
    call.read([m.id for m in items])
    return Page(results=items, total=got.total, has_more=offset + len(items) < got.total, as_of=AsOfInfo.of(got.as_of))


@tools.tool(intent="read", hints=READ)
async def memory_stats(
    call: Call,
    namespace: Namespace = None,
    store: Store = None,
    top_tags: Annotated[int, Field(ge=1, le=100)] = 10,
    as_of: AsOfArg = None,
) -> Stats:
    """Counts of what the memory holds: by kind, importance, category, subject and status; oldest and
    newest; top tags; most read; storage size."""
    gw = call.gw
    q = MemoryStats(
        namespace=call.namespace,
        now=gw.now(),
        store=v.store(store) if store is not None else None,
        top_tags=top_tags,
        as_of=await gw.as_of(as_of),
        min_access_seq=0 if as_of is not None else await gw.access.published(),  # most read: with your reads
    )
    return Stats.of(await call.app.reads.send(call, q))
