"""The knowledge graph's queries, answered from DuckDB (current rows, or the rows valid as of a position)."""

from __future__ import annotations

from typing import Any

import duckdb

from mneme.domain.graph import name_key
from schemas.queries import AsOfResolved, Entity, GraphEntities, GraphRelations, GraphResult, GraphTraverse, Relation
from services.projector.memories_sql import resolve_as_of
from services.projector.memories_view import MemoriesView

MAX_TRAVERSE_NODES = 1000


def _valid(alias: str, at: AsOfResolved | None) -> tuple[str, list[Any]]:
    """The rows of `alias` that hold now, or as of `at`: never a deleted version."""
    if at is None:
        return f"{alias}.seq_to IS NULL AND NOT {alias}.deleted", []
    return f"{alias}.seq <= ? AND ({alias}.seq_to IS NULL OR {alias}.seq_to > ?) AND NOT {alias}.deleted", [at.seq] * 2


_ENTITY = "e.id, e.name, e.entity_type, e.description, e.observations, e.version, e.seq, e.created_at"


def _entity(r: tuple[Any, ...], depth: int | None = None) -> Entity:
    return Entity(
        id=r[0],
        name=r[1],
        entity_type=r[2],
        description=r[3],
        observations=list(r[4]),
        version=r[5],
        last_seq=r[6],
        created_at=r[7],
        depth=depth,
    )


def _relation(r: tuple[Any, ...]) -> Relation:
    """From (id, from_id, from_name, to_id, to_name, relation_type, weight, version, seq)."""
    return Relation(id=r[0], from_id=r[1], from_name=r[2], to_id=r[3], to_name=r[4], relation_type=r[5],
                    weight=r[6], version=r[7], last_seq=r[8])  # fmt: skip


def _relations(
    cur: duckdb.DuckDBPyConnection, ns: str, ids: list[str], mode: str, at: AsOfResolved | None
) -> list[Relation]:
    """Current (or as-of) relations touching `ids` (mode either) or between them (both), with both ends' names;
    a relation whose other end no longer holds is left out."""
    if not ids or mode == "none":
        return []
    rv, rargs = _valid("r", at)
    fv, fargs = _valid("f", at)
    tv, targs = _valid("t", at)
    ends = "(r.from_id IN (SELECT unnest(?)) OR r.to_id IN (SELECT unnest(?)))"
    if mode == "both":
        ends = "(r.from_id IN (SELECT unnest(?)) AND r.to_id IN (SELECT unnest(?)))"
    rows = cur.execute(
        "SELECT r.id, r.from_id, f.name, r.to_id, t.name, r.relation_type, r.weight, r.version, r.seq "
        "FROM graph_relations r JOIN graph_entities f ON f.id = r.from_id AND " + fv + " "
        "JOIN graph_entities t ON t.id = r.to_id AND " + tv + " "
        "WHERE r.namespace = ? AND " + rv + " AND " + ends + " ORDER BY r.seq, r.id",
        [*fargs, *targs, ns, *rargs, ids, ids],
    ).fetchall()
    return [_relation(r) for r in rows]


def entities(view: MemoriesView, q: GraphEntities) -> GraphResult:
    cur = view.reader()
    at = resolve_as_of(view, q.as_of)
    valid, args = _valid("e", at)
    where, params = [f"e.namespace = ? AND {valid}"], [q.namespace, *args]
    if q.ids is not None:
        where.append("e.id IN (SELECT unnest(?))")
        params.append(list(q.ids))
    if q.names is not None:
        where.append("e.name_key IN (SELECT unnest(?))")
        params.append([name_key(n) for n in q.names])
    if q.entity_type is not None:
        where.append("lower(e.entity_type) = lower(?)")
        params.append(q.entity_type)
    if q.text is not None:
        where.append(
            "(contains(lower(e.name), lower(?)) OR contains(lower(e.entity_type), lower(?)) "
            "OR len(list_filter(e.observations, lambda o: contains(lower(o), lower(?)))) > 0)"
        )
        params += [q.text] * 3
    sql = f"FROM graph_entities e WHERE {' AND '.join(where)}"
    total = int(cur.execute(f"SELECT count(*) {sql}", params).fetchall()[0][0])
    page = f" LIMIT {int(q.limit)}" if q.limit is not None else ""
    rows = cur.execute(f"SELECT {_ENTITY} {sql} ORDER BY e.created_seq, e.id{page} OFFSET {int(q.offset)}", params)
    found = [_entity(r) for r in rows.fetchall()]
    rels = _relations(cur, q.namespace, [e.id for e in found], q.relations, at)
    return GraphResult(entities=found, relations=rels, total=total)


def relations(view: MemoriesView, q: GraphRelations) -> GraphResult:
    cur = view.reader()
    at = resolve_as_of(view, q.as_of)
    rv, rargs = _valid("r", at)
    rows = cur.execute(
        "SELECT r.id, r.from_id, coalesce(f.name, ''), r.to_id, coalesce(t.name, ''), r.relation_type, r.weight, "
        "r.version, r.seq FROM graph_relations r "
        "LEFT JOIN graph_entities f ON f.id = r.from_id AND f.seq_to IS NULL "
        "LEFT JOIN graph_entities t ON t.id = r.to_id AND t.seq_to IS NULL "
        f"WHERE r.namespace = ? AND {rv} AND r.id IN (SELECT unnest(?)) ORDER BY r.seq",
        [q.namespace, *rargs, list(q.ids)],
    ).fetchall()
    rels = [_relation(r) for r in rows]
    return GraphResult(entities=[], relations=rels, total=len(rels))


def traverse(view: MemoriesView, q: GraphTraverse) -> GraphResult:
    """Breadth first from the start, `depth` hops (1-3), each entity once; relations between reached entities
    in the chosen direction. At most `max_nodes` entities: the rest is cut at a hop boundary (`truncated`)."""
    cur = view.reader()
    at = resolve_as_of(view, q.as_of)
    cap = max(1, min(q.max_nodes, MAX_TRAVERSE_NODES))
    ev, eargs = _valid("e", at)
    start = cur.execute(
        f"SELECT {_ENTITY} FROM graph_entities e WHERE e.namespace = ? AND e.id = ? AND {ev}",
        [q.namespace, q.entity_id, *eargs],
    ).fetchall()
    if not start:
        return GraphResult(entities=[], relations=[], total=0)
    depth_of = {q.entity_id: 0}
    frontier = [q.entity_id]
    edges: dict[str, tuple[str, str]] = {}
    truncated = False
    rv, _ = _valid("r", at)
    for d in range(1, max(1, min(q.depth, 3)) + 1):
        if not frontier:
            break
        conds = []
        if q.direction in ("outgoing", "both"):
            conds.append("r.from_id IN (SELECT unnest($f))")
        if q.direction in ("incoming", "both"):
            conds.append("r.to_id IN (SELECT unnest($f))")
        rows = cur.execute(
            f"SELECT r.id, r.from_id, r.to_id FROM graph_relations r WHERE r.namespace = $ns AND "
            f"{rv.replace('?', '$s')} AND ({' OR '.join(conds)}) ORDER BY r.seq, r.id",
            {"ns": q.namespace, "f": frontier, **({"s": at.seq} if at else {})},
        ).fetchall()
        nxt: list[str] = []
        for rid, src, dst in rows:
            for other in ((dst,) if src in frontier and q.direction != "incoming" else ()) + (
                (src,) if dst in frontier and q.direction != "outgoing" else ()
            ):
                edges.setdefault(rid, (src, dst))
                if other not in depth_of:
                    if len(depth_of) >= cap:
                        truncated = True
                        continue
                    depth_of[other] = d
                    nxt.append(other)
        frontier = nxt
    ids = list(depth_of)
    rows = cur.execute(
        f"SELECT {_ENTITY} FROM graph_entities e WHERE e.namespace = ? AND {ev} AND e.id IN (SELECT unnest(?))",
        [q.namespace, *eargs, ids],
    ).fetchall()
    found = sorted((_entity(r, depth_of[r[0]]) for r in rows), key=lambda e: (e.depth or 0, e.name))
    alive = {e.id for e in found}
    rels = [r for r in _relations(cur, q.namespace, ids, "both", at) if r.id in edges and {r.from_id, r.to_id} <= alive]
    return GraphResult(entities=found, relations=rels, total=len(found), truncated=truncated)


HANDLERS: dict[type, Any] = {GraphEntities: entities, GraphRelations: relations, GraphTraverse: traverse}
