"""A memory's state and the one function that folds events into it."""

from __future__ import annotations

import msgspec
from msgspec import UNSET

from schemas.events import (
    UPDATABLE_FIELDS,
    Envelope,
    Event,
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

# the state itself is a wire type (queries answer it): schemas/state.py; re-exported for the domain's users
from schemas.state import ACTIVE, ARCHIVED, DEPRECATED, UNVERIFIED, VERIFIED, MemoryState  # noqa: F401


def stale(state: MemoryState | None, env: Envelope) -> bool:
    """An event that cannot follow `state`: a second create, or a change whose version is not past the state's
    (a gateway never writes one: each change expects the memory's subject as it read it; a forged or replayed
    message may). Folding it would give two rows one (id, version): it is skipped instead."""
    ev = env.event
    if state is None or not isinstance(ev, Event):
        return False
    return isinstance(ev, MemoryCreated) or ev.version <= state.version


def evolve(state: MemoryState | None, env: Envelope, seq: int) -> MemoryState | None:
    """Apply one event. Returns None once a memory is permanently deleted."""
    ev = env.event
    if isinstance(ev, MemoryCreated):
        return MemoryState(
            id=ev.memory_id,
            namespace=env.namespace,
            store=ev.store,
            path=ev.path,
            content=ev.content,
            kind=ev.kind,
            category=ev.category,
            subject=ev.subject,
            tags=tuple(ev.tags),
            importance=ev.importance,
            confidence=ev.confidence,
            citations=tuple(ev.citations),
            metadata=ev.metadata,
            status=ev.status,
            version=ev.version,
            created_at=env.occurred_at,
            updated_at=env.occurred_at,
            created_by=env.actor.agent_id,
            updated_by=env.actor.agent_id,
            expires_at=ev.expires_at,
            valid_from=ev.valid_from,
            valid_until=ev.valid_until,
            last_seq=seq,
            verification=ev.verification,
        )
    if state is None or not isinstance(ev, Event):
        return None  # an event for a memory this projection never saw created (or not a memory's): nothing to fold
    common = {"version": ev.version, "updated_at": env.occurred_at, "updated_by": env.actor.agent_id, "last_seq": seq}
    if isinstance(ev, MemoryUpdated):
        changes = {f: getattr(ev, f) for f in UPDATABLE_FIELDS if getattr(ev, f) is not UNSET}
        if ev.verification is not UNSET:
            changes["verification"] = ev.verification
        return msgspec.structs.replace(state, **changes, **common)
    if isinstance(ev, MemoryMoved):
        store = ev.to_store if ev.to_store is not None else state.store  # (None: a schema-1 move, same store)
        return msgspec.structs.replace(state, store=store, path=ev.to_path, **common)
    if isinstance(ev, MemoryArchived):
        return msgspec.structs.replace(state, status=ARCHIVED, status_reason=ev.reason, **common)
    if isinstance(ev, MemoryRestored):
        return msgspec.structs.replace(state, status=ACTIVE, status_reason=None, **common)
    if isinstance(ev, MemoryVerified):
        return msgspec.structs.replace(state, verification=VERIFIED, **common)
    if isinstance(ev, MemoryLocked):
        return msgspec.structs.replace(state, locked=True, lock_reason=ev.reason, **common)
    if isinstance(ev, MemoryUnlocked):
        return msgspec.structs.replace(state, locked=False, lock_reason=None, **common)
    if isinstance(ev, MemoryDeprecated):
        return msgspec.structs.replace(state, status=DEPRECATED, status_reason=ev.reason, **common)
    if isinstance(ev, MemoryInvalidated):
        return msgspec.structs.replace(
            state, valid_until=ev.valid_until, invalid_reason=ev.reason, superseded_by=ev.superseded_by, **common
        )
    if isinstance(ev, MemoryDeleted):
        return None
    raise TypeError(f"unknown event {type(ev).__name__}")
