"""A follower that must subscribe again (a gap in delivery, a stalled tail) while JetStream's API does not answer
(a leader election) retries; before, the failed subscribe ended its loop and the replica stopped for good, its
heartbeat still beating (found by the cluster history checker, tests/history). On a real nats-server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nats.errors
import pytest

from bench.synthetic import history, publish
from mneme.embedded_nats import EmbeddedNats
from mneme.follow import LogFollower
from mneme.sink import Positioned
from tests.harness import log_writer

pytestmark = pytest.mark.anyio


class Sink:
    def __init__(self) -> None:
        self.checkpoint, self.seqs = 0, []  # type: ignore[var-annotated]

    def stage_reads_disk(self, batch: list[Positioned]) -> bool:
        return False

    def stage(self, batch: list[Positioned], upto: int) -> None:
        self.seqs.extend(p.seq for p in batch)

    def commit(self) -> int:
        self.checkpoint = self.seqs[-1] if self.seqs else 0
        return int(self.checkpoint)


class FlakyJS:
    """The real JetStream context, whose next `fail` subscribes time out (as a consumer create does mid-election)."""

    def __init__(self, js: Any) -> None:
        self._js, self.fail = js, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._js, name)

    async def subscribe(self, *args: Any, **kwargs: Any) -> Any:
        if self.fail:
            self.fail -= 1
            raise nats.errors.TimeoutError
        return await self._js.subscribe(*args, **kwargs)


async def test_a_failed_subscribe_on_resync_is_retried(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    async with log_writer(nats_server) as js:
        events = list(history(40, n_memories=10, seed=3))
        last = await publish(js, iter(events[:20]))
        flaky = FlakyJS(js)
        sink = Sink()
        f = LogFollower(flaky, sink)  # type: ignore[arg-type]
        await f.start()
        try:
            assert await f.wait_for(last, 10)
            flaky.fail = 2  # the API does not answer twice...
            f._resync_from = f._last_seen + 1  # ...when the follower asks to be delivered again (as _check_tail does)
            f._wake.set()
            last = await publish(js, iter(events[20:]))  # the log goes on
            assert await f.wait_for(last, 20), f"stopped at {f.applied}; loop ended: {f._task and f._task.done()}"
            assert sink.seqs == list(range(1, 41))  # each event once, in order
            assert f._task is not None and not f._task.done()
        finally:
            await f.stop()
