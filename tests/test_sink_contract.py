"""One contract, every read model (issue 30, item 3): what a sink promises the follower that feeds it.

Fed by hand (no NATS): a fresh sink is at 0; what is staged is written with its checkpoint and the mark of the
event there by one commit, which returns the durable position (the vector index saves its position lazily, at
most every few seconds, and at `save`); a position staged again is not applied twice; a sink
reopened on its files is where its last commit left it, mark included. The rows, the access statistics, the vector
index (Qdrant Edge, the real model), the code index, and both sources of the audit trail.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bench.synthetic import history
from mneme.sink import Positioned, positions_of
from schemas.access import ReadRecorded
from services.auditor.trail import ACCESS, EVENTS, Trail
from services.projector.access_view import AccessView
from services.projector.code_view import CodeView
from services.projector.memories_view import MemoriesView
from tests.harness import open_vectors, shared_model

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def events(n: int) -> list[Positioned]:
    return [
        Positioned(i + 1, T0 + timedelta(seconds=i), env, subject)
        for i, (subject, env) in enumerate(history(n, n_memories=max(1, n // 3), seed=11))
    ]


def reads(n: int) -> list[Positioned]:
    ids = [env.aggregate_id for _, env in history(6, n_memories=2, seed=11)]
    return [
        Positioned(
            i + 1,
            T0 + timedelta(seconds=i),
            ReadRecorded(
                record_id=str(uuid.uuid4()),
                at=T0,
                agent_id="a",
                role="agent",
                request_id=f"r{i}",
                namespace="default",
                operation="memory_get",
                memory_ids=(ids[i % len(ids)],),
            ),
        )
        for i in range(n)
    ]


@dataclass
class Kind:
    open: Callable[[Path], Any]  # -> (sink, closer)
    feed: Callable[[int], list[Positioned]]
    applied: Callable[[Any], int]  # something the fold changed, to tell a second application from the first


def _rows(tmp: Path) -> Any:
    v = MemoriesView(str(tmp / "rows.duckdb"))
    return v, v.close


def _access(tmp: Path) -> Any:
    v = MemoriesView(str(tmp / "rows.duckdb"))
    return AccessView(v), v.close


def _vectors(tmp: Path) -> Any:
    v = open_vectors(tmp, background=False)
    return v, v.close


def _code(tmp: Path) -> Any:
    v = open_vectors(tmp / "m", background=False)
    c = CodeView(str(tmp / "code.duckdb"), v.model, v.cache)
    return c, c.close


def _trail(source: str) -> Callable[[Path], Any]:
    def open_(tmp: Path) -> Any:
        t = Trail(str(tmp / "audit.duckdb"))
        return t.source(source), t.close

    return open_


def _versions(sink: MemoriesView) -> int:
    return int(sink.reader().execute("SELECT count(*) FROM memory_versions").fetchall()[0][0])


def _access_count(sink: AccessView) -> int:
    rows = sink._cur.execute("SELECT coalesce(sum(access_count), 0) FROM access_stats").fetchall()
    return int(rows[0][0])


def _points(sink: Any) -> int:
    from services.projector.vector_index import Where

    return int(sink.index.count(Where()))


def _records(sink: Any) -> int:
    return int(sink.trail.last_seq)


KINDS = {
    "rows": Kind(_rows, events, _versions),
    "access": Kind(_access, reads, _access_count),
    "vectors": Kind(_vectors, events, _points),
    "code": Kind(_code, events, lambda s: s.checkpoint),
    "trail-events": Kind(_trail(EVENTS), events, _records),
    "trail-access": Kind(_trail(ACCESS), reads, _records),
}


@pytest.mark.parametrize("name", list(KINDS))
def test_every_sink_keeps_the_contract(tmp_path: Path, name: str) -> None:
    kind = KINDS[name]
    if name in ("vectors", "code"):
        assert shared_model().wait(120)  # (the model loads in the background: these sinks embed as they commit)
    sink, close = kind.open(tmp_path)
    try:
        assert sink.checkpoint == 0 and all(seq == 0 for _, seq, _ in positions_of(sink, name))
        batch = kind.feed(12)
        sink.stage(batch, 12)
        sink.mark(12, "mark-at-12")
        # the durable position: the batch's end, or (a sink that saves lazily: the vector index) not past it
        done = sink.commit()
        assert done == 12 or (hasattr(sink, "save") and 0 <= done <= 12)
        if hasattr(sink, "save"):
            assert sink.save() == 12  # (saved at a marked position: the one given)
        assert sink.checkpoint == 12
        assert positions_of(sink, name)[0][1:] == (12, "mark-at-12")
        once = kind.applied(sink)
        assert once > 0 or name == "code"
        sink.stage(batch, 12)  # the same positions again (a restart that refolds): not applied twice
        sink.commit()
        assert kind.applied(sink) == once and sink.checkpoint == 12
    finally:
        close()
    again, close = kind.open(tmp_path)
    try:
        assert again.checkpoint == 12
        assert positions_of(again, name)[0][1:] == (12, "mark-at-12")
        more = kind.feed(15)[12:]
        again.stage(more, 15)
        again.mark(15, "mark-at-15")
        assert again.commit() <= 15
        if hasattr(again, "save"):
            again.save()
        assert again.checkpoint == 15 and positions_of(again, name)[0][1:] == (15, "mark-at-15")
    finally:
        close()
