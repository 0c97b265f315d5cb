"""Structural limits on what a call may carry, whatever the transport: nesting, valid Unicode, finite numbers,
integers that fit in 64 bits.

JSON parsers disagree at the edges. The SDK's (jiter: stdio, the handshake-era HTTP entry) refuses lone
UTF-16 surrogates and nesting past 200 levels; Python's `json` (the 2026-07-28 HTTP entry) and in-process
callers let both through, and every parser here reads `NaN`, `Infinity` and `1e400`. A value we accept is
stored in the log and sent back later, so it must be something every reader can parse and every writer
can encode: pydantic refuses to serialize a lone surrogate, and stops at a few hundred levels of nesting,
and a client's parser stops at 200. Python reads any integer, but the log's and the queries' encoder (msgspec)
and DuckDB stop at 64 bits: an offset of 2**64 failed its query, and metadata holding one was written to the
log and then broke every read of that memory. So the limits are checked once, before a tool sees its arguments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE

MAX_DEPTH = 32
"""How deeply a value may nest: `{"a": 1}` is 1 level, `{"a": [1]}` 2."""

MIN_INT, MAX_INT = -(2**63), 2**63 - 1
"""The integers a call may carry: a signed 64-bit integer, what every store and encoder here holds."""

MAX_MESSAGE_BYTES = DEFAULT_MAX_REQUEST_BODY_SIZE
"""The largest JSON-RPC message, in bytes of UTF-8: a stdio line, as an HTTP body (4 MiB, the SDK's HTTP limit)."""


@dataclass(frozen=True, slots=True)
class Problem:
    field: str  # the top-level name: an argument, or the envelope member
    path: str  # where exactly: "metadata.a[2]"
    message: str  # what is wrong, without the offending value

    def text(self) -> str:
        return f"{self.path}: {self.message}"


def shown(text: str, limit: int = 60) -> str:
    """`text` safe to put in a reply: lone surrogates escaped (a reply holding one cannot be encoded), cut short."""
    cut = text if len(text) <= limit else text[:limit] + "…"
    return cut.encode("utf-8", "backslashreplace").decode("utf-8")


def _surrogate(s: str) -> str | None:
    if s.isascii():
        return None
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (
            f"contains a lone UTF-16 surrogate (U+{ord(s[exc.start]):04X}) at character {exc.start}; "
            "text must be valid Unicode"
        )
    return None


def _path(parts: tuple[Any, ...]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (shown(str(p)) if not out else f".{shown(str(p))}")
    return out


def _scalar(v: Any, ints: bool = False) -> str | None:
    """What is wrong with a string or a number (None: nothing, or not a scalar this checks); `ints`: an integer
    must fit in 64 bits too."""
    if isinstance(v, str):
        return _surrogate(v)
    if isinstance(v, float) and not math.isfinite(v):
        return "must be a finite number"
    if ints and isinstance(v, int) and not MIN_INT <= v <= MAX_INT:
        return f"must be an integer from {MIN_INT} to {MAX_INT} (64 bits)"
    return None


def first_problem(
    value: Any, prefix: tuple[Any, ...] = (), max_depth: int = MAX_DEPTH, *, ints: bool = False
) -> Problem | None:
    """The first string with a lone surrogate, number that is not finite, integer past 64 bits, or container
    nested deeper than `max_depth`, in `value` (integers only with `ints`: a tool's arguments reach the log and
    the queries; a JSON-RPC envelope's numbers do not). Walked without recursion, so any depth is safe to
    inspect; a container's scalars are checked in place and only containers are queued, so a long list of
    numbers costs little."""
    if (bad := _scalar(value, ints)) is not None:
        return _problem(prefix, bad)
    stack: list[tuple[Any, tuple[Any, ...], int]] = [(value, prefix, 1)] if isinstance(value, dict | list) else []
    while stack:
        v, parts, depth = stack.pop()
        if depth > max_depth:  # named by where it starts: the path down there says nothing more
            return _problem(parts[:2], f"nested deeper than {max_depth} levels")
        if isinstance(v, dict):
            for k, item in v.items():
                if isinstance(k, str) and (bad := _surrogate(k)) is not None:
                    return _problem(parts, f"has a key that {bad}")
                if isinstance(item, dict | list):
                    stack.append((item, (*parts, k), depth + 1))
                elif (bad := _scalar(item, ints)) is not None:
                    return _problem((*parts, k), bad)
        else:
            for i, item in enumerate(v):
                if isinstance(item, dict | list):
                    stack.append((item, (*parts, i), depth + 1))
                elif (bad := _scalar(item, ints)) is not None:
                    return _problem((*parts, i), bad)
    return None


def _problem(parts: tuple[Any, ...], message: str) -> Problem:
    field = shown(str(parts[0])) if parts else "arguments"
    return Problem(field=field, path=_path(parts) or field, message=message)


def argument_problem(arguments: dict[str, Any]) -> Problem | None:
    """The first argument of a tool call that breaks a structural limit, named by the argument."""
    for name, value in arguments.items():
        if (bad := _surrogate(name)) is not None:
            return Problem(field=shown(name), path=shown(name), message=f"argument name {bad}")
        if (p := first_problem(value, (name,), ints=True)) is not None:
            return Problem(p.field, p.field, p.message) if p.message.startswith("nested") else p
    return None
