"""A gateway in the projector's process (`mneme serve`) asks it without the NATS round trip: the same answers,
the same errors, the same bounds, and NATS whenever the projector does not serve queries."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mneme.embedded_nats import EmbeddedNats
from mneme.errors import MnemeError, ProjectionLag
from schemas.queries import GetMemory, ListMemories, MemoryStats, PathOwner, Query, SearchMemories
from services.gateway.commands import utc_now
from services.gateway.queries import QueryClient
from tests.harness import Stack, start_stack

pytestmark = pytest.mark.anyio


@pytest.fixture
async def local_stack(tmp_path: Path, nats_server: EmbeddedNats) -> AsyncIterator[Stack]:
    s = await start_stack(tmp_path / "data", nats_server, local=True)
    yield s
    await s.close()


def clients(stack: Stack) -> tuple[QueryClient, QueryClient]:
    return QueryClient(stack.nc, timeout=5), QueryClient(stack.nc, timeout=5, local=stack.projector.answer_here)


async def both(stack: Stack, q: Query) -> tuple[Any, Any]:
    remote, here = clients(stack)
    return await remote.ask(q), await here.ask(q)


async def error_of(client: QueryClient, q: Query) -> dict[str, Any]:
    with pytest.raises(MnemeError) as e:
        await client.ask(q)
    return e.value.to_dict()


async def test_the_tools_run_on_the_local_path_with_read_your_writes(local_stack: Stack) -> None:
    local = local_stack.gateway.queries.local
    assert local is not None
    answered: list[str] = []

    async def counted(query: Query) -> Any:
        reply = await local(query)
        answered.append(query.OPERATION if reply is not None else "over NATS")
        return reply

    local_stack.gateway.queries.local = counted
    a = await local_stack.call("memory_add", content="the deploy runs on Fridays", tags=["ops"])
    got = await local_stack.call("memory_get", id=a["id"])  # no wait: answered from the staged overlay
    assert got["content"] == "the deploy runs on Fridays"
    await local_stack.call("memory_update", id=a["id"], content="the deploy runs on Thursdays")
    assert (await local_stack.call("memory_get", id=a["id"]))["content"] == "the deploy runs on Thursdays"
    listed = await local_stack.call("memory_list", tags=["ops"])
    assert [m["id"] for m in listed["results"]] == [a["id"]]
    assert "memory.get" in answered and "memory.list" in answered and "over NATS" not in answered


async def test_local_and_nats_answers_agree(local_stack: Stack) -> None:
    ids = [(await local_stack.call("memory_add", content=f"note {i}", tags=["t"]))["id"] for i in range(5)]
    seq = await local_stack.last_seq()
    now = utc_now()
    for q in (
        GetMemory(namespace="default", now=now, min_seq=seq, memory_id=ids[2], history=3),
        GetMemory(namespace="default", now=now, min_seq=seq, memory_id="0" * 32),
        GetMemory(namespace="elsewhere", now=now, min_seq=seq, memory_id=ids[0]),
        ListMemories(namespace="default", now=now, min_seq=seq, tags=("t",), limit=3),
        MemoryStats(namespace="default", now=now, min_seq=seq),
        PathOwner(namespace="default", now=now, min_seq=seq, store="s", path="a/b"),
    ):
        remote, here = await both(local_stack, q)
        assert remote == here, q


async def test_local_errors_are_the_query_planes(local_stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    remote, here = clients(local_stack)
    no_vectors = SearchMemories(namespace="default", now=utc_now(), mode="keyword", query="x")
    assert await error_of(remote, no_vectors) == await error_of(here, no_vectors)  # this stack keeps no vectors

    def broken(*_: Any) -> Any:
        raise RuntimeError("a bug in a query")

    monkeypatch.setattr("services.projector.service.run_query", broken)
    listing = ListMemories(namespace="default", now=utc_now())
    e1, e2 = await error_of(remote, listing), await error_of(here, listing)
    assert e1 == e2 and e1["code"] == "INTERNAL" and "a bug" not in str(e1)  # no internals leak, either way

    lagging = GetMemory(namespace="default", now=utc_now(), min_seq=10**9, memory_id="0" * 32)
    local_stack.projector.wait_timeout = 0.2
    e1, e2 = await error_of(remote, lagging), await error_of(here, lagging)
    assert e1 == e2 and e1["code"] == "PROJECTION_LAG"


async def test_nats_answers_while_the_local_projector_does_not_serve(local_stack: Stack) -> None:
    a = await local_stack.call("memory_add", content="asked over NATS")
    q = GetMemory(namespace="default", now=utc_now(), min_seq=await local_stack.last_seq(), memory_id=a["id"])
    asked: list[Query] = []

    async def not_serving(query: Query) -> None:
        asked.append(query)
        return

    got = await QueryClient(local_stack.nc, timeout=5, local=not_serving).ask(q)
    assert asked == [q] and got.item is not None and got.item.memory.content == "asked over NATS"


async def test_a_local_answer_is_bounded_by_the_query_timeout(local_stack: Stack) -> None:
    async def stuck(query: Query) -> None:
        await asyncio.sleep(60)

    client = QueryClient(local_stack.nc, timeout=0.3, local=stuck)
    t0 = asyncio.get_running_loop().time()
    with pytest.raises(ProjectionLag):
        await client.ask(ListMemories(namespace="default", now=utc_now()))
    assert asyncio.get_running_loop().time() - t0 < 2
