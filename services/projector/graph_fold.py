"""The knowledge graph's fold: entity and relation events into DuckDB, in the memories' transaction.

Every version of an entity or relation is a row with its record interval [seq, seq_to): the current graph
is the rows with `seq_to IS NULL AND NOT deleted`, the graph as of sequence S the rows with
`seq <= S < coalesce(seq_to, ∞) AND NOT deleted`. A delete is a version too (deleted = true), so nothing
is removed from the history. MemoriesView stages graph events with its own, in log order, and writes both
with one checkpoint in one transaction (invariant 5).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import duckdb
import msgspec
from msgspec import UNSET

from mneme.domain.graph import mentions, name_key
from mneme.ids import entity_id_for
from schemas.events import Envelope
from schemas.graph_events import (
    ENTITY_EVENTS,
    RELATION_EVENTS,
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
    return (
        s.id,
        s.version,
        s.namespace,
        s.from_id,
        s.to_id,
        s.relation_type,
        s.weight,
        s.deleted,
        s.seq,
        None,
        recorded_at,
        agent_id,
    )


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
    return RelationState(
        id=r[0],
        version=r[1],
        namespace=r[2],
        from_id=r[3],
        to_id=r[4],
        relation_type=r[5],
        weight=r[6],
        deleted=r[7],
        seq=r[8],
    )


@dataclass
class GraphStaged:
    entities: dict[str, EntityState] = field(default_factory=dict)
    relations: dict[str, RelationState] = field(default_factory=dict)
    entity_rows: list[tuple[Any, ...]] = field(default_factory=list)
    relation_rows: list[tuple[Any, ...]] = field(default_factory=list)
    closed_entities: dict[tuple[str, int], int] = field(default_factory=dict)  # (id, version) -> seq_to
    closed_relations: dict[tuple[str, int], int] = field(default_factory=dict)
    # memory -> (entity, explicit) -> since: its current mentions
    mentions: dict[str, dict[tuple[str, bool], int]] = field(default_factory=dict)
    mention_rows: list[tuple[Any, ...]] = field(default_factory=list)  # (memory, entity, namespace, since, explicit)
    # (memory, entity, since, explicit) -> seq_to
    closed_mentions: dict[tuple[str, str, int, bool], int] = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)  # namespaces whose graph or mentions this batch changes

    def __bool__(self) -> bool:
        return bool(self.entity_rows or self.relation_rows or self.mention_rows or self.closed_mentions)


# (namespace, a word of the name) -> memories of the namespace whose content holds the word: [(id, content)]
FindMemories = Callable[[str, str], list[tuple[str, str]]]


class GraphFold:
    """Stages graph events and memories' mentions of entities (called by MemoriesView.stage, under its lock, in
    log order) and writes them in its commit.

    Mentions: a memory mentions an entity when the entity's name appears in its content (mneme/domain/graph.py)
    while both hold. They are recomputed when a memory's content changes (against the namespace's entities at
    that point of the log) and when an entity comes to exist (against the namespace's memories then), so the
    same log gives the same mentions however it is batched. A namespace that never had an entity costs
    nothing here."""

    def __init__(self) -> None:
        self.st = GraphStaged()
        self._names: dict[str, dict[str, str]] = {}  # namespace -> name key -> entity id (existing entities)
        self._ever: dict[str, bool] = {}  # namespace -> has it ever had an entity
        self._entities: dict[str, EntityState] = {}  # loaded for this batch
        self._relations: dict[str, RelationState] = {}
        self._mentions: dict[str, dict[tuple[str, bool], int]] = {}  # loaded for this batch: committed, current
        # namespace -> the checkpoint of the last commit that changed its graph (what a cached subgraph is keyed by)
        self.changed_at: dict[str, int] = {}

    @staticmethod
    def is_graph(env: Envelope) -> bool:
        return isinstance(env.event, GraphEvent)

    def _namespace(self, cur: duckdb.DuckDBPyConnection, ns: str) -> dict[str, str]:
        names = self._names.get(ns)
        if names is None:
            rows = cur.execute(
                "SELECT name_key, id, deleted FROM graph_entities WHERE namespace = ? AND seq_to IS NULL", [ns]
            ).fetchall()
            names = self._names[ns] = {r[0]: r[1] for r in rows if not r[2]}
            self._ever[ns] = bool(rows) or bool(
                cur.execute("SELECT 1 FROM graph_mentions WHERE namespace = ? LIMIT 1", [ns]).fetchall()
            )
        return names

    def reads_disk(self, batch: list[Any]) -> bool:
        """Whether staging the batch may read DuckDB (graph events; memories of a namespace with a graph or
        not looked at yet)."""
        return any(
            isinstance(p.envelope.event, GraphEvent) or self._ever.get(p.envelope.namespace, True) for p in batch
        )

    def has_graph(self, cur: duckdb.DuckDBPyConnection, ns: str) -> bool:
        self._namespace(cur, ns)
        return self._ever[ns]

    def prepare(self, cur: duckdb.DuckDBPyConnection, batch: list[Any]) -> None:
        """Load, in a few statements, what the batch's graph events and mention changes will read."""
        st = self.st
        ent_ids, rel_ids, mem_ids = set(), set(), set()
        for p in batch:
            ev = p.envelope.event
            if isinstance(ev, ENTITY_EVENTS):
                ent_ids.add(p.envelope.aggregate_id)
                self._namespace(cur, p.envelope.namespace)
            elif isinstance(ev, RELATION_EVENTS):
                rel_ids.add(p.envelope.aggregate_id)
            elif self.has_graph(cur, p.envelope.namespace):
                mem_ids.add(p.envelope.aggregate_id)
        self._entities = self._load_entities(cur, ent_ids - st.entities.keys())
        self._relations = self._load_relations(cur, rel_ids - st.relations.keys())
        ids = [m for m in mem_ids if m not in st.mentions]
        self._mentions = self._load_mentions(cur, ids) if ids else {}

    def stage_one(self, cur: duckdb.DuckDBPyConnection, p: Any, find: FindMemories) -> None:
        """Fold one graph event (Positioned)."""
        st, env = self.st, p.envelope
        aid = env.aggregate_id
        if isinstance(env.event, ENTITY_EVENTS):
            prev_e = st.entities.get(aid) or self._entities.get(aid)
            new_e = evolve_entity(prev_e, env, p.seq)
            if new_e is None or new_e is prev_e:
                return
            if prev_e is not None:
                st.closed_entities[(aid, prev_e.version)] = p.seq
            st.entities[aid] = new_e
            st.entity_rows.append(entity_row(new_e, p.recorded_at, env.actor.agent_id))
            st.touched.add(env.namespace)
            names = self._namespace(cur, env.namespace)
            self._ever[env.namespace] = True
            key = name_key(new_e.name)
            if new_e.deleted:
                names.pop(key, None)
            elif prev_e is None or prev_e.deleted:  # it comes to exist: the memories that name it mention it
                names[key] = aid
                self._link(cur, env.namespace, key, aid, p.seq, find)
            return
        prev_r = st.relations.get(aid) or self._relations.get(aid)
        new_r = evolve_relation(prev_r, env, p.seq)
        if new_r is None or new_r is prev_r:
            return
        if prev_r is not None:
            st.closed_relations[(aid, prev_r.version)] = p.seq
        st.relations[aid] = new_r
        st.relation_rows.append(relation_row(new_r, p.recorded_at, env.actor.agent_id))
        st.touched.add(env.namespace)

    def _current_mentions(self, mid: str) -> dict[tuple[str, bool], int]:
        st = self.st
        if mid not in st.mentions:
            st.mentions[mid] = dict(self._mentions.get(mid, {}))
        return st.mentions[mid]

    def _link(self, cur: duckdb.DuckDBPyConnection, ns: str, key: str, eid: str, seq: int, find: FindMemories) -> None:
        probe = max(key.split(" "), key=len)
        for mid, content in find(ns, probe):
            if mentions(content, {key: eid}):
                if mid not in self.st.mentions and mid not in self._mentions:
                    self._mentions.update(self._load_mentions(cur, [mid]))
                current = self._current_mentions(mid)
                if (eid, False) not in current:
                    current[(eid, False)] = seq
                    self.st.mention_rows.append((mid, eid, ns, seq, False))
                    self.st.touched.add(ns)

    @staticmethod
    def _load_mentions(cur: duckdb.DuckDBPyConnection, ids: list[str]) -> dict[str, dict[tuple[str, bool], int]]:
        out: dict[str, dict[tuple[str, bool], int]] = {m: {} for m in ids}
        for mid, eid, since, explicit in cur.execute(
            "SELECT memory_id, entity_id, seq, explicit FROM graph_mentions "
            "WHERE seq_to IS NULL AND memory_id IN (SELECT unnest(?))",
            [ids],
        ).fetchall():
            out[mid][(eid, explicit)] = since
        return out

    def memory_folded(
        self,
        cur: duckdb.DuckDBPyConnection,
        mid: str,
        ns: str,
        content: str | None,
        seq: int,
        explicit: tuple[str, ...] | None = None,
    ) -> None:
        """A memory came to exist, its content changed, or it is gone (content None): the mentions found in its
        content become those of the new content; `explicit` (entity names its writer gave) adds explicit
        mentions, which stay until the memory is gone. An explicit mention of an entity that does not exist yet
        is recorded all the same: it counts once the entity exists."""
        if not explicit and not self.has_graph(cur, ns):
            return
        self._namespace(cur, ns)
        self._ever[ns] = True
        current = self._current_mentions(mid)
        found = set(mentions(content, self._namespace(cur, ns))) if content is not None else set()
        for key in list(current):
            eid, is_explicit = key
            if content is None or (not is_explicit and eid not in found):
                self.st.closed_mentions[(mid, eid, current.pop(key), is_explicit)] = seq
                self.st.touched.add(ns)
        wanted = [(eid, False) for eid in found]
        if explicit and content is not None:
            wanted += [(entity_id_for(ns, name_key(n)), True) for n in explicit]
        for key in wanted:
            if key not in current:
                current[key] = seq
                self.st.mention_rows.append((mid, key[0], ns, seq, key[1]))
                self.st.touched.add(ns)

    @staticmethod
    def _load_entities(cur: duckdb.DuckDBPyConnection, ids: set[str]) -> dict[str, EntityState]:
        if not ids:
            return {}
        rows = cur.execute(
            f"SELECT {ENTITY_COLUMNS} FROM graph_entities WHERE seq_to IS NULL AND id IN (SELECT unnest(?))",
            [list(ids)],
        ).fetchall()
        return {r[0]: entity_state(r) for r in rows}

    @staticmethod
    def _load_relations(cur: duckdb.DuckDBPyConnection, ids: set[str]) -> dict[str, RelationState]:
        if not ids:
            return {}
        rows = cur.execute(
            f"SELECT {RELATION_COLUMNS} FROM graph_relations WHERE seq_to IS NULL AND id IN (SELECT unnest(?))",
            [list(ids)],
        ).fetchall()
        return {r[0]: relation_state(r) for r in rows}

    def write(self, w: duckdb.DuckDBPyConnection) -> None:
        """Inside the commit's transaction: new version rows, and the versions they close."""
        st = self.st
        if not st:
            return
        for table, closed, rows, columns, at in (
            ("graph_entities", st.closed_entities, st.entity_rows, ENTITY_COLUMNS, 10),
            ("graph_relations", st.closed_relations, st.relation_rows, RELATION_COLUMNS, 9),
        ):
            staged_closes = dict(closed)
            # a version staged and closed in this same batch is written closed (`at`: where seq_to is)
            fixed = [(*r[:at], staged_closes.pop((r[0], r[1]), None), *r[at + 1 :]) for r in rows]
            if fixed:
                w.executemany(f"INSERT INTO {table} ({columns}) VALUES ({', '.join('?' * len(fixed[0]))})", fixed)
            if staged_closes:  # versions committed earlier that this batch replaced
                ks = list(staged_closes)
                w.execute(
                    f"UPDATE {table} SET seq_to = c.s FROM (SELECT unnest(?) AS i, unnest(?) AS v, unnest(?) AS s) c "
                    f"WHERE {table}.id = c.i AND {table}.version = c.v",
                    [[k[0] for k in ks], [k[1] for k in ks], [staged_closes[k] for k in ks]],
                )
        closes = dict(st.closed_mentions)
        rows = [(m, e, ns, since, closes.pop((m, e, since, x), None), x) for m, e, ns, since, x in st.mention_rows]
        if rows:
            w.executemany("INSERT INTO graph_mentions VALUES (?, ?, ?, ?, ?, ?)", rows)
        if closes:
            ks3 = list(closes)
            w.execute(
                "UPDATE graph_mentions SET seq_to = c.s FROM (SELECT unnest(?) AS m, unnest(?) AS e, unnest(?) AS f, "
                "unnest(?) AS x, unnest(?) AS s) c WHERE memory_id = c.m AND entity_id = c.e AND seq = c.f "
                "AND explicit = c.x",
                [
                    [k[0] for k in ks3],
                    [k[1] for k in ks3],
                    [k[2] for k in ks3],
                    [k[3] for k in ks3],
                    [closes[k] for k in ks3],
                ],
            )

    def committed(self, checkpoint: int) -> None:
        """The staged changes are in DuckDB up to `checkpoint`: the namespaces they touched have a new graph."""
        for ns in self.st.touched:
            self.changed_at[ns] = checkpoint

    def reset(self) -> None:
        self.st = GraphStaged()
        self._mentions = {}

    def forget_staged(self) -> None:
        """Drop what was staged and what staging cached of the namespaces (names and whether they have a graph
        may hold staged entities): the batch is about to be staged again from the committed state."""
        self.reset()
        self._names.clear()
        self._ever.clear()
