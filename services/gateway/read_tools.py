"""The native read tools: get, list, recent, stats, answered by a projector.

Every read carries the gateway's `min_seq` (read-your-writes), is authorized by the mechanism
(toolkit.py: namespaces the principal may read) and leaves one access record with the ids returned.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import Field

from mneme.domain import validation as v
from mneme.errors import InvalidInput, MemoryNotFound
from schemas.queries import ListMemories, MemoryStats
from services.gateway.gateway import Call
from services.gateway.models import AsOfInfo, Memory, MemoryPage, RecentEntry, RecentResult, Stats
from services.gateway.params import (
    READ,
    AsOfArg,
    Kind,
    Label,
    MemoryId,
    Namespace,
    Path,
    Store,
    Tags,
    Unit,
    ValidAtArg,
)
from services.gateway.toolkit import Toolset

HISTORY = 5

tools = Toolset(doc_indent=8)


@tools.tool(intent="read", hints=READ)
async def memory_get(
    call: Call,
    id: MemoryId = None,
    namespace: Namespace = None,
    store: Store = None,
    path: Path = None,
    include_expired: bool = False,
    version: Annotated[int | None, Field(ge=1, description="Read this version instead of the latest.")] = None,
    as_of: AsOfArg = None,
) -> Memory:
    """Get one memory by id, or by store + path, with its recent version history. Expired memories are
    hidden unless include_expired; deprecated ones are returned and marked."""
    gw = call.gw
    assert gw is not None
    if as_of is not None and version is not None:
        raise InvalidInput("as_of", "give as_of or version, not both")
    at = await gw.as_of(as_of)
    row, history, resolved = await gw.resolve_with_history(call.namespace, id, store, path,
                                                           await gw.min_seq(), history=HISTORY,
                                                           version=version, as_of=at)  # fmt: skip
    now = resolved.time if resolved is not None and resolved.time is not None else gw.now()
    if version is None and row.memory.is_expired(now) and not include_expired:
        assert row.memory.expires_at is not None
        raise MemoryNotFound(id or f"{store}:{path}", expired_at=row.memory.expires_at.isoformat())
    call.read([row.memory.id])
    m = Memory.of(row.memory, now, row, history)
    m.as_of = AsOfInfo.of(resolved)
    return gw.shown(call, m)


@tools.tool(intent="read", hints=READ)
async def memory_list(
    call: Call,
    namespace: Namespace = None,
    store: Store = None,
    category_path: Annotated[str | None, Field(max_length=512, description="Only memories under this category path of the store.")] = None,  # noqa: E501
    recursive: Annotated[bool, Field(description="With category_path: include subcategories (default) or only direct children.")] = True,  # noqa: E501
    kind: Kind | None = None,
    tags: Annotated[Tags, Field(description="Memories carrying ALL of these tags.")] = [],  # noqa: B006
    category: Label | None = None,
    subject: Annotated[str | None, Field(max_length=128)] = None,
    importance_min: Unit | None = None,
    importance_max: Unit | None = None,
    status: Literal["live", "active", "deprecated", "archived", "any"] = "live",
    include_expired: bool = False,
    limit: Annotated[int, Field(ge=1, le=500)] = 50,
    offset: Annotated[int, Field(ge=0)] = 0,
    sort_by: Literal["created_at", "updated_at", "accessed_at", "importance", "access_count"] = "updated_at",
    sort_order: Literal["asc", "desc"] = "desc",
    as_of: AsOfArg = None,
    valid_at: ValidAtArg = None,
) -> MemoryPage:
    """List memories by store/category or by filters, with pagination (total, has_more) and sorting.
    status 'live' (default) is everything not archived: active and deprecated."""
    gw = call.gw
    assert gw is not None
    if as_of is not None and sort_by in ("accessed_at", "access_count"):
        raise InvalidInput("sort_by", f"{sort_by} is not kept per moment: past reads (as_of) carry no "
                           "access statistics; sort by created_at, updated_at or importance")  # fmt: skip
    q = ListMemories(
        namespace=call.namespace, now=gw.now(), min_seq=await gw.min_seq(),
        store=v.store(store) if store is not None else None,
        category_path=v.category_path(category_path) if category_path is not None else None,
        recursive=recursive, kind=kind, tags=tuple(tags), category=category, subject=subject,
        importance_min=importance_min, importance_max=importance_max, status=status,
        include_expired=include_expired, limit=limit, offset=offset, sort_by=sort_by, sort_order=sort_order,
        as_of=await gw.as_of(as_of), valid_at=v.utc(valid_at, "valid_at"),
    )  # fmt: skip
    got = await gw.queries.ask(q)
    now = got.as_of.time if got.as_of is not None and got.as_of.time is not None else gw.now()
    items = [gw.shown(call, Memory.of(r.memory, now, r)) for r in got.items]
    call.read([m.id for m in items])
    return MemoryPage(items=items, total=got.total, limit=limit, offset=offset,
                      has_more=offset + len(items) < got.total, as_of=AsOfInfo.of(got.as_of))  # fmt: skip


@tools.tool(intent="read", hints=READ)
async def memory_recent(
    call: Call,
    namespace: Namespace = None,
    store: Store = None,
    category_path: Annotated[str | None, Field(max_length=512, description="Only this category and its subcategories.")] = None,  # noqa: E501
    limit: Annotated[int, Field(ge=1, le=100)] = 5,
    include_expired: bool = False,
    as_of: AsOfArg = None,
) -> RecentResult:
    """The most recently updated memories with full content and a token estimate (newest first)."""
    gw = call.gw
    assert gw is not None
    q = ListMemories(
        namespace=call.namespace, now=gw.now(), min_seq=await gw.min_seq(),
        store=v.store(store) if store is not None else None,
        category_path=v.category_path(category_path) if category_path is not None else None,
        include_expired=include_expired, limit=limit, sort_by="updated_at", sort_order="desc",
        as_of=await gw.as_of(as_of),
    )  # fmt: skip
    got = await gw.queries.ask(q)
    entries = [
        RecentEntry(id=r.memory.id, store=r.memory.store, path=r.memory.path, content=r.memory.content,
                    kind=r.memory.kind, tags=list(r.memory.tags), updated_at=r.memory.updated_at,
                    token_estimate=math.ceil(len(r.memory.content) / 4))  # fmt: skip
        for r in got.items
    ]
    call.read([e.id for e in entries])
    return RecentResult(category=category_path or "all", count=len(entries), memories=entries,
                        as_of=AsOfInfo.of(got.as_of))  # fmt: skip


@tools.tool(intent="read", hints=READ)
async def memory_stats(
    call: Call,
    namespace: Namespace = None,
    store: Store = None,
    top_tags: Annotated[int, Field(ge=1, le=100)] = 10,
    as_of: AsOfArg = None,
) -> Stats:
    """Totals by kind, importance, category and subject; archived, deprecated and expired counts;
    oldest/newest; top tags; stores, categories and storage size."""
    gw = call.gw
    assert gw is not None
    q = MemoryStats(namespace=call.namespace, now=gw.now(), min_seq=await gw.min_seq(),
                    store=v.store(store) if store is not None else None, top_tags=top_tags,
                    as_of=await gw.as_of(as_of))  # fmt: skip
    return Stats.of(await gw.queries.ask(q))
