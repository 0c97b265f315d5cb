"""Queries the gateway asks a projector over NATS request/reply, and their replies (msgpack).

Every query carries `min_seq` (read-your-writes, invariant 3) and `now` (the reader's
clock, which decides what counts as expired). The memories' own queries (get, list, stats,
history, the category index) and the projector's status are here, with the tables of every
operation; the other families stand beside it and are re-exported from here: the base
(schemas/query_base.py), search (schemas/search_queries.py), the knowledge graph
(schemas/graph_queries.py), the code index (schemas/code_queries.py) and the audit trail
(schemas/audit_queries.py).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import msgspec
from msgspec import Struct

from schemas.audit_queries import AuditQuery as AuditQuery
from schemas.audit_queries import AuditResult as AuditResult
from schemas.audit_queries import AuditRow as AuditRow
from schemas.code_queries import CodeFiles as CodeFiles
from schemas.code_queries import CodeFilesResult as CodeFilesResult
from schemas.code_queries import CodeHit as CodeHit
from schemas.code_queries import CodeIndexStatus as CodeIndexStatus
from schemas.code_queries import CodeProjects as CodeProjects
from schemas.code_queries import CodeProjectsResult as CodeProjectsResult
from schemas.code_queries import CodeSearchResult as CodeSearchResult
from schemas.code_queries import CodeStatusResult as CodeStatusResult
from schemas.code_queries import SearchCode as SearchCode
from schemas.events import UtcTime
from schemas.graph_queries import Entity as Entity
from schemas.graph_queries import GraphEntities as GraphEntities
from schemas.graph_queries import GraphRelations as GraphRelations
from schemas.graph_queries import GraphResult as GraphResult
from schemas.graph_queries import GraphTraverse as GraphTraverse
from schemas.graph_queries import Relation as Relation
from schemas.query_base import AsOf as AsOf
from schemas.query_base import AsOfResolved as AsOfResolved
from schemas.query_base import Query as Query
from schemas.search_queries import SearchHit as SearchHit
from schemas.search_queries import SearchMemories as SearchMemories
from schemas.search_queries import SearchMode as SearchMode
from schemas.search_queries import SearchResult as SearchResult
from schemas.state import MemoryState

SortBy = Literal["created_at", "updated_at", "accessed_at", "importance", "access_count"]
StatusFilter = Literal["live", "active", "deprecated", "archived", "any"]


class GetMemory(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    OPERATION: ClassVar[str] = "memory.get"
    memory_id: str | None = None
    store: str | None = None
    path: str | None = None
    include_expired: bool = False
    history: int = 0  # how many recent versions to list with the memory
    version: int | None = None  # read this version instead of the latest
    as_of: AsOf | None = None


class ListMemories(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    OPERATION: ClassVar[str] = "memory.list"
    store: str | None = None
    category_path: str | None = None  # "": the store's root (with recursive=False, its root-level memories only)
    recursive: bool = True
    kind: str | None = None
    kinds: tuple[str, ...] = ()  # any of these kinds (a profile's closed vocabulary: profiles/vocab.py)
    kinds_not: tuple[str, ...] = ()  # none of these kinds
    min_access_seq: int = 0  # answer once the access stream is folded this far (read-your-reads: access order)
    tags: tuple[str, ...] = ()
    category: str | None = None
    subject: str | None = None
    importance_min: float | None = None
    importance_max: float | None = None
    status: StatusFilter = "live"
    include_expired: bool = False
    limit: int = 50
    offset: int = 0
    sort_by: SortBy = "updated_at"
    sort_order: Literal["asc", "desc"] = "desc"
    valid_at: UtcTime | None = None  # only memories valid then: valid_from <= t < valid_until
    created_by: str | None = None
    as_of: AsOf | None = None
    ids: tuple[str, ...] | None = None  # only these memories (e.g. a search's matches); None: no such filter
    unread_as_created: bool = False  # sort_by accessed_at: a memory never read counts as accessed when created


class MemoryStats(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    OPERATION: ClassVar[str] = "memory.stats"
    store: str | None = None
    subject: str | None = None  # only memories about this subject (case and spacing ignored, as in ListMemories)
    top_tags: int = 10
    as_of: AsOf | None = None
    min_access_seq: int = 0  # answer once the access stream is folded this far (read-your-reads: most_accessed)


class PathOwner(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Who holds (store, path) now, and the store's last sequence: the path-uniqueness guard."""

    OPERATION: ClassVar[str] = "memory.path_owner"
    store: str
    path: str


class ExpiredMemories(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    OPERATION: ClassVar[str] = "memory.expired"
    store: str | None = None
    limit: int = 1000


class StoreCategories(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One store's category index: the direct subcategories of `parent` (None: the store's root), each with
    the number of live (not archived) memories under it, and whether `parent` is a category of the store."""

    OPERATION: ClassVar[str] = "memory.categories"
    store: str
    parent: str | None = None
    include_expired: bool = False  # count expired memories too


class ReindexCategories(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Rebuild one store's category index (its rows of the categories table) from the versions folded from
    the log: exactly the rows a replay writes. The projector holds its commits while it runs. A repair (see
    REPAIR_TYPES): every replica runs it."""

    OPERATION: ClassVar[str] = "memory.categories.reindex"
    store: str


class MemoryRow(Struct, frozen=True, kw_only=True):
    memory: MemoryState
    accessed_at: UtcTime | None = None
    access_count: int | None = 0  # None in past reads (as_of): access statistics are kept only as they are now


class VersionInfo(Struct, frozen=True, kw_only=True):
    version: int
    seq: int
    recorded_at: UtcTime
    event_type: str
    agent_id: str
    request_id: str
    deleted: bool = False


class GetResult(Struct, frozen=True, kw_only=True):
    item: MemoryRow | None
    history: list[VersionInfo] = []
    as_of: AsOfResolved | None = None


class ListResult(Struct, frozen=True, kw_only=True):
    items: list[MemoryRow]
    total: int
    as_of: AsOfResolved | None = None


class StatsResult(Struct, frozen=True, kw_only=True):
    total: int
    active: int
    archived: int
    deprecated: int
    expired: int
    by_kind: dict[str, int]
    by_importance: dict[str, int]
    by_category: dict[str, int]
    by_subject: dict[str, int]
    top_tags: list[tuple[str, int]]
    most_accessed: list[tuple[str, int]] = []
    oldest: UtcTime | None
    newest: UtcTime | None
    stores: int
    categories: int
    content_bytes: int
    as_of: AsOfResolved | None = None
    subject_names: dict[str, str] = {}  # by_subject key -> the subject as its earliest memory spells it


class MemoryHistory(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every version of one memory in `namespace` (a permanently deleted one too), oldest first."""

    OPERATION: ClassVar[str] = "memory.history"
    memory_id: str
    versions: tuple[int, ...] = ()  # only these; empty: all (paged)
    limit: int = 100
    offset: int = 0


class VersionDetail(Struct, frozen=True, kw_only=True):
    version: int
    seq: int
    seq_to: int | None  # the sequence that replaced it; None while current
    recorded_at: UtcTime
    event_type: str
    agent_id: str
    request_id: str
    deleted: bool
    state: MemoryState  # the memory as this version left it (for a deletion: as it was deleted)


class HistoryResult(Struct, frozen=True, kw_only=True):
    versions: list[VersionDetail]
    total: int


class PathOwnerResult(Struct, frozen=True, kw_only=True):
    memory_id: str | None
    store_seq: int


class CategoryCount(Struct, frozen=True, kw_only=True):
    path: str
    memory_count: int  # live memories under it, subcategories included


class CategoriesResult(Struct, frozen=True, kw_only=True):
    exists: bool  # the parent asked about is a category of the store (the root always is)
    categories: list[CategoryCount]


class ReindexResult(Struct, frozen=True, kw_only=True):
    categories: int  # rows of the store's category index after the rebuild
    added: int  # rows the rebuild wrote (missing, or with another created_seq)
    removed: int  # rows the rebuild dropped (no version of a memory in the store justifies them)
    memories: int  # live memories in the store


class ProjectorStatus(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the projector holds for `namespace` and how it is doing: counts, the embedding model, its cache,
    how far behind the log it is."""

    OPERATION: ClassVar[str] = "projector.status"


class StatusResult(Struct, frozen=True, kw_only=True):
    memories: int  # live (not archived) memories of the namespace
    entities: int
    relations: int
    code_chunks: int
    model: str | None  # the embedding model's id (None: no vector index)
    model_status: Literal["loading", "ready", "error", "off"]
    model_error: str | None
    dimensions: int
    cache_hits: int
    cache_misses: int
    cache_size: int
    applied_seq: int  # the rows' position in the log
    head_seq: int  # the log's head when asked
    lag_events: int
    lag_seconds: float  # how long ago the oldest event not yet applied was recorded (0: none)
    vectors_applied: int | None = None
    code_pending: int = 0  # code chunks waiting for their vector
    dead_letters: int = 0  # messages any consumer could not fold, kept on MNEME_DLQ (the stream's count)
    dead_letters_here: int = 0  # of those, skipped by this projector since it started


class Reply(Struct, frozen=True, kw_only=True):
    applied_seq: int
    result: msgspec.Raw = msgspec.Raw(b"\xc0")  # msgpack nil until a result is set
    error: dict[str, Any] | None = None


RESULT_TYPES: dict[str, type] = {
    GetMemory.OPERATION: GetResult,
    ListMemories.OPERATION: ListResult,
    MemoryStats.OPERATION: StatsResult,
    PathOwner.OPERATION: PathOwnerResult,
    ExpiredMemories.OPERATION: ListResult,
    AuditQuery.OPERATION: AuditResult,
    SearchMemories.OPERATION: SearchResult,
    MemoryHistory.OPERATION: HistoryResult,
    StoreCategories.OPERATION: CategoriesResult,
    ReindexCategories.OPERATION: ReindexResult,
    GraphEntities.OPERATION: GraphResult,
    GraphRelations.OPERATION: GraphResult,
    GraphTraverse.OPERATION: GraphResult,
    SearchCode.OPERATION: CodeSearchResult,
    CodeIndexStatus.OPERATION: CodeStatusResult,
    CodeProjects.OPERATION: CodeProjectsResult,
    CodeFiles.OPERATION: CodeFilesResult,
    ProjectorStatus.OPERATION: StatusResult,
}
QUERY_TYPES: dict[str, type[Query]] = {
    q.OPERATION: q
    for q in (
        GetMemory,
        ListMemories,
        MemoryStats,
        PathOwner,
        ExpiredMemories,
        SearchMemories,
        MemoryHistory,
        StoreCategories,
        GraphEntities,
        GraphRelations,
        GraphTraverse,
        SearchCode,
        CodeIndexStatus,
        CodeProjects,
        CodeFiles,
        ProjectorStatus,
    )
}

# Repairs: queries that write a read model (a derived index put back as the log says), on the control plane.
# Every projector replica answers them (no queue group: each repairs its own copy); the first reply answers.
REPAIR_TYPES: dict[str, type[Query]] = {ReindexCategories.OPERATION: ReindexCategories}

encoder = msgspec.msgpack.Encoder()
