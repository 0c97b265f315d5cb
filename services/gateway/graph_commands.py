"""The knowledge graph's write side: decide from a projector's state, append with the aggregate's expected
sequence, retry when another writer got there first (invariant 4), never write a read model (invariant 1).

Ids follow from names (mneme/ids.py), so two gateways creating the same entity or relation meet on one
subject: the first append wins (expected sequence 0), the second learns it exists. Changes to an entity
(observations added or removed, deleted) append with the expected last sequence of its subject; a lost race
reloads and decides again, so concurrent writers never lose each other's observations.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

import msgspec

from mneme.domain import validation as v
from mneme.domain.graph import MAX_NAME_CHARS, MAX_OBSERVATION_CHARS, distinct, name_key
from mneme.errors import ConcurrencyConflict, EntityNotFound, InvalidInput
from mneme.eventlog import EventLog, WrongLastSequence
from mneme.ids import entity_id_for, envelope, relation_id_for
from schemas import subjects as S
from schemas.events import Actor, Envelope, decode_envelope, encode_envelope
from schemas.graph_events import (
    AnyGraphEvent,
    EntityChanged,
    EntityCreated,
    EntityDeleted,
    GraphEvent,
    RelationCreated,
    RelationDeleted,
)
from schemas.queries import Entity, GraphEntities, GraphRelations, GraphResult, Relation
from services.gateway.queries import QueryClient

MAX_ATTEMPTS = 25
MAX_ITEMS = 1000  # entities, relations or observation groups in one call


@dataclass(frozen=True)
class NewEntity:
    name: str
    entity_type: str
    observations: tuple[str, ...] = ()
    description: str | None = None


@dataclass(frozen=True)
class NewRelation:
    from_name: str
    to_name: str
    relation_type: str
    weight: float = 1.0


@dataclass
class GraphWrite:
    """What a graph command did: the last log position it wrote (0: none) and its per-item outcome."""

    seq: int = 0
    created: list[Entity | Relation] = field(default_factory=list)
    existing: list[Entity | Relation] = field(default_factory=list)
    changed: dict[str, list[str]] = field(default_factory=dict)  # entity name -> observations added/removed
    missing: list[str] = field(default_factory=list)
    deleted: int = 0

    def wrote(self, seq: int) -> None:
        self.seq = max(self.seq, seq)


def _text(value: str, fld: str, limit: int) -> str:
    text = value.strip() if isinstance(value, str) else ""
    if not text:
        raise InvalidInput(fld, "must not be empty")
    if len(text) > limit:
        raise InvalidInput(fld, f"at most {limit} characters ({len(text)} given)")
    return text


def entity_name(value: str, fld: str = "name") -> str:
    name = _text(value, fld, MAX_NAME_CHARS)
    if not name_key(name):
        raise InvalidInput(fld, "a name needs at least one letter or digit")
    return name


def observation(value: str, fld: str) -> str:
    return _text(value, fld, MAX_OBSERVATION_CHARS)


class GraphCommands:
    def __init__(self, log: EventLog, queries: QueryClient, clock: Callable[[], datetime]):
        self.log, self.queries, self.clock = log, queries, clock

    # -- plumbing ----------------------------------------------------------------------------
    def _envelope(self, ns: str, aggregate: str, event: AnyGraphEvent, actor: Actor, request_id: str) -> Envelope:
        key = f"{request_id}:{aggregate}:{event.version}"
        return envelope(key, ns, aggregate, event, actor, request_id, self.clock())

    async def _append(self, subject: str, env: Envelope, expected: int) -> int:
        assert isinstance(env.event, GraphEvent)
        seq, _dup = await self.log.append(
            subject,
            encode_envelope(env),
            msg_id=f"{env.request_id}:{env.aggregate_id}:{env.event.version}",
            expected_seq=expected,
        )
        return seq

    async def _last_event(self, subject: str) -> tuple[int, GraphEvent] | None:
        """The last event on an aggregate's subject, from the log itself (the projector may be behind)."""
        last = await self.log.last_on(subject)
        if last is None or last.data is None:
            return None
        ev = decode_envelope(last.data).event
        return (last.seq, ev) if isinstance(ev, GraphEvent) else None

    async def entities(
        self, ns: str, ids: Sequence[str], min_seq: int, relations: Literal["none", "either", "both"] = "none"
    ) -> dict[str, Entity]:
        query = GraphEntities(namespace=ns, now=self.clock(), min_seq=min_seq, ids=tuple(ids), relations=relations)
        got = await self._confirmed(query, lambda g: len(g.entities) < len(set(ids)))
        return {e.id: e for e in got.entities}

    async def _confirmed(
        self, query: GraphEntities | GraphRelations, missed: Callable[[GraphResult], bool]
    ) -> GraphResult:
        """Ask; when something asked for is missing, ask again at the head of the log (another gateway may have
        written it a moment ago)."""
        got: GraphResult = await self.queries.ask_confirmed(query, missed, self.log.last_seq)
        return got

    async def _retry(self, n: int) -> None:
        if n >= MAX_ATTEMPTS - 1:
            raise ConcurrencyConflict(f"gave up after {MAX_ATTEMPTS} attempts: other writers keep changing it; retry")
        await asyncio.sleep(random.uniform(0, min(0.002 * 2**n, 0.05)))

    # -- entities ----------------------------------------------------------------------------
    async def create_entities(
        self, ns: str, items: Sequence[NewEntity], actor: Actor, request_id: str, min_seq: int
    ) -> GraphWrite:
        """Create the entities that do not exist (by name key, the first of duplicates in the call); those that
        do are left as they are and reported as existing."""
        if len(items) > MAX_ITEMS:
            raise InvalidInput("entities", f"at most {MAX_ITEMS} in one call")
        out = GraphWrite()
        seen: set[str] = set()
        for item in items:
            key = name_key(item.name)
            if key in seen:
                continue
            seen.add(key)
            eid = entity_id_for(ns, key)
            subject = S.entity_subject(ns, eid)
            event = EntityCreated(
                version=1,
                entity_id=eid,
                name=item.name,
                entity_type=item.entity_type,
                description=item.description,
                observations=tuple(distinct(item.observations)),
            )
            expected = 0
            for n in range(MAX_ATTEMPTS):
                try:
                    seq = await self._append(subject, self._envelope(ns, eid, event, actor, request_id), expected)
                except WrongLastSequence as lost:
                    last = await self._last_event(subject)
                    if last is not None and isinstance(last[1], EntityDeleted):  # deleted before: it comes back
                        expected = last[0]
                        event = msgspec.structs.replace(event, version=last[1].version + 1)
                        continue
                    found = await self.entities(ns, [eid], max(min_seq, lost.last_seq))
                    if eid in found:
                        out.existing.append(found[eid])
                        break
                    await self._retry(n)
                    continue
                out.wrote(seq)
                out.created.append(
                    Entity(
                        id=eid,
                        name=item.name,
                        entity_type=item.entity_type,
                        description=item.description,
                        observations=list(event.observations),
                        version=event.version,
                        last_seq=seq,
                        created_at=self.clock(),
                    )
                )
                break
        return out

    async def change_observations(
        self,
        ns: str,
        changes: Sequence[tuple[str, Sequence[str]]],
        actor: Actor,
        request_id: str,
        min_seq: int,
        *,
        remove: bool,
        strict: bool,
    ) -> GraphWrite:
        """Add (or `remove`) observations, per entity name. `strict`: an unknown entity fails the whole call
        before anything is written (EntityNotFound); else it is reported in `missing`."""
        if len(changes) > MAX_ITEMS:
            raise InvalidInput("observations", f"at most {MAX_ITEMS} entities in one call")
        out = GraphWrite()
        ids = {name: entity_id_for(ns, name_key(name)) for name, _ in changes}
        known = await self.entities(ns, list(ids.values()), min_seq)
        for name, _ in changes:
            if ids[name] not in known:
                if strict:
                    raise EntityNotFound(name)
                out.missing.append(name)
        for name, contents in changes:
            eid = ids[name]
            if eid not in known:
                continue
            subject = S.entity_subject(ns, eid)
            state = known[eid]
            for n in range(MAX_ATTEMPTS):
                have = set(state.observations)
                todo = [c for c in distinct(contents) if (c in have) == remove]
                if not todo:
                    out.changed.setdefault(name, [])
                    break
                event = (
                    EntityChanged(version=state.version + 1, entity_id=eid, removed=tuple(todo))
                    if remove
                    else EntityChanged(version=state.version + 1, entity_id=eid, added=tuple(todo))
                )
                try:
                    seq = await self._append(subject, self._envelope(ns, eid, event, actor, request_id), state.last_seq)
                except WrongLastSequence as lost:
                    again = await self.entities(ns, [eid], max(min_seq, lost.last_seq))
                    if eid not in again:  # deleted meanwhile
                        if strict:
                            raise EntityNotFound(name) from None
                        out.missing.append(name)
                        break
                    state = again[eid]
                    await self._retry(n)
                    continue
                out.wrote(seq)
                out.changed[name] = out.changed.get(name, []) + todo
                out.deleted += len(todo) if remove else 0
                break
        return out

    async def delete_entities(
        self, ns: str, names: Sequence[str], actor: Actor, request_id: str, min_seq: int, reason: str | None = None
    ) -> GraphWrite:
        """Delete entities and every relation that touches them (each by its own event); unknown names are
        reported in `missing`."""
        out = GraphWrite()
        ids = {name: entity_id_for(ns, name_key(name)) for name in distinct(names)}
        query = GraphEntities(
            namespace=ns, now=self.clock(), min_seq=min_seq, ids=tuple(ids.values()), relations="either"
        )
        got = await self._confirmed(query, lambda g: len(g.entities) < len(ids))
        known = {e.id: e for e in got.entities}
        out.missing = [name for name, eid in ids.items() if eid not in known]
        for rel in got.relations:
            seq = await self._delete_relation(ns, rel, actor, request_id, min_seq, reason)
            out.wrote(seq)
        for eid in ids.values():
            state = known.get(eid)
            subject = S.entity_subject(ns, eid)
            for n in range(MAX_ATTEMPTS):
                if state is None:
                    break
                event = EntityDeleted(version=state.version + 1, entity_id=eid, reason=reason)
                try:
                    seq = await self._append(subject, self._envelope(ns, eid, event, actor, request_id), state.last_seq)
                except WrongLastSequence as lost:
                    state = (await self.entities(ns, [eid], max(min_seq, lost.last_seq))).get(eid)
                    await self._retry(n)
                    continue
                out.wrote(seq)
                out.deleted += 1
                break
        return out

    # -- relations ---------------------------------------------------------------------------
    async def create_relations(
        self, ns: str, items: Sequence[NewRelation], actor: Actor, request_id: str, min_seq: int
    ) -> GraphWrite:
        """Create relations between existing entities (an unknown end fails the whole call before anything is
        written); a relation that exists (same ends, same type) is reported as existing."""
        if len(items) > MAX_ITEMS:
            raise InvalidInput("relations", f"at most {MAX_ITEMS} in one call")
        ends = {n: entity_id_for(ns, name_key(n)) for r in items for n in (r.from_name, r.to_name)}
        known = await self.entities(ns, list(ends.values()), min_seq)
        for i, r in enumerate(items):
            for end, fld in ((r.from_name, "from"), (r.to_name, "to")):
                if ends[end] not in known:
                    raise EntityNotFound(end, field=f"relations[{i}].{fld}")
        out = GraphWrite()
        seen: set[str] = set()
        for r in items:
            fid, tid = ends[r.from_name], ends[r.to_name]
            rid = relation_id_for(ns, fid, r.relation_type, tid)
            if rid in seen:
                continue
            seen.add(rid)
            subject = S.relation_subject(ns, rid)
            event = RelationCreated(
                version=1, relation_id=rid, from_id=fid, to_id=tid, relation_type=r.relation_type, weight=r.weight
            )
            expected = 0
            for n in range(MAX_ATTEMPTS):
                try:
                    seq = await self._append(subject, self._envelope(ns, rid, event, actor, request_id), expected)
                except WrongLastSequence as lost:
                    last = await self._last_event(subject)
                    if last is not None and isinstance(last[1], RelationDeleted):
                        expected = last[0]
                        event = msgspec.structs.replace(event, version=last[1].version + 1)
                        continue
                    got = await self.queries.ask(
                        GraphRelations(namespace=ns, now=self.clock(), min_seq=max(min_seq, lost.last_seq), ids=(rid,))
                    )
                    if got.relations:
                        out.existing.append(got.relations[0])
                        break
                    await self._retry(n)
                    continue
                out.wrote(seq)
                out.created.append(
                    Relation(
                        id=rid,
                        from_id=fid,
                        from_name=known[fid].name,
                        to_id=tid,
                        to_name=known[tid].name,
                        relation_type=r.relation_type,
                        weight=r.weight,
                        version=event.version,
                        last_seq=seq,
                    )
                )
                break
        return out

    async def delete_relations(
        self, ns: str, items: Sequence[NewRelation], actor: Actor, request_id: str, min_seq: int
    ) -> GraphWrite:
        """Delete the relations that exist (same ends by name key, same type); the rest match nothing."""
        ids = distinct(
            relation_id_for(
                ns, entity_id_for(ns, name_key(r.from_name)), r.relation_type, entity_id_for(ns, name_key(r.to_name))
            )
            for r in items
        )
        query = GraphRelations(namespace=ns, now=self.clock(), min_seq=min_seq, ids=tuple(ids))
        got = await self._confirmed(query, lambda g: len(g.relations) < len(ids))
        out = GraphWrite()
        for rel in got.relations:
            out.wrote(await self._delete_relation(ns, rel, actor, request_id, min_seq, None))
            out.deleted += 1
        return out

    async def _delete_relation(
        self, ns: str, rel: Relation, actor: Actor, request_id: str, min_seq: int, reason: str | None
    ) -> int:
        subject = S.relation_subject(ns, rel.id)
        state: Relation | None = rel
        for n in range(MAX_ATTEMPTS):
            if state is None:
                return 0
            event = RelationDeleted(version=state.version + 1, relation_id=rel.id, reason=reason)
            try:
                return await self._append(subject, self._envelope(ns, rel.id, event, actor, request_id), state.last_seq)
            except WrongLastSequence as lost:
                got = await self.queries.ask(
                    GraphRelations(namespace=ns, now=self.clock(), min_seq=max(min_seq, lost.last_seq), ids=(rel.id,))
                )
                state = got.relations[0] if got.relations else None
                await self._retry(n)
        return 0


def relation_type(value: str, fld: str) -> str:
    return _text(value, fld, MAX_NAME_CHARS)


def weight(value: float | None, fld: str) -> float:
    return 1.0 if value is None else v.unit_interval(value, fld)
