"""The native write tools: add, update, move, retire, restore, prune, over the event log.

Each tool is thin: the signature is the schema; the mechanism (toolkit.py) authorizes the call
(principal, namespace, context) with the tool's declared intent, the body builds a command and lets
the write side decide and append, and the answer is a receipt. Ending a memory's life is one tool,
memory_retire, whose `mode` says how (archive, delete, deprecate, invalidate, outdated).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET
from pydantic import Field

from mneme.domain import validation as v
from mneme.domain.graph import entity_names
from mneme.errors import InvalidInput, MemoryNotFound
from schemas.commands import (
    CreateMemory,
    DeleteMemory,
    DeprecateMemory,
    InvalidateMemory,
    MoveMemory,
    RestoreMemory,
    UpdateMemory,
)
from services.gateway.gateway import Call, split_ref
from services.gateway.models import AddResult, PruneResult, Receipt
from services.gateway.params import (
    CREATE,
    DESTRUCTIVE,
    WRITE,
    Citations,
    Kind,
    Label,
    Namespace,
    Path,
    Ref,
    RequestId,
    Store,
    Tags,
    Unit,
    UtcTime,
)
from services.gateway.toolkit import Toolset

tools = Toolset(flow=True)

Subject = Annotated[str | None, Field(max_length=128, description="Who or what it is about.")]


@tools.tool(intent="write", hints=CREATE)
async def memory_add(
    call: Call,
    content: Annotated[str, Field(min_length=1, description="The memory text.")],
    namespace: Namespace = None,
    store: Store = None,
    path: Path = None,
    kind: Kind = "note",
    category: Label | None = None,
    subject: Subject = None,
    tags: Tags = [],  # noqa: B006 - pydantic copies defaults
    importance: Unit = 0.5,
    confidence: Unit = 1.0,
    citations: Citations = [],  # noqa: B006
    metadata: dict[str, Any] = {},  # noqa: B006
    expires_at: UtcTime | None = None,
    valid_from: UtcTime | None = None,
    valid_until: UtcTime | None = None,
    entities: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=200)]] | None,
        Field(max_length=50, description="Knowledge-graph entities it is about (created if new)."),
    ] = None,
    request_id: RequestId = None,
) -> AddResult:
    """Remember something new: a fact, preference, decision or note, shared with every agent of the
    namespace. With store + path it can be read back by path (an occupied path is ALREADY_EXISTS; use
    memory_update to change a memory). Returns its id."""
    named = entity_names(entities or ())
    cmd = CreateMemory(
        namespace=call.namespace,
        store=store,
        path=path,
        content=content,
        kind=kind,
        category=category,
        subject=subject,
        tags=tuple(tags),
        importance=importance,
        confidence=confidence,
        citations=tuple(citations),
        metadata=metadata,
        expires_at=expires_at,
        valid_from=valid_from,
        valid_until=valid_until,
        entities=named,
    )
    w = await call.app.memories.create(call, cmd, request_id=request_id, with_entities=True)
    assert w.memory is not None
    return AddResult.of(w.memory, w.duplicate)


@tools.tool(intent="write", hints=WRITE)
async def memory_update(
    call: Call,
    id: Ref,
    namespace: Namespace = None,
    content: Annotated[str | None, Field(min_length=1)] = None,
    kind: Kind | None = None,
    category: Label | None = None,
    subject: Subject = None,
    tags: Annotated[Tags | None, Field(description="Replaces all tags.")] = None,
    importance: Unit | None = None,
    confidence: Unit | None = None,
    citations: Annotated[Citations | None, Field(description="Replaces all citations; [] clears.")] = None,
    metadata: dict[str, Any] | None = None,
    expires_at: UtcTime | None = None,
    clear_expiry: bool = False,
    valid_from: UtcTime | None = None,
    valid_until: UtcTime | None = None,
    request_id: RequestId = None,
) -> Receipt:
    """Correct or extend a memory: change the fields given, keep the rest. Every version stays in its
    history."""
    if clear_expiry and expires_at is not None:
        raise InvalidInput("clear_expiry", "give expires_at or clear_expiry, not both")
    given = {
        "content": content,
        "kind": kind,
        "category": category,
        "subject": subject,
        "tags": tuple(tags) if tags is not None else None,
        "importance": importance,
        "confidence": confidence,
        "citations": tuple(citations) if citations is not None else None,
        "metadata": metadata,
        "expires_at": expires_at,
        "valid_from": valid_from,
        "valid_until": valid_until,
    }
    fields: dict[str, Any] = {k: (UNSET if val is None else val) for k, val in given.items()}
    if clear_expiry:
        fields["expires_at"] = None
    _, w = await call.app.memories.change(
        "update",
        call,
        split_ref(id),
        lambda mid: UpdateMemory(namespace=call.namespace, memory_id=mid, **fields),
        request_id=request_id,
    )
    assert w.memory is not None
    changed = [f for f in (*fields, "verification") if w.event is not None and getattr(w.event, f, UNSET) is not UNSET]
    return Receipt.of(w.memory, w.seq if w.changed else None, w.changed, updated_fields=changed)


@tools.tool(intent="write", hints=WRITE)
async def memory_move(
    call: Call,
    id: Ref,
    to_path: Annotated[str, Field(min_length=1, max_length=512, description="New path in the same store.")],
    namespace: Namespace = None,
    request_id: RequestId = None,
) -> Receipt:
    """Move or rename a memory inside its store (an occupied destination is ALREADY_EXISTS)."""
    row, w = await call.app.memories.change(
        "move",
        call,
        split_ref(id),
        lambda mid: MoveMemory(namespace=call.namespace, memory_id=mid, to_path=to_path),
        request_id=request_id,
    )
    assert w.memory is not None
    return Receipt.of(w.memory, w.seq if w.changed else None, w.changed, from_path=row.memory.path)


Mode = Literal["archive", "delete", "deprecate", "invalidate", "outdated"]


@tools.tool(intent="write", hints=DESTRUCTIVE)
async def memory_retire(
    call: Call,
    id: Ref,
    mode: Annotated[
        Mode,
        Field(
            description=(
                "archive (default): hidden from reads, memory_restore brings it back; delete: gone from every read "
                "and its path freed (history stays); deprecate: still found, marked obsolete and ranked lower; "
                "invalidate: its valid time ends now, optionally superseded_by another; outdated: the same, "
                "recorded as outdated."
            )
        ),
    ] = "archive",
    reason: Annotated[
        str | None, Field(max_length=128, description="Why (required to deprecate or mark outdated).")
    ] = None,
    superseded_by: Annotated[
        str | None, Field(max_length=64, description="invalidate: the memory that replaces it.")
    ] = None,
    namespace: Namespace = None,
    request_id: RequestId = None,
) -> Receipt:
    """Stop a memory from counting: when it is wrong, obsolete, replaced or no longer true. Choose how
    with `mode`; every mode keeps its history."""
    gw = call.gw
    if mode in ("deprecate", "outdated") and not (reason and reason.strip()):
        raise InvalidInput("reason", f"mode {mode!r} needs a reason")
    if superseded_by is not None and mode != "invalidate":
        raise InvalidInput("superseded_by", "only with mode 'invalidate'")
    ref = split_ref(id)
    if mode in ("archive", "delete"):
        permanent = mode == "delete"
        row, w = await call.app.memories.change(
            "delete",
            call,
            ref,
            lambda mid: DeleteMemory(namespace=call.namespace, memory_id=mid, permanent=permanent, reason=reason),
            request_id=request_id,
        )
        version = w.event.version if w.event is not None else row.memory.version
        return Receipt(
            id=row.memory.id,
            version=version,
            seq=w.seq if w.changed else None,
            status="deleted" if permanent else "archived",
            changed=w.changed,
            store=row.memory.store,
            path=row.memory.path,
        )
    if mode == "deprecate":
        assert reason is not None  # checked above: deprecating needs a reason
        row, w = await call.app.memories.change(
            "govern",
            call,
            ref,
            lambda mid: DeprecateMemory(namespace=call.namespace, memory_id=mid, reason=reason),
            request_id=request_id,
        )
        return Receipt.of(w.memory or row.memory, w.seq if w.changed else None, w.changed)
    successor = None
    if superseded_by is not None:  # it must be a memory the caller can see in the same namespace
        v.memory_id(superseded_by, "superseded_by")
        try:
            successor = (await call.app.reads.resolve(call, superseded_by)).memory.id
        except MemoryNotFound:
            raise InvalidInput("superseded_by", f"no memory {superseded_by} in {call.namespace}") from None
    row, w = await call.app.memories.change(
        "govern",
        call,
        ref,
        lambda mid: InvalidateMemory(
            namespace=call.namespace,
            memory_id=mid,
            at=gw.now(),
            reason=reason,
            superseded_by=successor,
            outdated=mode == "outdated",
        ),
        request_id=request_id,
    )
    m = w.memory or row.memory
    return Receipt.of(
        m, w.seq if w.changed else None, w.changed, valid_until=m.valid_until, superseded_by=m.superseded_by
    )


@tools.tool(intent="write", hints=WRITE)
async def memory_restore(call: Call, id: Ref, namespace: Namespace = None, request_id: RequestId = None) -> Receipt:
    """Bring an archived memory back (memory_retire mode 'archive' undone)."""
    _, w = await call.app.memories.change(
        "restore",
        call,
        split_ref(id),
        lambda mid: RestoreMemory(namespace=call.namespace, memory_id=mid),
        request_id=request_id,
    )
    assert w.memory is not None
    return Receipt.of(w.memory, w.seq if w.changed else None, w.changed)


@tools.tool(intent="write", hints=DESTRUCTIVE)
async def memory_prune_expired(
    call: Call,
    namespace: Namespace = None,
    store: Store = None,
    request_id: RequestId = None,
) -> PruneResult:
    """Permanently delete every expired memory in the namespace (or one store)."""
    pruned = await call.app.memories.prune_expired(call, v.store(store) if store is not None else None, request_id)
    return PruneResult(pruned=len(pruned), ids=[m.id for m in pruned])
