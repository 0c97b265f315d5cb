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
    Every follower asks it of every event: the placed case is a few string comparisons."""
    if not isinstance(env, Envelope):
        return None  # (not an event of the log: nothing to compare)
    head = f"{S.EVENTS_PREFIX}.{S.token(env.namespace)}."
    if not subject.startswith(head):
        return f"misplaced: namespace {env.namespace!r} on {subject!r}"
    rest = subject[len(head) :]  # <aggregate>.<...>
    ev = env.event
    if not isinstance(ev, Event):  # (graph, code and namespace events: anywhere but on a memory's subject)
        on_memory = rest.startswith(f"{S.MEMORY_AGGREGATE}.")
        return f"misplaced: a {type(ev).__name__} on a memory's subject" if on_memory else None
    if ev.memory_id != env.aggregate_id:
        return f"misplaced: memory {ev.memory_id!r} in an envelope of aggregate {env.aggregate_id!r}"
    if isinstance(ev, MemoryCreated):  # a create is on its own store's subject
        placed = rest == f"{S.MEMORY_AGGREGATE}.{store_token(ev.store)}.{ev.memory_id}"
    else:  # a change: the memory's store takes its state to judge (the folds' `on_memory_subject`)
        parts = rest.split(".")
        placed = len(parts) == 3 and parts[0] == S.MEMORY_AGGREGATE and parts[2] == ev.memory_id
    return None if placed else f"misplaced: a {type(ev).__name__} of memory {ev.memory_id!r} on {subject!r}"


def store_token(store: str | None) -> str:
    return S.token(store) if store else S.NO_STORE_TOKEN


def on_memory_subject(subject: str, namespace: str, store: str | None, memory_id: str) -> bool:
    """A change to a memory must be on the memory's subject as it stands (its store now). An empty subject
    (a fold fed without one: unit tests, tools) is taken as placed."""
    return not subject or subject == S.memory_subject(namespace, store, memory_id)
