"""No lost updates across gateways (invariant 4) and idempotent writes (invariant 6).

Two real `mneme gateway` processes share one nats-server; the projector runs in
this process (the `stack` fixture), so its DuckDB tables can be inspected.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import AsyncExitStack
from typing import Any

import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client

from tests.harness import Stack, ToolFailure, gateway_params, result_of

pytestmark = pytest.mark.anyio


class Remote:
    def __init__(self, s: ClientSession):
        self.s = s

    async def __call__(self, tool: str, **args: Any) -> dict[str, Any]:
        return result_of(await self.s.call_tool(tool, args))


async def two_gateways(
    stack: Stack, es: AsyncExitStack, agents: tuple[str, str] = ("gw-a", "gw-b")
) -> tuple[Remote, Remote]:
    out = []
    for name in agents:
        r, w = await es.enter_async_context(
            stdio_client(gateway_params(stack.url, env={"MNEME_GATEWAY_AGENT_ID": name}))
        )
        cs = await es.enter_async_context(ClientSession(r, w))
        await cs.initialize()
        out.append(Remote(cs))
    return out[0], out[1]


async def test_concurrent_updates_from_two_gateways_are_all_applied_once(stack: Stack) -> None:
    async with AsyncExitStack() as es:
        a, b = await two_gateways(stack, es)
        mid = (await a("memory_add", content="counter", store="s", path="shared/counter"))["id"]

        async def writer(gw: Remote, name: str) -> list[int]:
            versions = []
            for i in range(100):
                res = await gw("memory_update", id=mid, content=f"{name}-{i}")
                versions.append(res["version"])
            return versions

        va, vb = await asyncio.gather(writer(a, "a"), writer(b, "b"))
        assert va == sorted(va) and vb == sorted(vb), "versions seen by one writer must increase"
        assert len(set(va) | set(vb)) == 200, "two updates got the same version"
        # A session reads its own writes, not necessarily the other gateway's latest:
        # ask once the projection has the head of the log.
        await stack.projector.follower.wait_for(await stack.last_seq(), 10)
        assert (await a("memory_get", id=mid))["version"] == 201

    await stack.projector.follower.wait_for(await stack.last_seq(), 10)
    rows = (
        stack.view.reader()
        .execute("SELECT version, seq, content, agent_id FROM memory_versions WHERE id = ? ORDER BY version", [mid])
        .fetchall()
    )
    assert [r[0] for r in rows] == list(range(1, 202))
    assert [r[1] for r in rows] == sorted(r[1] for r in rows), "versions must follow log order"
    contents = Counter(r[2] for r in rows[1:])
    assert contents == Counter([f"a-{i}" for i in range(100)] + [f"b-{i}" for i in range(100)])
    assert Counter(r[3] for r in rows[1:]) == {"gw-a": 100, "gw-b": 100}


async def test_racing_for_one_store_path_exactly_one_wins(stack: Stack) -> None:
    async with AsyncExitStack() as es:
        a, b = await two_gateways(stack, es)

        async def claim(gw: Remote, path: str, who: str) -> str | None:
            try:
                return (await gw("memory_add", content=who, store="race", path=path))["id"]
            except ToolFailure as err:
                assert err.code == "ALREADY_EXISTS", err.error
                return None

        for round_ in range(25):
            path = f"slot/{round_}"
            wins = await asyncio.gather(claim(a, path, "a"), claim(b, path, "b"))
            assert sum(w is not None for w in wins) == 1, (path, wins)
        # moves race for a destination too
        x = (await a("memory_add", content="x", store="race", path="move/x"))["id"]
        y = (await b("memory_add", content="y", store="race", path="move/y"))["id"]

        async def move(gw: Remote, mid: str) -> bool:
            try:
                await gw("memory_move", id=mid, to_path="move/target")
                return True
            except ToolFailure as err:
                assert err.code == "ALREADY_EXISTS", err.error
                return False

        assert sorted(await asyncio.gather(move(a, x), move(b, y))) == [False, True]

    await stack.projector.follower.wait_for(await stack.last_seq(), 10)
    dupes = (
        stack.view.reader()
        .execute("SELECT path, count(*) FROM memories WHERE store = 'race' GROUP BY path HAVING count(*) > 1")
        .fetchall()
    )
    assert dupes == []
    assert stack.view.reader().execute("SELECT count(*) FROM memories WHERE store = 'race'").fetchone() == (27,)


async def test_same_request_id_creates_one_memory(stack: Stack) -> None:
    first = await stack.call("memory_add", content="once", request_id="req-1", store="s", path="a/once")
    before = await stack.last_seq()
    again = await stack.call("memory_add", content="once", request_id="req-1", store="s", path="a/once")
    assert again["id"] == first["id"] and again["duplicate"] and not first["duplicate"]
    assert await stack.last_seq() == before
    plain1 = await stack.call("memory_add", content="no path", request_id="req-2")
    plain2 = await stack.call("memory_add", content="no path", request_id="req-2")
    assert plain1["id"] == plain2["id"] and plain2["duplicate"]
    assert (await stack.call("memory_list"))["total"] == 2

    up1 = await stack.call("memory_update", id=plain1["id"], content="v2", request_id="req-3")
    up2 = await stack.call("memory_update", id=plain1["id"], content="v2", request_id="req-3")
    assert up1["version"] == up2["version"] == 2


async def test_retry_through_another_gateway_is_one_event(stack: Stack) -> None:
    """The same request id sent through two gateways at once (a client retrying elsewhere: the same principal;
    another principal's request id is another request)."""
    async with AsyncExitStack() as es:
        a, b = await two_gateways(stack, es, agents=("client", "client"))
        for i in range(10):
            rid = f"retry-{i}"
            res = await asyncio.gather(
                a("memory_add", content=f"r{i}", request_id=rid), b("memory_add", content=f"r{i}", request_id=rid)
            )
            assert res[0]["id"] == res[1]["id"]
            assert sorted([res[0]["duplicate"], res[1]["duplicate"]]) == [False, True]
    await stack.projector.follower.wait_for(await stack.last_seq(), 10)
    assert (await stack.call("memory_list", limit=100))["total"] == 10
    assert await stack.last_seq() == 10


async def test_path_claims_succeed_under_unrelated_writes_to_the_same_store(stack: Stack) -> None:
    """Every write in a store moves the store's last sequence, which path claims check. A claim that
    lost only to writes that cannot matter to its path retries at once, so claims do not starve, and
    a contested path still has exactly one winner."""
    async with AsyncExitStack() as es:
        a, b = await two_gateways(stack, es)
        busy = [(await a("memory_add", content=f"busy {i}", store="hot", path=f"busy/{i}"))["id"] for i in range(5)]
        stop = asyncio.Event()

        async def churn() -> int:
            n = 0
            while not stop.is_set():
                await a("memory_update", id=busy[n % 5], content=f"churn {n}")
                n += 1
            return n

        async def claims() -> list[str]:
            out = []
            for i in range(40):
                out.append((await b("memory_add", content=f"claim {i}", store="hot", path=f"claims/{i}"))["id"])
            return out

        churner = asyncio.create_task(churn())
        claimed = await claims()
        stop.set()
        churned = await churner
        assert len(set(claimed)) == 40 and churned > 0

        async def contest(gw: Remote, who: str) -> str | None:
            try:
                return (await gw("memory_add", content=who, store="hot", path="contested/one"))["id"]
            except ToolFailure as err:
                assert err.code == "ALREADY_EXISTS", err.error
                return None

        stop.clear()
        churner = asyncio.create_task(churn())
        wins = await asyncio.gather(contest(a, "a"), contest(b, "b"))
        stop.set()
        await churner
        assert sum(w is not None for w in wins) == 1

    await stack.projector.follower.wait_for(await stack.last_seq(), 10)
    dupes = (
        stack.view.reader()
        .execute("SELECT path, count(*) FROM memories WHERE store = 'hot' GROUP BY path HAVING count(*) > 1")
        .fetchall()
    )
    assert dupes == []
