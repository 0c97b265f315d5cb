"""Tool surfaces as profiles: each profile is one small module of typed tool functions plus its mapping.

A tool function is `async def name(call: Call, <arguments>) -> <pydantic model>`: its signature after
`call` is the tool's input schema, its return type the output schema, its docstring the description.
It is declared once, with its intent (read, write, admin: what the principal must be allowed), its MCP
annotations and its group (`Toolset.tool`). The mechanism turns it into an MCP tool: it authorizes the
call (principal, namespace, context), runs the body, records the read or the refusal, and renders any
domain error in the profile's own error format (`ErrorStyle`). No profile owns storage: bodies speak
to the gateway's commands and queries, and agents on different profiles share one memory.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from mneme.errors import MnemeError
from services.gateway.error_styles import NATIVE_ERRORS, ErrorStyle
from services.gateway.gateway import Call, Gateway
from services.gateway.params import ContextArg, Intent, RequestContext

ContextPolicy = Literal["never", "optional", "required"]
Scope = Callable[[Gateway, dict[str, Any]], str | None]  # a call's arguments -> its namespace (None: default)




@dataclass(frozen=True)
class ToolSpec:
    name: str
    fn: Callable[..., Awaitable[Any]]
    intent: Intent
    hints: ToolAnnotations
    group: str
    description: str


class Toolset:
    """The tools of one profile, in the order they are listed.

    A description is the function's docstring, dedented; `doc_indent` puts that many spaces back in front of
    each of its continuation lines (the native surface's descriptions have always carried 8: MCPServer.tool
    served the raw docstrings of functions nested in a `register`)."""

    def __init__(self, *, doc_indent: int = 0) -> None:
        self.specs: list[ToolSpec] = []
        self.doc_indent = doc_indent

    def tool(self, name: str | None = None, *, intent: Intent, hints: ToolAnnotations, group: str = "core",
             description: str | None = None) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:  # fmt: skip  # noqa: E501
        def declare(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            doc = (inspect.getdoc(fn) or "").replace("\n", "\n" + " " * self.doc_indent)
            self.specs.append(ToolSpec(name or fn.__name__, fn, intent, hints, group, description or doc))
            return fn

        return declare


@dataclass(frozen=True)
class Profile:
    name: str
    tools: Toolset
    instructions: str
    errors: ErrorStyle = NATIVE_ERRORS
    context: ContextPolicy = "optional"  # the `context` argument: absent, optional or required on every tool
    scope: Scope | None = None  # default: the `namespace` argument, if the tool has one
    groups: tuple[str, ...] | None = None  # the groups served (None: all)


def _default_scope(gw: Gateway, arguments: dict[str, Any]) -> str | None:
    ns = arguments.get("namespace")
    return ns if isinstance(ns, str) else None


def mcp_handler(gw: Gateway, profile: Profile, spec: ToolSpec) -> Callable[..., Awaitable[Any]]:
    """The function MCP registers: (ctx, <the tool's arguments>[, context]) with the tool's own schema."""
    sig = inspect.signature(spec.fn, eval_str=True)
    params = list(sig.parameters.values())[1:]  # the first is `call`
    ctx_param = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context)
    own = [p for p in params if p.name != "context"]
    if profile.context == "optional":
        own.append(inspect.Parameter("context", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None,
                                     annotation=ContextArg))  # fmt: skip
    elif profile.context == "required":
        required = [p for p in own if p.default is inspect.Parameter.empty]
        rest = [p for p in own if p.default is not inspect.Parameter.empty]
        own = [*required, inspect.Parameter("context", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                            annotation=RequestContext), *rest]  # fmt: skip
    scope = profile.scope or _default_scope
    takes_context = any(p.name == "context" for p in params)

    async def handler(ctx: Context, **arguments: Any) -> Any:
        context = arguments.pop("context", None) if not takes_context else arguments.get("context")
        if isinstance(context, dict):
            context = RequestContext.model_validate(context)
        try:
            namespace = scope(gw, arguments)
        except MnemeError as exc:  # e.g. a store the registry does not know: in the profile's own format
            raise ToolError(profile.errors.render(exc.code, exc.message, exc.field, exc.details)) from None

        async def body(call: Call) -> Any:
            return await spec.fn(call, **arguments)

        return await gw.run(ctx.headers, spec.name, spec.intent, context, namespace, body, errors=profile.errors)

    handler.__name__ = spec.name
    handler.__doc__ = spec.description
    handler.__signature__ = sig.replace(parameters=[ctx_param, *own])  # type: ignore[attr-defined]
    handler.__annotations__ = {p.name: p.annotation for p in [ctx_param, *own]} | {"return": sig.return_annotation}
    return handler
