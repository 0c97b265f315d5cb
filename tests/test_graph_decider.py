"""The graph's pure decider (mneme/domain/graph_decider.py): what each state and request decide, without a log."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mneme.domain import graph_decider as gd
from mneme.errors import InvalidInput
from schemas.graph_events import EntityChanged, EntityCreated, EntityDeleted, RelationCreated, RelationDeleted
from schemas.queries import Entity, Relation

NOW = datetime(2026, 11, 29, tzinfo=UTC)
texts = st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), max_size=8)


def entity(observations: list[str], version: int = 3) -> Entity:
    return Entity(id="e1", name="Alice", entity_type="person", description=None, observations=observations,
                  version=version, last_seq=40, created_at=NOW)  # fmt: skip


def test_an_entity_is_created_on_a_new_subject_at_version_1_with_its_observations_once() -> None:
    ev = gd.decide_entity_created("e1", "Alice", "person", ["x", "y", "x"], "a person")
    assert ev == EntityCreated(version=1, entity_id="e1", name="Alice", entity_type="person",
                               description="a person", observations=("x", "y"))  # fmt: skip


def test_an_existing_entity_is_not_created_again_and_a_deleted_one_comes_back_with_the_next_version() -> None:
    alive = EntityCreated(version=4, entity_id="e1", name="Alice", entity_type="person")
    assert gd.decide_entity_created("e1", "Alice", "person", last=alive) is None
    gone = EntityDeleted(version=5, entity_id="e1")
    back = gd.decide_entity_created("e1", "Alice", "person", last=gone)
    assert back is not None and back.version == 6
    changed = EntityChanged(version=2, entity_id="e1", added=("x",))
    assert gd.decide_entity_created("e1", "Alice", "person", last=changed) is None


@given(have=texts, asked=texts)
def test_adding_appends_only_what_is_missing_in_order_once(have: list[str], asked: list[str]) -> None:
    have = list(dict.fromkeys(have))
    ev = gd.decide_observations(entity(have), asked, remove=False)
    missing = [a for a in dict.fromkeys(asked) if a not in have]
    if not missing:
        assert ev is None
    else:
        assert ev == EntityChanged(version=4, entity_id="e1", added=tuple(missing))


@given(have=texts, asked=texts)
def test_removing_drops_only_what_is_there(have: list[str], asked: list[str]) -> None:
    have = list(dict.fromkeys(have))
    ev = gd.decide_observations(entity(have), asked, remove=True)
    present = [a for a in dict.fromkeys(asked) if a in have]
    if not present:
        assert ev is None
    else:
        assert ev == EntityChanged(version=4, entity_id="e1", removed=tuple(present))


def test_deleting_what_is_not_there_decides_nothing() -> None:
    assert gd.decide_entity_deleted(None) is None
    assert gd.decide_entity_deleted(entity([]), "gone") == EntityDeleted(version=4, entity_id="e1", reason="gone")
    rel = Relation(id="r1", from_id="e1", from_name="Alice", to_id="e2", to_name="Bob", relation_type="knows",
                   weight=1.0, version=2, last_seq=9)  # fmt: skip
    assert gd.decide_relation_deleted(None) is None
    assert gd.decide_relation_deleted(rel) == RelationDeleted(version=3, relation_id="r1")


def test_a_relation_is_created_once_and_comes_back_after_a_delete() -> None:
    new = gd.decide_relation_created("r1", "e1", "e2", "knows", 0.5)
    assert new == RelationCreated(version=1, relation_id="r1", from_id="e1", to_id="e2", relation_type="knows",
                                  weight=0.5)  # fmt: skip
    assert gd.decide_relation_created("r1", "e1", "e2", "knows", last=new) is None
    back = gd.decide_relation_created("r1", "e1", "e2", "knows", last=RelationDeleted(version=2, relation_id="r1"))
    assert back is not None and back.version == 3


def test_a_batch_over_the_limit_is_refused_naming_the_field() -> None:
    gd.check_batch([0] * gd.MAX_ITEMS, "entities")
    with pytest.raises(InvalidInput) as err:
        gd.check_batch([0] * (gd.MAX_ITEMS + 1), "observations", "entities")
    assert err.value.field == "observations" and "1000 entities" in err.value.message
