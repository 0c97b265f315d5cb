"""The knowledge graph's decider: pure functions from what an aggregate holds (an entity or a relation as the
read models answer it, or the last event on its subject) and what was asked, to the event to append (or None:
nothing to do). Beside the memory decider (decider.py); the write side (services/gateway/graph_commands.py)
loads, appends and retries around them, and the projection folds what they decide (services/projector).

Ids follow from names (mneme/ids.py), so the same entity or relation asked for twice meets on one subject.
An aggregate that was deleted comes back with the next version, so its history stays one line.
"""

from __future__ import annotations

from collections.abc import Sequence

from mneme.domain.graph import distinct
from mneme.errors import InvalidInput
from schemas.graph_events import (
    EntityChanged,
    EntityCreated,
    EntityDeleted,
    GraphEvent,
    RelationCreated,
    RelationDeleted,
)
from schemas.queries import Entity, Relation

MAX_ITEMS = 1000  # entities, relations or observation groups in one call


def check_batch(items: Sequence[object], field: str, what: str = "") -> None:
    """At most MAX_ITEMS in one call (`what`: how the items are counted, e.g. "entities")."""
    if len(items) > MAX_ITEMS:
        raise InvalidInput(field, f"at most {MAX_ITEMS}{' ' + what if what else ''} in one call")


def _next_version(last: GraphEvent | None, deleted: type[GraphEvent]) -> int | None:
    """The version a creation takes on a subject whose last event is `last`: 1 on a new subject, the next one
    after a deletion, None when the aggregate exists (nothing to create)."""
    if last is None:
        return 1
    return last.version + 1 if isinstance(last, deleted) else None


def decide_entity_created(
    entity_id: str,
    name: str,
    entity_type: str,
    observations: Sequence[str] = (),
    description: str | None = None,
    *,
    last: GraphEvent | None = None,
) -> EntityCreated | None:
    """Create an entity on a subject whose last event is `last` (None: a new subject). None: it exists."""
    version = _next_version(last, EntityDeleted)
    if version is None:
        return None
    return EntityCreated(version=version, entity_id=entity_id, name=name, entity_type=entity_type,
                         description=description, observations=tuple(distinct(observations)))  # fmt: skip


def decide_observations(state: Entity, contents: Sequence[str], *, remove: bool) -> EntityChanged | None:
    """Add (or `remove`) observations: only those it lacks (or has), each once, in the order given. None:
    nothing to change."""
    have = set(state.observations)
    todo = tuple(c for c in distinct(contents) if (c in have) == remove)
    if not todo:
        return None
    version, eid = state.version + 1, state.id
    if remove:
        return EntityChanged(version=version, entity_id=eid, removed=todo)
    return EntityChanged(version=version, entity_id=eid, added=todo)


def decide_entity_deleted(state: Entity | None, reason: str | None = None) -> EntityDeleted | None:
    """Delete an entity (None: it is not there, nothing to delete)."""
    if state is None:
        return None
    return EntityDeleted(version=state.version + 1, entity_id=state.id, reason=reason)


def decide_relation_created(
    relation_id: str,
    from_id: str,
    to_id: str,
    relation_type: str,
    weight: float = 1.0,
    *,
    last: GraphEvent | None = None,
) -> RelationCreated | None:
    """Relate two entities on a subject whose last event is `last` (None: a new subject). None: it exists."""
    version = _next_version(last, RelationDeleted)
    if version is None:
        return None
    return RelationCreated(version=version, relation_id=relation_id, from_id=from_id, to_id=to_id,
                           relation_type=relation_type, weight=weight)  # fmt: skip


def decide_relation_deleted(state: Relation | None, reason: str | None = None) -> RelationDeleted | None:
    """Delete a relation (None: it is not there, nothing to delete)."""
    if state is None:
        return None
    return RelationDeleted(version=state.version + 1, relation_id=state.id, reason=reason)
