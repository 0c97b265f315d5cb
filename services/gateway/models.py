"""Structured outputs of the native tools (pydantic models become each tool's outputSchema)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from mneme.domain.state import MemoryState
from schemas.queries import MemoryRow, StatsResult, VersionInfo


class AsOfInfo(BaseModel):
    """The past moment an answer describes."""

    seq: int = Field(description="The answer is the memory right after this log sequence.")
    time: datetime | None = Field(None, description="When the log recorded it (or the time asked for).")

    @classmethod
    def of(cls, r: Any) -> AsOfInfo | None:
        return cls(seq=r.seq, time=r.time) if r is not None else None


class Version(BaseModel):
    version: int
    seq: int | None = Field(None, description="Log position (omitted for agents on a trimmed surface).")
    recorded_at: datetime
    event_type: str = Field(description="memory_created, memory_updated, memory_locked, …")
    agent_id: str
    request_id: str | None = None

    @classmethod
    def of(cls, v: VersionInfo) -> Version:
        return cls(version=v.version, seq=v.seq, recorded_at=v.recorded_at, event_type=v.event_type,
                   agent_id=v.agent_id, request_id=v.request_id)  # fmt: skip


class Memory(BaseModel):
    id: str
    namespace: str
    store: str | None = None
    path: str | None = None
    content: str
    kind: str
    category: str | None = None
    subject: str | None = None
    tags: list[str]
    importance: float
    confidence: float
    citations: list[str] = Field(description="Always present; [] when none.")
    metadata: dict[str, Any]
    status: Literal["active", "deprecated", "archived"] | str
    verification: Literal["unverified", "verified"] | str = "unverified"
    locked: bool = False
    status_reason: str | None = Field(None, description="Why it was deprecated or archived.")
    lock_reason: str | None = Field(None, description="Why an admin locked it.")
    version: int
    created_at: datetime
    updated_at: datetime
    created_by: str
    updated_by: str
    expires_at: datetime | None = None
    expired: bool = False
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    accessed_at: datetime | None = Field(None, description="Last read (none in past reads: as_of).")
    access_count: int | None = Field(0, description="Reads so far; null in past reads (as_of), whose answer "
                                     "describes the memory as it was, not how often it has been read since.")
    seq: int | None = Field(description="Log position of this version (stream sequence); omitted for agents on a "
                            "trimmed surface.")
    history: list[Version] = Field(default_factory=list, description="Recent versions, newest first (memory_get).")
    superseded_by: str | None = Field(None, description="The memory that replaced this one (memory_invalidate).")
    invalid_reason: str | None = Field(None, description="Why its valid time was ended.")
    as_of: AsOfInfo | None = Field(None, description="Set when the answer describes a past moment (as_of).")

    def trimmed(self) -> Memory:
        """Without internal positions, request ids and access statistics (what a trimmed surface sends agents)."""
        return self.model_copy(update={
            "seq": None, "accessed_at": None, "access_count": None,
            "history": [h.model_copy(update={"seq": None, "request_id": None}) for h in self.history],
        })  # fmt: skip

    @classmethod
    def of(
        cls, s: MemoryState, now: datetime, row: MemoryRow | None = None, history: list[VersionInfo] | None = None
    ) -> Memory:
        return cls(
            id=s.id, namespace=s.namespace, store=s.store, path=s.path, content=s.content, kind=s.kind,
            category=s.category, subject=s.subject, tags=list(s.tags), importance=s.importance,
            confidence=s.confidence, citations=list(s.citations), metadata=s.metadata, status=s.status,
            version=s.version, created_at=s.created_at, updated_at=s.updated_at, created_by=s.created_by,
            updated_by=s.updated_by, expires_at=s.expires_at, expired=s.is_expired(now), valid_from=s.valid_from,
            valid_until=s.valid_until, accessed_at=row.accessed_at if row else None,
            access_count=row.access_count if row else 0, seq=s.last_seq, verification=s.verification,
            locked=s.locked, status_reason=s.status_reason, lock_reason=s.lock_reason, history=[Version.of(v) for v in history or ()],
            superseded_by=s.superseded_by, invalid_reason=s.invalid_reason,
        )  # fmt: skip


class AddResult(BaseModel):
    """A receipt, not an echo: the content the agent just sent is not sent back (tokens, speed)."""

    id: str
    namespace: str
    store: str | None = None
    path: str | None = None
    version: int
    seq: int = Field(description="Log position of this version (stream sequence).")
    created_at: datetime
    duplicate: bool = Field(description="True when this request_id had already created the memory (a retry).")

    @classmethod
    def of(cls, s: MemoryState, duplicate: bool) -> AddResult:
        return cls(id=s.id, namespace=s.namespace, store=s.store, path=s.path, version=s.version, seq=s.last_seq,
                   created_at=s.created_at, duplicate=duplicate)  # fmt: skip


class UpdateResult(BaseModel):
    memory: Memory
    updated_fields: list[str] = Field(description="Fields this call changed; [] when nothing differed.")


class MoveResult(BaseModel):
    memory: Memory
    from_path: str
    to_path: str


class LifecycleResult(BaseModel):
    id: str
    version: int
    status: str
    verification: str
    locked: bool
    changed: bool = Field(description="False when the memory already was in that state.")
    at: datetime
    valid_until: datetime | None = Field(None, description="End of its valid time (memory_invalidate).")


class DeleteResult(BaseModel):
    id: str
    mode: Literal["archived", "deleted"]
    version: int


class MemoryPage(BaseModel):
    items: list[Memory]
    total: int = Field(description="Matches before pagination.")
    limit: int
    offset: int
    has_more: bool
    as_of: AsOfInfo | None = None


class RecentEntry(BaseModel):
    id: str
    store: str | None = None
    path: str | None = None
    content: str
    kind: str
    tags: list[str]
    updated_at: datetime | None
    token_estimate: int = Field(description="About 4 characters per token.")


class RecentResult(BaseModel):
    category: str = Field(description="The category path, or 'all'.")
    count: int
    memories: list[RecentEntry]
    as_of: AsOfInfo | None = None


class PruneResult(BaseModel):
    pruned: int
    ids: list[str]


class TagCount(BaseModel):
    tag: str
    count: int


class AccessCount(BaseModel):
    id: str
    count: int


class Stats(BaseModel):
    total: int
    active: int
    archived: int
    deprecated: int
    expired: int
    by_kind: dict[str, int]
    by_importance: dict[str, int] = Field(description="high ≥ 0.7, medium ≥ 0.4, low below (memories not archived).")
    by_category: dict[str, int]
    by_subject: dict[str, int]
    top_tags: list[TagCount]
    most_accessed: list[AccessCount] = Field(default_factory=list, description="The most read memories (top 5).")
    oldest: datetime | None
    newest: datetime | None
    stores: int
    categories: int
    storage_bytes: int = Field(description="UTF-8 bytes of content and metadata in scope.")
    as_of: AsOfInfo | None = None

    @classmethod
    def of(cls, r: StatsResult) -> Stats:
        return cls(
            total=r.total, active=r.active, archived=r.archived, deprecated=r.deprecated, expired=r.expired, by_kind=r.by_kind,
            by_importance=r.by_importance, by_category=r.by_category, by_subject=r.by_subject,
            top_tags=[TagCount(tag=t, count=n) for t, n in r.top_tags], oldest=r.oldest, newest=r.newest,
            most_accessed=[AccessCount(id=i, count=n) for i, n in r.most_accessed],
            stores=r.stores, categories=r.categories, storage_bytes=r.content_bytes, as_of=AsOfInfo.of(r.as_of),
        )  # fmt: skip


class AuditRecord(BaseModel):
    trail_seq: int
    action: str = Field(description="memory_created, memory_updated, … for changes; read:<tool>; denied:<tool>")
    outcome: Literal["ok", "denied"] | str
    at: datetime
    agent_id: str
    role: str
    request_id: str
    namespace: str
    memory_ids: list[str]
    code: str | None = Field(None, description="The error code of a denied attempt.")


class AuditPage(BaseModel):
    records: list[AuditRecord]
    total: int
    has_more: bool


class SearchItem(Memory):
    score: float = Field(description="Absolute relevance 0-1, comparable across queries (semantic: cosine similarity; "
                         "keyword: share of the query's words the memory holds, weighted by rarity; hybrid: 0.3 x "
                         "semantic relevance + 0.7 x keyword coverage), +0.1 when the content contains the query, "
                         "x0.7 deprecated, x0.5 archived, x0.7 valid time ended. Results are in this order.")
    semantic_score: float | None = Field(None, description="Cosine similarity (semantic and hybrid searches).")
    keyword_score: float | None = Field(None, description="Raw BM25 score (keyword and hybrid searches).")
    match: Literal["exact", "scope", "rules"] = Field(
        "scope", description="exact: the content contains the query, in the caller's namespace; scope: other matches "
        "in the caller's namespace; rules: verified rules of the caller's organization (<org>/_system)."
    )
    demoted: bool = Field(False, description="Deprecated, archived, or its valid time has ended: its score is "
                          "scaled down.")


class SearchResults(BaseModel):
    query: str
    mode: Literal["semantic", "keyword", "hybrid"]
    count: int
    threshold: float
    model: str | None = Field(None, description="Embedding model of the semantic scores.")
    results: list[SearchItem]
    as_of: AsOfInfo | None = None
