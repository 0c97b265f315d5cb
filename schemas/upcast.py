"""Upcasters: events written under an earlier schema, turned into today's shape on read.

The log is immutable (invariant 7): an old event is never rewritten. When an event's shape
changes incompatibly, it gets a new tag and today's code keeps an upcaster from the old
tag's raw JSON to the new one. Reading is then uniform: the projector, a replay and the
auditor see only current event types. The fast path (a current event) never comes here.

History:
- memory_moved (schema 1: from_path, to_path) -> memory_moved_v2 (schema 2: + to_store,
  required). A schema-1 move never left its store: to_store None means "the same store".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Raw = dict[str, Any]


def _moved_v1(env: Raw) -> Raw:
    ev = dict(env["event"])
    ev["type"] = "memory_moved_v2"
    ev["to_store"] = None
    return {**env, "event": ev, "schema_version": 2}


UPCASTERS: dict[str, Callable[[Raw], Raw]] = {  # old tag -> raw envelope in the next shape
    "memory_moved": _moved_v1,
}


def upcast(env: Raw) -> Raw | None:
    """Apply upcasters until the event's tag is current; None when there is nothing to upcast."""
    changed = False
    for _ in range(16):
        tag = env.get("event", {}).get("type")
        step = UPCASTERS.get(tag)
        if step is None:
            break
        env = step(env)
        changed = True
    return env if changed else None
