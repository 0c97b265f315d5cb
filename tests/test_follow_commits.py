"""When a follower commits: larger commits while it catches up on a backlog, and a waiter's commit as soon as
what it waits for is staged (not after the linger). On a real nats-server.
"""

from __future__ import annotations

import asyncio
import gc
import time
from pathlib import Path

import pytest

from bench.synthetic import history, publish
from mneme.app import gc_policy
from mneme.embedded_nats import EmbeddedNats
from mneme.follow import LogFollower
from mneme.sink import Positioned
from tests.harness import log_writer

pytestmark = pytest.mark.anyio


class Recording:
    """Folds nothing; records how many events each commit held (the follower's policy is what is tested)."""

    def __init__(self, slow: float = 0.0) -> None:
        self.checkpoint = 0
        self.staged = 0
        self.commits: list[int] = []
        self.slow = slow  # seconds a stage takes (a fold slower than delivery: a backlog builds up)

    def stage(self, batch: list[Positioned], upto: int) -> None:
        if self.slow:
            time.sleep(self.slow)
        self.staged = upto

    def stage_reads_disk(self, batch: list[Positioned]) -> bool:
        return bool(self.slow)  # (a slow stage runs on a worker thread, as a fold that reads does)

    def commit(self) -> int:
        self.commits.append(self.staged - self.checkpoint)
        self.checkpoint = self.staged
        return self.checkpoint


async def test_a_backlog_is_committed_in_catch_up_batches(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    async with log_writer(nats_server) as js:
        assert await publish(js, history(6000, n_memories=600, namespaces=1, seed=3)) == 6000
        sink = Recording(slow=0.02)
        f = LogFollower(js, sink, batch_max=500, catch_up_batch=2000, queue_max=3000, linger=0.01)
        await f.start()
        try:
            assert await f.wait_for(6000, 60)
        finally:
            await f.stop()
        assert sum(sink.commits) == 6000
        # while more than a batch waited, commits held up to catch_up_batch events, far past batch_max (and
        # past the linger: 0.01 s is much less than a stage takes)
        assert max(sink.commits) > 500
        assert max(sink.commits) <= 2000
        assert len(sink.commits) <= 8, sink.commits


async def test_without_a_backlog_the_linger_and_batch_max_decide(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    async with log_writer(nats_server) as js:
        sink = Recording()
        f = LogFollower(js, sink, batch_max=500, catch_up_batch=2000, linger=0.05)
        await f.start()
        try:
            for i, pair in enumerate(history(300, n_memories=30, namespaces=1, seed=4)):
                await publish(js, iter([pair]))
                if i % 50 == 49:
                    await asyncio.sleep(0.2)  # past the linger: what arrived is committed
            async with asyncio.timeout(10):
                while f.committed < 300:
                    await asyncio.sleep(0.02)
        finally:
            await f.stop()
        assert sum(sink.commits) == 300
        assert len(sink.commits) >= 6  # at least one commit per pause: nothing waited for a catch-up batch


async def test_a_waiter_commits_as_soon_as_its_event_is_staged(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    async with log_writer(nats_server) as js:
        sink = Recording()
        f = LogFollower(js, sink, linger=30.0)  # the linger alone would commit after 30 s
        await f.start()
        try:
            pairs = list(history(20, n_memories=5, namespaces=1, seed=6))
            assert await publish(js, iter(pairs[:10])) == 10
            t = time.monotonic()
            assert await f.wait_for(10, 10)  # staged already, or about to be
            waiter = asyncio.create_task(f.wait_for(20, 10))  # not published yet: asked before it exists
            await asyncio.sleep(0.1)
            assert not waiter.done()
            await publish(js, iter(pairs[10:]))
            assert await waiter
            assert time.monotonic() - t < 5
            assert f.committed == 20
        finally:
            await f.stop()


def test_gc_policy_freezes_and_raises_the_thresholds() -> None:
    before = gc.get_threshold()
    try:
        gc_policy.tune()
        assert gc.get_threshold() == gc_policy.THRESHOLDS
        assert gc.get_freeze_count() > 0  # what the process held is out of every collection
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
