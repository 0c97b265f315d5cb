"""A follower's stop() always ends, even when its cancel lands in the same turn as a wake-up.

On Python 3.11, `asyncio.wait_for` loses a cancellation when the awaited thing completes in the same turn
of the event loop: the follower's loop then went on, and stop() (which awaits it) waited for ever. It is
what hung `mneme replay --upto` in CI twice (tests/test_replay.py, a frozen copy to a time before the first
event: every message arrives past `stop_at`, each one waking the loop, while the build stops it). Found
by 1 hang in ~290 replays of that kind; the loop now waits with `asyncio.timeout` and ends on a flag too.

The first test is the mechanism, deterministic: it failed 200 times in 200 with the old wait. The second
is the case as it happened, on a real nats-server with messages flowing during every stop.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench.synthetic import history, publish
from mneme.embedded_nats import EmbeddedNats
from mneme.follow import LogFollower
from mneme.sink import Positioned
from tests.harness import log_writer

pytestmark = pytest.mark.anyio


class Counting:
    """A sink that folds nothing but counts (the follower's loop is what is tested)."""

    def __init__(self) -> None:
        self.checkpoint = 0
        self.staged = 0

    def stage(self, batch: list[Positioned], upto: int) -> None:
        self.staged = upto

    def stage_reads_disk(self, batch: list[Positioned]) -> bool:
        return False

    def commit(self) -> int:
        self.checkpoint = self.staged
        return self.checkpoint


async def test_the_loop_ends_when_cancelled_in_the_same_turn_as_a_wake_up(tmp_path: Path) -> None:
    ended = 0
    for _ in range(50):
        f = LogFollower(None, Counting())  # type: ignore[arg-type]  # (the loop alone: no subscription)
        f.idle_check = 30.0  # waiting on its wake-up, as between messages
        task = asyncio.create_task(f._loop())
        await asyncio.sleep(0.002)
        f._wake.set()  # a message arrives ...
        task.cancel()  # ... in the turn the stop cancels
        done, _ = await asyncio.wait({task}, timeout=2)
        ended += bool(done)
        if not done:  # (lost: a second cancel, in a turn of its own, ends it)
            task.cancel()
            await asyncio.wait({task}, timeout=2)
    assert ended == 50


async def test_stop_ends_while_messages_past_stop_at_keep_arriving(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    async with log_writer(nats_server) as js:
        assert await publish(js, history(3000, n_memories=300, namespaces=1, seed=5)) == 3000
        for trial in range(30):
            f = LogFollower(js, Counting(), stop_at=0)  # a frozen copy before the first event
            await f.start()
            await asyncio.sleep(0.001 * (trial % 10))  # stop at different points of the delivery
            try:
                async with asyncio.timeout(15):
                    await f.stop()
            except TimeoutError:
                pytest.fail(f"stop() did not end (trial {trial}, {f.received} messages received)")
            assert f.committed == 0 and f.applied == 0  # nothing past stop_at was folded
