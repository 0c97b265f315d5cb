"""MCP over stdio for the benchmarks: `mneme serve` and the no-op MCPServer (bench/noop_server.py) under the
mcp package's client, timed blocks of tool calls, and the processes to meter.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent

from bench.common import find_child
from bench.fixtures import MNEME, REPO

NOOP_SERVER = str(Path(__file__).resolve().parent / "noop_server.py")


@asynccontextmanager
async def mcp_session(params: StdioServerParameters, errlog: Any) -> AsyncIterator[ClientSession]:
    async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def serve_params(data_dir: Path) -> StdioServerParameters:
    # the whole environment: the SDK passes a child only a few variables by default, and PYTHONPATH (a
    # baseline worktree measured side by side) must reach `mneme serve`, or it runs the installed tree
    return StdioServerParameters(
        command=MNEME, args=["serve", "--data-dir", str(data_dir)], cwd=str(REPO), env=dict(os.environ)
    )


def noop_params() -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[NOOP_SERVER], cwd=str(REPO))


class ToolFailed(Exception):
    pass


def structured(res: Any) -> dict[str, Any]:
    if res.is_error:
        raise ToolFailed(res.content[0].text if res.content else "tool error")
    return res.structured_content


async def mcp_block(session: ClientSession, tool: str, args_list: list[dict[str, Any]]) -> tuple[float, list[float]]:
    lat = []
    call = session.call_tool
    t0 = time.perf_counter()
    for args in args_list:
        t = time.perf_counter()
        structured(await call(tool, args))
        lat.append(time.perf_counter() - t)
    return time.perf_counter() - t0, lat


def first_text(res: CallToolResult) -> str:
    """The text of a tool result's first content block (mneme answers with one text block), or "?"."""
    block = res.content[0] if res.content else None
    return block.text if isinstance(block, TextContent) else "?"


def server_pids(client: int, server: int | None) -> dict[str, int]:
    """The processes a stdio measurement's CPU meter reads: this client, the server (if found) and the
    nats-server child it started (if any)."""
    pids = {"client": client}
    if server:
        pids["server"] = server
        nats_pid = find_child(server, "nats-server")
        if nats_pid:
            pids["nats"] = nats_pid
    return pids
