"""Delivery gaps: nats-py drops messages when its pending buffer overflows (it answers JetStream flow
control on arrival, so the server never waits for a slow consumer), and its ordered consumer does not
notice. bench.replay lost ~245,000 of 1,000,000 events that way. The follower must see the gap and fetch
again from the first missing sequence: every event staged exactly once, in order."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.synthetic import history, publish
from mneme.app.compose import close_nats, connect
from mneme.embedded_nats import EmbeddedNats
from mneme.eventlog import ensure_streams
from mneme.follow import LogFollower
from mneme.sink import Positioned

pytestmark = pytest.mark.anyio
N = 10_000


class SlowSink:
    """Records the sequences it is given; each commit takes a while (as a DuckDB or Edge commit does)."""

    def __init__(self) -> None:
        self.checkpoint = 0
        self.seqs: list[int] = []

    def stage_reads_disk(self, batch: list[Positioned]) -> bool:
        return False

    def stage(self, batch: list[Positioned], upto: int) -> None:
        self.seqs.extend(p.seq for p in batch)

    def commit(self) -> int:
        time.sleep(0.05)
        self.checkpoint = self.seqs[-1] if self.seqs else 0
        return self.checkpoint


async def test_messages_dropped_in_delivery_are_fetched_again(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    nc = await connect(nats_server.url or "", "gaps")
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        last = await publish(js, history(N, n_memories=N // 5, seed=3))
        assert last == N
        sinks = [SlowSink(), SlowSink()]
        # a tiny nats-py buffer and a tiny queue: drops are certain, as with a 1,000,000-event backlog
        followers = [
            LogFollower(js, s, batch_max=500, linger=0.01, queue_max=50, pending_msgs_limit=300) for s in sinks
        ]
        for f in followers:
            await f.start()
        for f in followers:
            assert await f.wait_for(N, 120), f"stalled at {f.staged}"
            await f.stop()
        for f, s in zip(followers, sinks, strict=True):
            assert s.seqs == list(range(1, N + 1)), "every event once, in order, none skipped"
            assert f.resyncs > 0, "the test did not provoke a drop: make the buffers smaller"
    finally:
        await close_nats(nc)
