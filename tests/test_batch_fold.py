"""The batch fold equals the event-by-event fold (issue 11, item 5).

Random histories over a few memories, with every event type (creates, updates of every field, moves
between stores, archive/restore, verify, lock/unlock, deprecate, invalidate, delete, and events about a
memory the log never created), are folded into the DuckDB view and the vector view three ways:
one event per stage and commit; random batches committed at random points; and random batches with the
view closed and reopened between commits (no in-memory cache survives). Every table (the canonical
digest) and every point (payload and BM25 vector) must come out the same.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mneme.embed_cache import EmbeddingCache
from mneme.sink import Positioned
from schemas.events import (
    Actor,
    Envelope,
    MemoryArchived,
    MemoryCreated,
    MemoryDeleted,
    MemoryDeprecated,
    MemoryInvalidated,
    MemoryLocked,
    MemoryMoved,
    MemoryRestored,
    MemoryUnlocked,
    MemoryUpdated,
    MemoryVerified,
)
from services.projector.memories_view import MemoriesView
from services.projector.vector_index import EdgeIndex, point_id
from services.projector.vector_view import VectorView

T0 = datetime(2026, 3, 1, tzinfo=UTC)
WORDS = "tea coffee deploy friday alice bob berlin tokyo roadmap schema latency invoice".split()


def history(seed: int, n: int) -> list[Positioned]:
    """A consistent history (versions follow on; only live memories change), from one seed."""
    rng = random.Random(seed)
    live: dict[str, dict[str, Any]] = {}
    out: list[Positioned] = []
    made = 0
    for i in range(n):
        at = T0 + timedelta(seconds=i)
        roll = rng.random()
        if not live or roll < 0.25:
            mid = f"m{made}-{seed}"
            made += 1
            store = rng.choice(["s", "t", None])
            path = f"{rng.choice(['a', 'b'])}/{rng.choice(['x', 'y'])}/n{made}" if store else None
            ns = rng.choice(["ns1", "ns2"])
            ev: Any = MemoryCreated(
                memory_id=mid,
                version=1,
                store=store,
                path=path,
                content=" ".join(rng.sample(WORDS, 4)),
                kind=rng.choice(["note", "fact"]),
                category=rng.choice(["work", None]),
                subject=rng.choice(["Alice", None]),
                tags=tuple(sorted(rng.sample(WORDS, rng.randrange(3)))),
                importance=round(rng.random(), 2),
                metadata={"k": rng.randrange(3)},
                valid_from=rng.choice([None, T0 - timedelta(days=3)]),
                expires_at=rng.choice([None, T0 + timedelta(days=30)]),
            )
            live[mid] = {"ns": ns, "v": 1, "store": store, "path": path, "status": "active"}
        elif roll < 0.28:  # an event about a memory this log never created: folded as nothing
            mid, ns, ev = f"ghost-{i}", "ns1", MemoryUpdated(memory_id=f"ghost-{i}", version=2, content="boo")
        else:
            mid = rng.choice(sorted(live))
            m = live[mid]
            ns, v = m["ns"], m["v"] + 1
            kind = rng.choice(["update", "update", "update", "move", "archive", "verify", "lock", "unlock",
                               "deprecate", "invalidate", "delete"])  # fmt: skip
            if kind == "update":
                fields = rng.sample(["content", "tags", "importance", "category", "subject", "metadata", "expires_at",
                                     "kind", "citations", "valid_until"], rng.randrange(1, 4))  # fmt: skip
                values: dict[str, Any] = {  # MemoryUpdated's fields, each of its own type
                    "content": " ".join(rng.sample(WORDS, 5)),
                    "tags": ("x", "y")[: rng.randrange(3)],
                    "importance": round(rng.random(), 2),
                    "category": rng.choice(["diet", None]),
                    "subject": rng.choice(["Bob", None]),
                    "metadata": {"n": i},
                    "kind": "decision",
                    "expires_at": rng.choice([None, T0 + timedelta(days=1)]),
                    "citations": ("doc:1",),
                    "valid_until": rng.choice([None, T0 + timedelta(days=9)]),
                }
                ev = MemoryUpdated(memory_id=mid, version=v, **{f: values[f] for f in fields})
            elif kind == "move" and m["store"]:
                to_store = rng.choice(["s", "t"])
                to_path = f"{rng.choice(['a', 'c'])}/moved{i}"
                ev = MemoryMoved(memory_id=mid, version=v, from_path=m["path"], to_path=to_path, to_store=to_store)
                m["store"], m["path"] = to_store, to_path
            elif kind == "archive":
                ev = (
                    MemoryArchived(memory_id=mid, version=v)
                    if m["status"] == "active"
                    else MemoryRestored(memory_id=mid, version=v)
                )
                m["status"] = "archived" if m["status"] == "active" else "active"
            elif kind == "verify":
                ev = MemoryVerified(memory_id=mid, version=v)
            elif kind == "lock":
                ev = MemoryLocked(memory_id=mid, version=v, reason="hold")
            elif kind == "unlock":
                ev = MemoryUnlocked(memory_id=mid, version=v)
            elif kind == "deprecate":
                ev = MemoryDeprecated(memory_id=mid, version=v, reason="old")
                m["status"] = "deprecated"
            elif kind == "invalidate":
                ev = MemoryInvalidated(memory_id=mid, version=v, valid_until=at, reason="wrong", outdated=True)
            else:
                ev = MemoryDeleted(memory_id=mid, version=v)
                del live[mid]
            if mid in live:
                m["v"] = v
        env = Envelope(
            event_id=f"e{i}",
            schema_version=1,
            namespace=ns,
            aggregate_id=mid,
            occurred_at=at,
            actor=Actor(agent_id=f"a{i % 2}"),
            request_id=f"r{i}",
            event=ev,
        )
        out.append(Positioned(seq=i + 1, recorded_at=at + timedelta(milliseconds=5), envelope=env))
    return out


def cuts(rng: random.Random, n: int) -> list[tuple[list[int], bool]]:
    """Random batches (index ranges) and, after each, whether to commit (the last always does)."""
    out, i = [], 0
    while i < n:
        j = min(n, i + rng.randrange(1, 12))
        out.append((list(range(i, j)), j == n or rng.random() < 0.5))
        i = j
    return out


class NoModel:
    """No dense vectors: the points carry what the fold decides (payload, BM25)."""

    model_id = name = "none"
    ready = False
    dim = 4

    def get(self) -> Any:
        from mneme.embedding import ModelLoading

        raise ModelLoading("no model in this test")

    def wait(self, timeout: float | None) -> bool:
        return False


def fold_rows(path: Path, events: list[Positioned], plan: list[tuple[list[int], bool]], reopen: bool) -> dict[str, str]:
    view = MemoriesView(str(path))
    for ix, commit in plan:
        view.stage([events[i] for i in ix], events[ix[-1]].seq)
        if commit:
            view.commit()
            if reopen:
                view.close()
                view = MemoriesView(str(path))
    digest = view.canonical_digest()
    view.close()
    return digest


def fold_points(
    path: Path, events: list[Positioned], plan: list[tuple[list[int], bool]], reopen: bool
) -> dict[str, Any]:
    def open_view() -> VectorView:
        return VectorView(
            EdgeIndex(path / "v", 4),
            NoModel(),  # type: ignore[arg-type]  # a stand-in with ModelHandle's attributes, not one
            EmbeddingCache(path / "c.sqlite"),
            background=True,
        )

    vv = open_view()
    for ix, commit in plan:
        vv.stage([events[i] for i in ix], events[ix[-1]].seq)
        if commit:
            vv.commit()
            if reopen:
                vv.save()
                vv.close()
                vv = open_view()
    ids = {point_id(p.envelope.aggregate_id, p.envelope.event.version) for p in events}
    got = vv.index.retrieve(sorted(ids))
    vv.close()
    return {pid: (p.payload, p.sparse) for pid, p in sorted(got.items())}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 60), plan_seed=st.integers(0, 10_000))
def test_batch_fold_equals_event_by_event(tmp_path_factory: Any, seed: int, n: int, plan_seed: int) -> None:
    events = history(seed, n)
    one_by_one = [([i], True) for i in range(n)]
    plan = cuts(random.Random(plan_seed), n)
    d = tmp_path_factory.mktemp("fold")
    want = fold_rows(d / "one.duckdb", events, one_by_one, reopen=False)
    assert fold_rows(d / "batch.duckdb", events, plan, reopen=False) == want
    assert fold_rows(d / "reopen.duckdb", events, plan, reopen=True) == want
    (d / "p1").mkdir()
    (d / "p2").mkdir()
    (d / "p3").mkdir()
    points = fold_points(d / "p1", events, one_by_one, reopen=False)
    assert points, "a history always creates a memory first"
    assert fold_points(d / "p2", events, plan, reopen=False) == points
    assert fold_points(d / "p3", events, plan, reopen=True) == points


def test_batch_fold_whole_log_at_once(tmp_path: Path) -> None:
    """One batch of the whole history (how a replay folds) equals the event-by-event fold, a long one."""
    events = history(99, 400)
    want = fold_rows(tmp_path / "one.duckdb", events, [([i], True) for i in range(400)], reopen=False)
    assert fold_rows(tmp_path / "all.duckdb", events, [(list(range(400)), True)], reopen=False) == want
