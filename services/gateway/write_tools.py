"""The native write tools: add, update, move, delete, restore, prune, over the event log.

Each tool is thin: the signature is the schema; the mechanism (toolkit.py) authorizes the call
(principal, namespace, context) with the tool's declared intent, the body builds a command and lets
the write side decide and append, and the result is shaped here. Domain errors leave as JSON tool errors.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from msgspec import UNSET
from pydantic import Field

from mneme.domain import validation as v
from mneme.errors import InvalidInput, MnemeError
from schemas.commands import CreateMemory, DeleteMemory, MoveMemory, RestoreMemory, UpdateMemory
from schemas.queries import ExpiredMemories
from services.gateway.gateway import Call
from services.gateway.models import AddResult, DeleteResult, Memory, MoveResult, PruneResult, UpdateResult
from services.gateway.params import (
    CREATE,
    DESTRUCTIVE,
    WRITE,
    Citations,
    Kind,
    Label,
    MemoryId,
    Namespace,
    Path,
    RequestId,
    Store,
    Tags,
    Unit,
)  # fmt: skip
from services.gateway.toolkit import Toolset

tools = Toolset(doc_indent=8)



@tools.tool(intent="write", hints=CREATE)
async def memory_add(
    call: Call,
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
    an occupied path is an ALREADY_EXISTS error). An agent's memory starts 'unverified'; the protected
    kinds business_rule and system_constraint are for admins. Returns a receipt: id, version and log
    position (read the memory back with memory_get)."""
    gw = call.gw
    assert gw is not None
    cmd = CreateMemory(
        namespace=call.namespace, store=store, path=path, content=content, kind=kind,
        category=category, subject=subject, tags=tuple(tags), importance=importance, confidence=confidence,
        citations=tuple(citations), metadata=metadata, expires_at=expires_at, valid_from=valid_from,
        valid_until=valid_until,
    )  # fmt: skip
    w = await gw.commands.create(cmd, actor=call.principal.actor, request_id=request_id or call.request_id,
                                 min_seq=await gw.min_seq())  # fmt: skip
    gw.noted(w.seq)
    assert w.memory is not None
    return AddResult.of(w.memory, w.duplicate)


@tools.tool(intent="write", hints=WRITE)
async def memory_update(
    call: Call,
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
    Returns the new version and which fields changed. A locked memory is for admins to change."""
    gw = call.gw
    assert gw is not None
    if clear_expiry and expires_at is not None:
        raise InvalidInput("clear_expiry", "give expires_at or clear_expiry, not both")
    given = {
        "content": content, "kind": kind, "category": category, "subject": subject,
        "tags": tuple(tags) if tags is not None else None, "importance": importance, "confidence": confidence,
        "citations": tuple(citations) if citations is not None else None, "metadata": metadata,
        "expires_at": expires_at, "valid_from": valid_from, "valid_until": valid_until,
    }  # fmt: skip
    fields = {k: (UNSET if val is None else val) for k, val in given.items()}
    if clear_expiry:
        fields["expires_at"] = None
    _, w = await gw.change(call, id, store, path, request_id,
                           lambda mid: UpdateMemory(namespace=call.namespace, memory_id=mid, **fields),
                           gw.commands.update)  # fmt: skip
    assert w.memory is not None
    changed = [f for f in (*fields, "verification")
               if w.event is not None and getattr(w.event, f, UNSET) is not UNSET]  # fmt: skip
    return UpdateResult(memory=Memory.of(w.memory, gw.now()), updated_fields=changed)


@tools.tool(intent="write", hints=WRITE)
async def memory_move(
    call: Call,
    to_path: Annotated[str, Field(min_length=1, max_length=512, description="New path in the same store.")],
    id: MemoryId = None,
    namespace: Namespace = None,
    store: Store = None,
    path: Path = None,
    request_id: RequestId = None,
) -> MoveResult:
    """Move or rename a memory inside its store. An occupied destination is an ALREADY_EXISTS error."""
    gw = call.gw
    assert gw is not None
    row, w = await gw.change(call, id, store, path, request_id,
                             lambda mid: MoveMemory(namespace=call.namespace, memory_id=mid, to_path=to_path),
                             gw.commands.move)  # fmt: skip
    assert w.memory is not None
    return MoveResult(memory=Memory.of(w.memory, gw.now()), from_path=row.memory.path or "", to_path=to_path)


@tools.tool(intent="write", hints=DESTRUCTIVE)
async def memory_delete(
    call: Call,
    id: MemoryId = None,
    namespace: Namespace = None,
    store: Store = None,
    path: Path = None,
    permanent: Annotated[bool, Field(description="False (default): archive, restorable. True: remove from every read model (history stays in the log).")] = False,  # noqa: E501
    reason: Annotated[str | None, Field(max_length=128)] = None,
    request_id: RequestId = None,
) -> DeleteResult:
    """Delete a memory: archive it (default) or remove it permanently, which frees its path."""
    gw = call.gw
    assert gw is not None
    row, w = await gw.change(
        call, id, store, path, request_id,
        lambda mid: DeleteMemory(namespace=call.namespace, memory_id=mid, permanent=permanent, reason=reason),
        gw.commands.delete,
    )  # fmt: skip
    version = w.event.version if w.event is not None else row.memory.version
    return DeleteResult(id=row.memory.id, mode="deleted" if permanent else "archived", version=version)


@tools.tool(intent="write", hints=WRITE)
async def memory_restore(
    call: Call,
    id: MemoryId = None,
    namespace: Namespace = None,
    store: Store = None,
    path: Path = None,
    request_id: RequestId = None,
) -> Memory:
    """Bring an archived memory back to active."""
    gw = call.gw
    assert gw is not None
    _, w = await gw.change(call, id, store, path, request_id,
                           lambda mid: RestoreMemory(namespace=call.namespace, memory_id=mid),
                           gw.commands.restore)  # fmt: skip
    assert w.memory is not None
    return Memory.of(w.memory, gw.now())


@tools.tool(intent="write", hints=DESTRUCTIVE)
async def memory_prune_expired(
    call: Call,
    namespace: Namespace = None,
    store: Store = None,
    request_id: RequestId = None,
) -> PruneResult:
    """Permanently delete every expired memory in the namespace (or one store). Returns the count (0 when none)."""
    gw = call.gw
    assert gw is not None
    rid = request_id or call.request_id
    ids: list[str] = []
    seen: set[str] = set()
    while True:
        got = await gw.queries.ask(ExpiredMemories(
            namespace=call.namespace, now=gw.now(), min_seq=await gw.min_seq(),
            store=v.store(store) if store is not None else None, limit=500,
        ))  # fmt: skip
        batch = [r.memory.id for r in got.items if r.memory.id not in seen]
        if not batch:
            break
        seen.update(batch)
        for mid in batch:
            cmd = DeleteMemory(namespace=call.namespace, memory_id=mid, permanent=True, reason="expired")
            try:
                w = await gw.commands.delete(cmd, actor=call.principal.actor, request_id=rid,
                                             min_seq=await gw.min_seq())  # fmt: skip
            except MnemeError as exc:
                if exc.code in ("MEMORY_NOT_FOUND", "MEMORY_LOCKED", "WRITE_NOT_ALLOWED"):
                    continue  # pruned by someone else meanwhile, or not this caller's to prune
                raise
            gw.noted(w.seq)
            ids.append(mid)
    return PruneResult(pruned=len(ids), ids=ids)
