"""The gateway's MCP server: structured errors at the edge, then the tool sets registered on it."""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError

from services.gateway.limits import argument_problem
from services.gateway.stdio import stdio_transport


class MnemeMCPServer(MCPServer):
    """Argument validation errors become the same structured JSON as domain errors; stdio answers every line."""

    async def run_stdio_async(self) -> None:
        """Serve over stdin/stdout through mneme's transport: every line is answered (see stdio.py)."""
        low = self._lowlevel_server
        async with stdio_transport() as (read_stream, write_stream):
            await low.run(read_stream, write_stream, low.create_initialization_options())

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        tool = self._tool_manager.get_tool(name)
        if (problem := argument_problem(arguments)) is not None:
            raise ToolError(error_text({"code": "INVALID_INPUT", "field": problem.field, "message": problem.text()}))
        if tool is not None:  # a misspelt argument fails loudly instead of being dropped
            known = tool.parameters.get("properties", {})
            unknown = sorted(k for k in arguments if k not in known)
            if unknown:
                raise ToolError(error_text({
                    "code": "INVALID_INPUT", "field": unknown[0],
                    "message": f"{unknown[0]}: unknown argument; known: {', '.join(sorted(known))}",
                }))  # fmt: skip
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ToolError):  # ours: drop the SDK's "Error executing tool X: " prefix
                raise cause from None
            if isinstance(cause, ValidationError):
                errs = [{"field": ".".join(str(p) for p in e["loc"]), "problem": e["msg"]} for e in cause.errors()]
                first = errs[0] if errs else {"field": "arguments", "problem": "invalid"}
                raise ToolError(error_text({
                    "code": "INVALID_INPUT", "field": first["field"],
                    "message": f"{first['field']}: {first['problem']}", "errors": errs,
                })) from cause  # fmt: skip
            raise


def error_text(err: dict[str, Any]) -> str:
    return json.dumps({"error": err}, ensure_ascii=False)


def build_server(gw: Any, *, name: str = "mneme") -> MnemeMCPServer:
    from services.gateway import governance_tools, read_tools, search_tools, time_tools, write_tools

    mcp = MnemeMCPServer(
        name=name,
        instructions=(
            "mneme is a shared, event-sourced memory. Store facts with memory_add (optionally at a store path), "
            "read them back with memory_get / memory_list / memory_recent. Every change is versioned; "
            "pass request_id to make a write safe to retry."
        ),
    )
    write_tools.register(mcp, gw)
    read_tools.register(mcp, gw)
    governance_tools.register(mcp, gw)
    search_tools.register(mcp, gw)
    time_tools.register(mcp, gw)
    return mcp
