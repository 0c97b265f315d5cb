"""The native read tools: get, list, recent, stats, answered by a projector.

Every read carries the gateway's `min_seq` (read-your-writes). Domain errors leave as
a ToolError whose text is JSON: {"error": {"code", "message", "field"?}}.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from mneme.domain import validation as v
from mneme.errors import MemoryNotFound
from schemas.queries import ListMemories, MemoryStats
from services.gateway.gateway import Gateway
from services.gateway.models import Memory, MemoryPage, RecentEntry, RecentResult, Stats
from services.gateway.params import READ, Kind, Label, MemoryId, Namespace, Path, Store, Tags, Unit
from services.gateway.server import guarded


def register(mcp: MCPServer, gw: Gateway) -> None:
    @mcp.tool(annotations=READ)
    async def memory_get(
        id: MemoryId = None,
        namespace: Namespace = None,
        store: Store = None,
        path: Path = None,
        include_expired: bool = False,
    ) -> Memory:
        """Get one memory by id, or by store + path. Expired memories are hidden unless include_expired."""

        async def go() -> Memory:
            ns = gw.namespace(namespace)
            row = await gw.resolve(ns, id, store, path, await gw.min_seq())
            now = gw.now()
            if row.memory.is_expired(now) and not include_expired:
                raise MemoryNotFound(id or f"{store}:{path}")
            return Memory.of(row.memory, now, row)

        return await guarded(go)

    @mcp.tool(annotations=READ)
    async def memory_list(
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
        status: Literal["active", "archived", "any"] = "active",
        include_expired: bool = False,
        limit: Annotated[int, Field(ge=1, le=500)] = 50,
        offset: Annotated[int, Field(ge=0)] = 0,
        sort_by: Literal["created_at", "updated_at", "accessed_at", "importance", "access_count"] = "updated_at",
        sort_order: Literal["asc", "desc"] = "desc",
    ) -> MemoryPage:
        """List memories by store/category or by filters, with pagination (total, has_more) and sorting."""

        async def go() -> MemoryPage:
            q = ListMemories(
                namespace=gw.namespace(namespace), now=gw.now(), min_seq=await gw.min_seq(),
                store=v.store(store) if store is not None else None,
                category_path=v.category_path(category_path) if category_path is not None else None,
                recursive=recursive, kind=kind, tags=tuple(tags), category=category, subject=subject,
                importance_min=importance_min, importance_max=importance_max, status=status,
                include_expired=include_expired, limit=limit, offset=offset, sort_by=sort_by, sort_order=sort_order,
            )  # fmt: skip
            got = await gw.queries.ask(q)
            now = gw.now()
            items = [Memory.of(r.memory, now, r) for r in got.items]
            return MemoryPage(items=items, total=got.total, limit=limit, offset=offset,
                              has_more=offset + len(items) < got.total)  # fmt: skip

        return await guarded(go)

    @mcp.tool(annotations=READ)
    async def memory_recent(
        namespace: Namespace = None,
        store: Store = None,
        category_path: Annotated[str | None, Field(max_length=512, description="Only this category and its subcategories.")] = None,  # noqa: E501
        limit: Annotated[int, Field(ge=1, le=100)] = 5,
        include_expired: bool = False,
    ) -> RecentResult:
        """The most recently updated memories with full content and a token estimate (newest first)."""

        async def go() -> RecentResult:
            q = ListMemories(
                namespace=gw.namespace(namespace), now=gw.now(), min_seq=await gw.min_seq(),
                store=v.store(store) if store is not None else None,
                category_path=v.category_path(category_path) if category_path is not None else None,
                include_expired=include_expired, limit=limit, sort_by="updated_at", sort_order="desc",
            )  # fmt: skip
            got = await gw.queries.ask(q)
            entries = [
                RecentEntry(id=r.memory.id, store=r.memory.store, path=r.memory.path, content=r.memory.content,
                            kind=r.memory.kind, tags=list(r.memory.tags), updated_at=r.memory.updated_at,
                            token_estimate=math.ceil(len(r.memory.content) / 4))  # fmt: skip
                for r in got.items
            ]
            return RecentResult(category=category_path or "all", count=len(entries), memories=entries)

        return await guarded(go)

    @mcp.tool(annotations=READ)
    async def memory_stats(
        namespace: Namespace = None,
        store: Store = None,
        top_tags: Annotated[int, Field(ge=1, le=100)] = 10,
    ) -> Stats:
        """Totals by kind, importance, category and subject; archived and expired counts; oldest/newest;
        top tags; stores, categories and storage size."""

        async def go() -> Stats:
            q = MemoryStats(namespace=gw.namespace(namespace), now=gw.now(), min_seq=await gw.min_seq(),
                            store=v.store(store) if store is not None else None, top_tags=top_tags)  # fmt: skip
            return Stats.of(await gw.queries.ask(q))

        return await guarded(go)
