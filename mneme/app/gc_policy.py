"""The garbage collector's settings for a long-running mneme process.

A fold allocates a few container objects per event (the decoded envelope, a state, row tuples), and CPython's
default thresholds (700, 10, 10) start a young collection every 700 of them and a full one, which walks
every live object (the imported modules, the caches of known states and recent versions, the staged
overlay), every 70,000. Refcounting frees nearly all of that garbage anyway: the folds build no cycles.
Measured on the 100,000-event log of bench.replay (a fresh DuckDB, batches of 20,000, 2-core Xeon):
the rows' fold in-process 48.9 -> 40.0 us an event, the stage step 20.5 -> 14.3; `replay()` DuckDB-only
9,865-12,513 -> 13,971-14,636 events/s. So a process freezes what it holds after its imports (they are
never garbage; `gc.freeze` moves them out of every collection) and collects the young generation every
10,000 allocations, a full collection after 400 young ones (cycles are still collected, a little later).
"""

from __future__ import annotations

import gc

THRESHOLDS = (10_000, 20, 20)


def tune() -> None:
    """Call once at a process's start, after its heavy imports (the CLI does, before running a command)."""
    gc.freeze()  # (no gc.collect() first: after `mneme serve`'s imports it took 52 ms and freed 23 objects)
    gc.set_threshold(*THRESHOLDS)
