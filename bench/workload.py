"""Shared workload pieces: reproducible memory texts, pre-encoded log messages, and the gateway's event log
and query client with their time added up (bench-side subclasses; the core code is untouched).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

from mneme.eventlog import EventLog
from services.gateway.queries import QueryClient

_WORDS = (
    "agent memory project decision database schema latency index query cache user prefers dark mode "
    "deploy friday never release branch main review tests flaky retry timeout network gateway projector "
    "stream sequence event log replay snapshot vector search embedding model token budget context window "
    "meeting notes customer asked about pricing tier enterprise invoice quarterly report revenue forecast "
    "python rust typescript golang async await thread lock mutex channel queue worker pool backpressure "
    "kubernetes container image registry secret config environment staging production rollback incident "
    "postmortem root cause alert pager oncall runbook dashboard metric trace span sampling budget error "
    "the a an of to in on for with by from about after before during while because so but and or not "
    "always usually sometimes rarely important remember note that this should must could would might"
).split()


class Corpus:
    """Varied, reproducible memory texts of roughly 150-400 characters."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def text(self, i: int) -> str:
        words = self.rng.choices(_WORDS, k=self.rng.randint(25, 60))
        return f"Note {i}: " + " ".join(words) + "."

    def texts(self, n: int, start: int = 0) -> list[str]:
        return [self.text(start + i) for i in range(n)]


@dataclass(frozen=True, slots=True)
class PreEncoded:
    subject: str
    data: bytes
    memory_id: str
    msg_id: str


class TimedEventLog(EventLog):
    """EventLog that also adds up the time spent in append (the JetStream publish round trip)."""

    def __init__(self, *a: Any, **kw: Any):
        super().__init__(*a, **kw)
        self.append_s = 0.0
        self.appends = 0
        self.conflicts = 0

    async def append(self, *a: Any, **kw: Any) -> tuple[int, bool]:
        t = time.perf_counter()
        try:
            return await super().append(*a, **kw)
        except Exception as exc:
            if type(exc).__name__ == "WrongLastSequence":
                self.conflicts += 1
            raise
        finally:
            self.append_s += time.perf_counter() - t
            self.appends += 1

    def reset(self) -> None:
        self.append_s, self.appends, self.conflicts = 0.0, 0, 0


class TimedQueryClient(QueryClient):
    def __init__(self, *a: Any, **kw: Any):
        super().__init__(*a, **kw)
        self.ask_s = 0.0
        self.asks = 0

    async def ask(self, query: Any, *, wait_model: bool = True) -> Any:
        t = time.perf_counter()
        try:
            return await super().ask(query, wait_model=wait_model)
        finally:
            self.ask_s += time.perf_counter() - t
            self.asks += 1

    def reset(self) -> None:
        self.ask_s, self.asks = 0.0, 0
