"""The agent-memory contract's shapes: its argument types (limits, enums, defaults as the seed document
states them), its memory object and results, the importance levels on the native 0-1 scale, and its
error format. The tools themselves are in agent_memory.py; docs/profiles.md (agent-memory) maps both."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from mneme.domain.state import ARCHIVED, MemoryState
from services.gateway.error_styles import ErrorStyle
from services.gateway.profiles.vocab import AGENT_MEMORY

# -- importance: the contract's three levels on the domain's 0-1 scale ------------------------------------
Level = Literal["high", "medium", "low"]
STORED: dict[str, float] = {"high": 0.9, "medium": 0.5, "low": 0.2}  # what a level stores
HIGH, MEDIUM = 0.7, 0.4  # the native statistics' buckets: high >= 0.7, medium >= 0.4, low below


def level_of(importance: float) -> Level:
    """The level a native importance reads back as."""
    return "high" if importance >= HIGH else "medium" if importance >= MEDIUM else "low"


def level_range(level: Level) -> tuple[float | None, float | None]:
    """(importance_min, importance_max), both inclusive, of the memories that read back as `level`."""

    def below(x: float) -> float:  # the largest double under x: the bounds stay exclusive
        return math.nextafter(x, 0.0)

    return {"high": (HIGH, None), "medium": (MEDIUM, below(HIGH)), "low": (None, below(MEDIUM))}[level]


# -- argument types ------------------------------------------------------------------------------------
# An argument the contract makes optional without a default is declared `Annotated[T, Field(...,
# json_schema_extra=NO_DEFAULT)] = None`: its schema is the contract's (no null, no default), an omitted
# argument reaches the tool as None, and an explicit null is refused like any value of the wrong type.
def NO_DEFAULT(schema: dict[str, Any]) -> None:  # upper case: used like a constant
    schema.pop("default", None)


def shown_default(value: str) -> Callable[[dict[str, Any]], None]:
    """The contract's default, shown in the schema, while the tool still sees None when it was omitted
    (store_memory with an id keeps the stored importance instead of resetting it to 'medium')."""

    def put(schema: dict[str, Any]) -> None:
        schema["default"] = value

    return put


UUID_V4 = r"^[a-f0-9]{8}-[a-f0-9]{4}-4[a-f0-9]{3}-[89ab][a-f0-9]{3}-[a-f0-9]{12}$"
Id = Annotated[str, Field(pattern=UUID_V4)]
TYPES = ("core", "learning", "task")
Type = Literal["core", "learning", "task"]
SortBy = Literal["created_at", "updated_at", "accessed_at", "importance", "access_count"]
Content = Annotated[str, Field(min_length=1, max_length=5000)]
Category = Annotated[str, Field(max_length=50)]
Tags = Annotated[list[Annotated[str, Field(max_length=30)]], Field(max_length=10)]


# -- results -------------------------------------------------------------------------------------------
class AgentMemory(BaseModel):
    """One memory as this contract shows it."""

    id: str = Field(description="UUID of the memory.")
    type: Type = Field(
        description="core, learning or task (a memory written through another profile shows under the "
        "nearest: a lesson or skill as learning, a goal or todo as task, anything else as core)."
    )
    content: str
    category: str | None = None
    tags: list[str] = Field(description="Stored in lower case.")
    importance: Level = Field(description="high, medium or low.")
    archived: bool
    created_at: datetime
    updated_at: datetime
    accessed_at: datetime = Field(
        description="Last returned by query_memories (or any read); the creation time until it is first read."
    )
    access_count: int = Field(description="How many reads have returned it so far.")

    @classmethod
    def of(cls, s: MemoryState, accessed_at: datetime | None = None, access_count: int | None = 0) -> AgentMemory:
        return cls(
            id=s.id,
            type=AGENT_MEMORY.name_of(s.kind),
            content=s.content,
            category=s.category,
            tags=list(s.tags),
            importance=level_of(s.importance),
            archived=s.status == ARCHIVED,
            created_at=s.created_at,
            updated_at=s.updated_at,
            accessed_at=accessed_at or s.created_at,
            access_count=access_count or 0,
        )


class Stored(BaseModel):
    id: str = Field(description="UUID of the stored memory")
    created: bool = Field(description="True if new memory was created, false if existing was updated")
    memory: AgentMemory = Field(description="The complete stored memory object")


class Page(BaseModel):
    memories: list[AgentMemory] = Field(description="Array of matching memories")
    total: int = Field(description="Total number of matching memories (before pagination)")
    limit: int
    offset: int
    has_more: bool = Field(description="True if more results available")


class Updated(BaseModel):
    memory: AgentMemory = Field(description="The updated memory object")
    updated_fields: list[str] = Field(description="List of fields that were updated")


class Deleted(BaseModel):
    success: bool
    action: Literal["archived", "deleted"] = Field(description="Action performed")
    id: str = Field(description="UUID of the affected memory")


class ByType(BaseModel):
    """Every memory counts under the type it shows as (profiles/vocab.py)."""

    core: int
    learning: int
    task: int


class ByImportance(BaseModel):
    high: int
    medium: int
    low: int


class TagCount(BaseModel):
    tag: str
    count: int


class MemoryStatsOut(BaseModel):
    total_memories: int = Field(description="Total number of non-archived memories")
    by_type: ByType
    by_importance: ByImportance
    archived_count: int
    total_storage_kb: float = Field(description="Total storage used in kilobytes")
    oldest_memory: datetime | None = Field(description="Timestamp of oldest memory")
    newest_memory: datetime | None = Field(description="Timestamp of newest memory")
    most_accessed: AgentMemory | None = Field(
        description="The memory with highest access count (null until a memory has been read)"
    )
    top_tags: list[TagCount] = Field(description="Top 10 most used tags")


# -- errors --------------------------------------------------------------------------------------------
class _Codes(dict[str, str]):
    """Domain code -> contract code; a code the contract has no word for is an INTERNAL_ERROR."""

    def get(self, key: str, default: Any = None) -> str:
        return super().get(key, "INTERNAL_ERROR")


ERRORS = ErrorStyle(
    codes=_Codes(
        {
            "INVALID_INPUT": "INVALID_INPUT",
            "UNKNOWN_TOOL": "INVALID_INPUT",
            "ALREADY_EXISTS": "INVALID_INPUT",
            "INVALID_STATE": "INVALID_INPUT",
            "IDEMPOTENCY_KEY_REUSED": "INVALID_INPUT",
            "MEMORY_NOT_FOUND": "NOT_FOUND",
            "PERMISSION_ERROR": "PERMISSION_ERROR",
            "MEMORY_LOCKED": "PERMISSION_ERROR",
            "WRITE_NOT_ALLOWED": "PERMISSION_ERROR",
            "SCOPE_VIOLATION": "PERMISSION_ERROR",
            "INVALID_CONTEXT": "PERMISSION_ERROR",
            "UNAUTHORIZED": "PERMISSION_ERROR",
            "CONFLICT": "STORAGE_ERROR",
            "PROJECTION_LAG": "STORAGE_ERROR",
            "UNAVAILABLE": "STORAGE_ERROR",
            "EMBEDDING_MODEL_LOADING": "STORAGE_ERROR",
            "EMBEDDING_MODEL_UNAVAILABLE": "STORAGE_ERROR",
            "INTERNAL": "INTERNAL_ERROR",
        }
    ),
    with_field=False,  # the contract's error object is {code, message}: the message names the field
    with_details=False,
)
