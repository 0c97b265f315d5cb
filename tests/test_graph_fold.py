"""The knowledge graph's fold: versions, deletes that close validity, and memories' mentions of entities.

Random histories mixing memory events and graph events (entities created, changed, deleted and created
again; relations created and deleted) are folded event by event, in random batches, and in random batches
with the view reopened between commits: every table, the mentions included, comes out the same (a replay
gives the same graph however it is batched). Then what the mentions mean, on a small known history.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mneme.domain.graph import mentions, name_key
from mneme.ids import entity_id_for, relation_id_for
from mneme.sink import Positioned
from schemas.events import Actor, Envelope, MemoryCreated, MemoryDeleted, MemoryUpdated
from schemas.graph_events import EntityChanged, EntityCreated, EntityDeleted, RelationCreated, RelationDeleted
from services.projector.memories_view import MemoriesView

T0 = datetime(2026, 3, 1, tzinfo=UTC)
NAMES = ["Alice", "Bob", "Berlin", "Project Atlas", "tea"]
FILLER = "met at about with the in on and for".split()


def env(ns: str, aid: str, ev: object, i: int) -> Envelope:
    return Envelope(event_id=f"e{i}", schema_version=1, namespace=ns, aggregate_id=aid,
                    occurred_at=T0 + timedelta(seconds=i), actor=Actor(agent_id="a"), request_id=f"r{i}",
                    event=ev)  # type: ignore[arg-type]  # fmt: skip


def history(seed: int, n: int) -> list[Positioned]:
    rng = random.Random(seed)
    out: list[Positioned] = []
    mem: dict[str, int] = {}  # live memory -> version
    ent: dict[str, tuple[int, bool]] = {}  # entity id -> (version, deleted)
    rel: dict[str, tuple[int, bool, str, str]] = {}
    ns = "ns"
    for i in range(n):
        roll = rng.random()

        def text() -> str:
            return " ".join(rng.choice(FILLER + NAMES) for _ in range(rng.randint(3, 9)))

        if roll < 0.3 or not mem:
            mid = f"m{i}"
            mem[mid] = 1
            named = tuple(rng.sample(NAMES, rng.randint(1, 2))) if rng.random() < 0.3 else ()
            e = env(ns, mid, MemoryCreated(memory_id=mid, version=1, content=text(), entities=named), i)
        elif roll < 0.45:
            mid = rng.choice(sorted(mem))
            mem[mid] += 1
            e = env(ns, mid, MemoryUpdated(memory_id=mid, version=mem[mid], content=text()), i)
        elif roll < 0.5:
            mid = rng.choice(sorted(mem))
            e = env(ns, mid, MemoryDeleted(memory_id=mid, version=mem.pop(mid) + 1), i)
        elif roll < 0.7:
            name = rng.choice(NAMES)
            eid = entity_id_for(ns, name_key(name))
            version, deleted = ent.get(eid, (0, True))
            if deleted:
                ent[eid] = (version + 1, False)
                e = env(ns, eid, EntityCreated(version=version + 1, entity_id=eid, name=name, entity_type="t"), i)
            else:
                ent[eid] = (version + 1, False)
                e = env(ns, eid, EntityChanged(version=version + 1, entity_id=eid, added=(text(),)), i)
        elif roll < 0.78 and any(not d for _, d in ent.values()):
            eid = rng.choice(sorted(k for k, (_, d) in ent.items() if not d))
            ent[eid] = (ent[eid][0] + 1, True)
            e = env(ns, eid, EntityDeleted(version=ent[eid][0], entity_id=eid), i)
        elif roll < 0.92 and len(ent) >= 2:
            a, b = rng.sample(sorted(ent), 2)
            rid = relation_id_for(ns, a, "r", b)
            version, deleted, _, _ = rel.get(rid, (0, True, a, b))
            if deleted:
                rel[rid] = (version + 1, False, a, b)
                ev: object = RelationCreated(
                    version=version + 1, relation_id=rid, from_id=a, to_id=b, relation_type="r"
                )
            else:
                rel[rid] = (version + 1, True, a, b)
                ev = RelationDeleted(version=version + 1, relation_id=rid)
            e = env(ns, rid, ev, i)
        else:
            mid = rng.choice(sorted(mem))
            mem[mid] += 1
            e = env(ns, mid, MemoryUpdated(memory_id=mid, version=mem[mid], importance=0.9), i)
        out.append(Positioned(i + 1, T0 + timedelta(seconds=i), e))
    return out


def fold(path: Path, events: list[Positioned], cuts: list[int], reopen: bool) -> dict[str, str]:
    view = MemoriesView(str(path))
    start = 0
    for cut in [*cuts, len(events)]:
        if cut <= start:
            continue
        batch = events[start:cut]
        view.stage(batch, batch[-1].seq)
        view.commit()
        start = cut
        if reopen:
            view.close()
            view = MemoriesView(str(path))
    digest = view.canonical_digest()
    view.close()
    return digest


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), data=st.data())
def test_the_graph_fold_is_the_same_however_it_is_batched(tmp_path: Path, seed: int, data: st.DataObject) -> None:
    events = history(seed, 60)
    one = fold(tmp_path / f"one-{seed}.duckdb", events, list(range(1, len(events))), reopen=False)
    cuts = sorted(data.draw(st.lists(st.integers(1, len(events) - 1), max_size=6)))
    batched = fold(tmp_path / f"batched-{seed}.duckdb", events, cuts, reopen=False)
    reopened = fold(tmp_path / f"reopened-{seed}.duckdb", events, cuts, reopen=True)
    assert one == batched == reopened
    assert one["graph_mentions"] != fold(tmp_path / f"empty-{seed}.duckdb", [], [], False)["graph_mentions"] or (
        not any(isinstance(p.envelope.event, EntityCreated) for p in events)
    )


def test_mentions_follow_content_and_entities(tmp_path: Path) -> None:
    ns = "ns"
    alice, atlas = entity_id_for(ns, name_key("Alice")), entity_id_for(ns, name_key("Project Atlas"))
    events = [
        env(ns, "m1", MemoryCreated(memory_id="m1", version=1, content="Alice leads project ATLAS."), 0),
        env(ns, alice, EntityCreated(version=1, entity_id=alice, name="Alice", entity_type="person"), 1),
        env(ns, atlas, EntityCreated(version=1, entity_id=atlas, name="Project  Atlas", entity_type="project"), 2),
        env(ns, "m2", MemoryCreated(memory_id="m2", version=1, content="Nothing about anyone"), 3),
        env(ns, "m1", MemoryUpdated(memory_id="m1", version=2, content="Project Atlas shipped."), 4),
        env(ns, "m2", MemoryUpdated(memory_id="m2", version=2, content="alice likes tea"), 5),
        env(ns, "m2", MemoryDeleted(memory_id="m2", version=3), 6),
    ]
    view = MemoriesView(str(tmp_path / "m.duckdb"))
    for i, e in enumerate(events):
        view.stage([Positioned(i + 1, T0, e)], i + 1)
        view.commit()
    rows = (
        view.reader()
        .execute("SELECT memory_id, entity_id, seq, seq_to FROM graph_mentions ORDER BY seq, memory_id, entity_id")
        .fetchall()
    )
    view.close()
    assert sorted(rows) == sorted([
        ("m1", alice, 2, 5),  # linked when Alice came to exist; gone when m1's content no longer names her
        ("m1", atlas, 3, None),  # "project ATLAS" is "Project  Atlas" by name key
        ("m2", alice, 6, 7),  # named by the update, closed by the delete
    ])  # fmt: skip


def test_mentions_match_whole_words_longest_first() -> None:
    known = {name_key(n): n for n in ["New York", "New York Times", "York", "C++", "Node.js"]}
    assert mentions("I read the new york times in C++ and node.js, not NEWYORK", known) == [
        "New York Times",
        "C++",
        "Node.js",
    ]
    assert mentions("Yorkshire", known) == []


def test_explicit_mentions_stay_until_the_memory_is_gone(tmp_path: Path) -> None:
    ns = "ns"
    bob = entity_id_for(ns, name_key("Bob"))
    events = [
        # named by its writer before Bob exists: recorded, counted once he does
        env(ns, "m1", MemoryCreated(memory_id="m1", version=1, content="prefers oat milk", entities=("bob",)), 0),
        env(ns, bob, EntityCreated(version=1, entity_id=bob, name="Bob", entity_type="person"), 1),
        env(ns, "m1", MemoryUpdated(memory_id="m1", version=2, content="Bob prefers soy milk now"), 2),
        env(ns, "m1", MemoryUpdated(memory_id="m1", version=3, content="prefers soy milk"), 3),
        env(ns, "m1", MemoryDeleted(memory_id="m1", version=4), 4),
    ]
    view = MemoriesView(str(tmp_path / "m.duckdb"))
    view.stage([Positioned(i + 1, T0, e) for i, e in enumerate(events)], len(events))
    view.commit()
    rows = (
        view.reader()
        .execute("SELECT memory_id, entity_id, seq, seq_to, explicit FROM graph_mentions ORDER BY seq, explicit")
        .fetchall()
    )
    view.close()
    assert rows == [
        ("m1", bob, 1, 5, True),  # the writer's: from the create to the delete, whatever the content says
        ("m1", bob, 3, 4, False),  # found in the content while it named him
    ]
