"""Integers past 64 bits in a log message: refused when it is decoded, whatever field holds them.

Every store and encoder here holds a signed 64-bit integer at most (DuckDB's BIGINT, msgpack, Qdrant's
payloads), and the gateway refuses wider ones in tool arguments. A message that holds one anyway (an
older mneme, a forged or damaged message) would be folded and then break every read of its memory and
every list of its namespace, or fail the projection's commit over and over. Decoding it fails instead,
so each consumer dead-letters it like any other undecodable message and goes on.

Typed integer fields are `Int64`, or `Int32` where a read model keeps them in a 32-bit column (versions,
line numbers) (msgspec checks the range while decoding, at no measurable cost); the
free-form JSON fields (`metadata`, an access record's `arguments`) are walked with `check_json`, only
when they are not empty.
"""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta

MIN_INT, MAX_INT = -(2**63), 2**63 - 1

Int64 = Annotated[int, Meta(ge=MIN_INT, le=MAX_INT)]
# versions and line numbers: INTEGER (32-bit) columns in the read models
Int32 = Annotated[int, Meta(ge=-(2**31), le=2**31 - 1)]


def check_json(value: dict[str, Any], path: str) -> None:
    """Raise ValueError naming where the first integer past 64 bits is in a decoded JSON object `value`.
    A flat object of scalars (the usual metadata) is looked at in one pass, without building paths."""
    for v in value.values():
        t = type(v)
        if (t is int and not MIN_INT <= v <= MAX_INT) or t is dict or t is list:
            break
    else:
        return
    _walk(value, path)


def _walk(value: Any, path: str) -> None:
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, dict):
            stack.extend((item, f"{at}.{k}") for k, item in v.items())
        elif isinstance(v, list):
            stack.extend((item, f"{at}[{i}]") for i, item in enumerate(v))
        elif isinstance(v, int) and not isinstance(v, bool) and not MIN_INT <= v <= MAX_INT:
            raise ValueError(f"an integer past 64 bits at {at}")
