"""Knowledge-graph events: entities and directed, weighted relations, in the same log as memories.

An entity (`mneme.evt.<ns>.ent.<id>`) has a name, a type, an optional description and observations (short
facts about it, in the order they were added). Its id is derived from its namespace and its normalized name
(`mneme.ids.entity_id_for`), so two writers creating the same entity meet on one subject, and the second is
told it exists. A relation (`mneme.evt.<ns>.rel.<id>`) is directed (from → to), typed and weighted 0–1; its
id is derived from both ends and its type, so the same triple is one relation. Nothing is removed from the
history: deleting closes an entity's or a relation's validity in the projection, and `as_of` still sees it.

The same rules as schemas/events.py: a tag is never reused, a field never retyped, new fields get defaults.
"""

from __future__ import annotations

from typing import ClassVar

from msgspec import UNSET, Struct, UnsetType

from schemas.wide_ints import Int32


class GraphEvent(Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of the graph's event payloads: `version` counts the aggregate's events from 1."""

    SCHEMA_VERSION: ClassVar[int] = 1
    version: Int32


class EntityCreated(GraphEvent, frozen=True, kw_only=True, tag="entity_created"):
    """An entity comes to exist (again, after a delete: the version goes on)."""

    entity_id: str
    name: str
    entity_type: str
    description: str | None = None
    observations: tuple[str, ...] = ()


class EntityChanged(GraphEvent, frozen=True, kw_only=True, tag="entity_changed"):
    """A partial change: observations added (appended, in order) and removed; a field left UNSET is unchanged."""

    entity_id: str
    entity_type: str | UnsetType = UNSET
    description: str | None | UnsetType = UNSET
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


class EntityDeleted(GraphEvent, frozen=True, kw_only=True, tag="entity_deleted"):
    """Its validity ends (the gateway deletes its relations with it, each by its own event)."""

    entity_id: str
    reason: str | None = None


class RelationCreated(GraphEvent, frozen=True, kw_only=True, tag="relation_created"):
    relation_id: str
    from_id: str
    to_id: str
    relation_type: str
    weight: float = 1.0


class RelationDeleted(GraphEvent, frozen=True, kw_only=True, tag="relation_deleted"):
    relation_id: str
    reason: str | None = None


AnyGraphEvent = EntityCreated | EntityChanged | EntityDeleted | RelationCreated | RelationDeleted
ENTITY_EVENTS = (EntityCreated, EntityChanged, EntityDeleted)
RELATION_EVENTS = (RelationCreated, RelationDeleted)
