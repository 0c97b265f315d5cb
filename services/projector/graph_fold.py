"""The knowledge graph's fold: entity and relation events into DuckDB, in the memories' transaction.

Every version of an entity or relation is a row with its record interval [seq, seq_to): the current graph
is the rows with `seq_to IS NULL AND NOT deleted`, the graph as of sequence S the rows with
`seq <= S < coalesce(seq_to, ∞) AND NOT deleted`. A delete is a version too (deleted = true), so nothing
is removed from the history. MemoriesView stages graph events with its own, in log order, and writes both
with one checkpoint in one transaction (invariant 5).

The tables, the states and the pure fold of one event are services/projector/graph_states.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

import duckdb

from mneme.domain.graph import mentions, name_key
from mneme.ids import entity_id_for
from schemas.events import Envelope
from schemas.graph_events import ENTITY_EVENTS, RELATION_EVENTS, GraphEvent
from services.projector.duck_sql import close_versions, columns
from services.projector.graph_states import (
    ENTITY_COLUMNS,
    RELATION_COLUMNS,
    EntityState,
    RelationState,
    entity_row,
    entity_state,
    evolve_entity,
    evolve_relation,
    relation_row,
    relation_state,
)

St = TypeVar("St", EntityState, RelationState)


@dataclass
class Versions(Generic[St]):
    """One kind's staged versions (entities or relations): the newest state of each id staged, the version
    rows to insert, and the committed versions they replace ((id, version) -> seq_to)."""

    states: dict[str, St] = field(default_factory=dict)
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    closed: dict[tuple[str, int], int] = field(default_factory=dict)

    def fold(
        self,
        p: Any,
        loaded: dict[str, St],
        evolve: Callable[[St | None, Envelope, int], St | None],
        row: Callable[[St, datetime, str], tuple[Any, ...]],
    ) -> tuple[St | None, St] | None:
        """Fold one event (Positioned) into its id's newest state (staged, else `loaded`): (the state before,
        the new one) with the new version's row staged, or None when the event changes nothing."""
        env = p.envelope
        aid = env.aggregate_id
        prev = self.states.get(aid) or loaded.get(aid)
        new = evolve(prev, env, p.seq)
        if new is None or new is prev:
            return None
        if prev is not None:
            self.closed[(aid, prev.version)] = p.seq
        self.states[aid] = new
        self.rows.append(row(new, p.recorded_at, env.actor.agent_id))
        return prev, new


def _load_current(
    cur: duckdb.DuckDBPyConnection, table: str, cols: str, ids: set[str], state: Callable[[tuple[Any, ...]], St]
) -> dict[str, St]:
    """The current version (deleted or not) of each of `ids` in `table`, by id."""
    if not ids:
        return {}
    rows = cur.execute(
        f"SELECT {cols} FROM {table} WHERE seq_to IS NULL AND id IN (SELECT unnest(?))", [list(ids)]
    ).fetchall()
    return {r[0]: state(r) for r in rows}


@dataclass
class GraphStaged:
    entities: Versions[EntityState] = field(default_factory=Versions)
    relations: Versions[RelationState] = field(default_factory=Versions)
    # memory -> (entity, explicit) -> since: its current mentions
    mentions: dict[str, dict[tuple[str, bool], int]] = field(default_factory=dict)
    mention_rows: list[tuple[Any, ...]] = field(default_factory=list)  # (memory, entity, namespace, since, explicit)
    # (memory, entity, since, explicit) -> seq_to
    closed_mentions: dict[tuple[str, str, int, bool], int] = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)  # namespaces whose graph or mentions this batch changes

    def __bool__(self) -> bool:
        return bool(self.entities.rows or self.relations.rows or self.mention_rows or self.closed_mentions)


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
        self._entities = _load_current(
            cur, "graph_entities", ENTITY_COLUMNS, ent_ids - st.entities.states.keys(), entity_state
        )
        self._relations = _load_current(
            cur, "graph_relations", RELATION_COLUMNS, rel_ids - st.relations.states.keys(), relation_state
        )
        ids = [m for m in mem_ids if m not in st.mentions]
        self._mentions = self._load_mentions(cur, ids) if ids else {}

    def stage_one(self, cur: duckdb.DuckDBPyConnection, p: Any, find: FindMemories) -> None:
        """Fold one graph event (Positioned)."""
        st, env = self.st, p.envelope
        if not isinstance(env.event, ENTITY_EVENTS):
            if st.relations.fold(p, self._relations, evolve_relation, relation_row) is not None:
                st.touched.add(env.namespace)
            return
        folded = st.entities.fold(p, self._entities, evolve_entity, entity_row)
        if folded is None:
            return
        prev_e, new_e = folded
        st.touched.add(env.namespace)
        names = self._namespace(cur, env.namespace)
        self._ever[env.namespace] = True
        key = name_key(new_e.name)
        if new_e.deleted:
            names.pop(key, None)
        elif prev_e is None or prev_e.deleted:  # it comes to exist: the memories that name it mention it
            names[key] = env.aggregate_id
            self._link(cur, env.namespace, key, env.aggregate_id, p.seq, find)

    def _current_mentions(self, mid: str) -> dict[tuple[str, bool], int]:
        st = self.st
        if mid not in st.mentions:
            st.mentions[mid] = dict(self._mentions.get(mid, {}))
        return st.mentions[mid]

    def _mention(self, mid: str, key: tuple[str, bool], ns: str, seq: int) -> None:
        """`mid` mentions the entity `key` names (explicitly or not) from `seq` on, unless it does already."""
        current = self._current_mentions(mid)
        if key not in current:
            current[key] = seq
            self.st.mention_rows.append((mid, key[0], ns, seq, key[1]))
            self.st.touched.add(ns)

    def _link(self, cur: duckdb.DuckDBPyConnection, ns: str, key: str, eid: str, seq: int, find: FindMemories) -> None:
        probe = max(key.split(" "), key=len)
        for mid, content in find(ns, probe):
            if mentions(content, {key: eid}):
                if mid not in self.st.mentions and mid not in self._mentions:
                    self._mentions.update(self._load_mentions(cur, [mid]))
                self._mention(mid, (eid, False), ns, seq)

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
            self._mention(mid, key, ns, seq)

    def write(self, w: duckdb.DuckDBPyConnection) -> None:
        """Inside the commit's transaction: new version rows, and the versions they close."""
        st = self.st
        if not st:
            return
        for table, versions, cols, at in (
            ("graph_entities", st.entities, ENTITY_COLUMNS, 10),
            ("graph_relations", st.relations, RELATION_COLUMNS, 9),
        ):
            staged_closes = dict(versions.closed)
            # a version staged and closed in this same batch is written closed (`at`: where seq_to is)
            fixed = [(*r[:at], staged_closes.pop((r[0], r[1]), None), *r[at + 1 :]) for r in versions.rows]
            if fixed:
                w.executemany(f"INSERT INTO {table} ({cols}) VALUES ({', '.join('?' * len(fixed[0]))})", fixed)
            close_versions(w, table, staged_closes)  # versions committed earlier that this batch replaced
        closes = dict(st.closed_mentions)
        rows = [(m, e, ns, since, closes.pop((m, e, since, x), None), x) for m, e, ns, since, x in st.mention_rows]
        if rows:
            w.executemany("INSERT INTO graph_mentions VALUES (?, ?, ?, ?, ?, ?)", rows)
        if closes:
            w.execute(
                "UPDATE graph_mentions SET seq_to = c.s FROM (SELECT unnest(?) AS m, unnest(?) AS e, unnest(?) AS f, "
                "unnest(?) AS x, unnest(?) AS s) c WHERE memory_id = c.m AND entity_id = c.e AND seq = c.f "
                "AND explicit = c.x",
                columns((*k, s) for k, s in closes.items()),
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
