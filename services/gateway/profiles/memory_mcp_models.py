"""memory-mcp's arguments and results: the contract's input limits as pydantic types (what a call is validated
against; the listed schemas are the contract's own, memory_mcp_schemas.py) and its output shapes.

A nullable argument (`"nullable": true` in the contract) accepts null as absent. Limits the contract states only
in a description ("max: 50") are enforced too, and refused naming the argument.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, Field

from mneme.domain.state import MemoryState
from services.gateway.profiles.vocab import MEMORY_MCP

MEMORY_TYPES = ("episodic", "semantic", "procedural")
MemoryType = Literal["episodic", "semantic", "procedural"]

# -- arguments -----------------------------------------------------------------------------------------------
ListLimit = Annotated[int, Field(ge=1, le=100)]  # list_memories, get_valid, get_valid_at: default 20, max 100
SearchLimit = Annotated[int, Field(ge=1, le=50)]  # search, search_text, recall: default 10, max 50
Offset = Annotated[int, Field(ge=0)]
Depth = Annotated[int, Field(ge=1, le=3)]
Direction = Literal["outgoing", "incoming", "both"]
Weight = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
# recall's signal weights: the contract gives defaults only; a weight is a finite number, 0 or more
SignalWeight = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
UserId = Annotated[str | None, Field(max_length=256)]


# -- results -------------------------------------------------------------------------------------------------
class StringId(BaseModel):
    String: str


class RecordId(BaseModel):
    """The memory's id as the contract's SurrealDB-backed server shows it: {"tb": "memories", "id": {"String"}}."""

    tb: str = "memories"
    id: StringId


class MemoryOut(BaseModel):
    """A memory as get_memory shows it (without its embedding)."""

    id: RecordId
    content: str
    memory_type: MemoryType = Field(
        description="episodic, semantic or procedural (another profile's memory shows under the nearest: "
        "an event or history as episodic, a skill or runbook as procedural, anything else as semantic)"
    )
    event_time: datetime
    ingestion_time: datetime
    valid_from: datetime
    valid_until: datetime | None
    importance_score: float
    metadata: dict[str, Any]

    @classmethod
    def of(cls, m: MemoryState) -> Self:
        return cls(
            id=RecordId(id=StringId(String=m.id)),
            content=m.content,
            memory_type=MEMORY_MCP.name_of(m.kind),
            event_time=m.valid_from or m.created_at,
            ingestion_time=m.created_at,
            valid_from=m.valid_from or m.created_at,
            valid_until=m.valid_until,
            importance_score=m.importance,
            metadata=m.metadata,
        )


class Stored(BaseModel):
    id: str


class Deleted(BaseModel):
    deleted: bool


class MemoryList(BaseModel):
    memories: list[MemoryOut]
    total: int
    limit: int
    offset: int


class SearchItem(BaseModel):
    id: str
    content: str
    memory_type: str
    score: float


class SearchOut(BaseModel):
    results: list[SearchItem]
    count: int
    query: str


class RecallItem(BaseModel):
    id: str
    content: str
    source: Literal["memory", "code"]
    score: float
    vector_score: float
    bm25_score: float
    ppr_score: float
    file_path: str | None = Field(None, description="code results only")
    start_line: int | None = Field(None, description="code results only")
    end_line: int | None = Field(None, description="code results only")


class RecallOut(BaseModel):
    results: list[RecallItem]
    query: str
    subgraph_nodes: int
    memories_count: int
    code_count: int


class Created(BaseModel):
    id: str


class EntityOut(BaseModel):
    id: str
    name: str
    entity_type: str | None
    description: str | None
    depth: int = Field(description="hops from the start entity")


class RelationOut(BaseModel):
    id: str
    from_entity: str
    to_entity: str
    relation_type: str
    weight: float


class Related(BaseModel):
    entities: list[EntityOut]
    relations: list[RelationOut]
    entity_count: int
    relation_count: int


class Valid(BaseModel):
    results: list[MemoryOut]
    count: int


class ValidAt(Valid):
    timestamp: datetime


class Invalidated(BaseModel):
    invalidated: bool


class CacheStats(BaseModel):
    hits: int
    misses: int
    size: int


class EmbeddingStatus(BaseModel):
    status: Literal["loading", "ready", "error"]
    model: str
    dimensions: int
    cache_stats: CacheStats


class Status(BaseModel):
    version: str
    status: str
    memories_count: int
    entities_count: int
    code_chunks_count: int
    embedding: EmbeddingStatus
    db_dimension: int


class ResetCounts(BaseModel):
    memories: int
    entities: int
    relations: int
    code_chunks: int


class Reset(BaseModel):
    """confirm=true: `reset` and `deleted`; otherwise `reset: false` and `message` (absent keys are left out)."""

    reset: bool
    deleted: ResetCounts | None = None
    message: str | None = None
