"""The knowledge graph's queries and their results: entities (by id, name, type or text, with their relations),
relations by id, and a traversal from one entity, each current or as of a past position. Answered by a
projector from its graph tables (services/projector/graph_queries.py); re-exported by schemas/queries.py.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from msgspec import Struct

from schemas.events import UtcTime
from schemas.query_base import AsOf, Query


class GraphEntities(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Entities of the knowledge graph (current, or as of a past position), with their relations.

    Filters combine: `ids`, `names` (compared by name key), `text` (a case-insensitive substring of the name,
    the type or an observation), `entity_type`. `relations`: none, those touching `either` end of a found
    entity, or only those with `both` ends found."""

    OPERATION: ClassVar[str] = "graph.entities"
    ids: tuple[str, ...] | None = None
    names: tuple[str, ...] | None = None
    text: str | None = None
    entity_type: str | None = None
    relations: Literal["none", "either", "both"] = "either"
    limit: int | None = None
    offset: int = 0
    as_of: AsOf | None = None


class GraphRelations(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Relations by id (current, or as of a past position): what a delete of relations acts on."""

    OPERATION: ClassVar[str] = "graph.relations"
    ids: tuple[str, ...]
    as_of: AsOf | None = None


class GraphTraverse(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Entities and relations within `depth` hops of one entity, following relations out, in or both ways;
    each entity once (cycles end there), at most `max_nodes` entities (then `truncated`)."""

    OPERATION: ClassVar[str] = "graph.traverse"
    entity_id: str
    depth: int = 1
    direction: Literal["outgoing", "incoming", "both"] = "outgoing"
    max_nodes: int = 200
    as_of: AsOf | None = None


class Entity(Struct, frozen=True, kw_only=True):
    id: str
    name: str
    entity_type: str
    description: str | None
    observations: list[str]
    version: int
    last_seq: int
    created_at: UtcTime
    depth: int | None = None  # in a traversal: hops from the start


class Relation(Struct, frozen=True, kw_only=True):
    id: str
    from_id: str
    from_name: str
    to_id: str
    to_name: str
    relation_type: str
    weight: float
    version: int
    last_seq: int


class GraphResult(Struct, frozen=True, kw_only=True):
    entities: list[Entity]
    relations: list[Relation]
    total: int  # entities matching, before limit/offset
    truncated: bool = False
