"""Lifecycle tools of governance: verify, lock, unlock (admins only) and deprecate (anyone who may
write the memory, with a reason). Each is one event; refusals are recorded as denied attempts."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from schemas.commands import DeprecateMemory, LockMemory, UnlockMemory, VerifyMemory
from services.gateway.gateway import Call, Gateway, Intent
from services.gateway.models import LifecycleResult
from services.gateway.params import WRITE, ContextArg, MemoryId, Namespace, Path, RequestId, Store

Reason = Annotated[str | None, Field(max_length=128)]


def register(mcp: MCPServer, gw: Gateway) -> None:
    async def change(
        headers: object, tool: str, intent: Intent, context: object, namespace: str | None,
        memory_id: str | None, store: str | None, path: str | None, request_id: str | None, make: object,
    ) -> LifecycleResult:  # fmt: skip
        async def go(call: Call) -> LifecycleResult:
            min_seq = await gw.min_seq()
            row = await gw.resolve(call.namespace, memory_id, store, path, min_seq)
            cmd = make(call.namespace, row.memory.id)  # type: ignore[operator]
            w = await gw.commands.govern(cmd, actor=call.principal.actor, request_id=request_id or call.request_id,
                                         min_seq=min_seq)  # fmt: skip
            gw.noted(w.seq)
            m = w.memory or row.memory
            return LifecycleResult(id=m.id, version=m.version, status=m.status, verification=m.verification,
                                   locked=m.locked, changed=w.changed, at=m.updated_at)  # fmt: skip

        return await gw.run(headers, tool, intent, context, namespace, go)  # type: ignore[arg-type]

    @mcp.tool(annotations=WRITE)
    async def memory_verify(ctx: Context, id: MemoryId = None, namespace: Namespace = None, store: Store = None,
                            path: Path = None, request_id: RequestId = None,
                            context: ContextArg = None) -> LifecycleResult:  # fmt: skip
        """Mark a memory verified (admins only; agents get PERMISSION_ERROR)."""
        return await change(ctx.headers, "memory_verify", "admin", context, namespace, id, store, path, request_id,
                            lambda ns, mid: VerifyMemory(namespace=ns, memory_id=mid))  # fmt: skip

    @mcp.tool(annotations=WRITE)
    async def memory_lock(ctx: Context, id: MemoryId = None, namespace: Namespace = None, store: Store = None,
                          path: Path = None, reason: Reason = None, request_id: RequestId = None,
                          context: ContextArg = None) -> LifecycleResult:  # fmt: skip
        """Lock a memory: immutable to agents (MEMORY_LOCKED) until an admin unlocks it. Admins only."""
        return await change(ctx.headers, "memory_lock", "admin", context, namespace, id, store, path, request_id,
                            lambda ns, mid: LockMemory(namespace=ns, memory_id=mid, reason=reason))  # fmt: skip

    @mcp.tool(annotations=WRITE)
    async def memory_unlock(ctx: Context, id: MemoryId = None, namespace: Namespace = None, store: Store = None,
                            path: Path = None, request_id: RequestId = None,
                            context: ContextArg = None) -> LifecycleResult:  # fmt: skip
        """Unlock a locked memory. Admins only."""
        return await change(ctx.headers, "memory_unlock", "admin", context, namespace, id, store, path, request_id,
                            lambda ns, mid: UnlockMemory(namespace=ns, memory_id=mid))  # fmt: skip

    @mcp.tool(annotations=WRITE)
    async def memory_deprecate(
        ctx: Context,
        reason: Annotated[str, Field(min_length=1, max_length=128, description="Why it no longer applies.")],
        id: MemoryId = None, namespace: Namespace = None, store: Store = None, path: Path = None,
        request_id: RequestId = None, context: ContextArg = None,
    ) -> LifecycleResult:  # fmt: skip
        """Mark a memory obsolete, with a reason. It stays readable, marked 'deprecated'."""
        return await change(ctx.headers, "memory_deprecate", "write", context, namespace, id, store, path, request_id,
                            lambda ns, mid: DeprecateMemory(namespace=ns, memory_id=mid, reason=reason))  # fmt: skip
