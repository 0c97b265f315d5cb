"""The gateway's MCP server: structured errors at the edge, then the tool sets registered on it.

Every failure of a tool call leaves as a tool error whose text is `{"error": {"code", "field", "message"}}`:
an unknown tool (UNKNOWN_TOOL), an argument that breaks a structural limit or fails its schema
(INVALID_INPUT naming the argument), a domain error (its own code), and anything unexpected (INTERNAL,
without the exception's text: that goes to the server log with its traceback).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from importlib import metadata
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.shared.exceptions import MCPError
from mcp.types import GetPromptResult, InputRequiredResult
from mcp.types import Tool as MCPTool
from pydantic import ValidationError
from starlette.applications import Starlette

from services.gateway import arg_errors
from services.gateway.client_log import serve_set_level
from services.gateway.error_styles import NATIVE_ERRORS, ErrorStyle
from services.gateway.http_protocol import SSE_RETRY_MS, resumable
from services.gateway.limits import argument_problem, shown
from services.gateway.protocol import ProtocolErrors, params_error, serve_only_registered
from services.gateway.stdio import stdio_transport

log = logging.getLogger("mneme.gateway")


def package_version() -> str:
    """mneme's version as installed (what `mneme --version` reports)."""
    try:
        return metadata.version("mneme")
    except metadata.PackageNotFoundError:  # a source tree on the path, not installed
        from mneme import __version__

        return __version__


class MnemeMCPServer(MCPServer[Any]):
    """Every failed call leaves as the same structured JSON as domain errors; stdio answers every line."""

    def __init__(
        self,
        *,
        version: str | None = None,
        errors: ErrorStyle = NATIVE_ERRORS,
        listed: Mapping[str, dict[str, Any]] | None = None,
        **kwargs: Any,
    ):
        super().__init__(version=version or package_version(), **kwargs)
        self.errors = errors  # the profile's error format, for the errors raised here as well
        self.listed = listed or {}  # tools listed exactly as a contract's own server lists them
        # the protocol layer (protocol.py, client_log.py): JSON-RPC errors naming what is wrong, logging/setLevel,
        # and prompts/resources advertised (and served) only while some are registered
        low = self._lowlevel_server
        low.middleware.append(ProtocolErrors())
        serve_set_level(low)
        serve_only_registered(
            low,
            prompts=lambda: bool(self._prompt_manager.list_prompts()),
            resources=lambda: bool(self._resource_manager.list_resources() or self._resource_manager.list_templates()),
        )

    async def list_tools(self) -> list[MCPTool]:
        tools = await super().list_tools()
        return [MCPTool.model_validate(self.listed[t.name]) if t.name in self.listed else t for t in tools]

    async def run_stdio_async(self) -> None:
        """Serve over stdin/stdout through mneme's transport: every line is answered (see stdio.py)."""
        low = self._lowlevel_server
        async with stdio_transport() as (read_stream, write_stream):
            await low.run(read_stream, write_stream, low.create_initialization_options())

    def streamable_http_app(self, **kwargs: Any) -> Starlette:
        """The SDK's streamable HTTP app, its POST streams resumable: each opens with a priming event and the
        `retry` field, and each session keeps its recent events for a client that reconnects (http_protocol.py)."""
        kwargs.setdefault("retry_interval", SSE_RETRY_MS)
        app = super().streamable_http_app(**kwargs)
        resumable(self.session_manager)
        return app

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Any = None
    ) -> GetPromptResult | InputRequiredResult:
        """An unknown prompt, or one missing a required argument, is -32602 (the SDK answers code 0)."""
        prompt = self._prompt_manager.get_prompt(name)
        if prompt is None:
            names = sorted(p.name for p in self._prompt_manager.list_prompts())
            known = f"known prompts: {', '.join(names)}" if names else "this server serves no prompts"
            log.info("prompts/get: unknown prompt %r", shown(name))
            raise params_error(("params.name", f"unknown prompt {shown(name)!r}; {known}"))
        given = arguments or {}
        missing = sorted(a.name for a in prompt.arguments or () if a.required and a.name not in given)
        if missing:
            raise params_error(("params.arguments", f"prompt {name!r} needs {', '.join(missing)}"))
        return await super().get_prompt(name, arguments, context)

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        tool = self._tool_manager.get_tool(name)
        if tool is None:
            known = ", ".join(sorted(t.name for t in self._tool_manager.list_tools()))
            raise self.error("UNKNOWN_TOOL", "name", f"name: unknown tool {shown(name)!r}; known: {known}")
        if (problem := argument_problem(arguments)) is not None:
            raise self.error("INVALID_INPUT", problem.field, problem.text())
        known_args = tool.parameters.get("properties", {})
        unknown = sorted(k for k in arguments if k not in known_args)
        if unknown:  # a misspelt argument fails loudly instead of being dropped
            takes = f"known: {', '.join(sorted(known_args))}" if known_args else "this tool takes no arguments"
            raise self.error("INVALID_INPUT", unknown[0], f"{unknown[0]}: unknown argument; {takes}")
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError as exc:
            raise internal_error(name, exc.__cause__ or exc, self.errors) from None
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ToolError):  # ours: drop the SDK's "Error executing tool X: " prefix
                raise cause from None
            if isinstance(cause, ValidationError):
                errs = validation_errors(cause, arguments, known_args)
                first = errs[0] if errs else {"field": "arguments", "problem": "invalid"}
                raise ToolError(
                    self.errors.render(
                        "INVALID_INPUT", f"{first['field']}: {first['problem']}", first["field"], extra={"errors": errs}
                    )
                ) from cause
            raise internal_error(name, exc, self.errors) from None
        except MCPError:
            raise
        except Exception as exc:  # noqa: BLE001 - the SDK wraps tool failures; anything else is ours to hide
            raise internal_error(name, exc, self.errors) from None

    def error(self, code: str, field: str | None, message: str) -> ToolError:
        return ToolError(self.errors.render(code, message, field))


def internal_error(tool: str, exc: BaseException, errors: ErrorStyle = NATIVE_ERRORS) -> ToolError:
    """An unexpected failure: the client learns that it happened and where to look, the log gets the rest."""
    incident = uuid.uuid4().hex[:12]
    log.error("%s failed unexpectedly (incident %s)", tool, incident, exc_info=exc)
    return ToolError(
        errors.render("INTERNAL", f"{tool} failed unexpectedly; the server log has the details (incident {incident})")
    )


_KINDS = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "array": "a list",
    "object": "an object",
}


def _accepted(prop: dict[str, Any]) -> str | None:
    """What a union argument accepts, from its schema ("a log sequence number (an integer) or ...")."""
    members = [m for m in prop.get("anyOf", ()) if m.get("type") != "null"]
    if len(members) < 2:
        return None
    names = []
    for m in members:
        kind = _KINDS.get(m.get("type", ""), "an object")
        names.append(f"{m['description']} ({kind})" if m.get("description") else kind)
    return ", ".join(names[:-1]) + " or " + names[-1]


def validation_errors(exc: ValidationError, arguments: dict[str, Any], props: dict[str, Any]) -> list[dict[str, str]]:
    """pydantic's errors, one per problem, each naming the argument. A value that matches no member of a
    union fails once per member (`as_of.int`, `as_of.str`): those become one error on the argument itself,
    listing what it accepts."""
    out: list[dict[str, str]] = []
    collapsed: set[str] = set()
    for e in exc.errors():
        loc = e["loc"]
        arg = str(loc[0]) if loc else "arguments"
        accepted = _accepted(props.get(arg, {}))
        if accepted and len(loc) == 2 and isinstance(loc[1], str) and e.get("input") == arguments.get(arg):
            if arg not in collapsed:
                collapsed.add(arg)
                got = arguments.get(arg)
                out.append({"field": arg, "problem": f"must be {accepted}; got {shown(json.dumps(got, default=str))}"})
            continue
        out.append({"field": ".".join(str(p) for p in loc) or "arguments", "problem": arg_errors.problem(dict(e))})
    return out


def build_server(gw: Any, *, name: str = "mneme", profile: str = "native") -> MnemeMCPServer:
    """The MCP server of one profile (see services/gateway/profiles): its tools, its error format."""
    from services.gateway.profiles import load
    from services.gateway.toolkit import lean_schema, mcp_handler, require_context

    p = load(profile)
    is_native = p.name == "native"
    if is_native and gw is not None:  # the operator's choices: the context argument, the groups of tools
        p = p.with_options(context=gw.native_context, groups=gw.tool_groups)

    @asynccontextmanager
    async def serving(_: MCPServer[Any]) -> AsyncIterator[Any]:
        yield gw  # each request's ctx.request_context.lifespan_context: the gateway its tools run on

    mcp = MnemeMCPServer(
        lifespan=serving,
        name=p.server[0] if p.server else name if is_native else f"{name}-{p.name}",
        version=p.server[1] if p.server else None,
        instructions=p.instructions or None,
        errors=p.errors,
        listed=p.listed,
    )
    for spec in p.served():
        mcp.add_tool(mcp_handler(p, spec), name=spec.name, description=spec.description, annotations=spec.hints)
        tool = mcp._tool_manager.get_tool(spec.name)
        assert tool is not None  # added just above
        if p.context == "required":
            tool.parameters = require_context(tool.parameters, p.context_required)
        if p.drop_nulls:  # results never hold a null: the schemas need not say one may come
            tool.parameters = lean_schema(tool.parameters)
            tool.fn_metadata.output_schema = lean_schema(tool.fn_metadata.output_schema)
    return mcp
