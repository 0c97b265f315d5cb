"""Structured outputs of the native tools (pydantic models become each tool's outputSchema).

Results are concise by default: a list carries each memory in brief (`Result`: id, content and what marks
it), and `detail="full"` gives every field of memory_get instead (the brief model allows the extra fields,
so one output schema holds both). Writes answer with a receipt, not an echo of what the agent just sent.
Every list of results is called `results`. The native profile drops null fields from what it sends.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mneme.domain.state import MemoryState
from schemas.queries import MemoryRow, StatsResult, VersionInfo


class AsOfInfo(BaseModel):
    """The past moment an answer describes."""

    seq: int
    time: datetime | None = None

    @classmethod
    def of(cls, r: Any) -> AsOfInfo | None:
        return cls(seq=r.seq, time=r.time) if r is not None else None


class Version(BaseModel):
    version: int
    seq: int | None = None
    recorded_at: datetime
    event_type: str
    agent_id: str
    request_id: str | None = None

    @classmethod
    def of(cls, v: VersionInfo) -> Version:
        return cls(
            version=v.version,
            seq=v.seq,
            recorded_at=v.recorded_at,
            event_type=v.event_type,
            agent_id=v.agent_id,
            request_id=v.request_id,
        )


class Memory(BaseModel):
    """One memory with every field (memory_get; detail="full")."""

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
    citations: list[str]
    metadata: dict[str, Any]
    status: str = Field(description="active, deprecated or archived.")
    verification: str = "unverified"
    locked: bool = False
    status_reason: str | None = None
    lock_reason: str | None = None
    version: int
    created_at: datetime
    updated_at: datetime
    created_by: str
    updated_by: str
    expires_at: datetime | None = None
    expired: bool = False
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    superseded_by: str | None = None
    invalid_reason: str | None = None
    accessed_at: datetime | None = None
    access_count: int | None = None
    seq: int | None = Field(None, description="Log position of this version.")
    history: list[Version] | None = Field(None, description="Recent versions, newest first.")
    score: float | None = Field(None, description="Relevance 0-1 (searches).")
    as_of: AsOfInfo | None = None

    def trimmed(self) -> Memory:
        """Without internal positions, request ids and access statistics (what a trimmed surface sends agents)."""
        return self.model_copy(
            update={
                "seq": None,
                "accessed_at": None,
                "access_count": None,
                "history": [h.model_copy(update={"seq": None, "request_id": None}) for h in self.history]
                if self.history is not None
                else None,
            }
        )

    @classmethod
    def of(
        cls, s: MemoryState, now: datetime, row: MemoryRow | None = None, history: list[VersionInfo] | None = None
    ) -> Memory:
        return cls(
            id=s.id,
            namespace=s.namespace,
            store=s.store,
            path=s.path,
            content=s.content,
            kind=s.kind,
            category=s.category,
            subject=s.subject,
            tags=list(s.tags),
            importance=s.importance,
            confidence=s.confidence,
            citations=list(s.citations),
            metadata=s.metadata,
            status=s.status,
            version=s.version,
            created_at=s.created_at,
            updated_at=s.updated_at,
            created_by=s.created_by,
            updated_by=s.updated_by,
            expires_at=s.expires_at,
            expired=s.is_expired(now),
            valid_from=s.valid_from,
            valid_until=s.valid_until,
            accessed_at=row.accessed_at if row else None,
            access_count=row.access_count if row else None,
            seq=s.last_seq,
            verification=s.verification,
            locked=s.locked,
            status_reason=s.status_reason,
            lock_reason=s.lock_reason,
            history=[Version.of(v) for v in history] if history is not None else None,
            superseded_by=s.superseded_by,
            invalid_reason=s.invalid_reason,
        )


class Result(BaseModel):
    """A memory in brief; with detail="full", every field of memory_get."""

    model_config = ConfigDict(extra="allow")

    id: str
    content: str
    store: str | None = None
    path: str | None = None
    score: float | None = Field(None, description="Relevance 0-1, the same scale in every query.")
    status: str | None = Field(None, description="Only when not active: deprecated or archived.")
    expired: bool | None = Field(None, description="Only when true.")
    valid_until: datetime | None = Field(None, description="Only when its valid time has an end.")

    @classmethod
    def brief(cls, s: MemoryState, now: datetime, score: float | None = None) -> Result:
        return cls(
            id=s.id,
            content=s.content,
            store=s.store,
            path=s.path,
            score=round(score, 4) if score is not None else None,
            status=s.status if s.status != "active" else None,
            expired=True if s.is_expired(now) else None,
            valid_until=s.valid_until,
        )


Detail = Literal["brief", "full"]


class AddResult(BaseModel):
    """A receipt, not an echo: the content the agent just sent is not sent back."""

    id: str
    namespace: str
    store: str | None = None
    path: str | None = None
    version: int
    seq: int = Field(description="Log position of this version.")
    created_at: datetime
    duplicate: bool = Field(description="True when this request_id had already created it (a retry).")

    @classmethod
    def of(cls, s: MemoryState, duplicate: bool) -> AddResult:
        return cls(
            id=s.id,
            namespace=s.namespace,
            store=s.store,
            path=s.path,
            version=s.version,
            seq=s.last_seq,
            created_at=s.created_at,
            duplicate=duplicate,
        )


class Receipt(BaseModel):
    """What a change did: the memory's id, its new version and state, and what the change set (e.g.
    updated_fields, from_path, valid_until, locked)."""

    model_config = ConfigDict(extra="allow")

    id: str
    version: int
    seq: int | None = Field(None, description="Log position of the change (absent when nothing changed).")
    status: str = Field(description="active, deprecated, archived or deleted.")
    changed: bool = Field(description="False when it already was so (a retry, a no-op).")

    @classmethod
    def of(cls, s: MemoryState, seq: int | None, changed: bool, **extra: Any) -> Receipt:
        if s.path is not None:
            extra = {"store": s.store, "path": s.path, **extra}
        return cls(id=s.id, version=s.version, seq=seq, status=s.status, changed=changed, **extra)


class Page(BaseModel):
    results: list[Result]
    total: int = Field(description="Matches before pagination.")
    has_more: bool
    as_of: AsOfInfo | None = None


class SearchResults(BaseModel):
    results: list[Result] = Field(description="Most relevant first; only those at or above the threshold.")
    mode: str | None = Field(None, description="detail=full: semantic, keyword or hybrid.")
    threshold: float | None = Field(None, description="detail=full: the minimum score applied.")
    model: str | None = Field(None, description="detail=full: embedding model of the semantic scores.")
    subgraph_nodes: int | None = Field(None, description="graph_weight: knowledge-graph nodes the walk used.")
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
    by_importance: dict[str, int] = Field(description="high >= 0.7, medium >= 0.4, low below (not archived).")
    by_category: dict[str, int]
    by_subject: dict[str, int]
    top_tags: list[TagCount]
    most_accessed: list[AccessCount] = Field(default_factory=list)
    oldest: datetime | None = None
    newest: datetime | None = None
    stores: int
    categories: int
    storage_bytes: int = Field(description="UTF-8 bytes of content and metadata.")
    as_of: AsOfInfo | None = None

    @classmethod
    def of(cls, r: StatsResult) -> Stats:
        return cls(
            total=r.total,
            active=r.active,
            archived=r.archived,
            deprecated=r.deprecated,
            expired=r.expired,
            by_kind=r.by_kind,
            by_importance=r.by_importance,
            by_category=r.by_category,
            by_subject=r.by_subject,
            top_tags=[TagCount(tag=t, count=n) for t, n in r.top_tags],
            oldest=r.oldest,
            newest=r.newest,
            most_accessed=[AccessCount(id=i, count=n) for i, n in r.most_accessed],
            stores=r.stores,
            categories=r.categories,
            storage_bytes=r.content_bytes,
            as_of=AsOfInfo.of(r.as_of),
        )


class AuditRecord(BaseModel):
    trail_seq: int
    action: str = Field(description="memory_created, ... for changes; read:<tool>; denied:<tool>")
    outcome: str = Field(description="ok or denied")
    at: datetime
    agent_id: str
    role: str
    request_id: str
    namespace: str
    memory_ids: list[str]
    code: str | None = Field(None, description="The error code of a denied attempt.")


class AuditPage(BaseModel):
    results: list[AuditRecord]
    total: int
    has_more: bool
