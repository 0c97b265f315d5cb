"""The one retry policy of the write sides (invariant 4): an append made with an aggregate's expected last
sequence that another writer beat is decided again from the newer state and appended again, after a short
random pause (jittered exponential, at most 50 ms), and refused as CONCURRENCY_CONFLICT after MAX_ATTEMPTS."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from mneme.errors import ConcurrencyConflict
from mneme.eventlog import WrongLastSequence

T = TypeVar("T")
MAX_ATTEMPTS = 25


def pause(n: int) -> float:
    """The pause before attempt n + 1."""
    return random.uniform(0, min(0.002 * 2**n, 0.05))


async def until_not_beaten(
    attempt: Callable[[int], Awaitable[T]], *, after: int = 0, attempts: int = MAX_ATTEMPTS, what: str = "it"
) -> T:
    """`attempt(seq)` until no other writer beats it: `seq` is `after` at first, then the last sequence the
    latest conflict named (the attempt reads the state at least that far, and decides again)."""
    for n in range(attempts):
        try:
            return await attempt(after)
        except WrongLastSequence as conflict:
            after = max(after, conflict.last_seq)
            if n < attempts - 1:
                await asyncio.sleep(pause(n))
    raise ConcurrencyConflict(f"gave up after {attempts} attempts: other writers keep changing {what}; retry")
