"""Argument types and annotations shared by the gateway's tools: the signature is the schema."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from mcp.types import ToolAnnotations
from pydantic import AfterValidator, BaseModel, Field
from pydantic_core import PydanticCustomError

Namespace = Annotated[str | None, Field(description="Namespace to act in; default: yours.", max_length=255)]
Store = Annotated[str | None, Field(description="A named collection of memories addressed by path.", max_length=64)]
Path = Annotated[
    str | None,
    Field(description="Path in the store: categories then a name, e.g. 'project/decisions/db'.", max_length=512),
]
# The memory a tool acts on, required in its schema: its id, or store:path (store names and paths hold no ':').
Ref = Annotated[
    str, Field(min_length=1, max_length=600, description="Memory id, or store:path (e.g. 'notes:project/db').")
]
MemoryId = Annotated[str | None, Field(description="Memory id (UUID).", max_length=64)]
RequestId = Annotated[
    str | None,
    Field(
        description="Idempotency key: a retry with the same request_id is applied once.", min_length=1, max_length=128
    ),
]
Tags = Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]], Field(max_length=50)]
Citations = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=2048)]],
    Field(max_length=100, description="Sources: file:line, URLs, ticket ids."),
]
# Every float parameter is a Unit: NaN and +-Infinity (JSON parsers here read `NaN`, `Infinity`, `1e400`, and
# pydantic takes the strings "nan", "inf") are refused as "must be a finite number", not as out of range.
Unit = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Label = Annotated[str, Field(min_length=1, max_length=128)]
Kind = Annotated[
    str, Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$", description="e.g. note, fact, preference, decision, task.")
]
Detail = Annotated[
    Literal["brief", "full"], Field(description="brief: id, content and what marks each; full: every field.")
]


def utc_time(value: datetime) -> datetime:
    """A time that is a moment in UTC: 0001-01-01T00:00:00+01:00 is before year 1 there, and
    9999-12-31T23:59:59-01:00 after year 9999, so neither can be stored or compared (Python cannot convert them).
    """
    if value.tzinfo is not None:
        try:
            value.astimezone(UTC)
        except OverflowError:
            raise PydanticCustomError(
                "datetime_range", "out of range: its UTC time is before year 1 or after year 9999"
            ) from None
    return value


# Every time argument is a UtcTime: the schema is a date-time's; a time with no UTC equivalent is INVALID_INPUT.
UtcTime = Annotated[datetime, AfterValidator(utc_time)]


def as_of_value(value: Any) -> Any:
    """What the gateway's as_of parsing cannot take without failing inside: a sequence written with digits other
    than 0-9 ('²' is a digit to str.isdigit(), not to int()), a time with no UTC equivalent. Anything else goes
    on as it came (a malformed time is named there)."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.isdigit():
        if not text.isascii():
            raise PydanticCustomError("as_of", "a log sequence is written with the digits 0-9")
        return value
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return value
    utc_time(t)
    return value


AsOfArg = Annotated[  # the members' descriptions name them in the error for a value that is neither
    Annotated[int, Field(description="a log sequence number")]
    | Annotated[str, Field(description="an ISO 8601 time")]
    | None,
    Field(
        description="Answer as the memory was at this moment: a log sequence (e.g. 1042) or an ISO 8601 "
        "time (no offset: UTC)."
    ),
    AfterValidator(as_of_value),
]

ValidAtArg = Annotated[
    UtcTime | None,
    Field(description="Only memories valid at this time (valid_from <= t < valid_until); ISO 8601."),
]

# Hints must hold for a tool called with its defaults: memory_add without a request_id creates a new memory
# on every call, so it is not idempotent (a client that retries idempotent tools would duplicate memories).
CREATE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)

Intent = Literal["read", "write", "admin"]


class RequestContext(BaseModel):
    """Who is asking and for what, as the caller states it; checked against the authenticated principal."""

    agent_id: str | None = Field(None, max_length=128)
    organization_id: str | None = Field(None, max_length=128)
    repository_id: str | None = Field(None, max_length=128)
    intent: Intent | None = None
    request_id: str | None = Field(None, min_length=1, max_length=128)


ContextArg = Annotated[
    RequestContext | None,
    Field(
        description="Who asks and why: agent_id, organization_id, repository_id (sets the namespace "
        "<organization>/<repository> when namespace is not given), intent, request_id."
    ),
]
