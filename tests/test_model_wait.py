"""A search by meaning that arrives while the embedding model still loads waits for it (issue 28, item 1).

Right after a start the model loads on a background thread (0.3-1 s here, longer on a loaded machine). A
semantic or hybrid search in that window used to be refused at once with EMBEDDING_MODEL_LOADING (memento's
EMBEDDING_ERROR, memory-mcp's "Embedding service not ready"): a client that starts a server per call got it
every time. Now the gateway asks again until the model is ready, for MNEME_GATEWAY_MODEL_WAIT seconds at most,
in every profile, and only then answers the contract's error with a retry hint.

Everything real: nats-server, DuckDB, Qdrant Edge, and the bundled model behind a gate that holds its load.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client, ClientSession
from mcp.client.stdio import stdio_client

from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from mneme.embedding import DEFAULT_MODEL, ModelHandle
from services.gateway.server import build_server
from tests.harness import Stack, ToolFailure, open_vectors, result_of, serve_params, shared_model, start_stack

pytestmark = pytest.mark.anyio


class GatedLoad:
    """A model whose load holds until `gate` opens: the real embedder then, as a slow start would give."""

    def __init__(self) -> None:
        self.gate = threading.Event()

    def __call__(self) -> object:
        assert self.gate.wait(60), "the test never let the model load"
        real = shared_model()
        assert real.wait(60), "the embedding model did not load"
        return real.get()


async def _stack(tmp_path: Path, nats: EmbeddedNats, model_wait: float) -> AsyncIterator[tuple[Stack, GatedLoad]]:
    load = GatedLoad()
    handle = ModelHandle(DEFAULT_MODEL, factory=load).start()
    vectors = open_vectors(tmp_path / "data", handle)
    stack = await start_stack(tmp_path / "data", nats, GatewaySettings(model_wait=model_wait), vectors=vectors)
    try:
        yield stack, load
    finally:
        load.gate.set()  # (the loading thread must end)
        await stack.close()


@pytest.fixture
async def loading(tmp_path: Path, nats_server: EmbeddedNats) -> AsyncIterator[tuple[Stack, GatedLoad]]:
    """A stack whose model loads once the test opens its gate; searches wait up to 20 s for it."""
    async for got in _stack(tmp_path, nats_server, model_wait=20.0):
        yield got


@pytest.fixture
async def never_loads(tmp_path: Path, nats_server: EmbeddedNats) -> AsyncIterator[tuple[Stack, GatedLoad]]:
    """The same, with a gate the test never opens and a wait of 0.6 s."""
    async for got in _stack(tmp_path, nats_server, model_wait=0.6):
        yield got


def _open_gate_after(load: GatedLoad, seconds: float) -> None:
    threading.Timer(seconds, load.gate.set).start()


async def test_semantic_and_hybrid_searches_wait_for_the_model(loading: tuple[Stack, GatedLoad]) -> None:
    stack, load = loading
    added = await stack.call("memory_add", content="The staging database runs PostgreSQL 16 on port 5433")
    vectors = stack.projector.gen.vectors
    assert vectors is not None and not vectors.model.ready
    _open_gate_after(load, 1.0)
    t0 = time.monotonic()
    got = await stack.call("memory_search", query="which postgres version is on staging", mode="semantic")
    waited = time.monotonic() - t0
    assert waited >= 0.9, "the model was ready before the search: the test proves nothing"
    assert [r["id"] for r in got["results"]][:1] == [added["id"]]
    hybrid = await stack.call("memory_search", query="staging database port", mode="hybrid")
    assert hybrid["results"][0]["id"] == added["id"]


@pytest.mark.parametrize(
    ("profile", "tool", "args"),
    [
        ("memento", "search_memories", {"query": "postgres on staging"}),
        ("memory-mcp", "search", {"query": "postgres on staging"}),
        ("memory-mcp", "recall", {"query": "postgres on staging"}),
    ],
)
async def test_every_profile_waits_for_the_model(
    loading: tuple[Stack, GatedLoad], profile: str, tool: str, args: dict[str, object]
) -> None:
    stack, load = loading
    _open_gate_after(load, 0.8)
    async with Client(build_server(stack.gateway, profile=profile)) as client:
        res = await client.call_tool(tool, args)
    assert not res.is_error, res.content


async def test_still_loading_after_the_wait_answers_with_a_retry_hint(never_loads: tuple[Stack, GatedLoad]) -> None:
    stack, _ = never_loads
    t0 = time.monotonic()
    with pytest.raises(ToolFailure) as err:
        await stack.call("memory_search", query="anything", mode="semantic")
    assert time.monotonic() - t0 >= 0.5, "refused before the wait ran out"
    e = err.value.error
    assert e["code"] == "EMBEDDING_MODEL_LOADING", e
    assert e["details"]["retry_after_s"] > 0 and "retry in" in e["message"], e
    # keyword search never needs the model, and does not wait for it
    t0 = time.monotonic()
    await stack.call("memory_search", query="anything", mode="keyword")
    assert time.monotonic() - t0 < 0.5


async def test_contract_errors_carry_the_retry_hint(never_loads: tuple[Stack, GatedLoad]) -> None:
    stack, _ = never_loads
    async with Client(build_server(stack.gateway, profile="memento")) as client:
        res = await client.call_tool("search_memories", {"query": "anything"})
    assert res.is_error
    e = json.loads(res.content[0].text)["error"]  # type: ignore[union-attr]
    assert e["code"] == "EMBEDDING_ERROR" and "retry in" in e["message"], e
    assert "keyword search" not in e["message"], e  # memento has none to point to
    async with Client(build_server(stack.gateway, profile="memory-mcp")) as client:
        t0 = time.monotonic()
        status = result_of(await client.call_tool("get_status", {}))
    assert status["embedding"]["status"] == "loading"
    assert time.monotonic() - t0 < 0.5  # a status probe says so at once, it does not wait


async def test_first_search_of_a_fresh_serve_is_answered(tmp_path: Path) -> None:
    """What a client that starts a server per call does (the MCP Inspector CLI): its first and only call is a
    search by meaning, made the moment the server answers."""
    async with stdio_client(serve_params(tmp_path / "data")) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        res = await s.call_tool("memory_search", {"query": "what do we know about the staging database"})
        assert not res.is_error, res.content
        assert result_of(res)["results"] == []
