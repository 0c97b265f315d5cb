"""A gateway in the projector's process (`mneme serve`) asks it without the NATS round trip: the same answers,
the same errors, the same bounds, and NATS whenever the projector does not serve queries."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mneme.app.compose import close_nats, connect
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

    monkeypatch.setattr("services.projector.answers.run_query", broken)
    listing = ListMemories(namespace="default", now=utc_now())
    e1, e2 = await error_of(remote, listing), await error_of(here, listing)
    assert e1 == e2 and e1["code"] == "INTERNAL" and "a bug" not in str(e1)  # no internals leak, either way

    lagging = GetMemory(namespace="default", now=utc_now(), min_seq=10**9, memory_id="0" * 32)
    local_stack.projector.tuning = dataclasses.replace(local_stack.projector.tuning, wait_timeout=0.2)
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


async def test_a_query_retrying_while_nobody_serves_is_answered_once_the_local_projector_serves(
    local_stack: Stack, nats_server: EmbeddedNats
) -> None:
    """`mneme serve` catching up: a get finds no projector on NATS (nobody serves yet) and retries; when the
    projector in this process starts serving, the retry asks it and answers at once, instead of queueing its
    next request behind the catch-up's deliveries (which once cost 1.4 s at 100,000 events)."""
    a = await local_stack.call("memory_add", content="answered here after the catch-up")
    q = GetMemory(namespace="default", now=utc_now(), min_seq=await local_stack.last_seq(), memory_id=a["id"])
    nobody = await connect(nats_server.url or "", "nobody-serves")  # a subject no projector answers on
    real = local_stack.projector.answer_here
    asked: list[float] = []
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    async def serves_after_half_a_second(query: Query) -> Any:
        asked.append(loop.time() - t0)
        return await real(query) if loop.time() - t0 >= 0.5 else None

    client = QueryClient(_Renamed(nobody), timeout=5, local=serves_after_half_a_second)  # type: ignore[arg-type]
    try:
        got = await client.ask(q)
    finally:
        await close_nats(nobody)
    assert got.item is not None and got.item.memory.content == "answered here after the catch-up"
    assert len(asked) >= 3 and asked[-1] >= 0.5  # asked again between the retries, answered by the last ask
    assert loop.time() - t0 < 2.0  # within a retry's delay (at most 0.25 s) of serving, not the 5 s timeout


async def test_unavailable_while_catching_up_carries_the_progress(nats_server: EmbeddedNats) -> None:
    nobody = await connect(nats_server.url or "", "nobody-serves")
    progress = {"stage": "catching_up", "done": 41_000, "total": 100_000, "pending": 59_000,
                "events_per_s": 9_800.0, "eta_s": 6.0}  # fmt: skip

    async def not_serving(query: Query) -> None:
        return None

    q = GetMemory(namespace="default", now=utc_now(), memory_id="0" * 32)
    try:
        plain = await error_of(QueryClient(nobody, timeout=0.3, local=not_serving), q)
        told = await error_of(
            QueryClient(nobody, timeout=0.3, local=not_serving, catching_up=lambda: dict(progress)), q
        )
        done = await error_of(QueryClient(nobody, timeout=0.3, local=not_serving, catching_up=lambda: None), q)
    finally:
        await close_nats(nobody)
    assert plain["code"] == told["code"] == done["code"] == "UNAVAILABLE"
    assert told["details"] == progress
    assert "41,000 of 100,000 events" in told["message"] and "about 6 s left" in told["message"]
    assert done["message"] == plain["message"] and not plain.get("details")


async def test_the_projector_reports_its_catch_up_until_it_serves(local_stack: Stack) -> None:
    p = local_stack.projector
    assert p.catch_up_progress() is None  # serving: nothing to report
    p.serving.clear()
    try:
        got = p.catch_up_progress()
        assert got is not None and got["stage"] == "catching_up"
        assert got["total"] == p.start_target and got["done"] == p.follower.committed
        assert got["pending"] == max(0, got["total"] - got["done"])
    finally:
        p.serving.set()


class _Renamed:
    """A NATS connection whose requests go to a subject nobody serves (the stack's projector answers the
    real one): what a gateway sees while no projector serves queries."""

    def __init__(self, nc: Any):
        self._nc = nc
        self.is_connected = True

    async def request(self, subject: str, data: bytes, **kw: Any) -> Any:
        return await self._nc.request("nobody." + subject, data, **kw)
