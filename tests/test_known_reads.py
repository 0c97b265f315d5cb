"""Point reads answered without DuckDB (services/projector/known_states.py) are never older than DuckDB.

A get by id is answered from the staged overlay, else from the states and access statistics the view knows
(kept by the folds that write them), else from DuckDB, whose answer a reader may offer to the caches. These
tests pin the races that would make a cached answer stale: an offer read before a commit, an offer made
while access statistics commit, and a cache that claims to hold every row when it does not.
"""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.synthetic import history
from mneme.sink import Positioned
from schemas.access import ReadRecorded
from schemas.queries import GetMemory
from services.projector import memories_queries as Q
from services.projector.access_view import AccessView
from services.projector.known_states import KnownAccess
from services.projector.memories_view import MemoriesView

NOW = datetime(2030, 1, 1, tzinfo=UTC)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def fold_all(view: MemoriesView, n: int, seed: int = 1) -> dict[str, str]:
    """Fold a synthetic history and commit; returns id -> namespace of the memories alive at the end."""
    for seq, (_, env) in enumerate(history(n, n_memories=max(2, n // 4), namespaces=1, seed=seed), start=1):
        view.stage([Positioned(seq, T0, env)], seq)
    view.commit()
    rows = view.reader().execute("SELECT id, namespace FROM memories").fetchall()
    return {r[0]: r[1] for r in rows}


def read(mid: str, at: datetime) -> ReadRecorded:
    return ReadRecorded(record_id=str(uuid.uuid4()), at=at, agent_id="a", role="agent", request_id="r",
                        namespace="ns0", operation="memory_get", memory_ids=(mid,))  # fmt: skip


def stored_access(view: MemoriesView, mid: str) -> tuple[datetime | None, int]:
    r = view.reader().execute("SELECT accessed_at, access_count FROM access_stats WHERE id = ?", [mid]).fetchone()
    return (r[0], r[1]) if r else (None, 0)


def test_a_state_read_before_a_commit_is_not_cached_after_it(tmp_path: Path) -> None:
    path = str(tmp_path / "v.duckdb")
    view = MemoriesView(path)
    alive = fold_all(view, 40)
    view.close()
    view = MemoriesView(path)  # reopened: it knows no state yet, so a get reads DuckDB
    try:
        mid, ns = next(iter(alive.items()))
        state, epoch = view.known.lookup(mid)
        assert state is None
        before = Q.get(view, GetMemory(namespace=ns, now=NOW, memory_id=mid, include_expired=True)).item
        assert before is not None
        # a commit deletes it after the reader read the row but before the reader offers it
        view.known.record({mid: None})
        view.known.offer(mid, before.memory, epoch)  # refused: a commit ran since the miss
        assert view.known.lookup(mid)[0] is None
        _, epoch = view.known.lookup(mid)
        view.known.offer(mid, before.memory, epoch)  # (no commit since this miss: taken)
        assert view.known.lookup(mid)[0] == before.memory
    finally:
        view.close()


def test_a_get_offers_what_it_read_and_the_next_get_needs_no_statement(tmp_path: Path) -> None:
    path = str(tmp_path / "v.duckdb")
    view = MemoriesView(path)
    alive = fold_all(view, 40)
    view.close()
    view = MemoriesView(path)
    try:
        mid, ns = next(iter(alive.items()))
        q = GetMemory(namespace=ns, now=NOW, memory_id=mid, include_expired=True)
        assert Q.get_known(view, q) is None  # not known yet: the loop hands it to a worker thread
        slow = Q.get(view, q)
        fast = Q.get_known(view, q)
        assert fast is not None and fast == slow
        other = GetMemory(namespace="elsewhere", now=NOW, memory_id=mid, include_expired=True)
        assert Q.get_known(view, other) == Q.get(view, other)  # another namespace sees nothing, both ways
        expired_check = GetMemory(namespace=ns, now=NOW + timedelta(days=36500), memory_id=mid)
        assert Q.get_known(view, expired_check) == Q.get(view, expired_check)
    finally:
        view.close()


def test_access_offers_are_refused_during_and_across_a_commit() -> None:
    k = KnownAccess()
    k.load([])
    k._complete = False  # as if the table had held more rows than it keeps
    hit, epoch = k.lookup("a")
    assert hit is None and epoch is not None
    k.begin()
    assert k.lookup("a")[1] is None  # while writing: nothing read now may be offered
    k.offer("a", (None, 3), epoch)
    k.end({"a": (NOW, 1)})
    assert k.lookup("a")[0] is None  # the offer read before the commit was refused
    hit, epoch = k.lookup("a")
    k.offer("a", (NOW, 4), epoch)
    assert k.lookup("a")[0] == (NOW, 4)
    k.begin()
    k.end({"a": (NOW + timedelta(seconds=1), 2)})  # a commit adds to what is cached
    assert k.lookup("a")[0] == (NOW + timedelta(seconds=1), 6)


def test_a_complete_access_cache_answers_misses_and_stops_claiming_it_past_its_limit() -> None:
    k = KnownAccess(limit=3)
    k.load([("a", NOW, 2), ("b", None, 0), ("c", NOW, 1), ("d", NOW, 1)])  # more than it keeps: not loaded
    assert k.lookup("a")[0] is None
    k = KnownAccess(limit=3)
    k.load([("a", NOW, 2)])
    assert k.lookup("zzz")[0] == (None, 0)  # complete: never read
    k.begin()
    k.end({"b": (NOW, 1), "c": (NOW, 5)})  # first rows of b and c
    assert k.lookup("b")[0] == (NOW, 1) and k.lookup("c")[0] == (NOW, 5)
    k.begin()
    k.end({"d": (NOW, 1)})  # a fourth row: no longer complete
    assert k.lookup("never-read")[0] is None


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), steps=st.integers(20, 150), limit=st.sampled_from([2, 5, 1000]))
def test_access_statistics_from_the_cache_equal_duckdb(tmp_path_factory, seed: int, steps: int, limit: int) -> None:
    """Random reads, record folds and commits: every get's statistics equal the committed row."""
    d = tmp_path_factory.mktemp("acc")
    view = MemoriesView(str(d / "v.duckdb"))
    alive = fold_all(view, 40, seed)
    view.close()
    view = MemoriesView(str(d / "v.duckdb"))
    view.known_access = KnownAccess(limit=limit)
    view.known_access.load(view.reader().execute("SELECT * FROM access_stats").fetchall())
    access = AccessView(view)
    rng = random.Random(seed)
    ids = sorted(alive)
    seq = 0
    try:
        for _ in range(steps):
            mid = rng.choice(ids)
            op = rng.random()
            if op < 0.4:
                seq += 1
                access.stage([Positioned(seq, T0, read(mid, T0 + timedelta(seconds=seq)))])
            elif op < 0.55:
                access.commit()
            else:
                got = Q.get(view, GetMemory(namespace=alive[mid], now=NOW, memory_id=mid, include_expired=True))
                assert got.item is not None
                assert (got.item.accessed_at, got.item.access_count) == stored_access(view, mid), mid
    finally:
        view.close()
