"""The native MCP tool set: memory CRUD over the event log.

Each tool is thin: validate (the signature is the schema), build a command or a
query, call the gateway core, shape the result. Domain errors leave as a ToolError
whose text is JSON: {"error": {"code", "message", "field"?}}.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from msgspec import UNSET
from pydantic import Field, ValidationError

from mneme.domain import validation as v
from mneme.errors import InvalidInput, MemoryNotFound, MnemeError
from mneme.ids import new_id
from schemas.commands import CreateMemory, DeleteMemory, MoveMemory, RestoreMemory, UpdateMemory
from schemas.queries import ExpiredMemories, ListMemories, MemoryStats
from services.gateway.gateway import Gateway
from services.gateway.models import (
    AddResult,
    DeleteResult,
    Memory,
    MemoryPage,
    MoveResult,
    PruneResult,
    RecentEntry,
    RecentResult,
    Stats,
    UpdateResult,
)  # fmt: skip

Namespace = Annotated[str | None, Field(description="Namespace to act in (org/project/store or a user id); default: the caller's.", max_length=255)]  # noqa: E501
Store = Annotated[str | None, Field(description="Store name (a collection of path-addressed memories).", max_length=64)]
Path = Annotated[str | None, Field(description="Path inside the store: category segments then a name, e.g. 'project/decisions/db'.", max_length=512)]  # noqa: E501
MemoryId = Annotated[str | None, Field(description="Memory id (UUID).", max_length=64)]
RequestId = Annotated[str | None, Field(description="Idempotency key: a retried call with the same request_id is applied once.", min_length=1, max_length=128)]  # noqa: E501
Tags = Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]], Field(max_length=50)]
Citations = Annotated[list[Annotated[str, Field(min_length=1, max_length=2048)]], Field(max_length=100, description="Sources: file:line, URLs, ticket ids.")]  # noqa: E501
Unit = Annotated[float, Field(ge=0.0, le=1.0)]
Label = Annotated[str, Field(min_length=1, max_length=128)]
Kind = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$", description="Free vocabulary, e.g. note, fact, preference, decision, task, core, learning.")]  # noqa: E501

WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


class MnemeMCPServer(MCPServer):
    """Argument validation errors become the same structured JSON as domain errors."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        tool = self._tool_manager.get_tool(name)
        if tool is not None:  # a misspelt argument fails loudly instead of being dropped
            known = tool.parameters.get("properties", {})
            unknown = sorted(k for k in arguments if k not in known)
            if unknown:
                raise ToolError(_error_text({
                    "code": "INVALID_INPUT", "field": unknown[0],
                    "message": f"{unknown[0]}: unknown argument; known: {', '.join(sorted(known))}",
                }))  # fmt: skip
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ToolError):  # ours: drop the SDK's "Error executing tool X: " prefix
                raise cause from None
            if isinstance(cause, ValidationError):
                errs = [{"field": ".".join(str(p) for p in e["loc"]), "problem": e["msg"]} for e in cause.errors()]
                first = errs[0] if errs else {"field": "arguments", "problem": "invalid"}
                raise ToolError(_error_text({
                    "code": "INVALID_INPUT", "field": first["field"],
                    "message": f"{first['field']}: {first['problem']}", "errors": errs,
                })) from cause  # fmt: skip
            raise


def _error_text(err: dict[str, Any]) -> str:
    return json.dumps({"error": err}, ensure_ascii=False)


def build_server(gw: Gateway, *, name: str = "mneme") -> MnemeMCPServer:
    mcp = MnemeMCPServer(
        name=name,
        instructions=(
            "mneme is a shared, event-sourced memory. Store facts with memory_add (optionally at a store path), "
            "read them back with memory_get / memory_list / memory_recent. Every change is versioned; "
            "pass request_id to make a write safe to retry."
        ),
    )

    async def run(ctx: Context, fn: Any) -> Any:
        try:
            return await fn()
        except MnemeError as exc:
            raise ToolError(_error_text(exc.to_dict())) from None

    @mcp.tool(annotations=WRITE)
    async def memory_add(
        ctx: Context,
        content: Annotated[str, Field(min_length=1, description="The memory text.")],
        namespace: Namespace = None,
        store: Store = None,
        path: Path = None,
        kind: Kind = "note",
        category: Label | None = None,
        subject: Annotated[str | None, Field(max_length=128, description="Who or what it is about (normalized for filtering).")] = None,  # noqa: E501
        tags: Tags = [],  # noqa: B006 - pydantic copies defaults
        importance: Unit = 0.5,
        confidence: Unit = 1.0,
        citations: Citations = [],  # noqa: B006
        metadata: dict[str, Any] = {},  # noqa: B006
        expires_at: datetime | None = None,
        valid_from: datetime | None = None,
        valid_until: datetime | None = None,
        request_id: RequestId = None,
    ) -> AddResult:
        """Add a memory. With store + path it is addressable by path (categories are created as needed;
        an occupied path is an ALREADY_EXISTS error). Returns a receipt: id, version and log position (read the
        memory back with memory_get)."""

        async def go() -> AddResult:
            cmd = CreateMemory(
                namespace=gw.namespace(namespace), store=store, path=path, content=content, kind=kind,
                category=category, subject=subject, tags=tuple(tags), importance=importance, confidence=confidence,
                citations=tuple(citations), metadata=metadata, expires_at=expires_at, valid_from=valid_from,
                valid_until=valid_until,
            )  # fmt: skip
            w = await gw.commands.create(cmd, actor=gw.principal.actor, request_id=request_id or new_id(),
                                         min_seq=await gw.min_seq())  # fmt: skip
            gw.noted(w.seq)
            assert w.memory is not None
            return AddResult.of(w.memory, w.duplicate)

        return await run(ctx, go)

    @mcp.tool(annotations=READ)
    async def memory_get(
        ctx: Context,
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

        return await run(ctx, go)

    @mcp.tool(annotations=WRITE)
    async def memory_update(
        ctx: Context,
        id: MemoryId = None,
        namespace: Namespace = None,
        store: Store = None,
        path: Path = None,
        content: Annotated[str | None, Field(min_length=1)] = None,
        kind: Kind | None = None,
        category: Label | None = None,
        subject: Annotated[str | None, Field(max_length=128)] = None,
        tags: Tags | None = None,
        importance: Unit | None = None,
        confidence: Unit | None = None,
        citations: Annotated[Citations | None, Field(description="Replaces all citations; [] clears; omit to keep.")] = None,  # noqa: E501
        metadata: dict[str, Any] | None = None,
        expires_at: datetime | None = None,
        clear_expiry: bool = False,
        valid_from: datetime | None = None,
        valid_until: datetime | None = None,
        request_id: RequestId = None,
    ) -> UpdateResult:
        """Change some fields of a memory (by id, or store + path). Omitted fields keep their value.
        Returns the new version and which fields changed."""

        async def go() -> UpdateResult:
            if clear_expiry and expires_at is not None:
                raise InvalidInput("clear_expiry", "give expires_at or clear_expiry, not both")
            ns = gw.namespace(namespace)
            min_seq = await gw.min_seq()
            row = await gw.resolve(ns, id, store, path, min_seq)
            given = {
                "content": content, "kind": kind, "category": category, "subject": subject,
                "tags": tuple(tags) if tags is not None else None, "importance": importance, "confidence": confidence,
                "citations": tuple(citations) if citations is not None else None, "metadata": metadata,
                "expires_at": expires_at, "valid_from": valid_from, "valid_until": valid_until,
            }  # fmt: skip
            fields = {k: (UNSET if val is None else val) for k, val in given.items()}
            if clear_expiry:
                fields["expires_at"] = None
            cmd = UpdateMemory(namespace=ns, memory_id=row.memory.id, **fields)
            w = await gw.commands.update(cmd, actor=gw.principal.actor, request_id=request_id or new_id(),
                                         min_seq=min_seq)  # fmt: skip
            gw.noted(w.seq)
            assert w.memory is not None
            changed = [f for f in fields if w.event is not None and getattr(w.event, f, UNSET) is not UNSET]
            return UpdateResult(memory=Memory.of(w.memory, gw.now()), updated_fields=changed)

        return await run(ctx, go)

    @mcp.tool(annotations=WRITE)
    async def memory_move(
        ctx: Context,
        to_path: Annotated[str, Field(min_length=1, max_length=512, description="New path in the same store.")],
        id: MemoryId = None,
        namespace: Namespace = None,
        store: Store = None,
        path: Path = None,
        request_id: RequestId = None,
    ) -> MoveResult:
        """Move or rename a memory inside its store. An occupied destination is an ALREADY_EXISTS error."""

        async def go() -> MoveResult:
            ns = gw.namespace(namespace)
            min_seq = await gw.min_seq()
            row = await gw.resolve(ns, id, store, path, min_seq)
            cmd = MoveMemory(namespace=ns, memory_id=row.memory.id, to_path=to_path)
            w = await gw.commands.move(cmd, actor=gw.principal.actor, request_id=request_id or new_id(),
                                       min_seq=min_seq)  # fmt: skip
            gw.noted(w.seq)
            assert w.memory is not None
            return MoveResult(memory=Memory.of(w.memory, gw.now()), from_path=row.memory.path or "", to_path=to_path)

        return await run(ctx, go)

    @mcp.tool(annotations=DESTRUCTIVE)
    async def memory_delete(
        ctx: Context,
        id: MemoryId = None,
        namespace: Namespace = None,
        store: Store = None,
        path: Path = None,
        permanent: Annotated[bool, Field(description="False (default): archive, restorable. True: remove from every read model (history stays in the log).")] = False,  # noqa: E501
        reason: Annotated[str | None, Field(max_length=128)] = None,
        request_id: RequestId = None,
    ) -> DeleteResult:
        """Delete a memory: archive it (default) or remove it permanently, which frees its path."""

        async def go() -> DeleteResult:
            ns = gw.namespace(namespace)
            min_seq = await gw.min_seq()
            row = await gw.resolve(ns, id, store, path, min_seq)
            cmd = DeleteMemory(namespace=ns, memory_id=row.memory.id, permanent=permanent, reason=reason)
            w = await gw.commands.delete(cmd, actor=gw.principal.actor, request_id=request_id or new_id(),
                                         min_seq=min_seq)  # fmt: skip
            gw.noted(w.seq)
            version = w.event.version if w.event is not None else row.memory.version
            return DeleteResult(id=row.memory.id, mode="deleted" if permanent else "archived", version=version)

        return await run(ctx, go)

    @mcp.tool(annotations=WRITE)
    async def memory_restore(
        ctx: Context,
        id: MemoryId = None,
        namespace: Namespace = None,
        store: Store = None,
        path: Path = None,
        request_id: RequestId = None,
    ) -> Memory:
        """Bring an archived memory back to active."""

        async def go() -> Memory:
            ns = gw.namespace(namespace)
            min_seq = await gw.min_seq()
            row = await gw.resolve(ns, id, store, path, min_seq)
            cmd = RestoreMemory(namespace=ns, memory_id=row.memory.id)
            w = await gw.commands.restore(cmd, actor=gw.principal.actor, request_id=request_id or new_id(),
                                          min_seq=min_seq)  # fmt: skip
            gw.noted(w.seq)
            assert w.memory is not None
            return Memory.of(w.memory, gw.now())

        return await run(ctx, go)

    @mcp.tool(annotations=READ)
    async def memory_list(
        ctx: Context,
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

        return await run(ctx, go)

    @mcp.tool(annotations=READ)
    async def memory_recent(
        ctx: Context,
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

        return await run(ctx, go)

    @mcp.tool(annotations=DESTRUCTIVE)
    async def memory_prune_expired(
        ctx: Context,
        namespace: Namespace = None,
        store: Store = None,
        request_id: RequestId = None,
    ) -> PruneResult:
        """Permanently delete every expired memory in the namespace (or one store). Returns the count (0 when none)."""

        async def go() -> PruneResult:
            ns = gw.namespace(namespace)
            rid = request_id or new_id()
            ids: list[str] = []
            seen: set[str] = set()
            while True:
                got = await gw.queries.ask(ExpiredMemories(
                    namespace=ns, now=gw.now(), min_seq=await gw.min_seq(),
                    store=v.store(store) if store is not None else None, limit=500,
                ))  # fmt: skip
                batch = [r.memory.id for r in got.items if r.memory.id not in seen]
                if not batch:
                    break
                seen.update(batch)
                for mid in batch:
                    cmd = DeleteMemory(namespace=ns, memory_id=mid, permanent=True, reason="expired")
                    try:
                        w = await gw.commands.delete(cmd, actor=gw.principal.actor, request_id=rid,
                                                     min_seq=await gw.min_seq())  # fmt: skip
                    except MnemeError as exc:
                        if exc.code == "MEMORY_NOT_FOUND":  # pruned by someone else meanwhile
                            continue
                        raise
                    gw.noted(w.seq)
                    ids.append(mid)
            return PruneResult(pruned=len(ids), ids=ids)

        return await run(ctx, go)

    @mcp.tool(annotations=READ)
    async def memory_stats(
        ctx: Context,
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

        return await run(ctx, go)

    return mcp
