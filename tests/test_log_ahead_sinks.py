"""Every kind of follower's read model checks its checkpoint against the log when it starts (issue 29, item 2):
the rows and graph (MemoriesView), the vector index (Qdrant Edge), the code index and the audit trail. On real
nats-servers, each with a store of its own: the log a sink folded, a shorter log, and a log as long with other
events under the same sequences. The mark is written with the checkpoint, in the same transaction.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from nats.js import JetStreamContext

from bench.synthetic import history, publish
from mneme.embedded_nats import EmbeddedNats
from mneme.follow import LogFollower
from mneme.sink import FanOut, LogAhead, mark_of
from services.auditor.trail import EVENTS, Trail
from services.projector.code_view import CodeView
from services.projector.memories_view import MemoriesView
from tests.harness import log_writer, open_vectors, shared_model

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def log_of(store: Path, events: int, seed: int) -> AsyncIterator[JetStreamContext]:
    """A nats-server on `store` whose event log holds `events` synthetic events (drawn with `seed`)."""
    server = EmbeddedNats(store)
    await server.start()
    try:
        async with log_writer(server) as js:
            if events:
                await publish(js, history(events, n_memories=max(1, events // 4), seed=seed))
            yield js
    finally:
        await server.stop()


def rows(tmp: Path) -> Any:
    return MemoriesView(str(tmp / "rows.duckdb"))


def vectors(tmp: Path) -> Any:
    return open_vectors(tmp, background=False)


def trail(tmp: Path) -> Any:
    return Trail(str(tmp / "audit.duckdb")).source(EVENTS)


def code(tmp: Path) -> Any:
    v = open_vectors(tmp / "code-model", background=False)
    return CodeView(str(tmp / "code.duckdb"), v.model, v.cache)


def close(sink: Any) -> None:
    if isinstance(sink, FanOut):
        for s in sink.sinks:
            close(s)
    elif hasattr(sink, "trail"):
        sink.trail.close()
    else:
        sink.close()


def code_beside_rows(tmp: Path) -> Any:  # (the code index is fed as an extra sink of the rows' follower)
    return FanOut(rows(tmp), code(tmp))


SINKS: dict[str, Callable[[Path], Any]] = {
    "rows": rows,
    "vectors": vectors,
    "trail": trail,
    "code": code_beside_rows,
}


async def fold(js: JetStreamContext, sink: Any, upto: int) -> None:
    f = LogFollower(js, sink, batch_max=16, linger=0.01)
    await f.start()
    try:
        assert await f.wait_for(upto, 60)
    finally:
        await f.stop()
    if hasattr(sink, "save"):
        sink.save()  # (the vector index saves its position lazily; a stop saves it)


@pytest.mark.parametrize("kind", list(SINKS))
async def test_every_read_model_ahead_of_the_log_is_refused_at_start(tmp_path: Path, kind: str) -> None:
    shared_model()
    open_sink = SINKS[kind]
    async with log_of(tmp_path / "log", 40, seed=1) as js:
        sink = open_sink(tmp_path)
        await fold(js, sink, 40)
        positions = sink.positions()
        assert positions and all(seq == 40 for _, seq, _ in positions), positions
        head = await js.get_msg("MNEME_EVENTS", seq=40)
        assert all(mark == mark_of(head.data) for _, _, mark in positions)  # the mark is the event's at 40
        close(sink)
        again = open_sink(tmp_path)  # reopened: the same log passes, and folding goes on
        assert await LogFollower(js, again).check_log() is None
        close(again)
    async with log_of(tmp_path / "shorter", 25, seed=1) as js:  # the same events, fewer of them
        sink = open_sink(tmp_path)
        with pytest.raises(LogAhead, match="past the log's last sequence #25"):
            await LogFollower(js, sink).start()
        close(sink)
    async with log_of(tmp_path / "other", 60, seed=2) as js:  # as long and longer, other events
        sink = open_sink(tmp_path)
        with pytest.raises(LogAhead, match="applied another event at MNEME_EVENTS #40"):
            await LogFollower(js, sink).start()
        close(sink)


async def test_a_vector_position_is_saved_only_where_its_event_is_known(tmp_path: Path) -> None:
    """The vector index saves its position where the filler has embedded up to, which need not be where a batch
    ended: it saves the latest marked position at or below it, never a position without its event's mark."""
    shared_model()
    async with log_of(tmp_path / "log", 30, seed=3) as js:
        v = vectors(tmp_path)
        await fold(js, v, 30)
        (_, seq, mark), = v.positions()  # fmt: skip
        assert seq == 30 and mark is not None
        v.close()
        reopened = vectors(tmp_path)
        assert reopened.positions() == [("the vector index", 30, mark)]
        reopened.close()


async def test_one_sink_ahead_is_enough_when_another_starts_from_nothing(tmp_path: Path) -> None:
    """The rows' follower starts from its lowest sink's position: a code index folded anew (position 0) beside
    rows that are ahead must not hide them."""
    shared_model()
    async with log_of(tmp_path / "log", 20, seed=4) as js:
        view = rows(tmp_path)
        await fold(js, view, 20)
        view.close()
    async with log_of(tmp_path / "shorter", 5, seed=4) as js:
        sink = FanOut(rows(tmp_path), code(tmp_path))  # the code index is new: at 0
        assert sink.checkpoint == 0
        with pytest.raises(LogAhead, match="the rows: checkpoint at MNEME_EVENTS #20"):
            await LogFollower(js, sink).start()
        close(sink)
