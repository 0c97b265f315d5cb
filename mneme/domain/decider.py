"""decide: given the current state and a command, which events happen. Pure: no clock, no I/O."""

from __future__ import annotations

from msgspec import UNSET

from mneme.domain import validation as v
from mneme.domain.state import ACTIVE, ARCHIVED, MemoryState
from mneme.errors import InvalidInput, InvalidState, MemoryNotFound, PathExists
from schemas.commands import CreateMemory, DeleteMemory, MoveMemory, RestoreMemory, UpdateMemory
from schemas.events import (
    UPDATABLE_FIELDS,
    MemoryArchived,
    MemoryCreated,
    MemoryDeleted,
    MemoryMoved,
    MemoryRestored,
    MemoryUpdated,
)


def decide_create(
    cmd: CreateMemory, *, memory_id: str, path_owner: str | None, max_content: int = v.MAX_CONTENT_CHARS
) -> MemoryCreated:
    """`path_owner` is the id of the memory now at (store, path), if any."""
    v.namespace(cmd.namespace)
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
    state: MemoryState | None, cmd: UpdateMemory, *, max_content: int = v.MAX_CONTENT_CHARS
) -> MemoryUpdated | None:
    """The changed fields only; None when nothing would change (an idempotent no-op)."""
    st = _live(state, cmd.memory_id)
    given = {f: getattr(cmd, f) for f in UPDATABLE_FIELDS if getattr(cmd, f) is not UNSET}
    if not given:
        raise InvalidInput("fields", "give at least one field to change")
    changed = {}
    for field, value in given.items():
        value = _NORMALIZE[field](value, max_content)
        if value != getattr(st, field):
            changed[field] = value
    v.validity(changed.get("valid_from", st.valid_from), changed.get("valid_until", st.valid_until))
    if not changed:
        return None
    return MemoryUpdated(memory_id=st.id, version=st.version + 1, **changed)


def decide_move(state: MemoryState | None, cmd: MoveMemory, *, path_owner: str | None) -> MemoryMoved | None:
    st = _live(state, cmd.memory_id)
    if st.store is None or st.path is None:
        raise InvalidState("this memory has no store path to move; add it with store and path", field="memory_id")
    v.path(cmd.to_path, "to_path")
    if cmd.to_path == st.path:
        return None
    if path_owner is not None:
        raise PathExists(st.store, cmd.to_path, path_owner, field="to_path")
    return MemoryMoved(memory_id=st.id, version=st.version + 1, from_path=st.path, to_path=cmd.to_path)


def decide_delete(state: MemoryState | None, cmd: DeleteMemory) -> MemoryArchived | MemoryDeleted | None:
    st = _live(state, cmd.memory_id)
    reason = v.label(cmd.reason, "reason")
    if cmd.permanent:
        return MemoryDeleted(memory_id=st.id, version=st.version + 1, reason=reason)
    if st.status == ARCHIVED:
        return None
    return MemoryArchived(memory_id=st.id, version=st.version + 1, reason=reason)


def decide_restore(state: MemoryState | None, cmd: RestoreMemory) -> MemoryRestored | None:
    st = _live(state, cmd.memory_id)
    if st.status == ACTIVE:
        return None
    return MemoryRestored(memory_id=st.id, version=st.version + 1)
