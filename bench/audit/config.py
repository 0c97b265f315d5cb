"""bench.audit's settings (full and quick) and constants."""

from __future__ import annotations

from dataclasses import dataclass

from mneme.app.settings import AuditorSettings

NS = "default"
TAGS = ("bench", "audit")
LAG_P99_TARGET_MS = 200.0
TRAIL_FILE = AuditorSettings().db_name
SLICES = 4  # lag p99 is also given per quarter of the window, to show drift and noise


@dataclass(frozen=True)
class Config:
    rate: float  # writes/s, paced
    warmup_s: float
    paced_s: float
    path_every: int  # every n-th write claims a store+path
    stores: int  # path writes spread over this many stores (each store is one expected-sequence guard)
    read_every: int  # a memory_get after every n-th write
    max_in_flight: int  # open loop: a write waiting on a lagging projector does not hold back the next
    backlog_events: int
    backlog_access: int
    rounds: int

    @staticmethod
    def full() -> Config:
        return Config(rate=1000, warmup_s=2, paced_s=20, path_every=10, stores=64, read_every=20, max_in_flight=2000,
                      backlog_events=100_000, backlog_access=10_000, rounds=3)  # fmt: skip

    @staticmethod
    def quick() -> Config:
        return Config(rate=1000, warmup_s=1, paced_s=5, path_every=10, stores=64, read_every=20, max_in_flight=2000,
                      backlog_events=20_000, backlog_access=2_000, rounds=2)  # fmt: skip
