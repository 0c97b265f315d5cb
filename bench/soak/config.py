"""The soak's settings and the samples taken beside the load; small helpers every part shares."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bench.common import cpu_seconds, system_cpu_seconds
from bench.soak.memory import at, detail, signal_roots
from bench.soak.targets import Target, rss_mb


@dataclass
class Config:
    duration: float = 600.0  # seconds of measured load, after the warm-up
    clients: int = 8
    seed: int = 1
    cluster: bool = False
    warmup: float | None = None  # default: 10% of the duration, 3-30 s
    period: float = 1.0  # seconds between samples (lag, probes, RSS)
    floor_s: float = 3.0  # seconds per floor (0: no floors)
    reindex_every: float = 60.0  # client 0 changes one file of the code project and re-indexes it
    keep: bool = False
    steady: int = 0  # > 0: fill to this many live memories, then pair each add with a delete of an older one
    reads_only: bool = False  # after the warm-up, only calls that write nothing (and no probes)
    detail_every: float = 30.0  # seconds between smaps_rollup / data-directory samples (and at every mark)
    signal_marks: bool = False  # SIGUSR1 to each started process at every mark (a diagnostic build's dump)

    @property
    def warm(self) -> float:
        return self.warmup if self.warmup is not None else min(30.0, max(3.0, self.duration * 0.1))


@dataclass
class Samples:
    t0: float
    lag: list[dict[str, Any]] = field(default_factory=list)
    visible_s: list[float] = field(default_factory=list)
    audited_s: list[float] = field(default_factory=list)
    rss: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    marks: dict[str, dict[str, float]] = field(default_factory=dict)
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)
    detail: dict[str, dict[str, Any]] = field(default_factory=dict)  # mark -> smaps_rollup and data parts
    series: list[dict[str, Any]] = field(default_factory=list)  # the same every `detail_every` seconds
    signal: bool = False

    def snapshot(self, target: Target) -> dict[str, float]:
        got = {name: rss_mb(pid) for name, pid in target.processes().items()}
        return {name: mb for name, mb in got.items() if mb is not None}

    def mark(self, target: Target, name: str) -> None:
        """RSS of every process, and CPU seconds so far (this process: the clients)."""
        self.marks[name] = self.snapshot(target)
        self.cpu[name] = {n: cpu_seconds(pid) for n, pid in target.processes().items()}
        self.cpu[name]["bench (the clients)"] = time.process_time()
        self.cpu[name]["machine (every process)"] = system_cpu_seconds()
        self.detail[name] = self.details(target)
        if self.signal:
            signal_roots(target.roots)

    def details(self, target: Target) -> dict[str, Any]:
        """smaps_rollup of every process, the data directories' parts, and the projection's memories and log
        head (the status sample nearest in time)."""
        t = time.perf_counter() - self.t0
        d = detail(target.processes(), target.extra.get("data", {}))
        return {"t": round(t, 1), "memories": at(self.lag, t, "memories"), "log_head": at(self.lag, t, "head"), **d}


def now() -> datetime:
    return datetime.now(UTC)


async def poll(what: str, attempt: Callable[[], Awaitable[bool]], timeout: float, step: float = 0.005) -> float:
    """Call `attempt` until it says True; the seconds it took (RuntimeError after `timeout`)."""
    t = time.perf_counter()
    while not await attempt():
        if time.perf_counter() - t > timeout:
            raise RuntimeError(f"{what} not within {timeout} s")
        await asyncio.sleep(step)
    return time.perf_counter() - t
