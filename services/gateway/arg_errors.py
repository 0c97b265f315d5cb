"""What an argument's validation failure says to an agent: what is allowed, in words.

pydantic's own wording ("String should match pattern '^[a-z][a-z0-9_-]{0,31}$'", "Input should be a valid
number" for a NaN) is for programmers; an agent needs to know what to send instead. Each error type pydantic
raises for a tool argument gets a sentence built from its constraint (the error's `ctx`); a type not listed
keeps pydantic's message.
"""

from __future__ import annotations

import math
from typing import Any

# patterns the tools' schemas use, said in words (services/gateway/params.py and the profiles' shapes)
PATTERNS = {
    r"^[a-z][a-z0-9_-]{0,31}$": "must start with a lowercase letter and hold only lowercase letters, digits, "
    "'_' and '-', at most 32 characters (e.g. note, fact, decision)",
}
_NOT_FINITE = {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}
_TYPES = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "tuple_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "missing": "is required",
    "extra_forbidden": "is not a field this object takes",
    "datetime_type": "must be an ISO 8601 time, e.g. 2026-11-26T14:02:00Z",
    "datetime_parsing": "must be an ISO 8601 time, e.g. 2026-11-26T14:02:00Z",
    "datetime_from_date_parsing": "must be an ISO 8601 time, e.g. 2026-11-26T14:02:00Z",
    "date_parsing": "must be a date, e.g. 2026-11-26",
    "uuid_parsing": "must be a UUID",
    "uuid_type": "must be a UUID",
    "json_invalid": "must be valid JSON",
}


def _not_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, str) and value.strip().lower() in _NOT_FINITE


def _plural(n: Any, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def problem(error: dict[str, Any]) -> str:
    """One pydantic error (an item of `ValidationError.errors()`) as the problem with the argument, in words."""
    kind, ctx, value = error.get("type", ""), error.get("ctx") or {}, error.get("input")
    if kind == "finite_number" or (kind in ("float_type", "float_parsing") and _not_finite(value)):
        return "must be a finite number"
    if kind == "float_type" and value is None:  # (JavaScript clients send NaN and Infinity as null)
        return "must be a finite number, not null"
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        return PATTERNS.get(pattern, f"does not have the allowed form (the pattern {pattern})")
    if kind == "string_too_short":
        n = ctx.get("min_length", 1)
        return "must not be empty" if n == 1 else f"must be at least {_plural(n, 'character')}"
    if kind == "string_too_long":
        got = f" (got {len(value)})" if isinstance(value, str) else ""
        return f"must be at most {_plural(ctx.get('max_length'), 'character')}{got}"
    if kind == "too_short":
        return f"must hold at least {_plural(ctx.get('min_length'), 'item')}"
    if kind == "too_long":
        return f"must hold at most {_plural(ctx.get('max_length'), 'item')}"
    bounds = {"greater_than_equal": "at least", "less_than_equal": "at most", "greater_than": "more than"}
    for name, words in (*bounds.items(), ("less_than", "less than")):
        if kind == name:
            limit = next(iter(ctx.values()), None)
            return f"must be {words} {limit}"
    if kind in ("literal_error", "enum"):
        return f"must be one of {ctx.get('expected', '')}"
    return _TYPES.get(kind, str(error.get("msg", "is not valid")))
