"""memory-mcp's search tools: search (semantic), search_text (keyword) and recall (hybrid, over memories, code
or both, merged by z-score)."""

from __future__ import annotations

import math

from schemas.queries import SearchCode, SearchMemories
from services.gateway.gateway import Call
from services.gateway.params import READ
from services.gateway.profiles.memory_mcp_models import (
    RecallItem,
    RecallOut,
    SearchItem,
    SearchLimit,
    SearchOut,
    SignalWeight,
)
from services.gateway.profiles.vocab import MEMORY_MCP
from services.gateway.toolkit import Toolset

tools = Toolset()

MAX_SIGNAL_WEIGHT = 10.0


async def _search(call: Call, mode: str, query: str, limit: int) -> SearchOut:
    got = await call.app.reads.ask(call, SearchMemories, mode=mode, query=query, limit=limit)
    call.read([h.memory.id for h in got.hits])
    results = [
        SearchItem(
            id=h.memory.id, content=h.memory.content, memory_type=MEMORY_MCP.name_of(h.memory.kind), score=h.score
        )
        for h in got.hits
    ]
    return SearchOut(results=results, count=len(results), query=query)


@tools.tool(intent="read", hints=READ)
async def search(call: Call, query: str, limit: SearchLimit = 10) -> SearchOut:
    """Semantic vector search over memories using HNSW index."""
    return await _search(call, "semantic", query, limit)


@tools.tool(intent="read", hints=READ)
async def search_text(call: Call, query: str, limit: SearchLimit = 10) -> SearchOut:
    """Full-text keyword search using BM25 algorithm."""
    return await _search(call, "keyword", query, limit)


def _bounded_weights(*weights: float) -> tuple[float, ...]:
    """recall's weights, each at most MAX_SIGNAL_WEIGHT: larger ones are scaled down together, keeping their
    proportions (the ranking is the same). The contract bounds them by nothing, but the fused score is a logistic
    of the weighted z-scores, and weights like 1e308 put that past what a float holds."""
    top = max(weights)
    if top <= MAX_SIGNAL_WEIGHT:
        return weights
    return tuple(w / top * MAX_SIGNAL_WEIGHT for w in weights)


@tools.tool(intent="read", hints=READ)
async def recall(
    call: Call,
    query: str,
    limit: SearchLimit = 10,
    include_memories: bool = True,
    include_code: bool = False,
    project_id: str | None = None,
    language: str | None = None,
    vector_weight: SignalWeight = 0.40,
    bm25_weight: SignalWeight = 0.15,
    ppr_weight: SignalWeight = 0.45,
) -> RecallOut:
    """Hybrid search combining vector similarity, BM25 keywords, and graph context (PPR). Can search memories, code, or both with Z-Score normalization."""  # noqa: E501
    reads = call.app.reads
    vector_weight, bm25_weight, ppr_weight = _bounded_weights(vector_weight, bm25_weight, ppr_weight)
    memories: list[RecallItem] = []
    nodes = 0
    if include_memories:
        got = await reads.ask(
            call,
            SearchMemories,
            mode="hybrid",
            fusion="zscore",
            query=query,
            limit=limit,
            semantic_weight=vector_weight,
            keyword_weight=bm25_weight,
            graph_weight=ppr_weight,
        )
        call.read([h.memory.id for h in got.hits])
        nodes = got.subgraph_nodes
        memories = [
            RecallItem(
                id=h.memory.id,
                content=h.memory.content,
                source="memory",
                score=h.score,
                vector_score=h.semantic or 0.0,
                bm25_score=h.keyword or 0.0,
                ppr_score=h.graph or 0.0,
            )
            for h in got.hits
        ]
    code: list[RecallItem] = []
    if include_code:
        found = await reads.ask(call, SearchCode, query=query, project_id=project_id, language=language, limit=limit)
        code = [
            RecallItem(
                id=h.id,
                content=h.content,
                source="code",
                score=h.score,
                vector_score=h.score,
                bm25_score=0.0,
                ppr_score=0.0,
                file_path=h.path,
                start_line=h.start_line,
                end_line=h.end_line,
            )
            for h in found.hits
        ]
    results = merge_by_zscore(memories, code, limit) if memories and code else (memories or code)[:limit]
    return RecallOut(
        results=results,
        query=query,
        subgraph_nodes=nodes,
        memories_count=sum(1 for r in results if r.source == "memory"),
        code_count=sum(1 for r in results if r.source == "code"),
    )


def merge_by_zscore(memories: list[RecallItem], code: list[RecallItem], limit: int) -> list[RecallItem]:
    """Memories and code chunks on one list: each side's scores standardised over its own results (the two
    scales differ), then merged by that z-score, best first. Each merged result's `score` is its normalised
    score, the standard normal CDF of its z-score (0..1, 0.5 at its side's mean), so the list reads in
    `score` order; `vector_score`, `bm25_score` and `ppr_score` keep the raw signals."""

    def z(items: list[RecallItem]) -> list[tuple[float, RecallItem]]:
        xs = [r.score for r in items]
        mean = sum(xs) / len(xs)
        std = (sum((x - mean) ** 2 for x in xs) / len(xs)) ** 0.5 or 1.0
        return [((r.score - mean) / std, r) for r in items]

    both = z(memories) + z(code)
    both.sort(key=lambda t: -t[0])
    return [
        r.model_copy(update={"score": round(0.5 * (1.0 + math.erf(zs / math.sqrt(2.0))), 6)}) for zs, r in both[:limit]
    ]
