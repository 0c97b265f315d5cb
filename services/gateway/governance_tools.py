"""Lifecycle tools of governance: verify, lock, unlock (admins only) and deprecate (anyone who may
write the memory, with a reason). Each is one event; refusals are recorded as denied attempts."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field

from mneme.domain import validation as v
from mneme.errors import PermissionDenied
from schemas.commands import DeprecateMemory, LockMemory, UnlockMemory, VerifyMemory
from schemas.queries import AuditQuery
from services.gateway.gateway import Call
from services.gateway.models import AuditPage, AuditRecord, LifecycleResult
from services.gateway.params import READ, WRITE, MemoryId, Namespace, Path, RequestId, Store
from services.gateway.toolkit import Toolset

Reason = Annotated[str | None, Field(max_length=128)]

tools = Toolset(doc_indent=8)


async def _change(call: Call, memory_id: str | None, store: str | None, path: str | None, request_id: str | None,
                  make: Callable[[str, str], Any]) -> LifecycleResult:  # fmt: skip
    """One governance event on a memory (by id, or store + path); `make(namespace, memory_id)` is its command."""
    gw = call.gw
    assert gw is not None
    row, w = await gw.change(call, memory_id, store, path, request_id,
                             lambda mid: make(call.namespace, mid), gw.commands.govern)  # fmt: skip
    m = w.memory or row.memory
    return LifecycleResult(id=m.id, version=m.version, status=m.status, verification=m.verification,
                           locked=m.locked, changed=w.changed, at=m.updated_at)  # fmt: skip


@tools.tool(intent="admin", hints=WRITE)
async def memory_verify(call: Call, id: MemoryId = None, namespace: Namespace = None, store: Store = None,
                        path: Path = None, request_id: RequestId = None) -> LifecycleResult:  # fmt: skip
    """Mark a memory verified (admins only; agents get PERMISSION_ERROR)."""
    return await _change(call, id, store, path, request_id, lambda ns, mid: VerifyMemory(namespace=ns, memory_id=mid))


@tools.tool(intent="admin", hints=WRITE)
async def memory_lock(call: Call, id: MemoryId = None, namespace: Namespace = None, store: Store = None,
                      path: Path = None, reason: Reason = None, request_id: RequestId = None
                      ) -> LifecycleResult:  # fmt: skip
    """Lock a memory: immutable to agents (MEMORY_LOCKED) until an admin unlocks it. Admins only."""
    return await _change(call, id, store, path, request_id,
                         lambda ns, mid: LockMemory(namespace=ns, memory_id=mid, reason=reason))  # fmt: skip


@tools.tool(intent="admin", hints=WRITE)
async def memory_unlock(call: Call, id: MemoryId = None, namespace: Namespace = None, store: Store = None,
                        path: Path = None, request_id: RequestId = None) -> LifecycleResult:  # fmt: skip
    """Unlock a locked memory. Admins only."""
    return await _change(call, id, store, path, request_id, lambda ns, mid: UnlockMemory(namespace=ns, memory_id=mid))


@tools.tool(intent="write", hints=WRITE)
async def memory_deprecate(
    call: Call,
    reason: Annotated[str, Field(min_length=1, max_length=128, description="Why it no longer applies.")],
    id: MemoryId = None, namespace: Namespace = None, store: Store = None, path: Path = None,
    request_id: RequestId = None,
) -> LifecycleResult:  # fmt: skip
    """Mark a memory obsolete, with a reason. It stays readable, marked 'deprecated'."""
    return await _change(call, id, store, path, request_id,
                         lambda ns, mid: DeprecateMemory(namespace=ns, memory_id=mid, reason=reason))  # fmt: skip


@tools.tool(intent="read", hints=READ)
async def audit_query(
    call: Call,
    namespace: Namespace = None,
    memory_id: Annotated[str | None, Field(max_length=64, description="Who touched this memory.")] = None,
    agent_id: Annotated[str | None, Field(max_length=128, description="What this agent did.")] = None,
    action: Annotated[str | None, Field(max_length=64, description="Action prefix: memory_, read:, denied:")] = None,
    outcome: Literal["ok", "denied"] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    all_readable: Annotated[bool, Field(description="Search every namespace you may read, not just one.")] = False,
    limit: Annotated[int, Field(ge=1, le=1000)] = 100,
    offset: Annotated[int, Field(ge=0)] = 0,
) -> AuditPage:
    """The compliance trail, for admins: who touched memory X, what agent Y did between two times,
    which attempts were denied. Every change, read and refusal is one hash-chained record."""
    gw = call.gw
    assert gw is not None
    if not call.principal.is_admin:
        raise PermissionDenied("query the audit trail")
    p = call.principal
    spaces = (*p.namespaces, *p.read_only, *([p.system_namespace] if p.system_namespace else []))
    q = AuditQuery(namespace=call.namespace, now=gw.now(), min_seq=await gw.min_seq(),
                   namespaces=spaces if all_readable else (call.namespace,), memory_id=memory_id,
                   agent_id=agent_id, action=action, outcome=outcome,
                   since=v.utc(since, "since"), until=v.utc(until, "until"), limit=limit,
                   offset=offset)  # fmt: skip
    got = await gw.queries.ask(q)
    records = [AuditRecord(trail_seq=r.trail_seq, action=r.action, outcome=r.outcome, at=r.occurred_at,
                           agent_id=r.agent_id, role=r.role, request_id=r.request_id,
                           namespace=r.namespace, memory_ids=r.memory_ids, code=r.code)
               for r in got.records]  # fmt: skip
    return AuditPage(records=records, total=got.total, has_more=offset + len(records) < got.total)
