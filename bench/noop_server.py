"""A no-op MCP server over stdio: the floor every Python MCP tool call pays (framing, validation, dispatch).

One tool, `noop`, takes a string and returns a small pydantic model (so it has an outputSchema and
structured content, like mneme's tools). Run: `python bench/noop_server.py` (stdio).
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel


class Ack(BaseModel):
    ok: bool
    length: int


server = MCPServer(name="noop")


@server.tool(annotations=ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False))
async def noop(text: str) -> Ack:
    """Do nothing; say how long the text was."""
    return Ack(ok=True, length=len(text))


if __name__ == "__main__":
    server.run("stdio")
