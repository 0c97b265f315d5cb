"""Telling a catch-up (a replay's, a rebuild's) that has stopped from one that is slow."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

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
