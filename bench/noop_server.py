"""A no-op MCP server over stdio: the floor every Python MCP tool call pays (framing, validation, dispatch).

One tool, `noop`, takes a string and returns a small pydantic model (so it has an outputSchema and
structured content, like mneme's tools). Run: `python bench/noop_server.py` (stdio).

With `--nats-url URL` the same tool also awaits one JetStream publish of the text (stream
NOOP_BENCH): the floor of any tool that must wait for a durable write before it answers.
"""

from __future__ import annotations

import sys

import nats
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from nats.js.api import StorageType, StreamConfig
from pydantic import BaseModel


class Ack(BaseModel):
    ok: bool
    length: int


server = MCPServer(name="noop")
NATS_URL = sys.argv[sys.argv.index("--nats-url") + 1] if "--nats-url" in sys.argv else None
_js = None
_n = 0


async def _publish(url: str, text: str) -> None:
    global _js, _n
    if _js is None:
        nc = await nats.connect(url)
        _js = nc.jetstream()
        await _js.add_stream(StreamConfig(name="NOOP_BENCH", subjects=["noopbench.>"], storage=StorageType.FILE))
    _n += 1
    await _js.publish(f"noopbench.{_n}", text.encode(), headers={"Nats-Msg-Id": f"m{_n}"})


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False))
async def noop(text: str) -> Ack:
    """Do nothing (or, with --nats-url, one JetStream publish); say how long the text was."""
    if NATS_URL:
        await _publish(NATS_URL, text)
    return Ack(ok=True, length=len(text))


if __name__ == "__main__":
    server.run("stdio")
