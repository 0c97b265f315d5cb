"""The wire format: a checked-in v1 corpus still decodes, round-trips byte for byte, and
covers every event type; events tolerate unknown fields, commands reject them."""

from __future__ import annotations

import inspect
import json
import typing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
from msgspec import UNSET

from schemas.commands import AnyCommand, CreateMemory, UpdateMemory
from schemas.events import (
    AnyEvent,
    Envelope,
    Event,
    MemoryArchived,
    MemoryCreated,
    MemoryDeleted,
    MemoryMoved,
    MemoryRestored,
    MemoryUpdated,
    decode_envelope,
    encode_envelope,
)

CORPUS_DIR = Path(__file__).parent / "corpus"
CORPUS = CORPUS_DIR / "events_v1.jsonl"  # as the first writers put it in the log: never edited
CORPORA = sorted(CORPUS_DIR.glob("events_v*.jsonl"), key=lambda p: int(p.stem.split("_v")[1]))
LATEST = CORPORA[-1]
EVENT_CLASSES = typing.get_args(AnyEvent)
COMMAND_CLASSES = typing.get_args(AnyCommand)
MEM_FULL = "3f2b8c1e-9a4d-4e6f-8b7a-1c2d3e4f5a6b"
MEM_MIN = "7d9e0f1a-2b3c-4d5e-9f60-718293a4b5c6"
UTC = UTC


def _lines(path: Path = CORPUS) -> list[bytes]:
    return [ln for ln in path.read_bytes().splitlines() if ln.strip()]


def _decoded() -> list[Envelope]:
    return [decode_envelope(ln) for ln in _lines()]


def _tag(cls: type[msgspec.Struct]) -> str:
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str), cls
    return tag


def _assert_utc(dt: object) -> None:
    assert isinstance(dt, datetime)
    assert dt.tzinfo is not None and dt.utcoffset() == timedelta(0)


# --- the union itself -------------------------------------------------------------------


def test_every_event_class_has_a_distinct_string_tag_on_the_type_field() -> None:
    tags = [_tag(cls) for cls in EVENT_CLASSES]
    assert all(isinstance(t, str) and t for t in tags)
    assert len(set(tags)) == len(tags), f"tag reused: {tags}"
    assert {cls.__struct_config__.tag_field for cls in EVENT_CLASSES} == {"type"}


def test_every_event_class_has_a_schema_version() -> None:
    for cls in EVENT_CLASSES:
        assert isinstance(cls.SCHEMA_VERSION, int) and cls.SCHEMA_VERSION >= 1, cls.__name__


@pytest.mark.parametrize("cls", EVENT_CLASSES + COMMAND_CLASSES, ids=lambda c: c.__name__)
def test_events_and_commands_are_frozen_and_keyword_only(cls: type[msgspec.Struct]) -> None:
    assert cls.__struct_config__.frozen
    params = inspect.signature(cls).parameters.values()
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params), cls.__name__


def test_events_never_forbid_unknown_fields_and_commands_always_do() -> None:
    for cls in (*EVENT_CLASSES, Envelope):
        assert not cls.__struct_config__.forbid_unknown_fields, cls.__name__
    for cls in COMMAND_CLASSES:
        assert cls.__struct_config__.forbid_unknown_fields, cls.__name__


# --- the corpus ---------------------------------------------------------------------------


def test_corpus_covers_every_event_tag_in_the_union() -> None:
    in_corpus = {_tag(type(decode_envelope(ln).event)) for path in CORPORA for ln in _lines(path)}
    in_union = {_tag(cls) for cls in EVENT_CLASSES}
    missing = in_union - in_corpus
    assert not missing, f"add a corpus file (events_vN.jsonl) with a line per new event type: {sorted(missing)}"


def test_v1_corpus_still_decodes_to_the_same_events_after_re_encoding() -> None:
    """Old lines need not re-encode byte for byte (new fields with defaults appear); they must mean the same."""
    lines = _lines()
    assert len(lines) == 7
    for n, line in enumerate(lines, 1):
        env = decode_envelope(line)
        assert decode_envelope(encode_envelope(env)) == env, f"line {n}"


def test_latest_corpus_round_trips_byte_for_byte() -> None:
    for n, line in enumerate(_lines(LATEST), 1):
        assert encode_envelope(decode_envelope(line)) == line, f"{LATEST.name} line {n}"


def test_v1_memory_created_reads_as_unverified_and_unlocked() -> None:
    from mneme.domain.state import evolve

    created = next(e for e in _decoded() if _tag(type(e.event)) == "memory_created")
    state = evolve(None, created, 1)
    assert state is not None and (state.verification, state.locked, state.status_reason) == ("unverified", False, None)


def test_corpus_envelopes_carry_their_event_schema_version_and_utc_times() -> None:
    for env in _decoded():  # v1 lines, read today: the one move is upcast to schema 2, the rest are schema 1
        assert env.schema_version == type(env.event).SCHEMA_VERSION == (2 if type(env.event) is MemoryMoved else 1)
        assert env.namespace == "acme/research"
        assert isinstance(env.event, Event) and env.aggregate_id == env.event.memory_id
        _assert_utc(env.occurred_at)
        assert env.occurred_at.microsecond == 589793  # sub-second precision survives


def test_corpus_memory_created_with_every_field() -> None:
    env = _decoded()[0]
    ev = env.event
    assert type(ev) is MemoryCreated
    assert env.event_id == "00000000-0000-4000-8000-000000000001"
    assert env.occurred_at == datetime(2025, 3, 14, 9, 1, 53, 589793, tzinfo=UTC)
    assert (env.actor.agent_id, env.actor.role) == ("ana", "human")
    assert (env.request_id, env.correlation_id) == ("req-0001", "corr-0001")
    assert (ev.memory_id, ev.version) == (MEM_FULL, 1)
    assert (ev.store, ev.path) == ("main", "projects/mneme/decisions/event-log")
    assert ev.content == "Use NATS JetStream as the event log; DuckDB is a projection."
    assert (ev.kind, ev.category, ev.subject, ev.status) == ("decision", "architecture", "event log", "active")
    assert ev.tags == ("nats", "jetstream") and isinstance(ev.tags, tuple)
    assert ev.citations == ("https://docs.nats.io/nats-concepts/jetstream", "adr-0001")
    assert isinstance(ev.citations, tuple)
    assert (ev.importance, ev.confidence) == (0.8, 0.9)
    assert ev.metadata == {"source": "design-review", "priority": 2, "reviewers": ["ana", "bo"]}
    assert ev.expires_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert ev.valid_from == datetime(2025, 3, 1, tzinfo=UTC)
    assert ev.valid_until == datetime(2025, 12, 31, 23, 59, 59, tzinfo=UTC)
    for t in (ev.expires_at, ev.valid_from, ev.valid_until):
        _assert_utc(t)


def test_corpus_memory_created_with_only_required_fields_has_the_defaults() -> None:
    env = _decoded()[1]
    ev = env.event
    assert type(ev) is MemoryCreated
    assert (ev.memory_id, ev.version, ev.content) == (MEM_MIN, 1, "Standup moved to 10:00.")
    assert (ev.store, ev.path, ev.category, ev.subject) == (None, None, None, None)
    assert (ev.kind, ev.status, ev.importance, ev.confidence) == ("note", "active", 0.5, 1.0)
    assert ev.tags == () and ev.citations == () and ev.metadata == {}
    assert (ev.expires_at, ev.valid_from, ev.valid_until) == (None, None, None)
    assert env.correlation_id is None
    assert (env.actor.agent_id, env.actor.role) == ("agent-alpha", "agent")


def test_corpus_memory_updated_keeps_unset_apart_from_cleared() -> None:
    line = _lines()[2]
    raw = json.loads(line)["event"]
    ev = decode_envelope(line).event
    assert type(ev) is MemoryUpdated
    assert (ev.memory_id, ev.version) == (MEM_FULL, 2)
    assert ev.content == "Use NATS JetStream as the event log; DuckDB and Qdrant are projections."
    assert ev.tags == ("nats", "jetstream", "qdrant") and isinstance(ev.tags, tuple)
    assert ev.importance == 0.9
    # cleared: present in the JSON as null, decoded as None
    assert "expires_at" in raw and raw["expires_at"] is None
    assert ev.expires_at is None
    # unchanged: absent from the JSON, decoded as UNSET (not None)
    for name in ("kind", "category", "subject", "confidence", "citations", "metadata", "valid_from", "valid_until"):
        assert name not in raw, name
        assert getattr(ev, name) is UNSET, name


def test_corpus_move_archive_restore_delete() -> None:
    moved, archived, restored, deleted = (env.event for env in _decoded()[3:])
    assert type(moved) is MemoryMoved
    assert (moved.version, moved.from_path, moved.to_path) == (
        3,
        "projects/mneme/decisions/event-log",
        "projects/mneme/adr/0001-event-log",
    )
    assert type(archived) is MemoryArchived
    assert (archived.version, archived.reason) == (4, "superseded by ADR 0002")
    assert type(restored) is MemoryRestored
    assert (restored.memory_id, restored.version) == (MEM_FULL, 5)
    assert type(deleted) is MemoryDeleted
    assert (deleted.memory_id, deleted.version, deleted.reason) == (MEM_MIN, 2, "duplicate")


# --- evolution rules ------------------------------------------------------------------------


def test_an_envelope_from_a_newer_writer_with_unknown_fields_still_decodes() -> None:
    line = _lines()[0]
    newer = json.loads(line)
    newer["trace_id"] = "abc123"
    newer["actor"]["session"] = "s-1"
    newer["event"]["sentiment"] = "positive"
    newer["event"]["embedding_model"] = {"name": "future", "dim": 1024}
    env = decode_envelope(json.dumps(newer).encode())
    assert env == decode_envelope(line)
    assert not hasattr(env.event, "sentiment")


def test_an_old_writer_that_sent_only_required_fields_still_decodes() -> None:
    minimal = {
        "event_id": "e-1",
        "schema_version": 1,
        "namespace": "acme",
        "aggregate_id": MEM_MIN,
        "occurred_at": "2025-03-14T09:00:00Z",
        "actor": {"agent_id": "a"},
        "request_id": "r-1",
        "event": {"type": "memory_created", "memory_id": MEM_MIN, "version": 1, "content": "hi"},
    }
    env = decode_envelope(json.dumps(minimal).encode())
    assert env.correlation_id is None and env.actor.role == "agent"
    assert isinstance(env.event, MemoryCreated)
    assert env.event.tags == () and env.event.kind == "note" and env.event.store is None


def test_a_naive_time_on_the_wire_is_rejected() -> None:
    env = json.loads(_lines()[0])
    env["occurred_at"] = "2025-03-14T09:01:53"
    with pytest.raises(msgspec.ValidationError, match="occurred_at"):
        decode_envelope(json.dumps(env).encode())


def test_an_offset_time_on_the_wire_decodes_to_the_same_instant() -> None:
    env = json.loads(_lines()[1])
    env["occurred_at"] = "2025-03-14T11:02:53.589793+02:00"
    decoded = decode_envelope(json.dumps(env).encode())
    assert decoded.occurred_at == datetime(2025, 3, 14, 9, 2, 53, 589793, tzinfo=UTC)


def test_an_unknown_event_tag_is_rejected() -> None:
    env = json.loads(_lines()[5])
    env["event"]["type"] = "memory_teleported"
    with pytest.raises(msgspec.ValidationError, match="memory_teleported"):
        decode_envelope(json.dumps(env).encode())


@pytest.mark.parametrize("type_", [CreateMemory, AnyCommand], ids=["CreateMemory", "AnyCommand"])
def test_a_command_with_an_unknown_field_is_rejected(type_: object) -> None:
    good = {"command": "create_memory", "namespace": "acme", "content": "hi"}
    assert msgspec.json.decode(json.dumps(good).encode(), type=type_) == CreateMemory(namespace="acme", content="hi")
    typo = {**good, "tagz": ["x"]}
    with pytest.raises(msgspec.ValidationError, match="unknown field `tagz`"):
        msgspec.json.decode(json.dumps(typo).encode(), type=type_)


def test_an_update_command_keeps_absent_fields_unset_and_null_as_none() -> None:
    cmd = msgspec.json.decode(
        b'{"command":"update_memory","namespace":"acme","memory_id":"m","expires_at":null,"citations":[]}',
        type=AnyCommand,
    )
    assert isinstance(cmd, UpdateMemory)
    assert cmd.expires_at is None and cmd.citations == ()
    assert cmd.content is UNSET and cmd.valid_from is UNSET


def test_a_schema_1_move_is_upcast_and_replays_into_the_same_store() -> None:
    """The v1 corpus's memory_moved (no to_store) reads as today's MemoryMoved with to_store None, and folding
    the v1 history leaves the memory in its store at the new path."""
    from mneme.domain.state import evolve

    line = next(ln for ln in _lines(CORPUS) if b'"type":"memory_moved"' in ln)
    env = decode_envelope(line)
    assert type(env.event) is MemoryMoved and env.event.to_store is None and env.schema_version == 2
    state = None
    for i, e in enumerate(_decoded(), 1):
        if e.aggregate_id == env.aggregate_id:
            state = evolve(state, e, i)
            if e.event_id == env.event_id:
                break
    created = _decoded()[0].event
    assert isinstance(created, MemoryCreated)
    assert state is not None and state.store == created.store  # (the store it was created in)
    assert state.path == env.event.to_path


def test_upcasting_is_not_on_the_fast_path() -> None:
    from schemas import upcast

    calls: list[upcast.Raw] = []
    orig = upcast.upcast

    def spy(env: upcast.Raw) -> upcast.Raw | None:
        calls.append(env)
        return orig(env)

    upcast.upcast = spy
    try:
        for line in _lines(LATEST):
            decode_envelope(line)
        assert calls == []
        decode_envelope(next(ln for ln in _lines(CORPUS) if b'"type":"memory_moved"' in ln))
        assert len(calls) == 1
    finally:
        upcast.upcast = orig


def test_an_unknown_tag_is_still_an_error() -> None:
    line = next(iter(_lines(LATEST))).replace(b'"type":"memory_created"', b'"type":"memory_teleported"')
    with pytest.raises(msgspec.ValidationError):
        decode_envelope(line)
