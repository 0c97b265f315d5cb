"""Idempotency keys (issue 9, items 2 and 4): a request id names one request of one principal for one operation.
The same key with the same arguments is a retry; with different arguments it is refused, never a silent success."""

from __future__ import annotations

import pytest

from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from tests.harness import Stack, ToolFailure, hints_of, start_stack

pytestmark = pytest.mark.anyio


async def test_same_key_same_arguments_is_a_retry(stack: Stack) -> None:
    first = await stack.call("memory_add", content="A", request_id="r-1")
    again = await stack.call("memory_add", content="A", request_id="r-1")
    assert again["id"] == first["id"] and again["duplicate"] is True and first["duplicate"] is False
    assert (await stack.call("memory_list"))["total"] == 1


async def test_same_key_other_arguments_is_refused_and_writes_nothing(stack: Stack) -> None:
    first = await stack.call("memory_add", content="A", request_id="r-1")
    head = await stack.last_seq()
    with pytest.raises(ToolFailure) as err:
        await stack.call("memory_add", content="B", request_id="r-1")
    assert err.value.code == "IDEMPOTENCY_KEY_REUSED" and err.value.field == "request_id"
    assert err.value.error["details"]["memory_id"] == first["id"]
    assert await stack.last_seq() == head
    got = await stack.call("memory_get", id=first["id"])
    assert got["content"] == "A" and got["version"] == 1
    # at a path too (the path claim sees its own memory there), and the retry still answers
    await stack.call("memory_add", content="at a path", store="s", path="p/x", request_id="r-path")
    with pytest.raises(ToolFailure) as err:
        await stack.call("memory_add", content="other", store="s", path="p/x", request_id="r-path")
    assert err.value.code == "IDEMPOTENCY_KEY_REUSED"
    retry = await stack.call("memory_add", content="at a path", store="s", path="p/x", request_id="r-path")
    assert retry["duplicate"] is True


async def test_a_key_is_scoped_per_operation(stack: Stack) -> None:
    """The reported case: an update with the key of the create used to answer success and change nothing."""
    created = await stack.call("memory_add", content="v1", request_id="r-2")
    up = await stack.call("memory_update", id=created["id"], content="v2", request_id="r-2")
    assert up["version"] == 2 and up["updated_fields"] == ["content"]
    assert (await stack.call("memory_get", id=created["id"]))["content"] == "v2"
    # the update retried is a retry; the same key with other content is refused
    again = await stack.call("memory_update", id=created["id"], content="v2", request_id="r-2")
    assert again["version"] == 2
    with pytest.raises(ToolFailure) as err:
        await stack.call("memory_update", id=created["id"], content="v3", request_id="r-2")
    assert err.value.code == "IDEMPOTENCY_KEY_REUSED"
    assert (await stack.call("memory_get", id=created["id"]))["content"] == "v2"


async def test_a_key_is_scoped_per_principal(tmp_path, nats_server: EmbeddedNats) -> None:
    """Two agents that happen to pick the same request id make two memories, not one agent's duplicate."""
    a = await start_stack(tmp_path / "a", nats_server, GatewaySettings(agent_id="ann", namespace="shared"))
    try:
        b_gw_settings = GatewaySettings(agent_id="bob", namespace="shared")
        from mcp import Client

        from mneme.app import compose
        from services.gateway.server import build_server
        from tests.harness import result_of

        async with Client(build_server(compose.gateway(a.nc, b_gw_settings))) as bob:
            one = await a.call("memory_add", content="ann's note", request_id="r-1")
            two = result_of(await bob.call_tool("memory_add", {"content": "bob's note", "request_id": "r-1"}))
            assert one["id"] != two["id"] and two["duplicate"] is False
            a.gateway.app.marks.wrote(two["seq"])  # bob wrote through another gateway: ann's reads wait for it too
            assert (await a.call("memory_list"))["total"] == 2
    finally:
        await a.close()


async def test_annotations_hold_for_the_defaults(stack: Stack) -> None:
    tools = {t.name: t for t in (await stack.client.list_tools()).tools}
    assert hints_of(tools["memory_add"]).idempotent_hint is False
    # ...because without a request id the same call makes a second memory
    await stack.call("memory_add", content="same")
    await stack.call("memory_add", content="same")
    assert (await stack.call("memory_list"))["total"] == 2
    # the idempotent writes really are: a second identical call changes nothing
    m = await stack.call("memory_add", content="x", store="s", path="a/b")
    for tool, args in [
        ("memory_update", {"content": "y"}),
        ("memory_move", {"to_path": "a/c"}),
        ("memory_retire", {"mode": "deprecate", "reason": "old"}),
        ("memory_retire", {"mode": "invalidate", "reason": "gone"}),
        ("memory_retire", {"mode": "archive"}),
    ]:
        assert hints_of(tools[tool]).idempotent_hint is True, tool
        await stack.call(tool, id=m["id"], **args)
        before = await stack.last_seq()
        await stack.call(tool, id=m["id"], **args)
        assert await stack.last_seq() == before, f"a second {tool} wrote an event"
