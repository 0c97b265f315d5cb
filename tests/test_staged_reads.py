"""Point reads from staged state agree with a pure fold of the log, whatever was committed when.

The projector answers gets and path-owner checks from its overlay (events staged but
not committed) on top of DuckDB's committed rows. This property test replays random
histories (creates, updates, moves, archives, restores, deletes) into a real DuckDB
view, committing at random points, and after every step compares each answer with
`evolve` folded over the same events.
"""

from __future__ import annotations

import itertools
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.synthetic import history
from mneme.domain.state import MemoryState, evolve
from mneme.sink import Positioned
from schemas.events import Event
from schemas.queries import GetMemory, PathOwner
from services.projector import memories_queries as Q
from services.projector.memories_view import MemoriesView

NOW = datetime(2030, 1, 1, tzinfo=UTC)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def check(
    view: MemoriesView,
    truth: dict[str, MemoryState],
    paths_seen: set[tuple[str, str, str]],
    versions: dict[str, list[tuple[int, int]]] | None = None,
) -> None:
    for mid, state in truth.items():
        q = GetMemory(namespace=state.namespace, now=NOW, memory_id=mid, include_expired=True, history=5)
        got = Q.get(view, q)
        assert got.item is not None and got.item.memory == state, mid
        fast = Q.get_known(view, q)  # the event loop's answer, when it has one, is the same
        assert fast is None or fast == got, mid
        if versions is not None:  # the recent history (cached or read) is the fold's, newest first
            assert [(h.version, h.seq) for h in got.history] == versions[mid][::-1][:5], mid
    held = {(s.namespace, s.store, s.path): s.id for s in truth.values() if s.store and s.path}
    for ns, store, path in paths_seen:
        owner = Q.path_owner(view, PathOwner(namespace=ns, now=NOW, store=store, path=path))
        assert owner.memory_id == held.get((ns, store, path)), (path, owner)
        by_path = Q.get(view, GetMemory(namespace=ns, now=NOW, store=store, path=path, include_expired=True))
        assert (by_path.item.memory.id if by_path.item else None) == held.get((ns, store, path)), path


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n_events=st.integers(5, 80),
    commit_every=st.lists(st.integers(1, 15), min_size=1, max_size=20),
)
def test_staged_point_reads_equal_the_fold(seed: int, n_events: int, commit_every: list[int]) -> None:
    events = list(history(n_events, n_memories=max(2, n_events // 4), namespaces=2, seed=seed))
    with tempfile.TemporaryDirectory() as d:
        view = MemoriesView(str(Path(d) / "v.duckdb"))
        try:
            truth: dict[str, MemoryState] = {}
            versions: dict[str, list[tuple[int, int]]] = {}
            gone: set[str] = set()
            paths_seen: set[tuple[str, str, str]] = set()
            steps = itertools.cycle(commit_every)
            until_commit = next(steps)
            for seq, (_, env) in enumerate(events, start=1):
                p = Positioned(seq, T0, env)
                view.stage([p], seq)
                new = evolve(truth.get(env.aggregate_id), env, seq)
                if new is not None or env.aggregate_id in truth:
                    assert isinstance(env.event, Event)
                    versions.setdefault(env.aggregate_id, []).append((env.event.version, seq))
                if new is None:
                    truth.pop(env.aggregate_id, None)
                    gone.add(env.aggregate_id)
                else:
                    truth[env.aggregate_id] = new
                    if new.store and new.path:
                        paths_seen.add((new.namespace, new.store, new.path))
                until_commit -= 1
                if until_commit == 0:
                    assert view.commit() == seq
                    until_commit = next(steps)
                check(view, truth, paths_seen, versions)
                for mid in gone:
                    assert Q.get(view, GetMemory(namespace="ns0", now=NOW, memory_id=mid)).item is None
                    assert Q.get(view, GetMemory(namespace="ns1", now=NOW, memory_id=mid)).item is None
            view.commit()
            check(view, truth, paths_seen)
        finally:
            view.close()
