"""Does an event sit on the subject a gateway would have put it on?

Optimistic concurrency and path uniqueness rest on subjects (invariant 4): a change expects the last
sequence of its memory's subject, a path claim the last sequence of its store's subjects. A message on
a subject that contradicts its envelope (another namespace, another memory, a create outside its store)
would have a fold attribute it to a memory or a store whose subjects never held it, and every later
write there would expect a sequence the log cannot confirm (a path claim answering CONFLICT for ever).
No gateway writes one; a writer that bypasses the gateway can. The followers dead-letter such a message
instead of folding it (mneme/follow.py); what takes the memory's state to judge (a change published
under another store than the memory's) is judged by the folds with `on_memory_subject`.
"""

from __future__ import annotations

from typing import Any

from schemas import subjects as S
from schemas.events import Envelope, Event, MemoryCreated


def misplaced(subject: str, env: Any) -> str | None:
    """Why `env` cannot be on `subject`, or None when it can (as far as the envelope alone tells).
    Every follower asks it of every event: the placed case is a few string comparisons (~0.5 us)."""
    if not isinstance(env, Envelope):
        return None  # (not an event of the log: nothing to compare)
    ev = env.event
    if isinstance(ev, MemoryCreated):
        placed = subject == S.memory_subject(env.namespace, ev.store, env.aggregate_id)
        placed = placed and ev.memory_id == env.aggregate_id
    elif isinstance(ev, Event):
        head = f"{S.EVENTS_PREFIX}.{S.token(env.namespace)}.{S.MEMORY_AGGREGATE}."
        placed = subject.startswith(head) and subject.endswith(f".{ev.memory_id}") and subject.count(".") == 5
        placed = placed and ev.memory_id == env.aggregate_id
    else:
        head = f"{S.EVENTS_PREFIX}.{S.token(env.namespace)}."
        placed = subject.startswith(head) and not subject.startswith(f"{head}{S.MEMORY_AGGREGATE}.")
    return None if placed else _why(subject, env)


def _why(subject: str, env: Envelope) -> str | None:
    parts = subject.split(".")
    if len(parts) < 5 or f"{parts[0]}.{parts[1]}" != S.EVENTS_PREFIX:
        return f"misplaced: {subject!r} is not an event subject"
    if parts[2] != S.token(env.namespace):
        return f"misplaced: namespace {env.namespace!r} published under namespace token {parts[2]!r}"
    ev = env.event
    if not isinstance(ev, Event):
        if parts[3] == S.MEMORY_AGGREGATE:
            return f"misplaced: a {type(ev).__name__} on a memory's subject"
        return None
    if parts[3] != S.MEMORY_AGGREGATE or len(parts) != 6:
        return f"misplaced: a memory's {type(ev).__name__} on {subject!r}"
    if not (parts[5] == env.aggregate_id == ev.memory_id):
        return f"misplaced: memory {ev.memory_id!r} (aggregate {env.aggregate_id!r}) on the subject of {parts[5]!r}"
    if isinstance(ev, MemoryCreated) and parts[4] != store_token(ev.store):
        return f"misplaced: a memory created in store {ev.store!r} published under store token {parts[4]!r}"
    return None


def store_token(store: str | None) -> str:
    return S.token(store) if store else S.NO_STORE_TOKEN


def on_memory_subject(subject: str, namespace: str, store: str | None, memory_id: str) -> bool:
    """A change to a memory must be on the memory's subject as it stands (its store now). An empty subject
    (a fold fed without one: unit tests, tools) is taken as placed."""
    return not subject or subject == S.memory_subject(namespace, store, memory_id)
