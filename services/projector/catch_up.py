"""Waiting for a projector to catch up with the log: a rebuild, a replay or a benchmark folds the log as it
stands (or up to a target) before it goes on, reporting progress meanwhile; a fold that failed, or positions
that stopped moving (mneme/catch_up.py's StallWatch), end the wait at once instead of letting it hang.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from nats.js import JetStreamContext

from mneme.catch_up import StallWatch
from mneme.follow import LogFollower
from schemas import subjects as S
from services.projector.generation import Generation


class CatchingUp(Protocol):
    """What waiting needs of the projector (services/projector/service.py's Projector)."""

    js: JetStreamContext
    gen: Generation

    @property
    def follower(self) -> LogFollower: ...

    @property
    def vector_follower(self) -> LogFollower | None: ...

    @property
    def applied(self) -> int: ...


async def catch_up(
    projector: CatchingUp,
    *,
    progress: Callable[[int, int, float], None] | None = None,
    target: int | None = None,
    stall_after: float | None = None,
) -> int:
    """Wait until the projector has applied the log as it stands now (or up to `target`); report progress.

    A fold that failed ends the wait at once; with `stall_after`, so do positions that have not moved for that
    many seconds (CatchUpStalled, with the followers' reasons)."""
    if target is None:
        target = (await projector.js.stream_info(S.EVENTS_STREAM)).state.last_seq
    start = time.monotonic()
    followers = [f for f in (projector.follower, projector.vector_follower) if f is not None]
    watch = StallWatch(followers, stall_after)
    while not await projector.gen.caught_up(target, 0.5):
        if progress:
            progress(min(f.applied for f in followers), target, time.monotonic() - start)
        watch.check(target)
    if progress:
        progress(projector.applied, target, time.monotonic() - start)
    return target
