"""`governed`: the governance contract (../shared/seeds/memory-tool-governance-spec.md) over the one memory.

Five tools, named as the contract names them: memory-write, memory-search, memory.read, memory.lock,
memory.deprecate. Every call carries the contract's `context` (agent_id, organization_id, repository_id,
intent, request_id), checked against the principal of the token (HTTP) or of the settings (stdio): the
repository is the namespace `<organization_id>/<repository_id>`, the organization's verified rules are
`<organization_id>/_system`, readable through memory-search and memory.read only. The rules themselves
(unverified agent memories, protected types, locks, who may lock) are the domain's: the tools build the
same commands and queries as the native ones. docs/profiles.md (governed) maps each tool and every choice.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, TypeVar

import msgspec

from mneme.errors import InvalidContext, MemoryNotFound, MnemeError, ScopeViolation
from mneme.ids import event_id_for
from mneme.principals import SYSTEM_SEGMENT
from schemas.access import AccessDenied
from schemas.commands import CreateMemory, DeprecateMemory, LockMemory, UpdateMemory
from schemas.queries import MemoryHistory, MemoryRow, SearchHit, SearchMemories, VersionInfo
from services.gateway.application.memories import Op
from services.gateway.commands import Written
from services.gateway.gateway import Call, Gateway
from services.gateway.params import READ, WRITE, RequestContext
from services.gateway.profiles.governed_shapes import (
    ERRORS,
    Content,
    DeprecateResult,
    EditId,
    Limit,
    LockResult,
    MemoryDetail,
    MemoryIdArg,
    MemoryType,
    Query,
    Reason,
    SearchItem,
    SearchResult,
    TypeFilter,
    VersionEntry,
    WriteResult,
    action_of,
    scope_origin,
    status_of,
)
from services.gateway.toolkit import Profile, Toolset

T = TypeVar("T")
REQUIRED_CONTEXT = ("agent_id", "organization_id", "repository_id", "intent", "request_id")
HISTORY = 5  # versions memory.read lists ("its latest version history")
SEMANTIC_MIN = 0.2  # cosine similarity that counts as a semantic match (the native semantic default)
TIERS = {"exact": 0, "scope": 1, "rules": 2}  # the contract's ordering priority, by the projector's match group

tools = Toolset()


# -- what every tool does first ------------------------------------------------------------------------------


def gateway(call: Call, context: RequestContext) -> Gateway:
    """The context is complete (the gateway has already checked each given field against the principal)."""
    for name in REQUIRED_CONTEXT:
        if getattr(context, name) is None:
            raise InvalidContext(
                f"context.{name} is required: every request carries agent_id, organization_id, "
                "repository_id, intent and request_id",
                f"context.{name}",
            )
    assert call.gw is not None
    return call.gw


def rules_namespace(call: Call, context: RequestContext) -> str | None:
    """<organization>/_system, when the caller may read it and it is not the active repository itself."""
    org = call.principal.organization or context.organization_id
    ns = f"{org}/{SYSTEM_SEGMENT}"
    return ns if ns != call.namespace and call.principal.can_read(ns) else None


def writable(call: Call) -> None:
    """System scope is read-only here: no system-level writes through this surface (the contract, 3)."""
    if call.namespace.split("/")[-1] == SYSTEM_SEGMENT:
        raise ScopeViolation(
            "the organization's system scope is read-only: read or search it; no system-level "
            "writes through this surface",
            "context.repository_id",
        )


def canonical(memory_id: str) -> str:
    """A memory id that is no UUID names no memory: MEMORY_NOT_FOUND, as for any unknown identifier."""
    try:
        return str(uuid.UUID(memory_id))
    except ValueError:
        raise MemoryNotFound(memory_id) from None


async def audited(call: Call, memory_id: str, work: Callable[[str], Awaitable[T]]) -> T:
    """Run `work` on the memory (its canonical id); a refusal names the memory in the audit trail (the
    gateway records it), and so does an identifier that is not there (recorded here: every action leaves a
    trace linking agent and memory)."""
    try:
        memory_id = canonical(memory_id)
        return await work(memory_id)
    except MnemeError as exc:
        exc.details.setdefault("memory_id", memory_id)
        if exc.code == "MEMORY_NOT_FOUND":
            assert call.gw is not None
            await call.gw.access.record(
                AccessDenied(
                    record_id=event_id_for(f"denied:{call.request_id}:{call.tool}"),
                    at=call.gw.now(),
                    agent_id=call.principal.agent_id,
                    role=call.principal.role,
                    request_id=call.request_id,
                    namespace=call.namespace,
                    operation=call.tool,
                    code=exc.code,
                    message=exc.message,
                    memory_id=memory_id,
                )
            )
        raise


async def not_a_rule(call: Call, context: RequestContext, memory_id: str) -> None:
    """A change aimed at one of the organization's rules is a scope violation, not a missing memory."""
    rules = rules_namespace(call, context)
    if call.gw is None or rules is None:
        return
    try:
        await call.app.reads.resolve(call, memory_id, namespace=rules)
    except MemoryNotFound:
        return
    raise ScopeViolation(f"memory {memory_id} is an organization rule: read-only through this surface", "memory_id")


async def change(
    call: Call,
    context: RequestContext,
    memory_id: str,
    build: Callable[[str], Any],
    op: Op,
    **options: Any,
) -> tuple[MemoryRow, Written]:
    """An existing memory of the active repository, changed through the write side (the application's
    `memories.change`, running `op` with these options)."""
    assert call.gw is not None
    try:
        return await call.app.memories.change(op, call, (memory_id, None, None), build, **options)
    except MemoryNotFound:
        await not_a_rule(call, context, memory_id)
        raise


# -- the tools ---------------------------------------------------------------------------------------------


@tools.tool("memory-write", intent="write", hints=WRITE)
async def memory_write(
    call: Call, content: Content, type: MemoryType, context: RequestContext, memory_id: EditId = None
) -> WriteResult:
    """Store a new fact or decision log in the active repository, written exactly as given. Returns memory_id
    and status: an AI agent's memory is 'unverified' (version 1). With memory_id, edit that memory instead
    (new content and type, next version); a locked memory is MEMORY_LOCKED. AI agents may not write the
    types business_rule and system_constraint (WRITE_NOT_ALLOWED). A retry with the same context.request_id
    is applied once."""
    gateway(call, context)
    writable(call)
    if memory_id is None:
        cmd = CreateMemory(namespace=call.namespace, content=content, kind=type)
        w = await call.app.memories.create(call, cmd)
        m = w.memory
    else:
        _, w = await audited(
            call,
            memory_id,
            lambda mid: change(
                call,
                context,
                mid,
                lambda i: UpdateMemory(namespace=call.namespace, memory_id=i, content=content, kind=type),
                "update",
                locked_for_all=True,  # a lock freezes a rule, for admins too
            ),
        )
        m = w.memory
    assert m is not None
    return WriteResult(memory_id=m.id, status=status_of(m), version=m.version)


@tools.tool("memory-search", intent="read", hints=READ)
async def memory_search(
    call: Call, query: Query, context: RequestContext, limit: Limit = 5, type_filter: TypeFilter = None
) -> SearchResult:
    """Find the memories relevant to a question (RAG), in the active repository and the verified rules of
    the organization. Ordered: exact matches in the repository, then semantic matches in it, then verified
    organization rules; limit 1-10 (default 5). Each result: memory_id, content, type, status, scope_origin."""
    gateway(call, context)
    rules = rules_namespace(call, context)
    got = await call.app.reads.ask(
        call,
        SearchMemories,
        mode="hybrid",
        query=query,
        rule_namespaces=(rules,) if rules else (),
        limit=max(3 * limit, 15),
        threshold=0.0,
        kind=type_filter,
    )
    needle = " ".join(query.split()).casefold()

    def matches(h: SearchHit) -> bool:  # exact (the projector's "exact" group, or the text in a rule) or semantic
        if h.group == "exact" or needle in " ".join(h.memory.content.split()).casefold():
            return True
        return h.semantic is not None and h.semantic >= SEMANTIC_MIN

    hits = sorted(
        (h for h in got.hits if matches(h)), key=lambda h: (TIERS[h.group], h.demoted, -h.score, h.memory.id)
    )[:limit]
    items = [
        SearchItem(
            memory_id=h.memory.id,
            content=h.memory.content,
            type=h.memory.kind,
            status=status_of(h.memory),
            scope_origin=scope_origin(h.memory),
        )
        for h in hits
    ]
    call.read([i.memory_id for i in items])
    return SearchResult(memories=items, count=len(items))


@tools.tool("memory.read", intent="read", hints=READ)
async def memory_read(call: Call, memory_id: MemoryIdArg, context: RequestContext) -> MemoryDetail:
    """Read one memory in full, with its latest version history (newest first): a memory of the active
    repository, or a rule of the organization."""
    gw = gateway(call, context)

    async def read(mid: str) -> tuple[MemoryRow, list[VersionInfo]]:
        reads = call.app.reads
        try:
            row, history, _ = await reads.resolve_with_history(call, mid, history=HISTORY)
        except MemoryNotFound:
            rules = rules_namespace(call, context)
            if rules is None:
                raise
            row, history, _ = await reads.resolve_with_history(call, mid, namespace=rules, history=HISTORY)
        if row.memory.is_expired(gw.now()):  # expired memories are hidden, as everywhere
            raise MemoryNotFound(mid)
        return row, history

    row, history = await audited(call, memory_id, read)
    s = row.memory
    call.read([s.id])
    admin = call.principal.trusted_view()
    return MemoryDetail(
        memory_id=s.id,
        content=s.content,
        type=s.kind,
        status=status_of(s),
        scope_origin=scope_origin(s),
        version=s.version,
        verified=s.verification == "verified",
        locked=s.locked,
        tags=list(s.tags),
        deprecated_reason=s.status_reason,
        lock_reason=s.lock_reason,
        created_by=s.created_by,
        updated_by=s.updated_by,
        created_at=s.created_at if admin else None,
        updated_at=s.updated_at if admin else None,
        history=[
            VersionEntry(
                version=h.version,
                action=action_of(h.event_type),
                agent_id=h.agent_id,
                at=h.recorded_at if admin else None,
                request_id=h.request_id if admin else None,
            )
            for h in history
        ],
    )


@tools.tool("memory.lock", intent="admin", hints=WRITE)
async def memory_lock(call: Call, memory_id: MemoryIdArg, context: RequestContext) -> LockResult:
    """Lock a memory: immutable to AI agents from now on. Human admins only (an AI agent gets
    WRITE_NOT_ALLOWED). Returns status 'locked' and when it was locked."""
    gw = gateway(call, context)
    writable(call)
    row, w = await audited(
        call,
        memory_id,
        lambda mid: change(call, context, mid, lambda i: LockMemory(namespace=call.namespace, memory_id=i), "govern"),
    )
    m = w.memory or row.memory
    locked_at = m.updated_at if w.changed else await lock_time(gw, call, m.id) or m.updated_at
    return LockResult(memory_id=m.id, status="locked", locked_at=locked_at, version=m.version)


@tools.tool("memory.deprecate", intent="write", hints=WRITE)
async def memory_deprecate(
    call: Call, memory_id: MemoryIdArg, reason: Reason, context: RequestContext
) -> DeprecateResult:
    """Mark a memory obsolete, with the reason. It stays readable, with status 'deprecated', and ranks below
    the rest in memory-search. A locked memory is MEMORY_LOCKED for AI agents."""
    gateway(call, context)
    writable(call)
    row, w = await audited(
        call,
        memory_id,
        lambda mid: change(
            call,
            context,
            mid,
            lambda i: DeprecateMemory(namespace=call.namespace, memory_id=i, reason=reason),
            "govern",
        ),
    )
    m = w.memory or row.memory
    return DeprecateResult(memory_id=m.id, status="deprecated", reason=m.status_reason or reason, version=m.version)


# -- helpers -------------------------------------------------------------------------------------------------


async def lock_time(gw: Gateway, call: Call, memory_id: str) -> datetime | None:
    """When a memory that is already locked was locked: the time of its newest memory_locked version (the
    same clock as a fresh lock's answer)."""
    q = MemoryHistory(namespace=call.namespace, now=gw.now(), memory_id=memory_id, limit=1)
    total = (await call.app.reads.send(call, q)).total
    got = await call.app.reads.send(call, msgspec.structs.replace(q, limit=100, offset=max(0, total - 100)))
    return next((v.state.updated_at for v in reversed(got.versions) if v.event_type == "memory_locked"), None)


PROFILE = Profile(
    name="governed",
    tools=tools,
    instructions=(
        "Governed memory for an organization's repositories. Every call carries `context`: agent_id, "
        "organization_id, repository_id (the active repository), intent (read, write or admin) and a unique "
        "request_id. Store facts and decisions with memory-write, find them with memory-search (exact and "
        "semantic matches in the repository, then verified organization rules), read one in full with "
        "memory.read. Human admins lock memories (memory.lock); anyone who may write a memory can deprecate "
        "it with a reason (memory.deprecate). Every action is audited."
    ),
    errors=ERRORS,
    context="required",
    context_required=REQUIRED_CONTEXT,  # the schema says what the contract says; the check stays in `gateway`
)
