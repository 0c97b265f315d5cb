"""The `governed` profile's vocabulary: its argument types, its output objects, how a memory's lifecycle reads
as one contract status, and how the one domain error type renders as the contract's five codes.

Output objects leave out what is empty: an agent gets no internal timestamps (created/updated times, the
log's record times) and no internal ids (log sequences, request ids, namespaces); a human admin also gets
the times and request ids, for audit work (see docs/profiles.md (governed)).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_serializer

from mneme.domain.state import ARCHIVED, DEPRECATED, MemoryState
from mneme.principals import SYSTEM_SEGMENT
from services.gateway.error_styles import ErrorStyle, without_keyword_hint

# -- arguments ----------------------------------------------------------------------------------------------

Content = Annotated[str, Field(min_length=1, description="The fact or decision to remember, stored verbatim.")]
MemoryType = Annotated[
    str,
    Field(
        pattern=r"^[a-z][a-z0-9_-]{0,31}$",
        description="What kind of memory: fact, decision, ... (lowercase). business_rule and system_constraint are "
        "protected: only a human admin may write them.",
    ),
]
MemoryIdArg = Annotated[str, Field(min_length=1, max_length=64, description="The memory's id (memory_id).")]
EditId = Annotated[
    str | None,
    Field(
        max_length=64,
        description="Give it to edit that memory (new content and type, a new version); omit it to store a new memory.",
    ),
]
Query = Annotated[str, Field(min_length=1, max_length=4096, description="What to look for, in natural language.")]
Limit = Annotated[int, Field(ge=1, le=10, description="Most memories to return (at most 10).")]
TypeFilter = Annotated[str | None, Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$", description="Only memories of this type.")]
Reason = Annotated[str, Field(min_length=1, max_length=128, description="Why the memory no longer applies.")]

# -- the contract's status and scope ------------------------------------------------------------------------

Status = Literal["unverified", "verified", "locked", "deprecated", "archived"]
ScopeOrigin = Literal["repository", "organization"]


def status_of(s: MemoryState) -> Status:
    """One status, the furthest lifecycle stage: archived, deprecated, locked, then verified or unverified."""
    if s.status == ARCHIVED:
        return "archived"
    if s.status == DEPRECATED:
        return "deprecated"
    if s.locked:
        return "locked"
    return "verified" if s.verification == "verified" else "unverified"


def scope_origin(s: MemoryState) -> ScopeOrigin:
    """organization: a rule of the organization (<org>/_system); repository: the active repository."""
    return "organization" if s.namespace.split("/")[-1] == SYSTEM_SEGMENT else "repository"


def action_of(event_type: str) -> str:
    """memory_created -> created: the audit vocabulary of the contract."""
    return event_type.removeprefix("memory_")


# -- outputs ------------------------------------------------------------------------------------------------


class Trimmed(BaseModel):
    """A result that leaves out every field it has no value for (trimmed fields are absent, not null)."""

    @model_serializer(mode="wrap")
    def _without_empty(self, handler: Any) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class WriteResult(Trimmed):
    memory_id: str
    status: Status = Field(description="unverified for an AI agent's memory; verified for a human admin's.")
    version: int = Field(description="1 for a new memory; an edit makes the next version.")


class SearchItem(Trimmed):
    memory_id: str = Field(description="For memory.read, memory.lock, memory.deprecate.")
    content: str
    type: str
    status: Status
    scope_origin: ScopeOrigin = Field(
        description="repository: the active repository; organization: a verified rule of the organization."
    )


class SearchResult(Trimmed):
    memories: list[SearchItem] = Field(
        description="Exact matches in the repository first, then semantic "
        "matches in it, then verified organization rules."
    )
    count: int


class VersionEntry(Trimmed):
    version: int
    action: str = Field(description="created, updated, verified, locked, unlocked, deprecated, archived, ...")
    agent_id: str
    at: datetime | None = Field(None, description="When (human admins only).")
    request_id: str | None = Field(None, description="The request's context.request_id (human admins only).")


class MemoryDetail(Trimmed):
    memory_id: str
    content: str
    type: str
    status: Status
    scope_origin: ScopeOrigin
    version: int
    verified: bool
    locked: bool
    tags: list[str]
    deprecated_reason: str | None = Field(None, description="Why it was deprecated (or archived).")
    lock_reason: str | None = None
    created_by: str = Field(description="agent_id of the writer of version 1.")
    updated_by: str = Field(description="agent_id of the writer of the latest version.")
    created_at: datetime | None = Field(None, description="Human admins only.")
    updated_at: datetime | None = Field(None, description="Human admins only.")
    history: list[VersionEntry] = Field(description="The latest versions, newest first.")


class LockResult(Trimmed):
    memory_id: str
    status: Literal["locked"]
    locked_at: datetime = Field(description="When the memory was locked.")
    version: int


class DeprecateResult(Trimmed):
    memory_id: str
    status: Literal["deprecated"]
    reason: str
    version: int


# -- errors -------------------------------------------------------------------------------------------------

# the domain's field names, as the contract calls them
FIELDS = {"kind": "type", "id": "memory_id", "request_id": "context.request_id"}


@dataclass(frozen=True)
class GovernedErrors(ErrorStyle):
    """The contract's five codes. Argument errors in the `context` object are INVALID_CONTEXT; an AI agent
    doing what only a human admin may do is WRITE_NOT_ALLOWED; a request_id reused for another request is
    INVALID_CONTEXT. Other malformed arguments are INVALID_INPUT, and the service's own retryable conditions
    (UNAVAILABLE, PROJECTION_LAG, CONFLICT, EMBEDDING_MODEL_LOADING) and INTERNAL keep their codes."""

    def render(
        self,
        code: str,
        message: str,
        field_: str | None = None,
        details: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> str:
        field_ = FIELDS.get(field_, field_) if field_ else field_
        if code == "INVALID_INPUT" and field_ and (field_ == "context" or field_.startswith("context.")):
            code = "INVALID_CONTEXT"
        return super().render(code, message, field_, details, extra)


ERRORS = GovernedErrors(
    codes={"PERMISSION_ERROR": "WRITE_NOT_ALLOWED", "IDEMPOTENCY_KEY_REUSED": "INVALID_CONTEXT"},
    with_details=False,  # details carry log positions: internal ids the contract trims
    messages={
        "IDEMPOTENCY_KEY_REUSED": lambda m, d: (
            "context.request_id was already used for another request with "
            "different arguments: each request needs its own request_id"
        ),
        "WRITE_NOT_ALLOWED": lambda m, d: m.replace("memories of the protected kind", "the protected type"),
        "EMBEDDING_MODEL_LOADING": without_keyword_hint,  # (memory-search has no keyword mode to point to)
        "INDEXING": without_keyword_hint,
    },
)
