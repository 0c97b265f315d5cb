"""The knowledge graph's write side: decide from a projector's state, append with the aggregate's expected
sequence, retry when another writer got there first (invariant 4), never write a read model (invariant 1).

Ids follow from names (mneme/ids.py), so two gateways creating the same entity or relation meet on one
subject: the first append wins (expected sequence 0), the second learns it exists. Changes to an entity
(observations added or removed, deleted) append with the expected last sequence of its subject; a lost race
reloads and decides again, so concurrent writers never lose each other's observations.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Literal, TypeVar

from mneme.domain import graph_decider as gd
from mneme.domain import validation as v
from mneme.domain.graph import MAX_NAME_CHARS, MAX_OBSERVATION_CHARS, distinct, name_key
from mneme.errors import EntityNotFound, InvalidInput
from mneme.eventlog import EventLogInterface
from mneme.ids import entity_id_for, envelope, relation_id_for
from schemas import subjects as S
from schemas.events import Actor, Envelope, decode_envelope, encode_envelope
from schemas.graph_events import (
    AnyGraphEvent,
    EntityChanged,
    EntityCreated,
    GraphEvent,
)
from schemas.queries import Entity, GraphEntities, GraphRelations, GraphResult, Relation
from services.gateway.queries import QueryClient
from services.gateway.retry import until_not_beaten

S_ = TypeVar("S_")
Last = tuple[int, GraphEvent] | None  # a subject's last event and its sequence
AnyEvent = AnyGraphEvent | None


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
    def __init__(self, log: EventLogInterface, queries: QueryClient, clock: Callable[[], datetime]):
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

    async def _commit(
        self,
        ns: str,
        subject: str,
        aggregate: str,
        who: tuple[Actor, str],
        state: S_,
        decide: Callable[[S_], AnyGraphEvent | None],
        expected: Callable[[S_], int],
        reload: Callable[[int], Awaitable[S_]],
    ) -> tuple[int, AnyGraphEvent | None, S_]:
        """Decide from `state`, append with the subject's expected sequence; when another writer got there first,
        `reload(their seq)` and decide again (services/gateway/retry.py). Returns (seq, event, state decided
        on); no event (and seq 0) when the decider found nothing to do."""
        actor, request_id = who
        decided: list[S_] = []  # the state the last attempt decided on

        async def attempt(seq: int) -> tuple[int, AnyGraphEvent | None, S_]:
            st = await reload(seq) if decided else state  # beaten: read what the other writer made
            decided.append(st)
            event = decide(st)
            if event is None:
                return 0, None, st
            env = self._envelope(ns, aggregate, event, actor, request_id)
            return await self._append(subject, env, expected(st)), event, st

        return await until_not_beaten(attempt)

    async def _last_on(self, subject: str, _seq: int = 0) -> Last:
        return await self._last_event(subject)

    # -- entities ----------------------------------------------------------------------------
    async def create_entities(
        self, ns: str, items: Sequence[NewEntity], actor: Actor, request_id: str, min_seq: int
    ) -> GraphWrite:
        """Create the entities that do not exist (by name key, the first of duplicates in the call); those that
        do are left as they are and reported as existing."""
        gd.check_batch(items, "entities")
        out = GraphWrite()
        seen: set[str] = set()
        for item in items:
            key = name_key(item.name)
            if key in seen:
                continue
            seen.add(key)
            eid = entity_id_for(ns, key)
            subject = S.entity_subject(ns, eid)

            def decide(last: Last, i: NewEntity = item, eid: str = eid) -> AnyGraphEvent | None:
                prior = last[1] if last is not None else None
                return gd.decide_entity_created(eid, i.name, i.entity_type, i.observations, i.description, last=prior)

            seq, event, last = await self._commit(ns, subject, eid, (actor, request_id), None, decide, _seq_of,
                                                  partial(self._last_on, subject))  # fmt: skip
            if event is None:  # it exists: reported as it is
                found = await self.entities(ns, [eid], max(min_seq, _seq_of(last)))
                if eid in found:
                    out.existing.append(found[eid])
                continue
            assert isinstance(event, EntityCreated)
            out.wrote(seq)
            out.created.append(
                Entity(id=eid, name=item.name, entity_type=item.entity_type, description=item.description,
                       observations=list(event.observations), version=event.version, last_seq=seq,
                       created_at=self.clock())
            )  # fmt: skip
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
        gd.check_batch(changes, "observations", "entities")
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

            def decide(st: Entity | None, contents: Sequence[str] = contents) -> AnyGraphEvent | None:
                return None if st is None else gd.decide_observations(st, contents, remove=remove)

            seq, event, state = await self._commit(ns, S.entity_subject(ns, eid), eid, (actor, request_id),
                                                   known.get(eid), decide, _last_seq_of,
                                                   partial(self._entity_after, ns, eid, min_seq))  # fmt: skip
            if state is None:  # deleted meanwhile
                if strict:
                    raise EntityNotFound(name) from None
                out.missing.append(name)
                continue
            if event is None:
                out.changed.setdefault(name, [])
                continue
            assert isinstance(event, EntityChanged)
            todo = list(event.removed if remove else event.added)
            out.wrote(seq)
            out.changed[name] = out.changed.get(name, []) + todo
            out.deleted += len(todo) if remove else 0
        return out

    async def _entity_after(self, ns: str, eid: str, min_seq: int, seq: int) -> Entity | None:
        return (await self.entities(ns, [eid], max(min_seq, seq))).get(eid)

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
            out.wrote(await self._delete_relation(ns, rel, (actor, request_id), min_seq, reason))
        for eid in ids.values():
            seq, event, _ = await self._commit(ns, S.entity_subject(ns, eid), eid, (actor, request_id),
                                               known.get(eid), partial(gd.decide_entity_deleted, reason=reason),
                                               _last_seq_of, partial(self._entity_after, ns, eid, min_seq))  # fmt: skip
            if event is not None:
                out.wrote(seq)
                out.deleted += 1
        return out

    # -- relations ---------------------------------------------------------------------------
    async def create_relations(
        self, ns: str, items: Sequence[NewRelation], actor: Actor, request_id: str, min_seq: int
    ) -> GraphWrite:
        """Create relations between existing entities (an unknown end fails the whole call before anything is
        written); a relation that exists (same ends, same type) is reported as existing."""
        gd.check_batch(items, "relations")
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

            def decide(
                last: Last, r: NewRelation = r, ids: tuple[str, str, str] = (rid, fid, tid)
            ) -> AnyGraphEvent | None:
                prior = last[1] if last is not None else None
                return gd.decide_relation_created(*ids, r.relation_type, r.weight, last=prior)

            seq, event, last = await self._commit(ns, subject, rid, (actor, request_id), None, decide, _seq_of,
                                                  partial(self._last_on, subject))  # fmt: skip
            if event is None:  # it exists: reported as it is
                found = await self._relation_after(ns, rid, max(min_seq, _seq_of(last)))
                if found is not None:
                    out.existing.append(found)
                continue
            out.wrote(seq)
            out.created.append(
                Relation(id=rid, from_id=fid, from_name=known[fid].name, to_id=tid, to_name=known[tid].name,
                         relation_type=r.relation_type, weight=r.weight, version=event.version, last_seq=seq)
            )  # fmt: skip
        return out

    async def _relation_after(self, ns: str, rid: str, seq: int) -> Relation | None:
        got = await self.queries.ask(GraphRelations(namespace=ns, now=self.clock(), min_seq=seq, ids=(rid,)))
        return got.relations[0] if got.relations else None

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
            out.wrote(await self._delete_relation(ns, rel, (actor, request_id), min_seq, None))
            out.deleted += 1
        return out

    async def _delete_relation(
        self, ns: str, rel: Relation, who: tuple[Actor, str], min_seq: int, reason: str | None
    ) -> int:
        async def reload(seq: int) -> Relation | None:
            return await self._relation_after(ns, rel.id, max(min_seq, seq))

        state: Relation | None = rel
        seq, _, _ = await self._commit(ns, S.relation_subject(ns, rel.id), rel.id, who, state,
                                       partial(gd.decide_relation_deleted, reason=reason), _last_seq_of,
                                       reload)  # fmt: skip
        return seq


def _seq_of(last: Last) -> int:
    """The expected sequence of a subject whose last event is `last` (0: none yet)."""
    return last[0] if last is not None else 0


def _last_seq_of(state: Entity | Relation | None) -> int:
    return state.last_seq if state is not None else 0


def relation_type(value: str, fld: str) -> str:
    return _text(value, fld, MAX_NAME_CHARS)


def weight(value: float | None, fld: str) -> float:
    return 1.0 if value is None else v.unit_interval(value, fld)
