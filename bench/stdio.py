"""MCP over stdio for the benchmarks: `mneme serve` and the no-op MCPServer (bench/noop_server.py) under the
mcp package's client, timed blocks of tool calls, and the processes to meter.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CallToolResult, TextContent

from bench.common import find_child, timed_each
from bench.fixtures import MNEME, REPO

NOOP_SERVER = str(Path(__file__).resolve().parent / "noop_server.py")


@asynccontextmanager
async def mcp_session(params: StdioServerParameters, errlog: Any) -> AsyncIterator[ClientSession]:
    async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def serve_params(data_dir: Path, profile: str | None = None, **env: str) -> StdioServerParameters:
    """`mneme serve` on `data_dir` (with `profile`, that tool profile), the environment plus `env`."""
    # the whole environment: the SDK passes a child only a few variables by default, and PYTHONPATH (a
    # baseline worktree measured side by side) must reach `mneme serve`, or it runs the installed tree
    args = ["serve", "--data-dir", str(data_dir), *(["--profile", profile] if profile else [])]
    return StdioServerParameters(command=MNEME, args=args, cwd=str(REPO), env={**os.environ, **env})


def noop_params() -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[NOOP_SERVER], cwd=str(REPO))


class ToolFailed(Exception):
    pass


def structured(res: Any) -> dict[str, Any]:
    if res.is_error:
        raise ToolFailed(res.content[0].text if res.content else "tool error")
    return res.structured_content


async def mcp_block(session: ClientSession, tool: str, args_list: list[dict[str, Any]]) -> tuple[float, list[float]]:
    """`tool` called with each of `args_list` in turn (a failed call raises ToolFailed): (seconds, each call's)."""

    async def one(args: dict[str, Any]) -> None:
        structured(await session.call_tool(tool, args))

    return await timed_each(args_list, one)


async def call(session: ClientSession, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """One tool call's structured result (ToolFailed if it failed)."""
    return structured(await session.call_tool(tool, args))


def first_text(res: CallToolResult) -> str:
    """The text of a tool result's first content block (mneme answers with one text block), or "?"."""
    block = res.content[0] if res.content else None
    return block.text if isinstance(block, TextContent) else "?"


def error_code(res: CallToolResult) -> str:
    """The code of a failed call's structured error ("?" without one)."""
    return str(json.loads(first_text(res)).get("error", {}).get("code", "?"))


def server_pids(server: int | None, **clients: int) -> dict[str, int]:
    """The processes a stdio measurement's CPU meter reads: the clients named, the server (if found) and the
    nats-server child it started (if any)."""
    pids = dict(clients)
    if server:
        pids["server"] = server
        nats_pid = find_child(server, "nats-server")
        if nats_pid:
            pids["nats"] = nats_pid
    return pids


def serve_child(data_dir: Path) -> int | None:
    """The `mneme serve` child of this process that runs on `data_dir`."""
    return find_child(os.getpid(), "serve", str(data_dir))
