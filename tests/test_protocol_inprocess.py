"""The protocol layer of `MnemeMCPServer` with things `mneme serve` does not have yet: prompts, resources, a
tool that logs to its client. A small server is served over OS pipes through the real stdio transport, as
`mneme serve` serves it, and driven with raw JSON-RPC lines; two connections can share one server. What
`mneme serve` itself answers is in test_protocol_stdio.py and test_protocol_http.py.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, get_args

import anyio
import pytest
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.resources import TextResource
from mcp_types import LoggingLevel

from services.gateway.server import MnemeMCPServer
from services.gateway.stdio import stdio_transport

pytestmark = pytest.mark.anyio

LEVELS = get_args(LoggingLevel)  # the eight RFC 5424 levels, least severe first
LOG_LEVEL = "io.modelcontextprotocol/logLevel"
INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}


class Wire:
    """One client connection: JSON-RPC lines in, the server's lines out."""

    def __init__(self, tx: Any, rx: Any):
        self.tx, self.rx = tx, rx
        self.capabilities: dict[str, Any] = {}
        self._next = 100

    async def send(self, msg: dict[str, Any]) -> None:
        await anyio.to_thread.run_sync(self._write, json.dumps(msg).encode() + b"\n")

    def _write(self, data: bytes) -> None:
        self.tx.write(data)
        self.tx.flush()

    async def line(self) -> dict[str, Any]:
        with anyio.fail_after(10):
            raw = await anyio.to_thread.run_sync(self.rx.readline, abandon_on_cancel=True)
        assert raw, "the server closed stdout"
        return dict(json.loads(raw))

    async def request(self, method: str, params: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[Any]]:
        """The reply to one request, and the notifications that came before it."""
        self._next += 1
        await self.send({"jsonrpc": "2.0", "id": self._next, "method": method, "params": params or {}})
        notes = []
        while (msg := await self.line()).get("id") != self._next:
            notes.append(msg)
        return msg, notes


@asynccontextmanager
async def connected(server: MnemeMCPServer, *, handshake: bool = True) -> AsyncIterator[Wire]:
    """A client connection to `server`, initialized (its capabilities on `wire.capabilities`); without the
    handshake, a 2026-07-28 connection (each request carries its envelope)."""
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    stdin, stdout = os.fdopen(in_r, "rb"), os.fdopen(out_w, "wb")
    tx, rx = os.fdopen(in_w, "wb"), os.fdopen(out_r, "rb")
    low = server._lowlevel_server

    async def serve() -> None:
        async with stdio_transport(stdin, stdout) as (read, write):
            await low.run(read, write, low.create_initialization_options())

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            wire = Wire(tx, rx)
            if handshake:
                reply, _ = await wire.request("initialize", INIT)
                wire.capabilities = reply["result"]["capabilities"]
                await wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            yield wire
            tx.close()  # end of input: this connection ends
    finally:
        for f in (tx, stdout, rx, stdin):
            f.close()


def chatty() -> MnemeMCPServer:
    from services.gateway.client_log import log_to_client  # (here: the other tests need no logging to run)

    server = MnemeMCPServer(name="toy")

    @server.tool()
    async def chatter(ctx: Context) -> str:
        """Logs one line to its client at each of the eight levels, as far as the client wants to hear."""
        for level in LEVELS:
            await log_to_client(ctx.request_context, level, f"a {level} line", logger="toy")
        return "done"

    return server


def levels_heard(notes: list[dict[str, Any]]) -> list[str]:
    assert all(n["method"] == "notifications/message" for n in notes), notes
    return [n["params"]["level"] for n in notes]


async def test_each_clients_log_level_governs_the_log_notifications_it_gets() -> None:
    server = chatty()
    async with connected(server) as a, connected(server) as b:
        assert a.capabilities["logging"] == {}
        reply, notes = await a.request("tools/call", {"name": "chatter", "arguments": {}})
        assert not reply["result"]["isError"]
        assert levels_heard(notes) == ["warning", "error", "critical", "alert", "emergency"]  # before any setLevel
        assert notes[0]["params"] == {"level": "warning", "logger": "toy", "data": "a warning line"}

        assert (await a.request("logging/setLevel", {"level": "error"}))[0]["result"] == {}
        assert (await b.request("logging/setLevel", {"level": "debug"}))[0]["result"] == {}
        _, notes = await a.request("tools/call", {"name": "chatter", "arguments": {}})
        assert levels_heard(notes) == ["error", "critical", "alert", "emergency"]
        _, notes = await b.request("tools/call", {"name": "chatter", "arguments": {}})
        assert levels_heard(notes) == list(LEVELS)  # b's level is b's own

        await a.request("logging/setLevel", {"level": "emergency"})
        _, notes = await a.request("tools/call", {"name": "chatter", "arguments": {}})
        assert levels_heard(notes) == ["emergency"]
        reply, _ = await a.request("logging/setLevel", {"level": "verbose"})
        assert reply["error"]["code"] == -32602
        assert reply["error"]["data"]["errors"][0]["field"] == "params.level"
        _, notes = await a.request("tools/call", {"name": "chatter", "arguments": {}})
        assert levels_heard(notes) == ["emergency"]  # a refused level changes nothing


async def test_on_2026_07_28_a_request_opts_in_to_log_notifications_with_its_own_level() -> None:
    envelope = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
    }
    async with connected(chatty(), handshake=False) as wire:
        call = {"name": "chatter", "arguments": {}}
        reply, notes = await wire.request("tools/call", {**call, "_meta": envelope})
        assert reply["result"]["content"][0]["text"] == "done" and notes == []  # no opt-in: nothing
        _, notes = await wire.request("tools/call", {**call, "_meta": {**envelope, LOG_LEVEL: "critical"}})
        assert levels_heard(notes) == ["critical", "alert", "emergency"]
        reply, _ = await wire.request("logging/setLevel", {"level": "debug", "_meta": envelope})
        assert reply["error"]["code"] == -32601  # gone in 2026-07-28


async def test_prompts_and_resources_are_advertised_once_registered() -> None:
    server = MnemeMCPServer(name="toy")
    async with connected(server) as before:
        assert set(before.capabilities) == {"tools", "logging"}
        reply, _ = await before.request("prompts/list")
        assert reply["error"]["code"] == -32601 and reply["error"]["data"] == "prompts/list"

    @server.prompt()
    def recap(topic: str) -> str:
        """Asks for a recap of one topic."""
        return f"Recap what you remember about {topic}."

    server.add_resource(TextResource(uri="memory://knowledge-graph", name="knowledge-graph", text="{}"))
    async with connected(server) as after:
        assert {"prompts", "resources"} <= set(after.capabilities)
        reply, _ = await after.request("prompts/list")
        assert [p["name"] for p in reply["result"]["prompts"]] == ["recap"]
        reply, _ = await after.request("resources/list")
        assert [r["uri"] for r in reply["result"]["resources"]] == ["memory://knowledge-graph"]
        reply, _ = await after.request("prompts/get", {"name": "recap", "arguments": {"topic": "tea"}})
        assert "tea" in json.dumps(reply["result"]["messages"])

        reply, _ = await after.request("prompts/get", {"name": "recap"})
        err = reply["error"]
        assert err["code"] == -32602 and "topic" in err["message"]
        assert err["data"]["errors"][0]["field"] == "params.arguments"
        reply, _ = await after.request("prompts/get", {"name": "summary"})
        err = reply["error"]
        assert err["code"] == -32602 and "'summary'" in err["message"] and "recap" in err["message"]


async def test_a_handler_that_fails_unexpectedly_is_internal_error_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = MnemeMCPServer(name="toy")

    @server.prompt()
    def broken() -> str:
        """Fails."""
        raise RuntimeError("a bug with a secret in it")

    caplog.set_level(logging.INFO)
    async with connected(server) as wire:
        reply, _ = await wire.request("prompts/get", {"name": "broken"})
    err = reply["error"]
    assert err["code"] == -32603 and "incident" in err["message"] and "secret" not in err["message"]
    failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(failures) == 1, [r.getMessage() for r in failures]
    assert failures[0].name == "mneme.gateway" and failures[0].exc_info is not None
