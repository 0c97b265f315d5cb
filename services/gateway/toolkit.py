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

import dataclasses
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel

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
    """The tools of one profile (or one concern of it), in the order they are listed. A description is the
    function's docstring, dedented (`flow`: and each paragraph joined onto one line, as the native surface
    sends it); `group` is the default group of its tools (operators choose which groups a server offers)."""

    def __init__(self, *, group: str = "core", flow: bool = False) -> None:
        self.specs: list[ToolSpec] = []
        self.group = group
        self.flow = flow

    def tool(
        self,
        name: str | None = None,
        *,
        intent: Intent,
        hints: ToolAnnotations,
        group: str | None = None,
        description: str | None = None,
    ) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
        def declare(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            doc = inspect.getdoc(fn) or ""
            if self.flow:
                doc = "\n\n".join(" ".join(block.split()) for block in doc.split("\n\n"))
            self.specs.append(ToolSpec(name or fn.__name__, fn, intent, hints, group or self.group, description or doc))
            return fn

        return declare

    def pick(self, *names: str) -> list[ToolSpec]:
        by_name = {s.name: s for s in self.specs}
        return [by_name[n] for n in names]


@dataclass(frozen=True)
class Profile:
    name: str
    tools: Toolset
    instructions: str
    errors: ErrorStyle = NATIVE_ERRORS
    context: ContextPolicy = "optional"  # the `context` argument: absent, optional or required on every tool
    scope: Scope | None = None  # default: the `namespace` argument, if the tool has one
    groups: tuple[str, ...] | None = None  # the groups served (None: all)
    drop_nulls: bool = False  # leave null fields out of results (native: absent means none)
    # fields of `context` its schema shows required (the contract's), while the call still reaches the tool: a
    # context missing one is refused there, in the contract's format and recorded in the audit trail as refused
    context_required: tuple[str, ...] = ()
    # tools listed exactly as a contract's own server lists them (name -> its tools/list entry): title, schemas,
    # annotations, execution; the functions still validate the arguments
    listed: Mapping[str, dict[str, Any]] | None = None
    server: tuple[str, str] | None = None  # the serverInfo (name, version) the contract names (None: mneme's)

    def with_options(self, *, context: ContextPolicy | None = None, groups: tuple[str, ...] | None = None) -> Profile:
        """This profile as an operator configured it: its context policy, the groups of tools it offers."""
        return dataclasses.replace(
            self, context=context or self.context, groups=groups if groups is not None else self.groups
        )

    def served(self) -> list[ToolSpec]:
        return [s for s in self.tools.specs if self.groups is None or s.group in self.groups]


def lean_schema(schema: Any) -> Any:
    """A JSON schema without what an agent pays for and gains nothing from: pydantic's generated titles, and the
    `anyOf [T, null]` + `default: null` of an optional value (absent means none: a profile that drops null
    fields never sends one, and an optional argument is simply left out). Property names are kept as they are."""
    if isinstance(schema, list):
        return [lean_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs"):
            out[key] = {name: lean_schema(sub) for name, sub in value.items()}
        else:
            out[key] = lean_schema(value)
    options = out.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options and "default" in out and out["default"] is None:
        rest = [o for o in options if o != {"type": "null"}]
        del out["anyOf"], out["default"]
        out = {**rest[0], **out} if len(rest) == 1 else {"anyOf": rest, **out}
    return out


def require_context(schema: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """The input schema of a profile whose `context` is required: `context` listed as required (after the
    other required arguments), its schema the object itself rather than object-or-null, and `fields` of it
    listed as required (wherever pydantic put the object)."""
    props = schema.get("properties", {})
    prop = props.get("context")
    if prop is None:
        return schema
    options = prop.get("anyOf")
    if options and {"type": "null"} in options:
        rest = [o for o in options if o != {"type": "null"}]
        prop = {**rest[0], **{k: v for k, v in prop.items() if k not in ("anyOf", "default")}}
        props["context"] = prop
    required = schema.setdefault("required", [])
    if "context" not in required:
        required.append("context")
    if fields:
        ref = prop.get("$ref")
        target = schema["$defs"][ref.rsplit("/", 1)[-1]] if ref else prop
        target["required"] = list(fields)
    return schema


def as_result(value: Any, drop_nulls: bool) -> Any:
    """A tool's answer as the client receives it: the structured content, and the same JSON, compact, as text."""
    if not isinstance(value, BaseModel) or isinstance(value, CallToolResult):  # a result the tool built itself
        return value
    data = value.model_dump(mode="json", by_alias=True, exclude_none=drop_nulls)
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _default_scope(gw: Gateway, arguments: dict[str, Any]) -> str | None:
    ns = arguments.get("namespace")
    return ns if isinstance(ns, str) else None


def mcp_handler(profile: Profile, spec: ToolSpec) -> Callable[..., Awaitable[Any]]:
    """The function MCP registers: (ctx, <the tool's arguments>[, context]) with the tool's own schema. The
    gateway it runs on is the server's lifespan state (build_server), reached through the request context."""
    sig = inspect.signature(spec.fn, eval_str=True)
    params = list(sig.parameters.values())[1:]  # the first is `call`
    ctx_param = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context)
    own = [p for p in params if p.name != "context"]
    if profile.context == "optional":
        own.append(
            inspect.Parameter("context", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=ContextArg)
        )
    elif profile.context == "required":
        required = [p for p in own if p.default is inspect.Parameter.empty]
        rest = [p for p in own if p.default is not inspect.Parameter.empty]
        # required in the schema (build_server marks it so), optional to the argument model: a call without it
        # reaches the gateway, which refuses it as INVALID_CONTEXT and records the refusal in the audit trail
        own = [
            *required,
            inspect.Parameter(
                "context", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=RequestContext | None
            ),
            *rest,
        ]
    scope = profile.scope or _default_scope
    takes_context = any(p.name == "context" for p in params)

    async def handler(ctx: Context[Gateway, Any], **arguments: Any) -> Any:
        gw = ctx.request_context.lifespan_context
        context = arguments.pop("context", None) if not takes_context else arguments.get("context")
        if isinstance(context, dict):
            context = RequestContext.model_validate(context)
        try:
            namespace = scope(gw, arguments)
        except MnemeError as exc:  # e.g. a store the registry does not know: in the profile's own format
            raise ToolError(profile.errors.render(exc.code, exc.message, exc.field, exc.details)) from None

        async def body(call: Call) -> Any:
            return await spec.fn(call, **arguments)

        got = await gw.run(
            ctx.headers,
            spec.name,
            spec.intent,
            context,
            namespace,
            body,
            errors=profile.errors,
            context_required=profile.context == "required",
        )
        return as_result(got, profile.drop_nulls)

    handler.__name__ = spec.name
    handler.__doc__ = spec.description
    handler.__signature__ = sig.replace(parameters=[ctx_param, *own])  # type: ignore[attr-defined]
    handler.__annotations__ = {p.name: p.annotation for p in [ctx_param, *own]} | {"return": sig.return_annotation}
    return handler
