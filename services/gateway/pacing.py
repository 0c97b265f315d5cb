"""Back-pressure from the vector index to the write path (`mneme serve`).

On two cores the model embeds ~130-190 memory texts a second while memory_add can be acknowledged faster,
so under sustained writes the index fell behind without bound: a semantic search after a write waited
seconds, then answered INDEXING. A write that brings a text to embed therefore waits, before it is
appended, while the local index has more than `backlog_max` texts pending, for at most `max_wait`
seconds; then it goes on regardless (a write is never refused for this). Writes then run at the pace the
index can keep, and the index stays within about a second of them (issue 11's "the index keeps up").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

Backlog = Callable[[], int]  # texts the index has yet to embed (0: nothing to pace against)


class IndexPacer:
    def __init__(self, backlog: Backlog, *, backlog_max: int = 16, max_wait: float = 2.0, poll: float = 0.005):
        self.backlog = backlog
        self.backlog_max = backlog_max
        self.max_wait = max_wait
        self.poll = poll
        self.paced = 0  # writes that waited
        self.waited_s = 0.0  # seconds they waited, in all

    async def pace(self) -> None:
        """Return once the backlog is at most `backlog_max` texts, or after `max_wait` seconds."""
        if self.backlog_max <= 0 or self.backlog() <= self.backlog_max:
            return
        t0 = time.monotonic()
        deadline = t0 + self.max_wait
        while self.backlog() > self.backlog_max and time.monotonic() < deadline:
            await asyncio.sleep(self.poll)
        self.paced += 1
        self.waited_s += time.monotonic() - t0
