"""Queries the gateway asks a projector over NATS request/reply, and their replies (msgpack).

Every query carries `min_seq` (read-your-writes, invariant 3) and `now` (the reader's
clock, which decides what counts as expired).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import msgspec
from msgspec import Struct

from schemas.events import UtcTime
from schemas.state import MemoryState

SortBy = Literal["created_at", "updated_at", "accessed_at", "importance", "access_count"]
StatusFilter = Literal["live", "active", "deprecated", "archived", "any"]


class Query(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    OPERATION: ClassVar[str] = ""
    namespace: str
    now: UtcTime
    min_seq: int = 0


class AsOf(Struct, frozen=True, kw_only=True):
    """A past position: a stream sequence, or a time (the newest sequence recorded at or before it); both: that
    sequence, with expiry judged at that time (an audited read asked again as it was asked)."""

    seq: int | None = None
    time: UtcTime | None = None


class AsOfResolved(Struct, frozen=True, kw_only=True):
    seq: int  # the answer is the projection right after this sequence
    time: UtcTime | None  # when the log recorded that sequence (what counts as expired then)


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


SearchMode = Literal["semantic", "keyword", "hybrid"]


class SearchMemories(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Semantic, keyword or hybrid search in `namespace`, plus verified memories of `rule_namespaces`
    (the caller's organization rules). Answered from the vector projection."""

    OPERATION: ClassVar[str] = "memory.search"
    mode: SearchMode
    query: str
    rule_namespaces: tuple[str, ...] = ()
    limit: int = 10
    threshold: float | None = None  # None: the mode's default
    kind: str | None = None
    kinds: tuple[str, ...] = ()  # any of these kinds (a profile's closed vocabulary: profiles/vocab.py)
    kinds_not: tuple[str, ...] = ()  # none of these kinds
    category: str | None = None
    subject: str | None = None
    tags: tuple[str, ...] = ()  # all of them
    importance_min: float | None = None
    importance_max: float | None = None
    status: Literal["live", "active", "any"] = "live"  # live: active and deprecated (deprecated scored lower)
    include_expired: bool = False
    include_invalid: bool = True  # memories whose valid time has ended, scored lower than valid ones
    # hybrid: calibrated (absolute scores, services/projector/search.py); zscore and rrf: relative to the candidates
    fusion: Literal["calibrated", "zscore", "rrf"] = "calibrated"
    semantic_weight: float = 0.3  # hybrid: the keyword weight is 1 - semantic_weight (unless keyword_weight)
    keyword_weight: float | None = None  # hybrid zscore: the keyword signal's weight (None: 1 - semantic_weight)
    # hybrid zscore: the weight of a third signal, personalized PageRank over the namespace's knowledge graph,
    # seeded from the entities the top hits mention and the entity names in the query (0: off)
    graph_weight: float = 0.0
    as_of: AsOf | None = None  # answer as the projection stood then
    valid_at: UtcTime | None = None  # only memories valid then: valid_from <= t < valid_until
    order: Literal["relevance", "tiers"] = "relevance"  # tiers: exact, own namespace, rules; demoted last in each


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


class SearchHit(Struct, frozen=True, kw_only=True):
    memory: MemoryState
    score: float  # 0-1: the mode's absolute relevance times the memory's standing (services/projector/search.py)
    semantic: float | None = None  # cosine similarity, when computed (semantic and calibrated hybrid searches)
    keyword: float | None = None  # raw BM25, when computed (keyword and calibrated hybrid searches)
    graph: float | None = None  # personalized PageRank mass of the memory, when the graph signal ran
    group: Literal["exact", "scope", "rules"] = "scope"
    demoted: bool = False  # deprecated, archived or no longer valid: its score scaled down


class SearchResult(Struct, frozen=True, kw_only=True):
    hits: list[SearchHit]
    mode: str
    threshold: float
    model: str | None = None
    as_of: AsOfResolved | None = None
    subgraph_nodes: int = 0  # nodes of the knowledge graph the graph signal ran over (0: it did not run)


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


class AuditQuery(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Served by the auditor: who touched a memory, what an agent did, in a time window."""

    OPERATION: ClassVar[str] = "audit.query"
    namespaces: tuple[str, ...] = ()  # the namespaces the asking admin may read; empty: `namespace` only
    memory_id: str | None = None
    agent_id: str | None = None
    action: str | None = None  # prefix: "memory_", "read:", "denied:"
    outcome: str | None = None
    since: UtcTime | None = None
    until: UtcTime | None = None
    limit: int = 100
    offset: int = 0
    trail_seq: int | None = None  # only this record


class AuditRow(Struct, frozen=True, kw_only=True):
    trail_seq: int
    source: str
    source_seq: int
    recorded_at: UtcTime
    action: str
    outcome: str
    namespace: str
    agent_id: str
    role: str
    request_id: str
    memory_ids: list[str]
    code: str | None
    occurred_at: UtcTime


class AuditResult(Struct, frozen=True, kw_only=True):
    records: list[AuditRow]
    total: int


class GraphEntities(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Entities of the knowledge graph (current, or as of a past position), with their relations.

    Filters combine: `ids`, `names` (compared by name key), `text` (a case-insensitive substring of the name,
    the type or an observation), `entity_type`. `relations`: none, those touching `either` end of a found
    entity, or only those with `both` ends found."""

    OPERATION: ClassVar[str] = "graph.entities"
    ids: tuple[str, ...] | None = None
    names: tuple[str, ...] | None = None
    text: str | None = None
    entity_type: str | None = None
    relations: Literal["none", "either", "both"] = "either"
    limit: int | None = None
    offset: int = 0
    as_of: AsOf | None = None


class GraphRelations(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Relations by id (current, or as of a past position): what a delete of relations acts on."""

    OPERATION: ClassVar[str] = "graph.relations"
    ids: tuple[str, ...]
    as_of: AsOf | None = None


class GraphTraverse(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Entities and relations within `depth` hops of one entity, following relations out, in or both ways;
    each entity once (cycles end there), at most `max_nodes` entities (then `truncated`)."""

    OPERATION: ClassVar[str] = "graph.traverse"
    entity_id: str
    depth: int = 1
    direction: Literal["outgoing", "incoming", "both"] = "outgoing"
    max_nodes: int = 200
    as_of: AsOf | None = None


class Entity(Struct, frozen=True, kw_only=True):
    id: str
    name: str
    entity_type: str
    description: str | None
    observations: list[str]
    version: int
    last_seq: int
    created_at: UtcTime
    depth: int | None = None  # in a traversal: hops from the start


class Relation(Struct, frozen=True, kw_only=True):
    id: str
    from_id: str
    from_name: str
    to_id: str
    to_name: str
    relation_type: str
    weight: float
    version: int
    last_seq: int


class GraphResult(Struct, frozen=True, kw_only=True):
    entities: list[Entity]
    relations: list[Relation]
    total: int  # entities matching, before limit/offset
    truncated: bool = False


class SearchCode(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Semantic search over the namespace's indexed code (chunks that have their vector)."""

    OPERATION: ClassVar[str] = "code.search"
    query: str
    project_id: str | None = None
    language: str | None = None
    limit: int = 10


class CodeIndexStatus(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    OPERATION: ClassVar[str] = "code.status"
    project_id: str


class CodeProjects(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    OPERATION: ClassVar[str] = "code.projects"


class CodeFiles(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The files a project's index holds, with their content hashes (what an indexing run can skip)."""

    OPERATION: ClassVar[str] = "code.files"
    project_id: str


class CodeHit(Struct, frozen=True, kw_only=True):
    id: str
    project_id: str
    path: str
    language: str
    start_line: int
    end_line: int
    chunk_type: str
    name: str | None
    content: str
    score: float


class CodeSearchResult(Struct, frozen=True, kw_only=True):
    hits: list[CodeHit]
    pending: int  # chunks of the namespace still waiting for their vector (not searchable yet)
    model: str | None = None


class CodeStatusResult(Struct, frozen=True, kw_only=True):
    project_id: str
    found: bool
    status: str = "pending"  # pending | indexing | completed | failed
    root: str | None = None
    total_files: int = 0
    indexed_files: int = 0
    total_chunks: int = 0
    embedded_chunks: int = 0
    progress_percent: float = 0.0
    eta_seconds: float | None = None
    started_at: UtcTime | None = None
    completed_at: UtcTime | None = None
    error: str | None = None


class CodeProjectsResult(Struct, frozen=True, kw_only=True):
    projects: list[CodeStatusResult]


class CodeFilesResult(Struct, frozen=True, kw_only=True):
    root: str | None
    files: dict[str, str]  # path -> sha256


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
