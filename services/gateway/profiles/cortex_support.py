"""The cortex profile's mapping: the store registry, the contract's errors (MCP error codes) and its wording.

A cortex store S is registered as S -> namespace (settings MNEME_GATEWAY_STORES, `--store NAME[=NAMESPACE]`).
Its memories are the domain's memories with `namespace` = that namespace and `store` = S, so the native
surface reads them with memory_get(namespace=..., store=S, path=...). A store registered without a namespace
lives in the gateway's default namespace (MNEME_GATEWAY_NAMESPACE): `store_namespace` is that rule, and
`parse_store_option` applies it to a `--store` option for the CLI.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mneme.domain import validation as v
from mneme.errors import InvalidInput, MnemeError
from services.gateway.error_styles import ErrorStyle
from services.gateway.gateway import Gateway

# -- the store registry ------------------------------------------------------------------------------------


def store_namespace(name: str, namespace: str | None, default_namespace: str) -> str:
    """The namespace a cortex store lives in: the one it was registered with, else the gateway's default
    namespace (a store registered as plain NAME, or NAME= , or "NAME": "" in MNEME_GATEWAY_STORES)."""
    return namespace if namespace else default_namespace


def parse_store_option(spec: str, default_namespace: str) -> tuple[str, str]:
    """`--store NAME[=NAMESPACE]` -> (name, namespace), both checked by the domain's rules (InvalidInput)."""
    name, _, namespace = spec.partition("=")
    name = v.store(name.strip(), "--store")
    resolved = store_namespace(name, namespace.strip() or None, default_namespace)
    return name, v.namespace(resolved, "--store") if resolved else ""  # "": the default namespace, resolved later


class StoreNotRegistered(MnemeError):
    code = "STORE_NOT_REGISTERED"

    def __init__(self, name: str, registered: list[str]):
        known = ", ".join(registered) if registered else "none (register stores with MNEME_GATEWAY_STORES)"
        super().__init__(f"Store '{name}' is not registered. Registered stores: {known}", field="store")


class CategoryNotFound(MnemeError):
    code = "CATEGORY_NOT_FOUND"

    def __init__(self, path: str):
        super().__init__(f"Category not found: {path}", field="category")


def registered_namespace(gw: Gateway, store: str) -> str:
    """The namespace of a registered store; StoreNotRegistered otherwise (there is no default store)."""
    if store not in gw.stores:
        raise StoreNotRegistered(store, sorted(gw.stores))
    v.store(store)
    return store_namespace(store, gw.stores[store], gw.principal.default_namespace)


def scope(gw: Gateway, arguments: dict[str, Any]) -> str | None:
    """The namespace a call acts in (the mechanism authorizes it); an unregistered store is refused here,
    before authorization, in the contract's words (a caller without rights in the default namespace is told
    the store is not registered, not that it may not touch a namespace)."""
    store = arguments.get("store")
    return registered_namespace(gw, store) if isinstance(store, str) else None


# -- the contract's errors ----------------------------------------------------------------------------------

INVALID_REQUEST, INVALID_PARAMS, INTERNAL_ERROR = -32600, -32602, -32603  # MCP (JSON-RPC) ErrorCode values

MCP_CODES = {
    # what the caller can correct: InvalidParams, as the contract's translateMemoryError does
    "INVALID_INPUT": INVALID_PARAMS,
    "MEMORY_NOT_FOUND": INVALID_PARAMS,
    "ALREADY_EXISTS": INVALID_PARAMS,
    "STORE_NOT_REGISTERED": INVALID_PARAMS,
    "CATEGORY_NOT_FOUND": INVALID_PARAMS,
    "INVALID_STATE": INVALID_PARAMS,
    "IDEMPOTENCY_KEY_REUSED": INVALID_PARAMS,
    "UNKNOWN_TOOL": INVALID_PARAMS,
    # refusals the contract does not know (locks, protected kinds, namespaces): InvalidRequest
    "MEMORY_LOCKED": INVALID_REQUEST,
    "WRITE_NOT_ALLOWED": INVALID_REQUEST,
    "PERMISSION_ERROR": INVALID_REQUEST,
    "SCOPE_VIOLATION": INVALID_REQUEST,
    "INVALID_CONTEXT": INVALID_REQUEST,
}
# everything else (CONFLICT, PROJECTION_LAG, UNAVAILABLE, INTERNAL, a failed reindex): InternalError

NO_UPDATES = "No updates provided. Specify content, tags, expires_at, clear_expiry, or citations."


@dataclass(frozen=True)
class McpErrorStyle(ErrorStyle):
    """The contract's errors are McpError(code, message): an MCP ErrorCode and a descriptive message, which an
    MCP client shows as "MCP error <code>: <message>". Rendered as {"error": {"code": <int>, "message": "MCP
    error <code>: <message>"}}: the code a cortex client compares with ErrorCode, and its message verbatim."""

    def render(
        self,
        code: str,
        message: str,
        field_: str | None = None,
        details: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> str:
        mcp = MCP_CODES.get(code, INTERNAL_ERROR)
        if code == "INVALID_INPUT" and "updatable" in (details or {}):  # the domain's NothingToChange
            message = NO_UPDATES
        elif extra and extra.get("errors"):  # every argument problem, as zod lists its issues
            message = "; ".join(f"{e['field']}: {e['problem']}" for e in extra["errors"])
        return json.dumps({"error": {"code": mcp, "message": f"MCP error {mcp}: {message}"}}, ensure_ascii=False)


CORTEX_ERRORS = McpErrorStyle(with_field=False, with_details=False)


def reworded(exc: MnemeError, message: str) -> MnemeError:
    """The same domain error (code, field, details) in the contract's words."""
    out = MnemeError(message, field=exc.field, details=exc.details)
    out.code = exc.code
    return out


@contextmanager
def cortex_words(path: str, *, to_path: str | None = None) -> Iterator[None]:
    """Domain errors about one memory, worded as the contract words them (`Memory not found: <path>`)."""
    try:
        yield
    except MnemeError as exc:
        if exc.code == "MEMORY_NOT_FOUND":
            raise reworded(exc, f"Memory not found: {path}") from None
        if exc.code == "ALREADY_EXISTS":
            raise reworded(
                exc,
                f"Destination already exists: {to_path}" if to_path is not None else f"Memory already exists: {path}",
            ) from None
        if exc.code == "MEMORY_LOCKED":
            raise reworded(exc, f"Memory is locked: {path} (only an admin can change it)") from None
        raise


def parse_time(value: str | None, field: str) -> datetime | None:
    """An ISO 8601 date or date-time (no offset: UTC), as the contract's isoDateSchema accepts it."""
    if value is None:
        return None
    try:
        t = datetime.fromisoformat(value.strip())
        return v.utc(t, field)
    except ValueError:
        raise InvalidInput(field, "Must be a valid ISO 8601 date string") from None
    except OverflowError:  # e.g. 0001-01-01T00:00:00+01:00: before year 1 in UTC
        raise InvalidInput(field, "Must be a date between years 1 and 9999 in UTC") from None
