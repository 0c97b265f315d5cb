"""memento's arguments and outputs: the contract's schemas, word for word where it gives them.

An optional argument has exactly the contract's schema (`"type": "string"`, no null, no default): an
explicit null is read as the argument being absent, as agents often send it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, Field, WithJsonSchema

from mneme.domain.state import MemoryState
from services.gateway.profiles.vocab import MEMENTO

CATEGORIES = ("preference", "restriction", "fact", "skill", "relationship", "goal", "history", "context")
Category = Literal["preference", "restriction", "fact", "skill", "relationship", "goal", "history", "context"]


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


_AS_STATED = Field(json_schema_extra=_no_default)  # the contract states no default for these

# -- arguments -----------------------------------------------------------------------------------------------
Content = Annotated[str, Field(description="The fact or memory to store. Should be a clear, standalone statement.")]
Subject = Annotated[
    str, Field(description="The primary subject this memory is about (e.g., 'Antonia', 'Liam', 'Gordon')")
]
CategoryArg = Annotated[Category, Field(description="Category of the memory")]
Tags = Annotated[
    list[str] | None,
    WithJsonSchema(
        {
            "type": "array",
            "items": {"type": "string"},
            "description": "Optional tags for additional categorization "
            "(e.g., ['food', 'allergy'], ['math', 'calculus'])",
        }
    ),
    _AS_STATED,
]
Confidence = Annotated[
    float,
    Field(
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="Confidence level in this memory "
        "(0-1). Default 1.0 for explicitly stated facts, lower for inferred "
        "information.",
    ),
]
Query = Annotated[str, Field(description="Natural language query to search for")]
SearchSubject = Annotated[
    str | None,
    WithJsonSchema({"type": "string", "description": "Optional: Filter results to memories about a specific subject"}),
    _AS_STATED,
]
SearchCategory = Annotated[
    Category | None,
    WithJsonSchema(
        {
            "type": "string",
            "description": "Optional: Filter results to a specific category",
            "enum": list(CATEGORIES),
        }
    ),
    _AS_STATED,
]
SearchLimit = Annotated[int, Field(ge=1, le=20, description="Maximum number of results to return")]
Threshold = Annotated[
    float, Field(ge=0, le=1, allow_inf_nan=False, description="Minimum similarity score for results (0-1)")
]
RecentLimit = Annotated[int, Field(ge=1, le=50, description="Number of recent memories to retrieve")]
RecentSubject = Annotated[
    str | None,
    WithJsonSchema({"type": "string", "description": "Optional: Filter to memories about a specific subject"}),
    _AS_STATED,
]
MemoryIdArg = Annotated[str, Field(description="ID of the memory to update")]
NewContent = Annotated[
    str | None, WithJsonSchema({"type": "string", "description": "Updated content for the memory"}), _AS_STATED
]
MarkOutdated = Annotated[
    bool | None,
    WithJsonSchema({"type": "boolean", "description": "If true, mark as outdated rather than updating content"}),
    _AS_STATED,
]
Reason = Annotated[
    str | None,
    WithJsonSchema({"type": "string", "description": "Reason for the update or why it's outdated"}),
    _AS_STATED,
]
StatsSubject = Annotated[
    str | None,
    WithJsonSchema({"type": "string", "description": "Optional: Get stats for a specific subject only"}),
    _AS_STATED,
]


# -- outputs -------------------------------------------------------------------------------------------------
class MemoryOut(BaseModel):
    """A memory as the contract's response format shows it."""

    id: str
    content: str
    subject: str | None = Field(
        description="Spelled as the subject was first stored (memories written through other surfaces may have none)."
    )
    category: str | None
    tags: list[str]
    confidence: float
    created_at: datetime

    @classmethod
    def of(cls, m: MemoryState, **extra: Any) -> Self:
        return cls(
            id=m.id,
            content=m.content,
            subject=m.subject,
            category=MEMENTO.name_of(m.category),
            tags=list(m.tags),
            confidence=m.confidence,
            created_at=m.created_at,
            **extra,
        )


class Stored(MemoryOut):
    duplicate: bool = Field(
        description="True when this fact about this subject was already stored: that memory "
        "is returned, with this call's category and confidence and the tags of both."
    )


class Found(MemoryOut):
    relevance_score: float = Field(
        description="0-1; 0.7 or more: relevant (semantic similarity of the content, "
        "raised when the query names the memory's subject, category or tags)."
    )


class FoundMemories(BaseModel):
    memories: list[Found]


class RecentMemories(BaseModel):
    memories: list[MemoryOut]


class Updated(MemoryOut):
    updated_at: datetime
    updated: bool = Field(description="False when nothing changed (it already said this, or was already outdated).")
    outdated: bool = Field(description="Marked outdated: search_memories and list_recent_memories no longer show it.")
    reason: str | None = None
    superseded_by: str | None = Field(
        None, description="mark_outdated with new_content: the memory that holds the new content."
    )


class MemoryStatsOut(BaseModel):
    total_memories: int
    by_category: dict[str, int]
    by_subject: dict[str, int]
    oldest_memory: datetime | None
    newest_memory: datetime | None
