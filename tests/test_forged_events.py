"""Random, well-typed events that no gateway would write, each on the subject a gateway would use for it.

Aimed at memories, entities and relations that exist: versions out of order, changes to deleted or
never-created memories, creates with odd versions, graph, code and namespace events with odd values. The
projector and the auditor must fold them all without stopping: the writes after them are read back at
once, lists and the graph still answer, and the trail verifies.

Among them, what stopped the projection's commits before: second creates of ids the log has (live or
deleted), and events under another store's subject than their memory's (tests/test_forged_placement.py
has each case alone). A gateway writes neither.
Real nats-server, projector, auditor, gateway (tests/harness.py).
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest
from nats.js.errors import NoStreamResponseError

from schemas import subjects as S
from schemas.events import Event, LogEvent, MemoryCreated, MemoryMoved, encode_envelope
from tests.harness import Stack, ToolFailure, forged_envelope

pytestmark = pytest.mark.anyio

EVENT_TYPES = [t.cls for t in mi.type_info(LogEvent).types if t.cls is not MemoryMoved]  # type: ignore[attr-defined]


class Forger:
    """Well-typed values, biased towards what exists: the ids and names of the stack's own writes."""

    def __init__(self, rng: random.Random, ids: list[str], names: list[str]):
        self.rng, self.ids, self.names = rng, ids, names

    def string(self, field: str) -> str:
        r = self.rng
        if field == "memory_id" and r.random() < 0.3:
            return str(uuid.uuid4())  # a new memory (a create), or a change to one never created
        if field.endswith("_id") or field in ("source", "target"):
            return r.choice(self.ids)
        if field in ("path", "store", "to_path", "to_store"):
            return r.choice(["p/a", "p/b", "notes/x.md", "a" * 300, "p//q"])
        if field in ("name", "entity", "subject", "from_name", "to_name"):
            return r.choice([*self.names, "Ω" * 50, "x"])
        return r.choice(["", "x", "éé", "a b c " * 40, "\u200b", "2026-13-45", "null"])

    def value(self, t: mi.Type, field: str) -> Any:
        r = self.rng
        if isinstance(t, mi.UnionType):
            return self.value(r.choice(t.types), field)
        if isinstance(t, mi.StrType):
            return self.string(field)
        if isinstance(t, mi.BoolType):
            return r.random() < 0.5
        if isinstance(t, mi.IntType):
            return r.choice([0, 1, 2, 3, -1, 7, 10**6, 2**30])
        if isinstance(t, mi.FloatType):
            return r.choice([0.0, 0.5, 1.0, -3.5, 1e300, -1e-300])
        if isinstance(t, mi.DateTimeType):
            return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=r.randint(-700_000, 700_000))
        if isinstance(t, mi.VarTupleType | mi.ListType):
            return tuple(self.value(t.item_type, field) for _ in range(r.randint(0, 3)))
        if isinstance(t, mi.DictType):
            return {f"k{i}": r.choice([1, "v", None, [1, 2], {"n": -5}]) for i in range(r.randint(0, 3))}
        if isinstance(t, mi.StructType):
            return self.struct(t.cls)
        if isinstance(t, mi.LiteralType):
            return r.choice(t.values)
        return None

    def struct(self, cls: type) -> Any:
        info = mi.type_info(cls)
        assert isinstance(info, mi.StructType)
        kwargs = {f.name: self.value(f.type, f.name) for f in info.fields if f.required or self.rng.random() < 0.6}
        try:
            return msgspec.convert(msgspec.to_builtins(cls(**kwargs)), cls)  # (checks the ranges too)
        except (TypeError, ValueError, msgspec.ValidationError):
            return None


def subject_of(ev: Any, stores: dict[str, str | None]) -> tuple[str, str, str]:
    """(subject, namespace, aggregate id) as a gateway would publish `ev`."""
    if isinstance(ev, MemoryCreated):
        return S.memory_subject("default", ev.store, ev.memory_id), "default", ev.memory_id
    if mid := getattr(ev, "memory_id", None):
        return S.memory_subject("default", stores.get(mid), mid), "default", mid
    if eid := getattr(ev, "entity_id", None):
        return S.entity_subject("default", eid), "default", eid
    if rid := getattr(ev, "relation_id", None):
        return S.relation_subject("default", rid), "default", rid
    if pid := getattr(ev, "project_id", None):
        return S.code_subject("default", pid), "default", pid
    return S.namespace_subject("other", "reset"), "other", "other"  # (a namespace nobody uses)


@pytest.mark.parametrize("seed", list(range(1, 11)))
async def test_random_well_typed_events_never_stop_the_folds(stack: Stack, seed: int) -> None:
    js = stack.nc.jetstream()
    rng = random.Random(seed)
    made = [await stack.call("memory_add", content=f"seed memory {i} about Alice", store="s", path=f"p/{i}")
            for i in range(5)]  # fmt: skip
    people = [(await stack.call("graph_entity", name=n, type="person"))["entity"]["id"] for n in ("Alice", "Bob")]
    rel = await stack.call("graph_relate", source="Alice", target="Bob", type="knows")
    forger = Forger(rng, [m["id"] for m in made] + people + [rel["relation"]["id"]], ["Alice", "Bob", "alice"])
    stores: dict[str, str | None] = {m["id"]: "s" for m in made}
    sent: list[str] = []
    while len(sent) < 150:
        ev = forger.struct(rng.choice(EVENT_TYPES))
        if ev is None:
            continue
        subject, ns, aggregate = subject_of(ev, stores)
        elsewhere = isinstance(ev, Event) and rng.random() < 0.15  # under another store's subject
        if elsewhere:
            subject = S.memory_subject(ns, rng.choice(["s", "t", None]), aggregate)
        try:
            await js.publish(subject, encode_envelope(forged_envelope(ev, aggregate, ns)), stream=S.EVENTS_STREAM)
        except NoStreamResponseError:
            continue  # (an id that makes a subject outside the stream: no gateway can write it)
        if isinstance(ev, MemoryCreated) and ev.memory_id not in stores and not elsewhere:
            stores[ev.memory_id] = ev.store  # (a second create of an id, or one under another store, is refused)
        sent.append(type(ev).__name__)
    assert len(set(sent)) >= 12, sent  # most kinds of event were forged

    after = await stack.call("memory_add", content="after the forged events", store="s", path="p/after")
    assert (await stack.call("memory_get", id=after["id"]))["content"] == "after the forged events"
    follower = stack.projector.follower
    assert await follower.wait_for(await stack.last_seq(), 30, committed=True), follower.stalled
    assert follower.stalled is None and not follower.fold_failed
    listed = await stack.call("memory_list", limit=200)
    assert after["id"] in {m["id"] for m in listed["results"]}
    try:  # (a forged delete may have taken Alice away: a structured answer either way)
        await stack.call("graph_get", related_to="Alice", direction="both", depth=2)
    except ToolFailure as exc:
        assert "ENTITY_NOT_FOUND" in str(exc), exc
    await stack.call("graph_get", text="a")
    await stack.settle()
    assert all(f.stalled is None and not f.fold_failed for f in stack.auditor.followers)
    assert stack.trail.verify()[1] is None
