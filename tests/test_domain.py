"""Given/when/then over the pure domain: decide (command -> event) and evolve (event -> state).
No clock, no I/O: every test runs in milliseconds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec import UNSET

from mneme.domain import decider
from mneme.domain.state import ACTIVE, ARCHIVED, MemoryState, evolve
from mneme.errors import InvalidInput, InvalidState, MemoryNotFound, PathExists
from schemas.commands import CreateMemory, DeleteMemory, MoveMemory, RestoreMemory, UpdateMemory
from schemas.events import (
    UPDATABLE_FIELDS,
    Actor,
    Envelope,
    MemoryArchived,
    MemoryCreated,
    MemoryDeleted,
    MemoryMoved,
    MemoryRestored,
    MemoryUpdated,
)

UTC = UTC
NS = "acme/research"
MID = "3f2b8c1e-9a4d-4e6f-8b7a-1c2d3e4f5a6b"
OTHER = "7d9e0f1a-2b3c-4d5e-9f60-718293a4b5c6"
T0 = datetime(2025, 3, 14, 9, 0, tzinfo=UTC)


def envelope(event: Any, *, at: datetime = T0, agent: str = "agent-a") -> Envelope:
    return Envelope(
        event_id=f"evt-{event.version}",
        schema_version=type(event).SCHEMA_VERSION,
        namespace=NS,
        aggregate_id=event.memory_id,
        occurred_at=at,
        actor=Actor(agent_id=agent),
        request_id=f"req-{event.version}",
        event=event,
    )


def create(**kw: Any) -> CreateMemory:
    return CreateMemory(**{"namespace": NS, "content": "first", **kw})


def given_memory(**kw: Any) -> MemoryState:
    """A memory as the log would hold it after one create."""
    ev = decider.decide_create(create(**kw), memory_id=MID, path_owner=None)
    state = evolve(None, envelope(ev), 1)
    assert state is not None
    return state


def stored(**kw: Any) -> MemoryState:
    return given_memory(store="main", path="notes/a", **kw)


# --- decide_create --------------------------------------------------------------------------


def test_create_without_store_and_path() -> None:
    ev = decider.decide_create(create(), memory_id=MID, path_owner=None)
    assert type(ev) is MemoryCreated
    assert (ev.memory_id, ev.version, ev.store, ev.path, ev.status) == (MID, 1, None, None, "active")
    assert (ev.content, ev.kind, ev.importance, ev.confidence) == ("first", "note", 0.5, 1.0)


def test_create_with_store_and_path_on_a_free_path() -> None:
    ev = decider.decide_create(create(store="main", path="projects/mneme/plan"), memory_id=MID, path_owner=None)
    assert (ev.store, ev.path) == ("main", "projects/mneme/plan")


@pytest.mark.parametrize(
    ("kw", "field"), [({"store": "main"}, "path"), ({"path": "notes/a"}, "store")], ids=["store-only", "path-only"]
)
def test_create_store_and_path_go_together(kw: dict, field: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        decider.decide_create(create(**kw), memory_id=MID, path_owner=None)
    assert (exc.value.code, exc.value.field) == ("INVALID_INPUT", field)


def test_create_on_an_occupied_path_names_the_owner() -> None:
    with pytest.raises(PathExists) as exc:
        decider.decide_create(create(store="main", path="notes/a"), memory_id=MID, path_owner=OTHER)
    err = exc.value
    assert err.code == "ALREADY_EXISTS"
    assert err.field == "path"
    assert err.details == {"memory_id": OTHER}
    assert "main:notes/a" in err.message
    assert err.to_dict() == {
        "code": "ALREADY_EXISTS",
        "message": err.message,
        "field": "path",
        "details": {"memory_id": OTHER},
    }


def test_create_checks_the_path_before_the_owner() -> None:
    with pytest.raises(InvalidInput) as exc:
        decider.decide_create(create(store="main", path="a/../b"), memory_id=MID, path_owner=OTHER)
    assert exc.value.field == "path"


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"namespace": "a/../b"}, "namespace"),
        ({"store": "a..b", "path": "x"}, "store"),
        ({"content": "   "}, "content"),
        ({"kind": "Note"}, "kind"),
        ({"category": "  "}, "category"),
        ({"tags": ("x" * 65,)}, "tags"),
        ({"importance": 1.5}, "importance"),
        ({"confidence": -0.1}, "confidence"),
        ({"citations": ("",)}, "citations"),
        ({"metadata": {"o": object()}}, "metadata"),
    ],
)
def test_create_rejects_bad_input_naming_the_field(kw: dict, field: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        decider.decide_create(create(**kw), memory_id=MID, path_owner=None)
    assert exc.value.field == field


def test_create_honours_max_content() -> None:
    ev = decider.decide_create(create(content="abcd"), memory_id=MID, path_owner=None, max_content=4)
    assert ev.content == "abcd"
    with pytest.raises(InvalidInput) as exc:
        decider.decide_create(create(content="abcde"), memory_id=MID, path_owner=None, max_content=4)
    assert exc.value.field == "content"


def test_create_normalizes_tags_labels_and_times() -> None:
    plus2 = timezone(timedelta(hours=2))
    ev = decider.decide_create(
        create(
            tags=("Python", "python ", "  RUST", "python"),
            subject="  the   build\tsystem ",
            category=" ops ",
            expires_at=datetime(2026, 1, 1, 12, 0, tzinfo=plus2),
            valid_from=datetime(2025, 1, 1, 8, 30),  # naive: taken as UTC
            valid_until=datetime(2025, 6, 1, 0, 0, tzinfo=timezone(timedelta(hours=-5))),
        ),
        memory_id=MID,
        path_owner=None,
    )
    assert ev.tags == ("python", "rust")
    assert ev.subject == "the build system"
    assert ev.category == "ops"
    assert ev.expires_at == datetime(2026, 1, 1, 10, 0, tzinfo=UTC) and ev.expires_at.tzinfo is UTC
    assert ev.valid_from == datetime(2025, 1, 1, 8, 30, tzinfo=UTC) and ev.valid_from.tzinfo is UTC
    assert ev.valid_until == datetime(2025, 6, 1, 5, 0, tzinfo=UTC) and ev.valid_until.tzinfo is UTC


@pytest.mark.parametrize("delta", [timedelta(0), timedelta(seconds=-1)], ids=["equal", "before"])
def test_create_rejects_valid_until_not_after_valid_from(delta: timedelta) -> None:
    with pytest.raises(InvalidInput) as exc:
        decider.decide_create(create(valid_from=T0, valid_until=T0 + delta), memory_id=MID, path_owner=None)
    assert exc.value.field == "valid_until"


def test_create_compares_validity_after_normalizing_to_utc() -> None:
    # 10:00+02:00 is 08:00 UTC, which is before 09:00 UTC: valid, although 10 > 9 on the clock face
    ev = decider.decide_create(
        create(
            valid_from=datetime(2025, 1, 1, 10, 0, tzinfo=timezone(timedelta(hours=2))),
            valid_until=datetime(2025, 1, 1, 9, 0),
        ),
        memory_id=MID,
        path_owner=None,
    )
    assert ev.valid_until is not None and ev.valid_from is not None
    assert ev.valid_until - ev.valid_from == timedelta(hours=1)


# --- decide_update ---------------------------------------------------------------------------


def _set_fields(ev: MemoryUpdated) -> set[str]:
    return {f for f in UPDATABLE_FIELDS if getattr(ev, f) is not UNSET}


def test_update_emits_only_the_changed_fields() -> None:
    state = given_memory(tags=("x",), importance=0.5)
    ev = decider.decide_update(
        state, UpdateMemory(namespace=NS, memory_id=MID, content="second", tags=("X",), importance=0.5)
    )
    assert type(ev) is MemoryUpdated
    assert _set_fields(ev) == {"content"}
    assert ev.content == "second"
    assert (ev.memory_id, ev.version) == (MID, 2)


def test_update_with_empty_citations_clears_them() -> None:
    state = given_memory(citations=("adr-1", "adr-2"))
    ev = decider.decide_update(state, UpdateMemory(namespace=NS, memory_id=MID, citations=()))
    assert ev is not None and ev.citations == ()
    after = evolve(state, envelope(ev), 2)
    assert after is not None and after.citations == ()


def test_update_with_none_clears_an_optional_field_and_absent_keeps_it() -> None:
    state = given_memory(subject="build", expires_at=T0 + timedelta(days=30), citations=("c",))
    ev = decider.decide_update(state, UpdateMemory(namespace=NS, memory_id=MID, expires_at=None))
    assert ev is not None
    assert ev.expires_at is None and _set_fields(ev) == {"expires_at"}
    after = evolve(state, envelope(ev), 2)
    assert after is not None
    assert after.expires_at is None
    assert (after.subject, after.citations, after.content) == ("build", ("c",), "first")


def test_update_that_changes_nothing_is_a_no_op() -> None:
    state = given_memory(tags=("a", "b"), subject="the build")
    cmd = UpdateMemory(namespace=NS, memory_id=MID, content="first", tags=("A", " b "), subject="the   build")
    assert decider.decide_update(state, cmd) is None


def test_update_with_no_fields_is_invalid() -> None:
    with pytest.raises(InvalidInput) as exc:
        decider.decide_update(given_memory(), UpdateMemory(namespace=NS, memory_id=MID))
    # no argument is wrong, so none is named (it used to name a `fields` argument no tool has); it says what to give
    assert exc.value.field is None and exc.value.code == "INVALID_INPUT"
    assert exc.value.message.startswith("nothing to change: give at least one of content, kind, category")


def test_update_of_a_missing_memory_is_not_found() -> None:
    with pytest.raises(MemoryNotFound) as exc:
        decider.decide_update(None, UpdateMemory(namespace=NS, memory_id=MID, content="x"))
    assert exc.value.code == "MEMORY_NOT_FOUND"
    assert MID in exc.value.message


def test_update_version_is_one_past_the_state() -> None:
    state = msgspec.structs.replace(given_memory(), version=7)
    ev = decider.decide_update(state, UpdateMemory(namespace=NS, memory_id=MID, kind="fact"))
    assert ev is not None and ev.version == 8


def test_update_checks_validity_against_the_current_state() -> None:
    state = given_memory(valid_from=T0)
    with pytest.raises(InvalidInput) as exc:
        decider.decide_update(state, UpdateMemory(namespace=NS, memory_id=MID, valid_until=T0 - timedelta(hours=1)))
    assert exc.value.field == "valid_until"
    # clearing valid_from makes the same valid_until acceptable
    ev = decider.decide_update(
        state, UpdateMemory(namespace=NS, memory_id=MID, valid_from=None, valid_until=T0 - timedelta(hours=1))
    )
    assert ev is not None and ev.valid_from is None and ev.valid_until == T0 - timedelta(hours=1)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"content": " "}, "content"),
        ({"importance": float("nan")}, "importance"),
        ({"tags": ("",)}, "tags"),
        ({"kind": "Bad Kind"}, "kind"),
        ({"subject": ""}, "subject"),
    ],
)
def test_update_validates_given_fields(kw: dict, field: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        decider.decide_update(given_memory(), UpdateMemory(namespace=NS, memory_id=MID, **kw))
    assert exc.value.field == field


def test_update_honours_max_content() -> None:
    with pytest.raises(InvalidInput) as exc:
        decider.decide_update(given_memory(), UpdateMemory(namespace=NS, memory_id=MID, content="abcde"), max_content=4)
    assert exc.value.field == "content"


# --- decide_move -----------------------------------------------------------------------------


def test_move_to_a_free_path() -> None:
    state = stored()
    ev = decider.decide_move(state, MoveMemory(namespace=NS, memory_id=MID, to_path="archive/a"), path_owner=None)
    assert type(ev) is MemoryMoved
    assert (ev.from_path, ev.to_path, ev.version) == ("notes/a", "archive/a", 2)


def test_move_to_an_occupied_path_names_the_owner() -> None:
    with pytest.raises(PathExists) as exc:
        decider.decide_move(stored(), MoveMemory(namespace=NS, memory_id=MID, to_path="notes/b"), path_owner=OTHER)
    assert exc.value.code == "ALREADY_EXISTS"
    assert exc.value.details == {"memory_id": OTHER}
    assert exc.value.field == "to_path"
    assert "main:notes/b" in exc.value.message


def test_move_to_the_same_path_is_a_no_op() -> None:
    assert (
        decider.decide_move(stored(), MoveMemory(namespace=NS, memory_id=MID, to_path="notes/a"), path_owner=None)
        is None
    )


def test_move_of_a_memory_without_a_store_is_invalid_state() -> None:
    with pytest.raises(InvalidState) as exc:
        decider.decide_move(given_memory(), MoveMemory(namespace=NS, memory_id=MID, to_path="x"), path_owner=None)
    assert (exc.value.code, exc.value.field) == ("INVALID_STATE", "memory_id")


@pytest.mark.parametrize("to_path", ["notes/../b", "..", "a//b", "a/ b", ""])
def test_move_validates_to_path(to_path: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        decider.decide_move(stored(), MoveMemory(namespace=NS, memory_id=MID, to_path=to_path), path_owner=None)
    assert exc.value.field == "to_path"


def test_move_of_a_missing_memory_is_not_found() -> None:
    with pytest.raises(MemoryNotFound):
        decider.decide_move(None, MoveMemory(namespace=NS, memory_id=MID, to_path="x"), path_owner=None)


# --- decide_delete / decide_restore ------------------------------------------------------------


def test_delete_archives_by_default() -> None:
    ev = decider.decide_delete(given_memory(), DeleteMemory(namespace=NS, memory_id=MID, reason="  out   of date "))
    assert type(ev) is MemoryArchived
    assert (ev.version, ev.reason) == (2, "out of date")


def test_permanent_delete_deletes() -> None:
    ev = decider.decide_delete(given_memory(), DeleteMemory(namespace=NS, memory_id=MID, permanent=True))
    assert type(ev) is MemoryDeleted
    assert (ev.version, ev.reason) == (2, None)


def test_permanent_delete_of_an_archived_memory_still_deletes() -> None:
    archived = msgspec.structs.replace(given_memory(), status=ARCHIVED)
    ev = decider.decide_delete(archived, DeleteMemory(namespace=NS, memory_id=MID, permanent=True))
    assert type(ev) is MemoryDeleted


def test_archiving_an_archived_memory_is_a_no_op() -> None:
    archived = msgspec.structs.replace(given_memory(), status=ARCHIVED)
    assert decider.decide_delete(archived, DeleteMemory(namespace=NS, memory_id=MID)) is None


def test_delete_of_a_missing_memory_is_not_found() -> None:
    with pytest.raises(MemoryNotFound):
        decider.decide_delete(None, DeleteMemory(namespace=NS, memory_id=MID))


def test_restore_of_an_archived_memory() -> None:
    archived = msgspec.structs.replace(given_memory(), status=ARCHIVED, version=4)
    ev = decider.decide_restore(archived, RestoreMemory(namespace=NS, memory_id=MID))
    assert type(ev) is MemoryRestored
    assert ev.version == 5


def test_restore_of_an_active_memory_is_a_no_op() -> None:
    assert decider.decide_restore(given_memory(), RestoreMemory(namespace=NS, memory_id=MID)) is None


def test_restore_of_a_missing_memory_is_not_found() -> None:
    with pytest.raises(MemoryNotFound):
        decider.decide_restore(None, RestoreMemory(namespace=NS, memory_id=MID))


# --- evolve ------------------------------------------------------------------------------------


def test_folding_a_scripted_history() -> None:
    def at(minute: int) -> datetime:
        return T0 + timedelta(minutes=minute)

    created = decider.decide_create(create(store="main", path="notes/a", content="v1"), memory_id=MID, path_owner=None)
    state = evolve(None, envelope(created, at=at(0), agent="ana"), 10)
    assert state is not None
    assert (state.id, state.namespace, state.version, state.path, state.status) == (MID, NS, 1, "notes/a", ACTIVE)
    assert (state.created_by, state.updated_by, state.last_seq) == ("ana", "ana", 10)
    assert state.created_at == state.updated_at == at(0)

    steps = [
        (UpdateMemory(namespace=NS, memory_id=MID, content="v2"), "bo", 11),
        (UpdateMemory(namespace=NS, memory_id=MID, tags=("Ops",)), "cy", 14),
        (UpdateMemory(namespace=NS, memory_id=MID, importance=0.9, content="v3"), "ana", 15),
    ]
    for i, (cmd, agent, seq) in enumerate(steps, 1):
        ev = decider.decide_update(state, cmd)
        assert ev is not None
        state = evolve(state, envelope(ev, at=at(i), agent=agent), seq)
        assert state is not None
        assert (state.version, state.updated_by, state.last_seq, state.updated_at) == (1 + i, agent, seq, at(i))
        assert (state.created_by, state.created_at, state.path, state.status) == ("ana", at(0), "notes/a", ACTIVE)
    assert (state.content, state.tags, state.importance) == ("v3", ("ops",), 0.9)

    moved = decider.decide_move(state, MoveMemory(namespace=NS, memory_id=MID, to_path="done/a"), path_owner=None)
    state = evolve(state, envelope(moved, at=at(5), agent="bo"), 20)
    assert state is not None
    assert (state.version, state.path, state.store, state.status, state.updated_by, state.last_seq) == (
        5,
        "done/a",
        "main",
        ACTIVE,
        "bo",
        20,
    )

    archived = decider.decide_delete(state, DeleteMemory(namespace=NS, memory_id=MID))
    state = evolve(state, envelope(archived, at=at(6), agent="cy"), 21)
    assert state is not None
    assert (state.version, state.path, state.status, state.updated_by, state.last_seq) == (
        6,
        "done/a",
        ARCHIVED,
        "cy",
        21,
    )
    assert state.content == "v3"

    restored = decider.decide_restore(state, RestoreMemory(namespace=NS, memory_id=MID))
    state = evolve(state, envelope(restored, at=at(7), agent="ana"), 25)
    assert state is not None
    assert (state.version, state.path, state.status, state.updated_by, state.last_seq) == (
        7,
        "done/a",
        ACTIVE,
        "ana",
        25,
    )

    deleted = decider.decide_delete(state, DeleteMemory(namespace=NS, memory_id=MID, permanent=True))
    assert deleted is not None and deleted.version == 8
    assert evolve(state, envelope(deleted, at=at(8)), 26) is None


@pytest.mark.parametrize(
    "event",
    [
        MemoryUpdated(memory_id=MID, version=2, content="x"),
        MemoryMoved(memory_id=MID, version=2, from_path="a", to_path="b", to_store="s"),
        MemoryArchived(memory_id=MID, version=2),
        MemoryRestored(memory_id=MID, version=2),
        MemoryDeleted(memory_id=MID, version=2),
    ],
    ids=lambda e: type(e).__name__,
)
def test_evolve_of_a_non_create_event_without_state_is_none(event: Any) -> None:
    assert evolve(None, envelope(event), 5) is None


def test_is_expired_at_and_after_expires_at() -> None:
    state = given_memory(expires_at=T0)
    assert not state.is_expired(T0 - timedelta(microseconds=1))
    assert state.is_expired(T0)
    assert not given_memory().is_expired(T0 + timedelta(days=10_000))


# --- property: folding decide's events gives the last value given --------------------------------

_tag = st.text(alphabet="abcdefghij-_0123", min_size=1, max_size=8)
_label = st.text(alphabet="abc xyz", min_size=1, max_size=12).map(lambda s: " ".join(s.split())).filter(bool)
_time = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC))
_unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
# Values already in normal form, so "the last value given" is what the state must hold.
FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "content": st.text(min_size=1, max_size=20).filter(lambda s: s.strip() != ""),
    "kind": st.sampled_from(["note", "fact", "decision", "how-to"]),
    "category": st.none() | _label,
    "subject": st.none() | _label,
    "tags": st.lists(_tag, max_size=5, unique=True).map(tuple),
    "importance": _unit,
    "confidence": _unit,
    "citations": st.lists(st.sampled_from(["adr-1", "https://x.test/a", "rfc-9"]), max_size=3).map(tuple),
    "metadata": st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(-5, 5), max_size=3),
    "expires_at": st.none() | _time,
    # valid_from always before valid_until, whatever order the updates come in
    "valid_from": st.none()
    | st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2009, 12, 31), timezones=st.just(UTC)),
    "valid_until": st.none()
    | st.datetimes(min_value=datetime(2010, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)),
}


def test_the_property_covers_every_updatable_field() -> None:
    assert set(FIELD_VALUES) == set(UPDATABLE_FIELDS), "add a strategy for each new updatable field"


_updates = st.lists(
    st.lists(st.sampled_from(sorted(FIELD_VALUES)), min_size=1, max_size=4, unique=True).flatmap(
        lambda names: st.fixed_dictionaries({n: FIELD_VALUES[n] for n in names})
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=100, deadline=None)
@given(updates=_updates)
def test_folding_updates_gives_the_last_value_given_per_field(updates: list[dict[str, Any]]) -> None:
    initial = given_memory()
    state = initial
    expected = {f: getattr(initial, f) for f in UPDATABLE_FIELDS}
    emitted = 0
    for seq, fields in enumerate(updates, 2):
        before = state
        ev = decider.decide_update(state, UpdateMemory(namespace=NS, memory_id=MID, **fields))
        would_change = {f for f, val in fields.items() if val != getattr(before, f)}
        if ev is None:
            assert not would_change
            continue
        assert _set_fields(ev) == would_change  # only what changed travels in the event
        assert ev.version == before.version + 1
        after = evolve(state, envelope(ev), seq)
        assert after is not None
        state = after
        assert state.version == before.version + 1 and state.last_seq == seq
        emitted += 1
        expected.update(fields)
    assert state.version == initial.version + emitted
    assert {f: getattr(state, f) for f in UPDATABLE_FIELDS} == expected
    assert (state.id, state.namespace, state.status, state.created_at) == (MID, NS, ACTIVE, T0)


def test_an_agent_changing_a_verified_memory_makes_it_unverified_an_admin_does_not() -> None:
    from mneme.domain.state import evolve as fold
    from schemas.events import Actor, Envelope

    verified = msgspec.structs.replace(stored(), verification="verified")
    agent, admin = Actor(agent_id="bot", role="agent"), Actor(agent_id="root", role="admin")
    ev = decider.decide_update(verified, UpdateMemory(namespace=NS, memory_id=MID, content="edited"), actor=agent)
    assert ev is not None and ev.verification == "unverified"
    env = Envelope(
        event_id="e",
        schema_version=1,
        namespace=NS,
        aggregate_id=MID,
        occurred_at=verified.updated_at,
        actor=agent,
        request_id="r",
        event=ev,
    )
    folded = fold(verified, env, 99)
    assert folded is not None and folded.verification == "unverified"
    tags_only = decider.decide_update(verified, UpdateMemory(namespace=NS, memory_id=MID, tags=("new",)), actor=agent)
    assert tags_only is not None and tags_only.verification is UNSET
    by_admin = decider.decide_update(verified, UpdateMemory(namespace=NS, memory_id=MID, content="edited"), actor=admin)
    assert by_admin is not None and by_admin.verification is UNSET
