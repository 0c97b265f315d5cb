"""A cold start serves rows first: a new replica answers get and list as soon as its rows are folded, while
its search index is still folding the log it found; a search meanwhile answers INDEXING (stage "folding")
with progress after at most wait_timeout, and answers once the index has caught up. The real model and
Qdrant Edge; the vector index's commits are held behind a gate the test opens."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from pathlib import Path

import pytest

from mneme.embed_cache import EmbeddingCache
from mneme.embedded_nats import EmbeddedNats
from services.projector.vector_index import EdgeIndex
from services.projector.vector_view import VectorView
from tests.harness import ToolFailure, shared_model, start_stack

pytestmark = pytest.mark.anyio


class HeldCommits(VectorView):
    """A vector view whose commits wait for a gate (they run on a worker thread: the rows go on)."""

    gate: threading.Event

    def commit(self) -> int:
        assert self.gate.wait(60), "the test never opened the gate"
        return super().commit()


async def test_a_new_replica_serves_rows_while_its_search_index_folds(tmp_path: Path, nats_server: EmbeddedNats
                                                                      ) -> None:  # fmt: skip
    first = await start_stack(tmp_path / "first", nats_server)
    try:
        ids = [(await first.call("memory_add", content=f"Note {i}: the harbour crane lifts container {i}"))["id"]
               for i in range(30)]  # fmt: skip
    finally:
        await first.close()

    model = shared_model()
    replica = tmp_path / "replica"
    replica.mkdir()
    held = HeldCommits(EdgeIndex(replica / f"vectors-{model.name}", model.dim or 384), model,
                       EmbeddingCache(replica / "embeddings.sqlite"), background=True)  # fmt: skip
    held.gate = threading.Event()
    stack = await start_stack(replica, nats_server, vectors=held)
    try:
        stack.projector.tuning = dataclasses.replace(stack.projector.tuning, wait_timeout=0.5)
        target = stack.projector.start_target
        assert target >= 30
        # the rows answer while not one point of the search index is written
        assert (await stack.call("memory_get", id=ids[4]))["content"].startswith("Note 4:")
        listed = await stack.call("memory_list", limit=50)
        assert {r["id"] for r in listed["results"]} >= set(ids)
        assert held.committed < target
        t0 = time.monotonic()
        with pytest.raises(ToolFailure) as err:
            await stack.call("memory_search", mode="keyword", query="harbour crane container 7")
        assert time.monotonic() - t0 < 3  # at most wait_timeout, then a clear answer
        failure = err.value
        assert failure.code == "INDEXING", failure.error
        details = failure.error["details"]
        assert details["stage"] == "folding" and details["total"] == target
        assert 0 <= details["done"] < target and details["pending"] == target - details["done"]
        assert {"events_per_s", "eta_s"} <= set(details)
        assert "memory_get" in failure.error["message"]

        held.gate.set()
        for _ in range(200):
            if held.committed >= target:
                break
            await asyncio.sleep(0.05)
        hits = await stack.call("memory_search", mode="keyword", query="harbour crane container 7")
        assert ids[7] in [r["id"] for r in hits["results"]]
    finally:
        held.gate.set()
        await stack.close()
