"""The server's edge, tool-independent: an unknown tool, a crash inside a tool, the version it announces.

A small `MnemeMCPServer` (no NATS) through the in-process MCP client; the real tools' bad input is
test_bad_input.py, the wire is test_stdio_transport.py.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from typing import Any

import pytest
from mcp import Client
from mcp.types import TextContent

from services.gateway.server import MnemeMCPServer

pytestmark = pytest.mark.anyio


def toy() -> MnemeMCPServer:
    server = MnemeMCPServer(name="toy")

    @server.tool()
    async def crash(detail: str = "x") -> str:
        raise RuntimeError(f"secret internal detail {detail}")

    @server.tool()
    async def recurse() -> str:
        def down(n: int) -> int:
            return down(n + 1)

        return str(down(0))

    @server.tool()
    async def fine(x: int = 1) -> str:
        return "ok"

    return server


def error(res: Any) -> dict[str, Any]:
    assert res.is_error, res
    return json.loads(res.content[0].text)["error"]


async def test_an_unknown_tool_is_a_structured_error_naming_the_known_ones() -> None:
    async with Client(toy()) as client:
        err = error(await client.call_tool("memory_nuke", {}))
    assert err["code"] == "UNKNOWN_TOOL" and err["field"] == "name", err
    assert "memory_nuke" in err["message"] and "crash, fine, recurse" in err["message"], err


@pytest.mark.parametrize("tool", ["crash", "recurse"])
async def test_an_unexpected_exception_is_internal_without_its_text(
    tool: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with Client(toy()) as client:
        err = error(await client.call_tool(tool, {}))
        fine = (await client.call_tool("fine", {})).content[0]
        assert isinstance(fine, TextContent) and fine.text == "ok"  # and the server carries on
    assert err["code"] == "INTERNAL" and set(err) == {"code", "message"}, err
    assert "secret" not in err["message"] and "Traceback" not in err["message"] and "Recursion" not in err["message"]
    incident = err["message"].rsplit("incident ", 1)[1].rstrip(")")
    assert any(incident in r.getMessage() and r.exc_info for r in caplog.records), "the log has the traceback"


async def test_the_server_announces_the_package_version() -> None:
    async with Client(toy()) as client:
        assert client.server_info is not None
        assert client.server_info.version == version("mneme") != ""
