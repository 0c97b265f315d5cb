"""Search over the vector projection: the query (semantic, keyword or hybrid, with its filters, fusion and
ordering) and its scored hits. Answered by a projector's searcher (services/projector/search.py); re-exported
by schemas/queries.py.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from msgspec import Struct

from schemas.events import UtcTime
from schemas.query_base import AsOf, AsOfResolved, Query
from schemas.state import MemoryState

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
