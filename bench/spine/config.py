"""bench.spine's settings (full and quick), its workload encoding, and the blocks its figures are made of."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bench.common import latency_summary, median, percentile, rnd
from bench.synthetic import envelope
from bench.workload import PreEncoded
from mneme.ids import memory_id_for, new_id
from schemas import subjects as S
from schemas.events import Actor, MemoryCreated, encode_envelope

NS = "default"  # the stdio gateway's default namespace, so in-process and stdio write alike
ACTOR = Actor(agent_id="bench", role="agent")
TAGS = ("bench", "spine")

TARGETS = {
    "b_vs_floor_awaited": 0.50,  # (b) adds without path >= 50% of awaited raw publishes
    "c_vs_noop": 0.60,  # (c) memory_add over stdio >= 60% of a no-op tool over stdio
    "d_p50_ms": 5.0,  # (d) add-then-get p50 < 5 ms, and every get finds its memory
}


@dataclass(frozen=True)
class Config:
    rounds: int
    floor_n: int  # per block: awaited raw publishes
    pipe_n: int  # per block: pipelined raw publishes
    add_n: int  # per block: domain adds without path
    path_n: int  # per block: domain adds with store+path
    mcp_n: int  # per block: stdio calls (no-op and memory_add)
    rw_inproc_n: int  # (d) in-process pairs
    rw_stdio_n: int  # (d) stdio pairs
    memories: int  # (e) memories loaded
    get_inproc_n: int
    get_stdio_n: int
    echo_n: int  # core NATS request/reply floor for the query path
    warmup: int
    lag_n: int = 1000  # index lag: memory_add flat out over stdio, then the last one searched semantically

    @staticmethod
    def full() -> Config:
        return Config(rounds=7, floor_n=1500, pipe_n=20000, add_n=1500, path_n=300, mcp_n=600, rw_inproc_n=2000,
                      rw_stdio_n=1000, memories=100_000, get_inproc_n=5000, get_stdio_n=2000, echo_n=3000, warmup=200,
                      lag_n=10_000)  # fmt: skip

    @staticmethod
    def quick() -> Config:
        return Config(rounds=3, floor_n=500, pipe_n=5000, add_n=500, path_n=100, mcp_n=200, rw_inproc_n=500,
                      rw_stdio_n=300, memories=10_000, get_inproc_n=1000, get_stdio_n=500, echo_n=1000,
                      warmup=100)  # fmt: skip


def pre_encode(texts: list[str], prefix: str, *, store: str | None = None) -> list[PreEncoded]:
    """memory_created envelopes exactly as the gateway would write them, encoded ahead of timing."""
    now = datetime.now(UTC)
    out = []
    for i, text in enumerate(texts):
        request_id = f"{prefix}-{i}"
        mid = memory_id_for(NS, request_id)
        ev = MemoryCreated(memory_id=mid, version=1, store=store, content=text, kind="note", tags=TAGS)
        env = envelope(NS, mid, ev, (new_id(), request_id), now, ACTOR)
        out.append(PreEncoded(S.memory_subject(NS, store, mid), encode_envelope(env), mid, f"{request_id}:{mid}"))
    return out


@dataclass
class Series:
    """Blocks of one measurement: rate per block, latencies pooled, CPU seconds per process."""

    name: str
    rates: list[float] = field(default_factory=list)
    lat: list[float] = field(default_factory=list)
    ops: int = 0
    cpu: dict[str, float] = field(default_factory=dict)
    extra: dict[str, float] = field(default_factory=dict)
    failures: int = 0

    def add(self, n: int, seconds: float, lat: list[float], cpu: dict[str, float] | None = None) -> None:
        self.rates.append(n / seconds)
        self.lat.extend(lat)
        self.ops += n
        for k, v in (cpu or {}).items():
            self.cpu[k] = self.cpu.get(k, 0.0) + v

    @property
    def rate(self) -> float:
        return median(self.rates)

    def cpu_ms_per_op(self) -> dict[str, float | None]:
        return {k: rnd(v * 1000 / self.ops, 3) if self.ops else None for k, v in self.cpu.items()}

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rate_per_s": rnd(self.rate, 1),
            "rates_per_block": [rnd(r, 1) for r in self.rates],
            **latency_summary(self.lat),
            "ops": self.ops,
            "cpu_ms_per_op": self.cpu_ms_per_op(),
        }
        if self.extra:
            out.update({k: rnd(v, 4) for k, v in self.extra.items()})
        if self.failures or self.name.startswith(("d_", "e_")):
            out["failures"] = self.failures
        return out


def paired_ratio(num: Series, den: Series) -> float | None:
    """Median over rounds of num/den in the same round: robust to drift in a noisy machine."""
    rs = [a / b for a, b in zip(num.rates, den.rates, strict=False) if b]
    return median(rs) if rs else None


def read_your_writes(
    name: str, pairs: list[tuple[float, float, bool]], seconds: float, cpu: dict[str, float]
) -> Series:
    """(d): add-then-get pairs as one series, each pair (add seconds, get seconds, found): the pairs' rate and
    latency, the add's and the get's percentiles, and the gets that did not find their memory."""
    d = Series(name)
    d.lat = [a + g for a, g, _ in pairs]
    d.failures = sum(1 for *_, found in pairs if not found)
    d.rates.append(len(pairs) / seconds)
    d.ops = len(pairs)
    d.cpu = cpu
    adds, gets = [a for a, _, _ in pairs], [g for _, g, _ in pairs]
    d.extra["add_p50_ms"] = percentile(adds, 50) * 1000
    d.extra["get_p50_ms"] = percentile(gets, 50) * 1000
    d.extra["get_p99_ms"] = percentile(gets, 99) * 1000
    return d


def call_args(tool: str, text: str) -> dict[str, Any]:
    return {"text": text} if tool == "noop" else {"content": text, "tags": list(TAGS)}
