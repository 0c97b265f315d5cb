"""A projector stops within a bounded time even with an embedding backlog: points whose vectors were not
computed stay pending, the saved position stays behind them, and the next start embeds them."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from mneme.embedded_nats import EmbeddedNats
from tests.harness import SlowEmbedder, model_of, open_vectors, shared_model, start_stack

pytestmark = pytest.mark.anyio


async def test_stop_does_not_wait_for_a_backlogs_embeddings(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    data = tmp_path / "d"
    data.mkdir()
    embedder = await asyncio.to_thread(SlowEmbedder, 0.01, held=True)  # 10 ms a text slower, held until released
    slow = await asyncio.to_thread(model_of, embedder)
    stack = await start_stack(data, nats_server, vectors=open_vectors(data, slow))
    n = 1200
    try:
        for i in range(n):
            await stack.call("memory_add", content=f"backlog memory number {i} about zebra {i * 7919 % 1000}")
        head = await stack.last_seq()
        assert stack.projector.vector_follower is not None
        assert stack.projector.vector_follower.committed < head  # the vectors are behind: the embedder is held
        embedder.release()  # 12 s of embedding left at 10 ms a text; stop must not wait for it
        await asyncio.sleep(0.5)
    finally:
        embedder.release()
        t0 = time.monotonic()
        await stack.close()
        took = time.monotonic() - t0
    assert took < 8, f"stop waited {took:.1f} s for embeddings"  # a chunk of 256 is 2.6 s at this rate

    # the next start, with the model at full speed, embeds what was left: every memory is found by meaning
    assert await asyncio.to_thread(shared_model().wait, 60)
    again = await start_stack(data, nats_server, vectors=open_vectors(data, shared_model()))
    try:
        assert again.projector.vector_follower is not None and again.projector.gen.vectors is not None
        assert await again.projector.vector_follower.wait_for(head, 120, committed=True)
        deadline = time.monotonic() + 60
        while again.projector.gen.vectors.pending_dense and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert again.projector.gen.vectors.pending_dense == 0
        found = await again.call(
            "memory_search", query=f"backlog memory number {n - 1} about zebra", limit=5, threshold=0
        )
        assert any(r["content"].startswith(f"backlog memory number {n - 1} ") for r in found["results"]), found
    finally:
        await again.close()
