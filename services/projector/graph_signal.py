"""Graph-aware recall: personalized PageRank over a namespace's knowledge graph, as a third search signal.

The subgraph of a namespace has a node per entity and per memory that mentions one; its edges are the
relations (weighted, walked both ways) and the mentions (weight 1). A search seeds the walk the way
HippoRAG 2 does: from the entities that its top hits mention, each weighted by the hit's score over the
number of memories that mention the entity (a rare entity says more), plus the entities the query names;
seeds every candidate memory by its first-stage score too (HippoRAG 2 seeds its passage nodes by their dense
scores); then runs PPR with damping 0.5 (scipy sparse power iteration). A memory's PPR mass is its graph
signal: it can rank a memory that neither vector nor keyword search found, because it is linked to what they
found, while what they found keeps its own mass. Without any entity seed there is no graph signal.

The subgraph (a sparse, column-normalized matrix) is cached per namespace until a commit changes that
namespace's entities, relations or mentions; a search as of a past position builds the subgraph as it stood
then.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import sparse

from mneme.domain.graph import mentions
from schemas.queries import AsOfResolved
from services.projector.memories_view import MemoriesView
from services.projector.vector_index import point_id

DAMPING = 0.5  # the probability of walking on (HippoRAG 2's); 1 - DAMPING returns to the seeds
ITERATIONS = 50
TOLERANCE = 1e-9
SEED_HITS = 5  # the top hits whose entities seed the walk
CACHED = 16  # subgraphs kept
MEMORY_SEED = 0.5  # each candidate memory's seed, at its best, against the entity seeds' total


@dataclass(frozen=True)
class Subgraph:
    entities: list[str]  # node i < len(entities): that entity
    memories: list[str]  # node len(entities) + j: that memory
    index: dict[str, int]  # entity or memory id -> node
    names: dict[str, str]  # name key -> entity id
    mentioned_by: np.ndarray  # per entity node: how many memories mention it
    memory_entities: dict[str, list[int]]  # memory id -> the entity nodes it mentions
    walk: Any  # scipy CSR: column-normalized transition matrix

    @property
    def nodes(self) -> int:
        return len(self.entities) + len(self.memories)


def _valid(alias: str, at: AsOfResolved | None) -> tuple[str, list[Any]]:
    if at is None:
        return f"{alias}.seq_to IS NULL", []
    return f"{alias}.seq <= ? AND ({alias}.seq_to IS NULL OR {alias}.seq_to > ?)", [at.seq, at.seq]


def build(view: MemoriesView, ns: str, at: AsOfResolved | None) -> Subgraph | None:
    """The namespace's subgraph now (or as of `at`); None when it has no entity."""
    cur = view.reader()
    ev, eargs = _valid("e", at)
    ents = cur.execute(
        f"SELECT e.id, e.name_key FROM graph_entities e WHERE e.namespace = ? AND {ev} AND NOT e.deleted ORDER BY e.id",
        [ns, *eargs],
    ).fetchall()
    if not ents:
        return None
    rv, rargs = _valid("r", at)
    rels = cur.execute(
        f"SELECT r.from_id, r.to_id, r.weight FROM graph_relations r WHERE r.namespace = ? AND {rv} AND NOT r.deleted",
        [ns, *rargs],
    ).fetchall()
    mv, margs = _valid("m", at)
    ments = cur.execute(
        f"SELECT m.memory_id, m.entity_id FROM graph_mentions m WHERE m.namespace = ? AND {mv} ORDER BY m.memory_id",
        [ns, *margs],
    ).fetchall()
    index = {eid: i for i, (eid, _) in enumerate(ents)}
    memories: list[str] = []
    memory_entities: dict[str, list[int]] = {}
    for mid, eid in ments:
        e = index.get(eid)
        if e is None:
            continue  # an entity that no longer holds
        if mid not in memory_entities:
            memory_entities[mid] = []
            memories.append(mid)
        if e not in memory_entities[mid]:  # (found in its content and named by its writer: one link)
            memory_entities[mid].append(e)
    n_ent = len(ents)
    for j, mid in enumerate(memories):
        index[mid] = n_ent + j
    rows, cols, vals = [], [], []
    for a, b, w in rels:
        ia, ib = index.get(a), index.get(b)
        if ia is None or ib is None or ia >= n_ent or ib >= n_ent:
            continue
        rows += [ia, ib]
        cols += [ib, ia]
        vals += [float(w), float(w)]
    mentioned_by = np.zeros(n_ent)
    for mid, es in memory_entities.items():
        m = index[mid]
        for e in es:
            rows += [m, e]
            cols += [e, m]
            vals += [1.0, 1.0]
            mentioned_by[e] += 1
    n = n_ent + len(memories)
    adj = sparse.csr_matrix((vals, (rows, cols)), shape=(n, n))
    out_weight = np.asarray(adj.sum(axis=0)).ravel()
    out_weight[out_weight == 0] = 1.0
    walk = adj @ sparse.diags(1.0 / out_weight)  # column-normalized: column j spreads node j's mass
    names = {key: eid for eid, key in ents}
    return Subgraph([e for e, _ in ents], memories, index, names, mentioned_by, memory_entities, walk.tocsr())


def personalized_pagerank(walk: Any, seeds: np.ndarray, damping: float = DAMPING) -> np.ndarray:
    """r = (1 - d) s + d W r, by power iteration (`seeds` sums to 1)."""
    r = seeds.copy()
    for _ in range(ITERATIONS):
        nxt = (1 - damping) * seeds + damping * (walk @ r)
        if np.abs(nxt - r).sum() < TOLERANCE:
            return np.asarray(nxt)
        r = nxt
    return np.asarray(r)


class GraphSignal:
    def __init__(self, view: MemoriesView):
        self.view = view
        self._cache: OrderedDict[tuple[str, int | None, int], Subgraph | None] = OrderedDict()
        self._lock = threading.Lock()

    def subgraph(self, ns: str, at: AsOfResolved | None) -> Subgraph | None:
        # now: keyed by the last commit that changed this namespace's graph (other writes leave it cached)
        key = (ns, at.seq if at is not None else None, self.view.graph.changed_at.get(ns, 0) if at is None else 0)
        with self._lock:
            if key in self._cache:
                self._cache.move_to_end(key)
                return self._cache[key]
        got = build(self.view, ns, at)
        with self._lock:
            self._cache[key] = got
            while len(self._cache) > CACHED:
                self._cache.popitem(last=False)
        return got

    def scores(
        self, ns: str, query: str, top: list[tuple[str, float]], at: AsOfResolved | None
    ) -> tuple[dict[str, float], int]:
        """The PPR mass of each memory of the subgraph and of each candidate, seeded from the entities that the
        best of `top` ((memory id, first-stage score), best first) mention, the entities `query` names, and the
        candidates themselves; ({}, nodes) without an entity seed, ({}, 0) without a graph."""
        g = self.subgraph(ns, at)
        if g is None:
            return {}, 0
        seeds = np.zeros(g.nodes)
        for mid, score in top[:SEED_HITS]:
            for e in g.memory_entities.get(mid, ()):
                seeds[e] += max(score, 1e-6) / max(g.mentioned_by[e], 1.0)
        named = mentions(query, g.names)
        if named:
            weight = max(seeds.max(), max((s for _, s in top[:1]), default=1.0), 1e-6)
            for eid in named:
                seeds[g.index[eid]] += weight
        entity_mass = float(seeds.sum())
        if entity_mass <= 0:
            return {}, g.nodes
        # every candidate is seeded too, by its first-stage score (min-max over the candidates), as HippoRAG 2
        # seeds its passage nodes: the walk then spreads from what the retrievers found rather than replacing
        # it, and a candidate that mentions no entity keeps its restart mass (an isolated node) instead of 0
        outside: dict[str, float] = {}
        if top:
            hi, lo = top[0][1], min(s for _, s in top)
            span = (hi - lo) or 1.0
            for mid, score in top:
                weight = MEMORY_SEED * entity_mass * (score - lo) / span
                node = g.index.get(mid)
                if node is None:
                    outside[mid] = weight
                else:
                    seeds[node] += weight
        total = float(seeds.sum()) + sum(outside.values())
        mass = personalized_pagerank(g.walk, seeds / total)
        n_ent = len(g.entities)
        out = {mid: float(mass[n_ent + j]) for j, mid in enumerate(g.memories)}
        for mid, weight in outside.items():
            out[mid] = (1 - DAMPING) * weight / total
        return out, g.nodes

    def points(self, memory_ids: list[str], at: AsOfResolved | None) -> dict[str, str]:
        """memory id -> the point id of its version now (or as of `at`), for memories that hold then."""
        if not memory_ids:
            return {}
        cur = self.view.reader()
        if at is None:
            rows = cur.execute(
                "SELECT id, version FROM memories WHERE id IN (SELECT unnest(?))", [memory_ids]
            ).fetchall()
        else:
            rows = cur.execute(
                "SELECT id, version FROM memory_versions WHERE id IN (SELECT unnest(?)) AND seq <= ? "
                "AND (seq_to IS NULL OR seq_to > ?) AND NOT deleted",
                [memory_ids, at.seq, at.seq],
            ).fetchall()
        return {mid: point_id(mid, version) for mid, version in rows}
