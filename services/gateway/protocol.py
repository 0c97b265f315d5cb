"""The MCP protocol layer of mneme's servers: JSON-RPC errors that say what is wrong, capabilities that say
what is served.

The SDK (mcp 2.3.0, pinned) answers a request whose params fail validation with -32602 "Invalid request
parameters" and empty data, and any other exception a handler raises with code 0 and two tracebacks in the
log. `ProtocolErrors`, a server middleware (it wraps params validation and the handler), answers the first
with -32602 naming each offending field (`params.name: is required`) and the second with -32603 and one log
line holding an incident id and the traceback.

`MCPServer` registers handlers for prompts and resources whether or not it has any, and the SDK advertises a
capability for every registered handler. `serve_only_registered` makes both follow what is registered at the
moment of asking: `prompts` and `resources` are advertised only when there are some, and otherwise listing
them (prompts/list, resources/list, resources/templates/list) answers -32601 (Method not found), as the MCP
schema says a method behind a capability the server did not advertise does. Asking for one by name
(prompts/get, resources/read) stays -32602 naming the unknown name, whether there are others or none.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, ServerCapabilities
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from pydantic_core import ErrorDetails

log = logging.getLogger("mneme.gateway")

_KINDS = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
    "list_type": "a list",
    "none_required": "null",
}


class ProtocolErrors:
    """Server middleware: params that fail validation are -32602 naming the fields; an unexpected exception is
    -32603 with one log record (the SDK would answer code 0, its message the exception's text)."""

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        try:
            return await call_next(ctx)
        except MCPError:
            raise
        except ValidationError as exc:
            raise invalid_params(exc, ctx.params) from None
        except Exception as exc:  # a handler's bug: the client learns that it happened and where to look
            incident = uuid.uuid4().hex[:12]
            log.error("%s failed unexpectedly (incident %s)", ctx.method, incident, exc_info=exc)
            raise MCPError(
                code=INTERNAL_ERROR,
                message=f"Internal error: {ctx.method} failed; the server log has the details (incident {incident})",
            ) from None


def invalid_params(exc: ValidationError, params: Mapping[str, Any] | None) -> MCPError:
    """-32602 naming each field that failed (`params.arguments: must be an object`), never echoing a value."""
    problems: dict[str, list[str]] = {}
    for e in exc.errors():
        field, problem = _field_problem(e, {} if params is None else {"params": params})
        seen = problems.setdefault(field, [])
        if problem not in seen:
            seen.append(problem)
    return params_error(*((field, _joined(ps)) for field, ps in problems.items()))


def params_error(*problems: tuple[str, str]) -> MCPError:
    """-32602 for the (field, problem) pairs given: the message says them all, `data.errors` lists them."""
    text = "; ".join(f"{field}: {problem}" for field, problem in problems)
    errors = [{"field": field, "problem": problem} for field, problem in problems]
    return MCPError(code=INVALID_PARAMS, message=f"Invalid params: {text}", data={"errors": errors})


def _field_problem(e: ErrorDetails, root: Any) -> tuple[str, str]:
    """The field an error is about (its location, less a union member's tag, which is no key of the input)
    and what is wrong with it."""
    loc = [str(p) for p in e["loc"]]
    if loc[:1] != ["params"]:
        loc.insert(0, "params")
    node, depth = root, 0
    for part in loc:
        if isinstance(node, Mapping) and part in node:
            node, depth = node[part], depth + 1
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node, depth = node[int(part)], depth + 1
        else:
            break
    kind = e["type"]
    if kind == "missing" and depth < len(loc):
        return ".".join(loc[: depth + 1]), "is required"
    field = ".".join(loc[: max(depth, 1)])
    if kind in _KINDS:
        return field, f"must be {_KINDS[kind]}"
    if kind == "literal_error":
        return field, f"must be one of {e.get('ctx', {}).get('expected', '')}"
    if kind == "extra_forbidden":
        return field, "is not a field this method takes"
    return field, e["msg"][:1].lower() + e["msg"][1:]


def _joined(problems: list[str]) -> str:
    """One field failing every member of a union: "must be a string or an integer"."""
    if len(problems) > 1 and all(p.startswith("must be ") for p in problems):
        return "must be " + " or ".join(p.removeprefix("must be ") for p in problems)
    return "; ".join(problems)


# -- capabilities that follow what is registered ----------------------------------------------------------

PROMPT_LISTS = ("prompts/list",)
RESOURCE_LISTS = ("resources/list", "resources/templates/list")


def serve_only_registered(low: Server[Any], *, prompts: Callable[[], bool], resources: Callable[[], bool]) -> None:
    """Advertise `prompts`/`resources` only while `prompts()`/`resources()` say some are registered, and answer
    their list methods -32601 otherwise (asked each time, so what is registered after this call counts too).
    `logging` is advertised only to the handshake versions, the ones that have `logging/setLevel`."""
    for methods, served in ((PROMPT_LISTS, prompts), (RESOURCE_LISTS, resources)):
        for method in methods:
            entry = low.get_request_handler(method)
            if entry is not None:
                low.add_request_handler(method, entry.params_type, _only_if(served, method, entry.handler))
    sdk_capabilities = low.get_capabilities

    def capabilities(*args: Any, **kwargs: Any) -> ServerCapabilities:
        caps = sdk_capabilities(*args, **kwargs)
        drop: dict[str, None] = {}
        if not prompts():
            drop["prompts"] = None
        if not resources():
            drop["resources"] = None
        if kwargs.get("protocol_version") in MODERN_PROTOCOL_VERSIONS:
            drop["logging"] = None
        return caps.model_copy(update=drop) if drop else caps

    # The SDK derives capabilities from registered handlers in this one method (its callers: the initialize
    # result and server/discover), with no hook for a server that registers handlers it may not use.
    low.get_capabilities = capabilities  # type: ignore[method-assign]


def _only_if(served: Callable[[], bool], method: str, handler: Any) -> Any:
    kind = method.split("/", 1)[0]

    async def gated(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
        if not served():
            raise MCPError(
                code=METHOD_NOT_FOUND,
                message=f"Method not found: this server has no {kind} (its {kind} capability is not advertised)",
                data=method,
            )
        return await handler(ctx, params)

    return gated
