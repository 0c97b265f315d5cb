"""decide: given the current state, a command and who asks, which events happen. Pure: no clock, no I/O.

Governance lives here: agents write "unverified" memories, cannot write protected kinds
(WRITE_NOT_ALLOWED), cannot change a locked memory (MEMORY_LOCKED), and cannot verify,
lock or unlock (PERMISSION_ERROR). Admins can do all of it. A missing actor is an agent.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET

from mneme.domain import validation as v
from mneme.domain.graph import entity_names
from mneme.domain.state import ACTIVE, ARCHIVED, DEPRECATED, UNVERIFIED, VERIFIED, MemoryState
from mneme.errors import (
    InvalidInput,
    InvalidState,
    MemoryIsLocked,
    MemoryNotFound,
    NothingToChange,
    PathExists,
    PermissionDenied,
    WriteNotAllowed,
)
from schemas.commands import (
    CreateMemory,
    DeleteMemory,
    DeprecateMemory,
    InvalidateMemory,
    LockMemory,
    MoveMemory,
    RestoreMemory,
    UnlockMemory,
    UpdateMemory,
    VerifyMemory,
)
from schemas.events import (
    UPDATABLE_FIELDS,
    Actor,
    MemoryArchived,
    MemoryCreated,
    MemoryDeleted,
    MemoryDeprecated,
    MemoryInvalidated,
    MemoryLocked,
    MemoryMoved,
    MemoryRestored,
    MemoryUnlocked,
    MemoryUpdated,
    MemoryVerified,
)

ADMIN = "admin"
PROTECTED_KINDS = frozenset({"business_rule", "system_constraint"})
AN_AGENT = Actor(agent_id="unknown", role="agent")


def is_admin(actor: Actor) -> bool:
    return actor.role == ADMIN


def _may_write_kind(kind: str, actor: Actor) -> None:
    if kind in PROTECTED_KINDS and not is_admin(actor):
        raise WriteNotAllowed(kind)


def _may_change(st: MemoryState, actor: Actor, *, locked_for_all: bool = False) -> None:
    """Locked memories and protected kinds are for admins to change; `locked_for_all`: a lock binds admins too
    (the governed contract's memory-write)."""
    if st.locked and (locked_for_all or not is_admin(actor)):
        raise MemoryIsLocked(st.id, for_admins_too=locked_for_all and is_admin(actor))
    _may_write_kind(st.kind, actor)


def decide_create(
    cmd: CreateMemory,
    *,
    memory_id: str,
    path_owner: str | None,
    max_content: int = v.MAX_CONTENT_CHARS,
    actor: Actor = AN_AGENT,
) -> MemoryCreated:
    """`path_owner` is the id of the memory now at (store, path), if any."""
    v.namespace(cmd.namespace)
    _may_write_kind(v.kind(cmd.kind), actor)
    if (cmd.store is None) != (cmd.path is None):
        raise InvalidInput("path" if cmd.store else "store", "store and path go together: give both or neither")
    if cmd.store is not None and cmd.path is not None:
        v.store(cmd.store)
        v.path(cmd.path)
        if path_owner is not None:
            raise PathExists(cmd.store, cmd.path, path_owner)
    valid_from, valid_until = v.utc(cmd.valid_from, "valid_from"), v.utc(cmd.valid_until, "valid_until")
    v.validity(valid_from, valid_until)
    return MemoryCreated(
        memory_id=memory_id,
        version=1,
        store=cmd.store,
        path=cmd.path,
        content=v.content(cmd.content, limit=max_content),
        kind=v.kind(cmd.kind),
        category=v.label(cmd.category, "category"),
        subject=v.label(cmd.subject, "subject"),
        tags=v.tags(cmd.tags),
        importance=v.unit_interval(cmd.importance, "importance"),
        confidence=v.unit_interval(cmd.confidence, "confidence"),
        citations=v.citations(cmd.citations),
        metadata=v.metadata(cmd.metadata),
        expires_at=v.utc(cmd.expires_at, "expires_at"),
        valid_from=valid_from,
        valid_until=valid_until,
        verification=VERIFIED if is_admin(actor) else UNVERIFIED,
        entities=entity_names(cmd.entities) or UNSET,
    )


_NORMALIZE = {
    "content": lambda x, lim: v.content(x, limit=lim),
    "kind": lambda x, _: v.kind(x),
    "category": lambda x, _: v.label(x, "category"),
    "subject": lambda x, _: v.label(x, "subject"),
    "tags": lambda x, _: v.tags(x),
    "importance": lambda x, _: v.unit_interval(x, "importance"),
    "confidence": lambda x, _: v.unit_interval(x, "confidence"),
    "citations": lambda x, _: v.citations(x),
    "metadata": lambda x, _: v.metadata(x),
    "expires_at": lambda x, _: v.utc(x, "expires_at"),
    "valid_from": lambda x, _: v.utc(x, "valid_from"),
    "valid_until": lambda x, _: v.utc(x, "valid_until"),
}


def _live(state: MemoryState | None, ref: str) -> MemoryState:
    if state is None:
        raise MemoryNotFound(ref)
    return state


def decide_update(
    state: MemoryState | None,
    cmd: UpdateMemory,
    *,
    max_content: int = v.MAX_CONTENT_CHARS,
    actor: Actor = AN_AGENT,
    locked_for_all: bool = False,
) -> MemoryUpdated | None:
    """The changed fields only; None when nothing would change (an idempotent no-op). `locked_for_all`: a
    locked memory is refused whoever asks (checked against the state the event is appended to)."""
    st = _live(state, cmd.memory_id)
    _may_change(st, actor, locked_for_all=locked_for_all)
    given = {f: getattr(cmd, f) for f in UPDATABLE_FIELDS if getattr(cmd, f) is not UNSET}
    if not given:
        raise NothingToChange(UPDATABLE_FIELDS)
    changed: dict[str, Any] = {}
    for field, value in given.items():
        value = _NORMALIZE[field](value, max_content)
        if value != getattr(st, field):
            changed[field] = value
    v.validity(changed.get("valid_from", st.valid_from), changed.get("valid_until", st.valid_until))
    if "kind" in changed:
        _may_write_kind(changed["kind"], actor)
    if not changed:
        return None
    if st.verification == VERIFIED and not is_admin(actor) and ("content" in changed or "kind" in changed):
        changed["verification"] = UNVERIFIED  # what an admin verified is no longer what it says
    return MemoryUpdated(memory_id=st.id, version=st.version + 1, **changed)


def decide_move(
    state: MemoryState | None, cmd: MoveMemory, *, path_owner: str | None, actor: Actor = AN_AGENT
) -> MemoryMoved | None:
    st = _live(state, cmd.memory_id)
    _may_change(st, actor)
    if st.store is None or st.path is None:
        raise InvalidState("this memory has no store path to move; add it with store and path", field="memory_id")
    v.path(cmd.to_path, "to_path")
    if cmd.to_path == st.path:
        return None
    if path_owner is not None:
        raise PathExists(st.store, cmd.to_path, path_owner, field="to_path")
    return MemoryMoved(
        memory_id=st.id, version=st.version + 1, from_path=st.path, to_path=cmd.to_path, to_store=st.store
    )


def decide_delete(
    state: MemoryState | None, cmd: DeleteMemory, *, actor: Actor = AN_AGENT
) -> MemoryArchived | MemoryDeleted | None:
    st = _live(state, cmd.memory_id)
    _may_change(st, actor)
    reason = v.label(cmd.reason, "reason")
    if cmd.permanent:
        return MemoryDeleted(memory_id=st.id, version=st.version + 1, reason=reason)
    if st.status == ARCHIVED:
        return None
    return MemoryArchived(memory_id=st.id, version=st.version + 1, reason=reason)


def decide_restore(state: MemoryState | None, cmd: RestoreMemory, *, actor: Actor = AN_AGENT) -> MemoryRestored | None:
    st = _live(state, cmd.memory_id)
    _may_change(st, actor)
    if st.status == ACTIVE:
        return None
    if st.status != ARCHIVED:  # deprecation says the memory is obsolete; restoring an archive must not erase that
        raise InvalidState(
            f"memory {st.id} is {st.status}, not archived: restore brings back archived memories "
            "(a deprecated memory stays readable as it is)"
        )
    return MemoryRestored(memory_id=st.id, version=st.version + 1)


def decide_verify(state: MemoryState | None, cmd: VerifyMemory, *, actor: Actor = AN_AGENT) -> MemoryVerified | None:
    st = _live(state, cmd.memory_id)
    if not is_admin(actor):
        raise PermissionDenied("verify a memory")
    if st.verification == VERIFIED:
        return None
    return MemoryVerified(memory_id=st.id, version=st.version + 1)


def decide_lock(state: MemoryState | None, cmd: LockMemory, *, actor: Actor = AN_AGENT) -> MemoryLocked | None:
    st = _live(state, cmd.memory_id)
    if not is_admin(actor):
        raise PermissionDenied("lock a memory")
    if st.locked:
        return None
    return MemoryLocked(memory_id=st.id, version=st.version + 1, reason=v.label(cmd.reason, "reason"))


def decide_unlock(state: MemoryState | None, cmd: UnlockMemory, *, actor: Actor = AN_AGENT) -> MemoryUnlocked | None:
    st = _live(state, cmd.memory_id)
    if not is_admin(actor):
        raise PermissionDenied("unlock a memory")
    if not st.locked:
        return None
    return MemoryUnlocked(memory_id=st.id, version=st.version + 1)


def decide_deprecate(
    state: MemoryState | None, cmd: DeprecateMemory, *, actor: Actor = AN_AGENT
) -> MemoryDeprecated | None:
    """Anyone who may write the memory can deprecate it, with a reason; it stays readable and marked."""
    st = _live(state, cmd.memory_id)
    _may_change(st, actor)
    reason = v.label(cmd.reason, "reason")
    if not reason:
        raise InvalidInput("reason", "say why the memory is deprecated")
    if st.status == DEPRECATED:
        return None
    return MemoryDeprecated(memory_id=st.id, version=st.version + 1, reason=reason)


def decide_invalidate(
    state: MemoryState | None, cmd: InvalidateMemory, *, actor: Actor = AN_AGENT
) -> MemoryInvalidated | None:
    """End a memory's valid time now (soft: it stays readable with its history). Anyone who may write it."""
    st = _live(state, cmd.memory_id)
    _may_change(st, actor)
    reason = v.label(cmd.reason, "reason") if cmd.reason is not None else None
    if cmd.outdated and not reason:
        raise InvalidInput("reason", "say why the memory is outdated")
    if cmd.superseded_by is not None and cmd.superseded_by == st.id:
        raise InvalidInput("superseded_by", "a memory cannot supersede itself")
    if st.valid_until is not None and st.valid_until <= cmd.at:
        return None  # its valid time has already ended: nothing changes (idempotent)
    if st.valid_from is not None and st.valid_from > cmd.at:
        raise InvalidState(f"memory {st.id} is valid only from {st.valid_from.isoformat()}: it cannot end before")
    return MemoryInvalidated(
        memory_id=st.id,
        version=st.version + 1,
        valid_until=cmd.at,
        reason=reason,
        superseded_by=cmd.superseded_by,
        outdated=cmd.outdated,
    )
