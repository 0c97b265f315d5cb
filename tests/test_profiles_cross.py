"""Across profiles: the four seed contracts and the native tools are surfaces of ONE memory (issue 10, "Tests
that must exist": cross-profile, and two profiles at once over streamable HTTP with bearer tokens).

How the namespaces line up. Every profile names its namespace its own way, and the tests configure the
principals so that all of them land on the one namespace `acme/web`:

- memento and agent-memory have no namespace argument: the principal's default namespace
  (`GatewaySettings.namespace` in process / over stdio, the token's `default_namespace` over HTTP) -> `acme/web`;
- native tools without a `namespace` argument: the same default namespace -> `acme/web`;
- cortex: the store registry, `GatewaySettings.stores = {"kb": "acme/web"}` -> store `kb` lives in `acme/web`;
- governed: `<context.organization_id>/<context.repository_id>` -> organization `acme`, repository `web`, so the
  principal's organization is `acme` and it is bound to `acme/web`.

1. In process (tests/harness.py `start_stack` with the real model, several MCP clients, one per profile, over
   the SAME gateway): a memory stored through memento is found by agent-memory's query_memories search text,
   by native memory_get and memory_search, and read by governed's memory.read, in `acme/web`.
2. In process, two principals on one NATS (the stack's agent gateway, and an admin's gateway built with
   `compose.gateway` on the stack's connection): a memory the admin locked through governed's memory.lock refuses
   the agent's update through cortex, agent-memory and memento, each in that contract's own error format, and
   nothing is written (MNEME_EVENTS' last sequence is unchanged). Before the lock the same agent updated it
   through each of the three, so the refusal is the lock's doing, not a misconfigured scope.
3. A real `mneme serve --transport http` with a principals file of hashed bearer tokens: one server serves
   /mcp (native), /mcp/memento and /mcp/agent-memory at once, each with its own tool list; a write through one
   path is read through the others with the same token's principal; another token's principal sees none of
   it; a missing or unknown token is HTTP 401 on every path.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mneme.app import compose
from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from mneme.principals import hash_token
from services.gateway import profiles
from services.gateway.server import build_server
from tests.harness import (
    MNEME,
    ToolFailure,
    free_port,
    nats_pid,
    result_of,
    start_stack,
    wait_dead,
    wait_listening,
)

pytestmark = pytest.mark.anyio

NS = "acme/web"
EMMA = {
    "content": "Emma is lactose intolerant",
    "subject": "Emma",
    "category": "restriction",
    "tags": ["dietary", "health"],
}
MEMENTO_TOOLS = {"store_memory", "search_memories", "list_recent_memories", "update_memory", "get_memory_stats"}
AGENT_MEMORY_TOOLS = {"store_memory", "query_memories", "update_memory", "delete_memory", "get_memory_stats"}


def agent_settings(**over: Any) -> GatewaySettings:
    """The agent `ann` of organization acme, bound to acme/web (its default namespace), with cortex store kb there."""
    base: dict[str, Any] = {
        "agent_id": "ann",
        "role": "agent",
        "organization": "acme",
        "namespace": NS,
        "namespaces": [NS],
        "stores": {"kb": NS},
    }
    return GatewaySettings(**(base | over))


def governed_context(agent_id: str, intent: str, request_id: str) -> dict[str, str]:
    """The governed contract's mandatory context for acme/web."""
    return {
        "agent_id": agent_id,
        "organization_id": "acme",
        "repository_id": "web",
        "intent": intent,
        "request_id": request_id,
    }


class Surface:
    """One MCP client: `await s(tool, **args)` is the structured result, `await s.fails(...)` the parsed error."""

    def __init__(self, client: Client):
        self.client = client

    async def __call__(self, tool: str, **args: Any) -> dict[str, Any]:
        return result_of(await self.client.call_tool(tool, args))

    async def fails(self, tool: str, **args: Any) -> ToolFailure:
        with pytest.raises(ToolFailure) as err:
            await self(tool, **args)
        return err.value

    async def tool_names(self) -> set[str]:
        return {t.name for t in (await self.client.list_tools()).tools}


async def surfaces(es: AsyncExitStack, gw: Any, *names: str) -> list[Surface]:
    """One in-process MCP client per profile, all over the gateway `gw`."""
    return [Surface(await es.enter_async_context(Client(build_server(gw, profile=n)))) for n in names]


@asynccontextmanager
async def clients() -> AsyncIterator[AsyncExitStack]:
    """An exit stack for MCP clients that closes them before a failure propagates: a failure raised through
    five nested clients' task groups would be buried in exception groups deeper than a traceback prints."""
    es = AsyncExitStack()
    try:
        yield es
    except BaseException:
        await es.aclose()
        raise
    await es.aclose()


# == 1. memento -> agent-memory / native / governed, one memory ================================================


async def test_a_memento_memory_is_found_by_agent_memory_native_and_governed(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    """One principal (ann, default namespace acme/web, cortex store kb -> acme/web), five surfaces over one
    gateway. Other memories are written through agent-memory and cortex first, so that finding the memento
    memory is a real search, not the only row in the namespace."""
    stack = await start_stack(tmp_path / "data", nats_server, agent_settings(), vectors=True)
    try:
        async with clients() as es:
            memento, agent_memory, cortex, governed = await surfaces(
                es, stack.gateway, "memento", "agent-memory", "cortex", "governed"
            )
            native = Surface(stack.client)
            other = await agent_memory(
                "store_memory",
                type="learning",
                content="The user prefers pytest over unittest for testing",
                tags=["python"],
            )
            await cortex("add_memory", store="kb", path="infra/database", content="Production runs PostgreSQL 16")
            m = await memento("store_memory", **EMMA)
            assert m["duplicate"] is False and m["subject"] == "Emma"

            # agent-memory: the search text finds it (and only it), in the contract's shape
            found = await agent_memory("query_memories", search="lactose")
            assert (found["total"], found["has_more"]) == (1, False), found
            hit = found["memories"][0]
            # memento's kind (fact) is no agent-memory type: it shows as the nearest one, core (issue 28, item 5)
            assert (hit["id"], hit["content"], hit["type"]) == (m["id"], EMMA["content"], "core")
            assert (hit["category"], hit["tags"], hit["archived"]) == ("restriction", ["dietary", "health"], False)
            assert hit["importance"] == "medium"  # the native default 0.5, read back through the contract's buckets
            assert (await agent_memory("query_memories", search="INTOLERANT"))["memories"][0]["id"] == m["id"]
            assert (await agent_memory("query_memories", search="peanuts"))["total"] == 0
            # without a search text it lists the namespace: memento's, agent-memory's and cortex's memories
            listed = await agent_memory("query_memories", limit=100)
            assert listed["total"] == 3 and m["id"] in {x["id"] for x in listed["memories"]}
            assert other["id"] in {x["id"] for x in listed["memories"]}

            # native: memory_get by id (default namespace, and naming it), memory_search ranks it first
            got = await native("memory_get", id=m["id"])
            assert (got["namespace"], got["content"], got["subject"], got["category"], got["kind"]) == (
                NS,
                EMMA["content"],
                "Emma",
                "restriction",
                "fact",
            )
            assert (got["created_by"], got["version"]) == ("ann", 1)
            assert (await native("memory_get", id=m["id"], namespace=NS))["id"] == m["id"]
            recalled = await native("memory_search", query="is Emma lactose intolerant?", detail="full")
            assert recalled["results"][0]["id"] == m["id"], recalled["results"]
            assert recalled["results"][0]["namespace"] == NS

            # governed: <acme>/<web> is the same namespace; memory.read and memory-search see it
            read = await governed("memory.read", memory_id=m["id"], context=governed_context("ann", "read", "g-r1"))
            assert (read["memory_id"], read["content"], read["type"]) == (m["id"], EMMA["content"], "fact")
            assert (read["scope_origin"], read["status"], read["created_by"]) == ("repository", "unverified", "ann")
            searched = await governed(
                "memory-search", query="lactose intolerant", context=governed_context("ann", "read", "g-s1")
            )
            assert searched["memories"][0]["memory_id"] == m["id"], searched
            assert searched["memories"][0]["scope_origin"] == "repository"

            # and back: what agent-memory stored, memento lists (the same namespace both ways)
            recent = await memento("list_recent_memories", limit=10)
            assert {x["id"] for x in recent["memories"]} >= {m["id"], other["id"]}
    finally:
        await stack.close()


# == 2. a governed lock holds on cortex, agent-memory and memento ===============================================


async def test_a_governed_lock_refuses_an_agents_update_on_every_profile(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    """ann (agent) and dana (admin, acme/*) are two gateways on the stack's NATS, both with store kb -> acme/web.
    The memory is made through cortex (so that cortex can address it by store + path), and its id read through
    the native memory_get by store:path: the same memory on every surface."""
    stack = await start_stack(tmp_path / "data", nats_server, agent_settings())
    admin_gw = compose.gateway(stack.nc, agent_settings(agent_id="dana", role="admin", namespaces=["acme/*"]))
    try:
        async with clients() as es:
            es.push_async_callback(admin_gw.access.flush)
            cortex, agent_memory, memento, governed = await surfaces(
                es, stack.gateway, "cortex", "agent-memory", "memento", "governed"
            )
            native = Surface(stack.client)
            admin_governed, admin_cortex = await surfaces(es, admin_gw, "governed", "cortex")
            admin_native = Surface(await es.enter_async_context(Client(build_server(admin_gw))))
            path = "decisions/database"
            await cortex("add_memory", store="kb", path=path, content="v1: every service uses PostgreSQL")
            mid = (await native("memory_get", id=f"kb:{path}"))["id"]

            # before the lock, the agent may update it through each of the three profiles
            await cortex("update_memory", store="kb", path=path, content="v2 through cortex")
            up = await agent_memory("update_memory", id=mid, content="v3 through agent-memory")
            assert up["updated_fields"] == ["content"]
            up = await memento("update_memory", memory_id=mid, new_content="v4 through memento")
            assert up["updated"] is True and up["content"] == "v4 through memento"
            assert (await native("memory_get", id=mid))["version"] == 4

            locked = await admin_governed(
                "memory.lock", memory_id=mid, context=governed_context("dana", "admin", "lock-1")
            )
            assert (locked["memory_id"], locked["status"], locked["version"]) == (mid, "locked", 5)
            head = await stack.last_seq()

            # cortex: McpError(InvalidRequest), {"error": {"code": -32600, "message": "MCP error -32600: ..."}}
            err = await cortex.fails("update_memory", store="kb", path=path, content="ann edits through cortex")
            assert err.error == {
                "code": -32600,
                "message": f"MCP error -32600: Memory is locked: {path} (only an admin can change it)",
            }, err.error
            err = await cortex.fails("update_memory", store="kb", path=path, tags=["retagged"])
            assert err.error["code"] == -32600 and "locked" in err.error["message"], err.error

            # agent-memory: {"error": {"code": "PERMISSION_ERROR", "message": ...}}, nothing else in it
            for tool, args in (
                ("update_memory", {"id": mid, "content": "ann edits through agent-memory"}),
                ("update_memory", {"id": mid, "importance": "high"}),
                ("store_memory", {"id": mid, "type": "core", "content": "ann's store as update"}),
            ):
                err = await agent_memory.fails(tool, **args)
                assert set(err.error) == {"code", "message"} and err.code == "PERMISSION_ERROR", (tool, err.error)
                assert "locked" in err.error["message"], err.error

            # memento: {"error": {"code": "INVALID_PARAMETER", "message": ...}} (its five codes have no refusal)
            for args in (
                {"new_content": "ann edits through memento"},
                {"mark_outdated": True, "reason": "ann thinks it is stale"},
                {"mark_outdated": True, "new_content": "a successor", "reason": "replaced"},
            ):
                err = await memento.fails("update_memory", memory_id=mid, **args)
                assert set(err.error) == {"code", "message"} and err.code == "INVALID_PARAMETER", (args, err.error)
                assert "locked" in err.error["message"], err.error

            # governed itself, for reference: its own MEMORY_LOCKED
            err = await governed.fails(
                "memory-write",
                memory_id=mid,
                content="ann edits through governed",
                type="decision",
                context=governed_context("ann", "write", "w-1"),
            )
            assert err.code == "MEMORY_LOCKED", err.error

            # nothing was written: no event, no successor, the memory as the admin left it (read through the
            # admin's gateway, whose reads wait for its own writes: the lock)
            assert await stack.last_seq() == head
            got = await admin_native("memory_get", id=mid)
            assert (got["content"], got["version"], got["locked"], got["updated_by"]) == (
                "v4 through memento",
                5,
                True,
                "dana",
            )
            assert (await admin_native("memory_list"))["total"] == 1
            # ...and every refusal is in the audit trail as ann's MEMORY_LOCKED
            await stack.gateway.access.flush()
            await stack.settle()
            denied = stack.trail.con.execute(
                "SELECT action FROM audit_trail WHERE outcome = 'denied' AND agent_id = 'ann' AND code = "
                "'MEMORY_LOCKED' ORDER BY trail_seq"
            ).fetchall()
            assert sorted(a for (a,) in denied) == sorted(
                ["denied:update_memory"] * 7 + ["denied:store_memory", "denied:memory-write"]
            ), denied

            # the lock binds agents only: the admin still edits it through cortex, and it stays locked
            await admin_cortex("update_memory", store="kb", path=path, content="v6 by the admin")
            got = await admin_native("memory_get", id=mid)
            assert (got["content"], got["version"], got["locked"]) == ("v6 by the admin", 6, True)
    finally:
        await stack.close()


# == 3. streamable HTTP: two profiles at once, bearer tokens, one memory =======================================

ANN_TOKEN = "cross-token-ann-4c9e1b"
GUS_TOKEN = "cross-token-gus-80aa7d"
PATHS = {name: profiles.http_path(name) for name in ("native", "memento", "agent-memory")}


@asynccontextmanager
async def as_token(url: str, token: str) -> AsyncIterator[Surface]:
    """An MCP client whose every HTTP request carries `Authorization: Bearer <token>`."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=120)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield Surface(client)


async def test_http_serves_two_profiles_at_once_over_one_memory(tmp_path: Path) -> None:
    principals = tmp_path / "principals.json"
    principals.write_text(
        json.dumps(
            {
                "principals": [
                    {
                        "token_sha256": hash_token(ANN_TOKEN),
                        "agent_id": "ann",
                        "role": "agent",
                        "organization": "acme",
                        "namespaces": [NS],
                        "default_namespace": NS,
                    },
                    {
                        "token_sha256": hash_token(GUS_TOKEN),
                        "agent_id": "gus",
                        "role": "agent",
                        "organization": "globex",
                        "namespaces": ["globex/web"],
                        "default_namespace": "globex/web",
                    },
                ]
            }
        )
    )
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
    env["MNEME_GATEWAY_PRINCIPALS_FILE"] = str(principals)
    argv = [MNEME, "serve", "--data-dir", str(tmp_path / "d"), "--transport", "http", "--host", "127.0.0.1",
            "--port", str(port)]  # fmt: skip
    # a long-running server child, stopped at the end
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_listening(proc, port)

        # -- a missing or unknown token is 401 on every path; a known one gets through ----------------------
        probe = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        accept = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        async with httpx2.AsyncClient(timeout=10) as http:
            for name, path in PATHS.items():
                for auth in (None, "Bearer not-a-known-token", f"Bearer {hash_token(ANN_TOKEN)}"):
                    headers = accept | ({"authorization": auth} if auth is not None else {})
                    r = await http.post(base + path, json=probe, headers=headers)
                    assert r.status_code == 401, (name, auth, r.status_code, r.text)
                    assert r.json()["error"]["code"] == "UNAUTHORIZED"
                    assert "store_memory" not in r.text and "memory_add" not in r.text
                r = await http.post(base + path, json=probe, headers=accept | {"authorization": f"Bearer {ANN_TOKEN}"})
                assert r.status_code != 401, (name, r.text)
        assert proc.poll() is None, "the server died on unauthorized requests"

        async with (
            as_token(base + PATHS["memento"], ANN_TOKEN) as memento,
            as_token(base + PATHS["agent-memory"], ANN_TOKEN) as agent_memory,
            as_token(base + PATHS["native"], ANN_TOKEN) as native,
            as_token(base + PATHS["memento"], GUS_TOKEN) as gus_memento,
            as_token(base + PATHS["agent-memory"], GUS_TOKEN) as gus_agent_memory,
        ):
            # -- each path its own tool list; store_memory is each contract's own --------------------------
            assert await memento.tool_names() == MEMENTO_TOOLS
            assert await agent_memory.tool_names() == AGENT_MEMORY_TOOLS
            native_tools = await native.tool_names()
            assert {"memory_add", "memory_get", "memory_search"} <= native_tools
            assert not native_tools & (MEMENTO_TOOLS | AGENT_MEMORY_TOOLS)
            schemas = {}
            for label, s in (("memento", memento), ("agent-memory", agent_memory)):
                tool = next(t for t in (await s.client.list_tools()).tools if t.name == "store_memory")
                schemas[label] = tool.input_schema
            assert {"content", "subject", "category"} <= set(schemas["memento"]["required"])
            assert "subject" not in schemas["agent-memory"]["properties"]
            assert {"type", "content"} <= set(schemas["agent-memory"]["required"])
            assert "type" not in schemas["memento"]["properties"]

            # -- memento writes; agent-memory and native read it, as the same token's principal -----------
            m = await memento("store_memory", **EMMA)
            found = await agent_memory("query_memories", search="lactose")
            assert [x["id"] for x in found["memories"]] == [m["id"]] and found["total"] == 1, found
            assert found["memories"][0]["content"] == EMMA["content"]
            got = await native("memory_get", id=m["id"])
            assert (got["namespace"], got["created_by"], got["subject"]) == (NS, "ann", "Emma")

            # -- and the other way: agent-memory writes, memento and native read it ------------------------
            a = await agent_memory(
                "store_memory",
                type="learning",
                content="The user prefers pytest for testing",
                importance="high",
                tags=["python"],
            )
            assert a["created"] is True
            recent = await memento("list_recent_memories")
            assert [x["id"] for x in recent["memories"]] == [a["memory"]["id"], m["id"]], recent
            got = await native("memory_get", id=a["memory"]["id"])
            assert (got["namespace"], got["created_by"], got["kind"], got["importance"]) == (NS, "ann", "learning", 0.9)
            # an update through memento is seen by agent-memory
            await memento(
                "update_memory",
                memory_id=a["memory"]["id"],
                new_content="The user prefers pytest, with coverage, for testing",
            )
            found = await agent_memory("query_memories", search="coverage")
            assert [x["id"] for x in found["memories"]] == [a["memory"]["id"]], found

            # -- another token's principal (globex/web) shares none of it ------------------------------------
            assert (await gus_memento("list_recent_memories"))["memories"] == []
            assert (await gus_agent_memory("query_memories", search="lactose"))["total"] == 0
            err = await gus_agent_memory.fails("update_memory", id=m["id"], content="gus was here")
            assert err.code == "NOT_FOUND", err.error
            err = await gus_memento.fails("update_memory", memory_id=m["id"], new_content="gus was here")
            assert err.code == "MEMORY_NOT_FOUND", err.error

        # -- clean stop -------------------------------------------------------------------------------------------
        child = nats_pid(tmp_path / "d")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, proc.stderr.read().decode() if proc.stderr else ""
        assert wait_dead(child), "nats-server outlived mneme serve --transport http"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
