"""A commit that fails (the disk is full, the file is gone) stalls the follower instead of killing it: it
takes nothing new, says why (`stalled`, shown by `mneme status`), retries with a backoff, and goes on from
where it was when commits work again, with nothing lost or folded twice. Real nats-server."""

from __future__ import annotations

import errno

import nats
import pytest
from nats.js import JetStreamContext

from mneme.embedded_nats import EmbeddedNats
from mneme.eventlog import ensure_streams
from mneme.follow import LogFollower
from mneme.sink import Positioned
from schemas import subjects as S

pytestmark = pytest.mark.anyio


class FlakySink:
    """Commits fail while `full` is true, as a DuckDB write on a full disk does (the transaction rolls back)."""

    def __init__(self) -> None:
        self.checkpoint = 0
        self.staged: list[int] = []
        self.committed: list[int] = []
        self.full = True
        self.failures = 0

    def stage_reads_disk(self, batch: list[Positioned]) -> bool:
        return False

    def stage(self, batch: list[Positioned], upto: int) -> None:
        self.staged += [p.seq for p in batch]

    def commit(self) -> int:
        if self.full:
            self.failures += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        self.committed = list(self.staged)
        self.checkpoint = self.staged[-1] if self.staged else 0
        return self.checkpoint


async def log_of(nc: nats.NATS, n: int) -> JetStreamContext:
    """The event stream holding `n` one-byte messages (a sink here never decodes them)."""
    js = nc.jetstream()
    await ensure_streams(js)
    for i in range(n):
        await js.publish(S.memory_subject("ns", None, f"m{i}"), b"x", stream=S.EVENTS_STREAM)
    return js


async def test_a_failing_commit_stalls_then_resumes_with_nothing_lost(nats_server: EmbeddedNats) -> None:
    nc = await nats.connect(nats_server.url or "")
    try:
        js = await log_of(nc, 200)
        sink = FlakySink()
        f = LogFollower(js, sink, batch_max=50, linger=0.01, decode=lambda b: b, consumer="test")
        await f.start()
        assert not await f.wait_for(200, 3.0)  # nothing commits while the disk is full ...
        assert f.stalled is not None and "No space left" in f.stalled
        assert sink.failures >= 2 and f.committed == 0
        assert len(sink.staged) < 200  # ... and it stopped taking more in
        sink.full = False  # space returns
        assert await f.wait_for(200, 15.0)
        assert f.stalled is None
        assert sink.committed == list(range(1, 201))  # in order, once each
        await js.publish(S.memory_subject("ns", None, "late"), b"x", stream=S.EVENTS_STREAM)
        assert await f.wait_for(201, 5.0)
        await f.stop()
    finally:
        await nc.close()


class BrokenFold(FlakySink):
    """Folds until it meets sequence `bad`, then raises: a projection that cannot take a decodable event."""

    def __init__(self, bad: int) -> None:
        super().__init__()
        self.full, self.bad = False, bad

    def stage(self, batch: list[Positioned], upto: int) -> None:
        if any(p.seq == self.bad for p in batch):
            raise KeyError("a field no fold expects")
        super().stage(batch, upto)


async def test_a_fold_that_raises_stops_the_follower_visibly_and_commits_nothing_half_done(
    nats_server: EmbeddedNats,
) -> None:
    nc = await nats.connect(nats_server.url or "")
    try:
        js = await log_of(nc, 100)
        sink = BrokenFold(bad=60)
        f = LogFollower(js, sink, batch_max=10, linger=0.01, decode=lambda b: b, consumer="test")
        await f.start()
        assert not await f.wait_for(100, 3.0)
        assert f.fold_failed and f.stalled is not None and "fold failed" in f.stalled and "KeyError" in f.stalled
        assert f.committed < 60 and sink.checkpoint == f.committed  # what is on disk stops before the bad one
        await f.stop()  # ends at once: no wait for a commit that cannot come
    finally:
        await nc.close()
