"""Governance tools: verify, lock, unlock (admins only; group "governance") and the audit trail (admins;
group "audit"). Each change is one event; refusals are recorded as denied attempts. Deprecating, which
any writer may do, is memory_retire's mode "deprecate"."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from mneme.domain import validation as v
from mneme.errors import PermissionDenied
from schemas.commands import LockMemory, UnlockMemory, VerifyMemory
from schemas.queries import AuditQuery
from services.gateway.gateway import Call, split_ref
from services.gateway.models import AuditPage, AuditRecord, Receipt
from services.gateway.params import READ, WRITE, Namespace, Ref, RequestId, UtcTime
from services.gateway.toolkit import Toolset

Reason = Annotated[str | None, Field(max_length=128)]

tools = Toolset(group="governance", flow=True)


async def _change(call: Call, ref: str, request_id: str | None, make: Callable[[str, str], Any]) -> Receipt:
    """One governance event on a memory (by id or store:path); `make(namespace, memory_id)` is its command."""
    row, w = await call.app.memories.change(
        "govern", call, split_ref(ref), lambda mid: make(call.namespace, mid), request_id=request_id
    )
    m = w.memory or row.memory
    return Receipt.of(m, w.seq if w.changed else None, w.changed, verification=m.verification, locked=m.locked)


@tools.tool(intent="admin", hints=WRITE)
async def memory_verify(call: Call, id: Ref, namespace: Namespace = None, request_id: RequestId = None) -> Receipt:
    """Admins: mark a memory verified (agents' memories start unverified)."""
    return await _change(call, id, request_id, lambda ns, mid: VerifyMemory(namespace=ns, memory_id=mid))


@tools.tool(intent="admin", hints=WRITE)
async def memory_lock(
    call: Call, id: Ref, reason: Reason = None, namespace: Namespace = None, request_id: RequestId = None
) -> Receipt:
    """Admins: lock a memory, so agents cannot change or retire it until it is unlocked."""
    return await _change(call, id, request_id, lambda ns, mid: LockMemory(namespace=ns, memory_id=mid, reason=reason))


@tools.tool(intent="admin", hints=WRITE)
async def memory_unlock(call: Call, id: Ref, namespace: Namespace = None, request_id: RequestId = None) -> Receipt:
    """Admins: unlock a locked memory."""
    return await _change(call, id, request_id, lambda ns, mid: UnlockMemory(namespace=ns, memory_id=mid))


@tools.tool(intent="read", hints=READ, group="audit")
async def audit_query(
    call: Call,
    namespace: Namespace = None,
    memory_id: Annotated[str | None, Field(max_length=64, description="Who touched this memory.")] = None,
    agent_id: Annotated[str | None, Field(max_length=128, description="What this agent did.")] = None,
    action: Annotated[str | None, Field(max_length=64, description="Prefix: memory_, read:, denied:")] = None,
    outcome: Literal["ok", "denied"] | None = None,
    since: UtcTime | None = None,
    until: UtcTime | None = None,
    all_readable: Annotated[bool, Field(description="Search every namespace you may read, not just one.")] = False,
    limit: Annotated[int, Field(ge=1, le=1000)] = 100,
    offset: Annotated[int, Field(ge=0)] = 0,
) -> AuditPage:
    """Admins: the tamper-evident trail of every change, read and refused attempt: who touched memory X,
    what agent Y did between two times, which attempts were denied."""
    gw = call.gw
    if not call.principal.is_admin:
        raise PermissionDenied("query the audit trail")
    p = call.principal
    spaces = (*p.namespaces, *p.read_only, *([p.system_namespace] if p.system_namespace else []))
    q = AuditQuery(
        namespace=call.namespace,
        now=gw.now(),
        namespaces=spaces if all_readable else (call.namespace,),
        memory_id=memory_id,
        agent_id=agent_id,
        action=action,
        outcome=outcome,
        since=v.utc(since, "since"),
        until=v.utc(until, "until"),
        limit=limit,
        offset=offset,
    )
    got = await call.app.reads.send(call, q)
    records = [
        AuditRecord(
            trail_seq=r.trail_seq,
            action=r.action,
            outcome=r.outcome,
            at=r.occurred_at,
            agent_id=r.agent_id,
            role=r.role,
            request_id=r.request_id,
            namespace=r.namespace,
            memory_ids=r.memory_ids,
            code=r.code,
        )
        for r in got.records
    ]
    return AuditPage(results=records, total=got.total, has_more=offset + len(records) < got.total)
