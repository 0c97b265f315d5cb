"""What the knowledge graph's fold stores: its tables (GRAPH_SCHEMA, created with the memories' own), the
versioned states of entities and relations, the pure fold of one graph event into them, and the conversions
between a state and its row (ENTITY_COLUMNS, RELATION_COLUMNS order). Every version is a row with its record
interval [seq, seq_to); services/projector/graph_fold.py stages and writes them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
from msgspec import UNSET

from mneme.domain.graph import name_key
from schemas.events import Envelope
from schemas.graph_events import (
    EntityChanged,
    EntityCreated,
    EntityDeleted,
    GraphEvent,
    RelationCreated,
    RelationDeleted,
)

GRAPH_SCHEMA = """
CREATE TABLE IF NOT EXISTS graph_entities (
    id VARCHAR NOT NULL, version INTEGER NOT NULL, namespace VARCHAR NOT NULL, name VARCHAR NOT NULL,
    name_key VARCHAR NOT NULL, entity_type VARCHAR NOT NULL, description VARCHAR, observations VARCHAR[] NOT NULL,
    deleted BOOLEAN NOT NULL, seq BIGINT NOT NULL, seq_to BIGINT, recorded_at TIMESTAMPTZ NOT NULL,
    created_at TIMESTAMPTZ NOT NULL, agent_id VARCHAR NOT NULL, created_seq BIGINT NOT NULL,
    PRIMARY KEY (id, version)
);
CREATE TABLE IF NOT EXISTS graph_relations (
    id VARCHAR NOT NULL, version INTEGER NOT NULL, namespace VARCHAR NOT NULL, from_id VARCHAR NOT NULL,
    to_id VARCHAR NOT NULL, relation_type VARCHAR NOT NULL, weight DOUBLE NOT NULL, deleted BOOLEAN NOT NULL,
    seq BIGINT NOT NULL, seq_to BIGINT, recorded_at TIMESTAMPTZ NOT NULL, agent_id VARCHAR NOT NULL,
    PRIMARY KEY (id, version)
);
CREATE TABLE IF NOT EXISTS graph_mentions (
    memory_id VARCHAR NOT NULL, entity_id VARCHAR NOT NULL, namespace VARCHAR NOT NULL, seq BIGINT NOT NULL,
    seq_to BIGINT, explicit BOOLEAN NOT NULL  -- explicit: named by the writer (memory_add's entities), not found
);
CREATE INDEX IF NOT EXISTS graph_entities_key ON graph_entities (namespace, name_key);
CREATE INDEX IF NOT EXISTS graph_mentions_memory ON graph_mentions (memory_id);
CREATE INDEX IF NOT EXISTS graph_relations_from ON graph_relations (from_id);
CREATE INDEX IF NOT EXISTS graph_relations_to ON graph_relations (to_id);
"""
GRAPH_TABLES = ("graph_entities", "graph_relations", "graph_mentions")
GRAPH_CANONICAL = {
    "graph_entities": ("id, version", "TRUE"),
    "graph_relations": ("id, version", "TRUE"),
    "graph_mentions": ("memory_id, entity_id, seq, explicit", "TRUE"),
}

ENTITY_COLUMNS = (
    "id, version, namespace, name, name_key, entity_type, description, observations, deleted, seq, seq_to, "
    "recorded_at, created_at, agent_id, created_seq"
)
RELATION_COLUMNS = (
    "id, version, namespace, from_id, to_id, relation_type, weight, deleted, seq, seq_to, recorded_at, agent_id"
)


class EntityState(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    version: int
    namespace: str
    name: str
    entity_type: str
    description: str | None
    observations: tuple[str, ...]
    deleted: bool
    seq: int
    created_at: datetime
    created_seq: int  # where this incarnation was created: entities list in the order they came to exist


class RelationState(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    version: int
    namespace: str
    from_id: str
    to_id: str
    relation_type: str
    weight: float
    deleted: bool
    seq: int


def evolve_entity(prev: EntityState | None, env: Envelope, seq: int) -> EntityState | None:
    """`prev` itself (nothing to fold) for an event whose version is not past it: a gateway never writes one,
    a replayed or forged message may, and folding it would give two rows one (id, version)."""
    ev = env.event
    if prev is not None and isinstance(ev, GraphEvent) and ev.version <= prev.version:
        return prev
    if isinstance(ev, EntityCreated):
        return EntityState(
            id=ev.entity_id,
            version=ev.version,
            namespace=env.namespace,
            name=ev.name,
            entity_type=ev.entity_type,
            description=ev.description,
            observations=tuple(dict.fromkeys(ev.observations)),
            deleted=False,
            seq=seq,
            created_at=env.occurred_at,
            created_seq=seq,
        )
    if prev is None:
        return None  # a change to an entity this projection never saw created
    if isinstance(ev, EntityChanged):
        removed = set(ev.removed)
        kept = [o for o in prev.observations if o not in removed]
        obs = tuple(dict.fromkeys([*kept, *ev.added]))
        changes: dict[str, Any] = {"observations": obs}
        if ev.entity_type is not UNSET:
            changes["entity_type"] = ev.entity_type
        if ev.description is not UNSET:
            changes["description"] = ev.description
        return msgspec.structs.replace(prev, version=ev.version, seq=seq, **changes)
    if isinstance(ev, EntityDeleted):
        return msgspec.structs.replace(prev, version=ev.version, seq=seq, deleted=True)
    return prev


def evolve_relation(prev: RelationState | None, env: Envelope, seq: int) -> RelationState | None:
    ev = env.event
    if prev is not None and isinstance(ev, GraphEvent) and ev.version <= prev.version:  # (as evolve_entity)
        return prev
    if isinstance(ev, RelationCreated):
        return RelationState(
            id=ev.relation_id,
            version=ev.version,
            namespace=env.namespace,
            from_id=ev.from_id,
            to_id=ev.to_id,
            relation_type=ev.relation_type,
            weight=ev.weight,
            deleted=False,
            seq=seq,
        )
    if prev is None:
        return None
    if isinstance(ev, RelationDeleted):
        return msgspec.structs.replace(prev, version=ev.version, seq=seq, deleted=True)
    return prev


def entity_row(s: EntityState, recorded_at: datetime, agent_id: str) -> tuple[Any, ...]:
    return (
        s.id,
        s.version,
        s.namespace,
        s.name,
        name_key(s.name),
        s.entity_type,
        s.description,
        list(s.observations),
        s.deleted,
        s.seq,
        None,
        recorded_at,
        s.created_at,
        agent_id,
        s.created_seq,
    )


def relation_row(s: RelationState, recorded_at: datetime, agent_id: str) -> tuple[Any, ...]:
    """(RELATION_COLUMNS order: the state's fields, in their order, then seq_to, recorded_at, agent_id.)"""
    return (*msgspec.structs.astuple(s), None, recorded_at, agent_id)


def entity_state(r: tuple[Any, ...]) -> EntityState:
    """From a graph_entities row (ENTITY_COLUMNS order)."""
    return EntityState(
        id=r[0],
        version=r[1],
        namespace=r[2],
        name=r[3],
        entity_type=r[5],
        description=r[6],
        observations=tuple(r[7]),
        deleted=r[8],
        seq=r[9],
        created_at=r[12],
        created_seq=r[14],
    )


def relation_state(r: tuple[Any, ...]) -> RelationState:
    """From a graph_relations row (RELATION_COLUMNS order: it begins with the state's fields)."""
    fields = RelationState.__struct_fields__
    return RelationState(**dict(zip(fields, r[: len(fields)], strict=True)))
