"""A live projector embeds in the background: keyword search never waits for an embedding, semantic search
waits for the dense vectors it must see (or answers INDEXING with progress), and a cold start answers get
and keyword search while the log it found is still being embedded. The real model, held behind a gate the
test opens."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest

from mneme.embedded_nats import EmbeddedNats
from mneme.embedding import DEFAULT_MODEL, ModelHandle
from services.projector.vector_index import point_id
from tests.harness import Gated, Stack, ToolFailure, model_of, open_vectors, start_stack

pytestmark = pytest.mark.anyio


def gated_model() -> tuple[ModelHandle, Gated]:
    gated = Gated()
    return model_of(gated), gated


async def gated_stack(data_dir: Path, nats: EmbeddedNats) -> tuple[Stack, Gated]:
    handle, gated = gated_model()
    vectors = open_vectors(data_dir, handle)
    assert vectors.background
    stack = await start_stack(data_dir, nats, vectors=vectors)
    stack.projector.tuning = dataclasses.replace(
        stack.projector.tuning, wait_timeout=0.5
    )  # how long a semantic search waits for its dense vectors
    return stack, gated


async def failure(stack: Stack, tool: str, **args: Any) -> ToolFailure:
    with pytest.raises(ToolFailure) as err:
        await stack.call(tool, **args)
    return err.value


async def test_keyword_search_never_waits_for_an_embedding(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    stack, gated = await gated_stack(tmp_path / "d", nats_server)
    try:
        facts = [
            "The backups go to the Frankfurt bucket",
            "Carol reviews every database migration",
            "Deployments freeze on Fridays",
        ]
        ids = [(await stack.call("memory_add", content=f))["id"] for f in facts]
        # nothing is embedded yet, and keyword search finds the new memories at once
        found = await stack.call("memory_search", mode="keyword", query="Frankfurt backups bucket")
        assert [r["id"] for r in found["results"]][:1] == [ids[0]]
        assert (await stack.call("memory_get", id=ids[1]))["content"] == facts[1]
        # semantic search must see this gateway's writes: it waits, then says how far embedding is
        for mode in ("semantic", "hybrid"):
            err = await failure(stack, "memory_search", mode=mode, query="where are backups stored")
            assert err.code == "INDEXING", err.error
            assert err.error["details"]["pending"] == 3 and err.error["details"]["done"] == 0
            assert "keyword" in err.error["message"]
        vectors = stack.projector.vectors
        assert vectors is not None and vectors.dense_applied < vectors.committed
        gated.gate.set()
        got = await stack.call("memory_search", mode="semantic", query="where are backups stored")
        assert got["results"][0]["id"] == ids[0]
        assert vectors.embedded == 3 and vectors.progress()["pending"] == 0  # (the query is embedded too)
        assert vectors.dense_applied == vectors.committed
    finally:
        gated.gate.set()
        await stack.close()


async def test_a_cold_start_answers_get_and_keyword_while_semantic_says_indexing(
    tmp_path: Path,
    nats_server: EmbeddedNats,
) -> None:
    first = await start_stack(tmp_path / "first", nats_server, vectors=True)
    try:
        ids = [
            (await first.call("memory_add", content=f"Fact {i}: the lighthouse keeper logs storm {i}"))["id"]
            for i in range(40)
        ]
    finally:
        await first.close()
    # a new replica: no projections, the whole log to fold, a model that embeds only when the test says so
    stack, gated = await gated_stack(tmp_path / "replica", nats_server)
    try:
        assert (await stack.call("memory_get", id=ids[7]))["content"].startswith("Fact 7:")
        hits = await stack.call("memory_search", mode="keyword", query="lighthouse storm 12")
        assert ids[12] in [r["id"] for r in hits["results"]]
        t0 = asyncio.get_running_loop().time()
        err = await failure(stack, "memory_search", mode="semantic", query="who keeps the lighthouse")
        assert asyncio.get_running_loop().time() - t0 < 0.4  # at once: a cold start is not a wait
        assert err.code == "INDEXING"
        details = err.error["details"]
        assert details["total"] == 40 and details["pending"] == 40 and details["done"] == 0
        assert {"eta_s", "texts_per_s", "dense_applied_seq"} <= set(details)
        gated.gate.set()
        vectors = stack.projector.vectors
        assert vectors is not None
        for _ in range(200):
            if vectors.dense_applied >= stack.projector.start_target:
                break
            await asyncio.sleep(0.05)
        got = await stack.call("memory_search", mode="semantic", query="who keeps the lighthouse", limit=40)
        assert len(got["results"]) >= 10
        assert vectors.progress()["done"] == 40
    finally:
        gated.gate.set()
        await stack.close()


async def test_the_saved_position_never_passes_a_point_without_its_dense_vector(
    tmp_path: Path,
    nats_server: EmbeddedNats,
) -> None:
    stack, gated = await gated_stack(tmp_path / "d", nats_server)
    try:
        for i in range(5):
            await stack.call("memory_add", content=f"note {i} about the harbour")
        vectors = stack.projector.vectors
        assert vectors is not None
        for _ in range(100):  # the vector follower commits (sparse only: the model is held)
            if vectors.committed >= await stack.last_seq():
                break
            await asyncio.sleep(0.02)
        first_pending = vectors.dense_applied + 1
        assert vectors.save() < first_pending <= vectors.committed
        gated.gate.set()
        for _ in range(200):
            if not vectors.progress()["pending"]:
                break
            await asyncio.sleep(0.02)
        assert vectors.save() == vectors.committed
    finally:
        gated.gate.set()
        await stack.close()


async def test_points_a_stop_left_without_a_dense_vector_get_one_after_the_restart(
    tmp_path: Path,
    nats_server: EmbeddedNats,
) -> None:
    """A stop before the model loaded leaves points with their BM25 vector only, and the saved position before
    them. The restart folds those events again: a create whose point is already there is the same event, not a
    second create of its id, so its point is written again and embedded (it was skipped, and the memory never
    became searchable by meaning)."""
    loaded = threading.Event()
    real = Gated()  # (the real model, loaded once; its gate opened below, never waited on)
    real.gate.set()
    loading = ModelHandle(DEFAULT_MODEL, factory=lambda: (loaded.wait(120), real)[1]).start()
    data = tmp_path / "d"
    first = await start_stack(data, nats_server, vectors=open_vectors(data, loading))
    try:
        texts = ["the lighthouse keeper logs every storm", "Carol bakes sourdough on Sundays"]
        ids = [(await first.call("memory_add", content=t))["id"] for t in texts]
        await first.call("memory_update", id=ids[1], content="Carol bakes rye bread on Sundays")
        vectors = first.projector.vectors
        assert vectors is not None and not loading.ready
        head = await first.last_seq()
        for _ in range(200):
            if vectors.committed >= head:
                break
            await asyncio.sleep(0.02)
        assert vectors.committed == head and vectors.save() == 0  # nothing dense: the position stays before
    finally:
        await first.close()
        loaded.set()
    second = await start_stack(data, nats_server, vectors=True)
    try:
        vectors = second.projector.vectors
        assert vectors is not None
        for _ in range(600):
            if vectors.dense_applied >= head:
                break
            await asyncio.sleep(0.05)
        assert vectors.dense_applied >= head, vectors.progress()
        points = vectors.index.retrieve([point_id(ids[0], 1), point_id(ids[1], 2)], with_dense=True)
        assert sorted(points) == sorted([point_id(ids[0], 1), point_id(ids[1], 2)])
        assert all(p.dense is not None for p in points.values()), "a point without its dense vector"
        for text, mid in (("who records the storms at the lighthouse", ids[0]), ("what bread does Carol bake", ids[1])):
            found = await second.call("memory_search", mode="semantic", query=text)
            assert found["results"] and found["results"][0]["id"] == mid, found
    finally:
        await second.close()
