"""Search tools: semantic (memory_search), keyword (memory_search_keyword) and hybrid (memory_recall).

All three search the caller's namespace plus, when the principal belongs to an organization,
the verified rules of `<org>/_system`, ranked by relevance with the caller's own memories. Scores
are absolute (services/projector/search.py), so the default thresholds drop unrelated memories and
a search may return fewer than `limit`. Each search leaves one access record with the ids it
returned, so it is audited and counted like a read.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from mneme.domain import validation as v
from schemas.queries import SearchMemories, SearchResult
from services.gateway.gateway import Call
from services.gateway.models import AsOfInfo, Memory, SearchItem, SearchResults
from services.gateway.params import READ, AsOfArg, Kind, Label, Namespace, Tags, Unit, ValidAtArg
from services.gateway.toolkit import Toolset

Query = Annotated[str, Field(min_length=1, max_length=4096, description="What to look for, in natural language.")]
Limit = Annotated[int, Field(ge=1, le=100, description="Most results to return.")]
Threshold = Annotated[Unit | None, Field(description="Minimum score 0-1; default per tool "
                                          "(memory_search 0.2, memory_search_keyword 0, memory_recall 0.1: what "
                                          "is below is unrelated).")]  # fmt: skip
Status = Annotated[Literal["live", "active", "any"], Field(
    description="live (default): active and deprecated (scored x0.7); active: exclude deprecated; "
    "any: also archived (scored x0.5).")]  # fmt: skip


tools = Toolset(doc_indent=8)


async def search(call: Call, mode: str, **params: object) -> SearchResults:
    gw = call.gw
    system = call.principal.system_namespace
    rules = (system,) if params.pop("include_rules") and system and system != call.namespace \
        and call.principal.can_read(system) else ()  # fmt: skip
    params["as_of"] = await gw.as_of(params.get("as_of"))  # type: ignore[arg-type]
    params["valid_at"] = v.utc(params.get("valid_at"), "valid_at")  # type: ignore[arg-type]
    q = SearchMemories(namespace=call.namespace, now=gw.now(), min_seq=await gw.min_seq(), mode=mode,
                       rule_namespaces=rules, **params)  # type: ignore[arg-type]  # fmt: skip
    got: SearchResult = await gw.queries.ask(q)
    now = got.as_of.time if got.as_of is not None and got.as_of.time is not None else gw.now()
    items = []
    for h in got.hits:
        m = Memory.of(h.memory, now).model_dump()
        m.update(access_count=None, history=[])
        item = SearchItem(**m, score=h.score, semantic_score=h.semantic, keyword_score=h.keyword,
                          match=h.group, demoted=h.demoted)  # fmt: skip
        items.append(gw.shown(call, item))  # type: ignore[arg-type]
    call.read([i.id for i in items])
    return SearchResults(query=q.query, mode=got.mode, count=len(items), threshold=got.threshold,  # type: ignore[arg-type]
                         model=got.model, results=items, as_of=AsOfInfo.of(got.as_of))  # fmt: skip


@tools.tool(intent="read", hints=READ)
async def memory_search(
    call: Call,
    query: Query,
    namespace: Namespace = None,
    limit: Limit = 10,
    threshold: Threshold = None,
    kind: Kind | None = None,
    category: Label | None = None,
    subject: Annotated[str | None, Field(max_length=128, description="Case and spacing are ignored.")] = None,
    tags: Annotated[Tags, Field(description="Memories carrying ALL of these tags.")] = [],  # noqa: B006
    importance_min: Unit | None = None,
    importance_max: Unit | None = None,
    status: Status = "live",
    include_expired: bool = False,
    include_rules: Annotated[bool, Field(description="Also verified rules of your organization.")] = True,
    as_of: AsOfArg = None,
    valid_at: ValidAtArg = None,
) -> SearchResults:
    """Semantic search: memories whose meaning is closest to the query (embedding similarity), with
    filters. Use it to recall facts, preferences and context phrased differently from the query.
    score: the cosine similarity (unrelated ~0-0.2, a paraphrase ~0.4-0.8), lower for deprecated or
    no longer valid memories; results below `threshold` (0.2) are left out."""
    return await search(call, "semantic", query=query, limit=limit,
                        threshold=threshold, kind=kind, category=category, subject=subject, tags=tuple(tags),
                        importance_min=importance_min, importance_max=importance_max, status=status,
                        include_expired=include_expired, include_rules=include_rules, as_of=as_of, valid_at=valid_at)  # fmt: skip


@tools.tool(intent="read", hints=READ)
async def memory_search_keyword(
    call: Call,
    query: Query,
    namespace: Namespace = None,
    limit: Limit = 10,
    threshold: Threshold = None,
    kind: Kind | None = None,
    category: Label | None = None,
    subject: Annotated[str | None, Field(max_length=128)] = None,
    tags: Annotated[Tags, Field(description="Memories carrying ALL of these tags.")] = [],  # noqa: B006
    importance_min: Unit | None = None,
    importance_max: Unit | None = None,
    status: Status = "live",
    include_expired: bool = False,
    include_rules: bool = True,
    as_of: AsOfArg = None,
    valid_at: ValidAtArg = None,
) -> SearchResults:
    """Keyword search (BM25 with English stemming, accents and case folded): memories containing the
    query's words, rarer words weighing more. score: the share of the query's words (weighted by rarity)
    the memory holds, 1 = all of them. Works while the embedding model is still loading."""
    return await search(call, "keyword", query=query, limit=limit,
                        threshold=threshold, kind=kind, category=category, subject=subject, tags=tuple(tags),
                        importance_min=importance_min, importance_max=importance_max, status=status,
                        include_expired=include_expired, include_rules=include_rules, as_of=as_of, valid_at=valid_at)  # fmt: skip


@tools.tool(intent="read", hints=READ)
async def memory_recall(
    call: Call,
    query: Query,
    namespace: Namespace = None,
    limit: Limit = 10,
    threshold: Threshold = None,
    fusion: Annotated[Literal["calibrated", "zscore", "rrf"], Field(description="calibrated (default): "
                      "absolute scores, semantic_weight x semantic relevance + the rest x keyword coverage; "
                      "zscore, rrf: scores relative to the candidates (threshold default 0).")
                      ] = "calibrated",  # fmt: skip
    semantic_weight: Annotated[Unit, Field(description="Weight of the semantic retriever; "
                               "keyword gets 1 - this.")] = 0.3,  # fmt: skip
    kind: Kind | None = None,
    category: Label | None = None,
    subject: Annotated[str | None, Field(max_length=128)] = None,
    tags: Annotated[Tags, Field(description="Memories carrying ALL of these tags.")] = [],  # noqa: B006
    importance_min: Unit | None = None,
    importance_max: Unit | None = None,
    status: Status = "live",
    include_expired: bool = False,
    include_rules: bool = True,
    as_of: AsOfArg = None,
    valid_at: ValidAtArg = None,
) -> SearchResults:
    """Hybrid recall: semantic and keyword search fused into one ranking by relevance; the best default
    for questions. score 0-1 means the same in every query: 0.3 x semantic relevance + 0.7 x keyword
    coverage, +0.1 when the memory contains the query, lower for deprecated or no longer valid memories;
    results below `threshold` (0.1) are unrelated and left out, so fewer than `limit` may come back."""
    return await search(call, "hybrid", query=query, limit=limit,
                        threshold=threshold, fusion=fusion, semantic_weight=semantic_weight, kind=kind,
                        category=category, subject=subject, tags=tuple(tags), importance_min=importance_min,
                        importance_max=importance_max, status=status, include_expired=include_expired,
                        include_rules=include_rules, as_of=as_of, valid_at=valid_at)  # fmt: skip
