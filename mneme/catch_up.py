"""Telling a catch-up (a replay's, a rebuild's) that has stopped from one that is slow."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mneme.follow import LogFollower


class CatchUpStalled(Exception):
    """A catch-up (a replay's, a rebuild's) that cannot finish: a fold failed, or nothing moved for too long (a
    commit that keeps failing, delivery that stopped). Raised instead of waiting for ever."""


class StallWatch:
    """Tells when followers catching up have stopped: a fold failed, or no position (staged or committed) of
    any of them moved for `after` seconds. `check(target)` raises CatchUpStalled with their reasons."""

    def __init__(self, followers: list[LogFollower], after: float | None):
        self.followers, self.after = followers, after
        self._where: list[tuple[int, int]] = []
        self._moved = time.monotonic()

    def check(self, target: int) -> None:
        now = time.monotonic()
        where = [(f.staged, f.committed) for f in self.followers]
        if where != self._where:
            self._where, self._moved = where, now
        failed = any(f.fold_failed for f in self.followers)
        if not failed and (self.after is None or now - self._moved <= self.after):
            return
        at = min(f.committed for f in self.followers)
        why = "; ".join(f"{f.consumer or f.stream}: {f.stalled}" for f in self.followers if f.stalled)
        raise CatchUpStalled(
            f"folding stopped at sequence {at} of {target}"
            + ("" if failed else f" (nothing moved for {now - self._moved:.0f} s)")
            + f": {why or 'no events arrived'}"
        )


def fold_progress(stage: str, clock: tuple[float, int] | None, done: int, total: int) -> dict[str, Any]:
    """How far a follower is through the log found at start: `clock` is (when, position) it started at; the
    rate is what it has made since (none in its first half second), the eta the rest at that rate."""
    rate = 0.0
    if clock is not None:
        t0, c0 = clock
        elapsed = time.monotonic() - t0
        rate = (done - c0) / elapsed if elapsed > 0.5 and done > c0 else 0.0
    pending = max(0, total - done)
    return {
        "stage": stage,
        "done": done,
        "total": total,
        "pending": pending,
        "events_per_s": round(rate, 1),
        "eta_s": round(pending / rate, 1) if rate > 0 else None,
    }
