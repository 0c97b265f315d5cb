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
from typing import Protocol

Backlog = Callable[[], int]  # texts the index has yet to embed (0: nothing to pace against)


class LocalIndex(Protocol):  # the projector in this process (services/projector/service.py)
    def index_backlog(self) -> int: ...

    def index_nudge(self) -> None: ...


class IndexPacer:
    def __init__(
        self,
        backlog: Backlog,
        *,
        nudge: Callable[[], None] | None = None,
        backlog_max: int = 16,
        max_wait: float = 2.0,
        poll: float = 0.005,
    ):
        """`nudge`: called when a write starts to wait (the projector commits what it holds at once)."""
        self.backlog = backlog
        self.nudge = nudge
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
        if self.nudge is not None:
            self.nudge()
        while self.backlog() > self.backlog_max and time.monotonic() < deadline:
            await asyncio.sleep(self.poll)
        self.paced += 1
        self.waited_s += time.monotonic() - t0
