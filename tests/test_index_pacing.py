"""Writes are paced by the vector index's backlog (`mneme serve`): under sustained writes the index stays
within about a second of them instead of falling behind without bound (services/gateway/pacing.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np
import pytest

from mneme.app.runtime import gateway_figures
from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from services.gateway.pacing import IndexPacer
from tests.harness import Gated, SlowEmbedder, Stack, model_of, open_vectors, start_stack

pytestmark = pytest.mark.anyio


# -- the pacer alone --------------------------------------------------------------------------------------


async def test_a_small_backlog_does_not_wait() -> None:
    pacer = IndexPacer(lambda: 16, backlog_max=16, max_wait=5.0)
    t0 = time.monotonic()
    await pacer.pace()
    assert time.monotonic() - t0 < 0.05 and pacer.paced == 0


async def test_a_write_waits_until_the_backlog_drains() -> None:
    backlog = [100]
    pacer = IndexPacer(lambda: backlog[0], backlog_max=16, max_wait=5.0)

    async def drain() -> None:
        await asyncio.sleep(0.2)
        backlog[0] = 10

    task = asyncio.create_task(drain())
    t0 = time.monotonic()
    await pacer.pace()
    took = time.monotonic() - t0
    await task
    assert 0.18 <= took < 2.0 and pacer.paced == 1


async def test_a_waiting_write_nudges_the_index_once() -> None:
    backlog, nudges = [100], []

    def nudge() -> None:  # the projector commits what its vector follower holds: here, the backlog drains
        nudges.append(1)
        backlog[0] = 0

    pacer = IndexPacer(lambda: backlog[0], nudge=nudge, backlog_max=16, max_wait=5.0)
    t0 = time.monotonic()
    await pacer.pace()
    assert time.monotonic() - t0 < 0.5 and nudges == [1] and pacer.paced == 1
    await pacer.pace()  # no wait, no nudge
    assert nudges == [1] and pacer.paced == 1


async def test_the_wait_is_bounded_and_zero_turns_it_off() -> None:
    pacer = IndexPacer(lambda: 10_000, backlog_max=16, max_wait=0.2)
    t0 = time.monotonic()
    await pacer.pace()  # a backlog that never drains (a stuck model): the write goes on after max_wait
    assert 0.18 <= time.monotonic() - t0 < 1.5 and pacer.paced == 1
    off = IndexPacer(lambda: 10_000, backlog_max=0, max_wait=5.0)
    t0 = time.monotonic()
    await off.pace()
    assert time.monotonic() - t0 < 0.05 and off.paced == 0


# -- the whole stack, with a model slower than the writes --------------------------------------------------


async def burst(stack: Stack, n: int) -> tuple[float, int]:
    """n memory_add one after the other; returns the seconds until the vector index had embedded them all
    after the last was acknowledged, and the most texts it held unembedded meanwhile (sampled every 5 ms)."""
    vectors, follower = stack.projector.gen.vectors, stack.projector.vector_follower
    assert vectors is not None and follower is not None
    most = 0

    async def sample() -> None:
        nonlocal most
        while True:
            most = max(most, vectors.pending_dense + max(0, follower.received - vectors.committed))
            await asyncio.sleep(0.005)

    sampler = asyncio.create_task(sample())
    for i in range(n):
        await stack.call("memory_add", content=f"paced memory {i}: the cyclist {i * 7919 % 1000} likes route {i % 17}")
    head = await stack.last_seq()
    acked = time.monotonic()
    while (follower.committed < head or vectors.pending_dense) and time.monotonic() - acked < 60:
        await asyncio.sleep(0.02)
    sampler.cancel()
    return time.monotonic() - acked, most


@pytest.mark.parametrize("backlog_max", [8, 0])
async def test_sustained_writes_keep_the_index_within_a_second(
    tmp_path: Path, nats_server: EmbeddedNats, backlog_max: int
) -> None:
    data = tmp_path / "d"
    data.mkdir()
    slow = await asyncio.to_thread(model_of, SlowEmbedder(0.02))  # 20 ms a text: slower than the writes
    gs = GatewaySettings(index_backlog_max=backlog_max)
    stack = await start_stack(data, nats_server, gs, vectors=open_vectors(data, slow), local=True, paced=True)
    try:
        lag, most = await burst(stack, 300)
        pacer = stack.gateway.commands.pacer
        if backlog_max:
            assert pacer is not None and pacer.paced > 0  # writes waited for the index
            assert gateway_figures(stack.gateway)["gateway"]["paced_writes"] == pacer.paced  # in mneme status
            # the chunk being embedded, at most backlog_max behind it, and a write in flight: events the
            # vector follower had not committed yet count too (counting only committed texts let ~100
            # writes through during one commit linger, and a slow machine then saw the index 2.8 s behind)
            assert most <= 3 * backlog_max, f"the index held {most} texts unembedded"
            assert lag < 2.0, f"the index was {lag:.1f} s behind the last write"
        else:  # the same burst unpaced leaves the index seconds behind (what pacing prevents)
            assert pacer is None
            assert lag > 2.0, f"unpaced, the index was only {lag:.1f} s behind: the model is not slower here"
    finally:
        await stack.close()


# -- when there is nothing to pace against -----------------------------------------------------------------


class Failing(SlowEmbedder):
    """The real model's shape; every call but the warm-up fails (a broken model: the filler retries)."""

    def embed(self, texts: list[str]) -> np.ndarray:
        if texts == ["warm up"]:
            return self.real.embed(texts)
        raise RuntimeError("the model is broken")


async def timed_add(stack: Stack, content: str) -> float:
    t0 = time.monotonic()
    await stack.call("memory_add", content=content)
    return time.monotonic() - t0


async def test_a_failing_model_does_not_slow_the_writes(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    data = tmp_path / "d"
    data.mkdir()
    broken = await asyncio.to_thread(model_of, Failing(0.0))
    gs = GatewaySettings(index_backlog_max=4, index_backlog_wait=2.0)
    stack = await start_stack(data, nats_server, gs, vectors=open_vectors(data, broken), local=True, paced=True)
    try:
        vectors = stack.projector.gen.vectors
        assert vectors is not None
        for i in range(10):
            await stack.call("memory_add", content=f"unembeddable memory {i} about the orchard")
        for _ in range(200):  # the filler's first model call fails
            if vectors.fill_failing and vectors.pending_dense > 4:
                break
            await asyncio.sleep(0.05)
        assert vectors.fill_failing and vectors.pending_dense > 4
        assert stack.projector.pace.index_backlog() == 0  # nothing to pace against
        took = [await timed_add(stack, f"another memory {i} about the orchard") for i in range(5)]
        assert max(took) < 1.0, f"writes waited for a broken model: {took}"
    finally:
        await stack.close()


async def test_a_cold_start_does_not_slow_the_writes(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    first = await start_stack(tmp_path / "first", nats_server, vectors=True)
    try:
        for i in range(40):
            await first.call("memory_add", content=f"Fact {i}: the lighthouse keeper logs storm {i}")
    finally:
        await first.close()
    # a new replica: the whole log to embed, a model that embeds only when the test says so
    gated = Gated()
    handle = await asyncio.to_thread(model_of, gated)
    data = tmp_path / "replica"
    data.mkdir()
    gs = GatewaySettings(index_backlog_max=4, index_backlog_wait=2.0)
    stack = await start_stack(data, nats_server, gs, vectors=open_vectors(data, handle), local=True, paced=True)
    try:
        vectors = stack.projector.gen.vectors
        assert vectors is not None
        for _ in range(200):  # the log found at start is folded and waits for its dense vectors
            if vectors.pending_dense >= 40:
                break
            await asyncio.sleep(0.05)
        assert vectors.pending_dense >= 40 and vectors.dense_applied < stack.projector.start_target
        assert stack.projector.pace.index_backlog() == 0  # a cold start answers INDEXING; it does not slow writes
        took = [await timed_add(stack, f"a new memory {i} about the harbour") for i in range(5)]
        assert max(took) < 1.0, f"writes waited for a cold start's embedding: {took}"
        pacer = stack.gateway.commands.pacer
        assert pacer is not None and pacer.paced == 0
    finally:
        gated.gate.set()
        await stack.close()
