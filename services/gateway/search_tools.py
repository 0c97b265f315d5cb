"""Search: one tool, memory_search, over hybrid (default), semantic or keyword retrieval.

It searches the caller's namespace plus, when the principal belongs to an organization, the verified
rules of `<org>/_system`, ranked by relevance with the caller's own memories. Scores are absolute
(services/projector/search.py), so the default thresholds drop unrelated memories and a search may
return fewer than `limit`. Each search leaves one access record with the ids it returned, so it is
audited and counted like a read.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from mneme.domain import validation as v
from mneme.errors import InvalidInput
from schemas.queries import SearchMemories, SearchResult
from services.gateway.gateway import Call
from services.gateway.models import AsOfInfo, SearchResults
from services.gateway.params import READ, AsOfArg, Detail, Kind, Label, Namespace, Tags, Unit, ValidAtArg
from services.gateway.read_tools import result
from services.gateway.toolkit import Toolset

tools = Toolset(flow=True)


@tools.tool(intent="read", hints=READ)
async def memory_search(
    call: Call,
    query: Annotated[
        str, Field(min_length=1, max_length=4096, description="A question or topic, in natural language.")
    ],
    namespace: Namespace = None,
    limit: Annotated[int, Field(ge=1, le=100)] = 10,
    mode: Annotated[
        Literal["hybrid", "semantic", "keyword"],
        Field(
            description="hybrid (default): meaning and words together, best for questions; semantic: meaning "
            "only, for paraphrases; keyword: the query's words (BM25), works while the model loads."
        ),
    ] = "hybrid",
    threshold: Annotated[
        Unit | None,
        Field(
            description="Minimum score (default: hybrid 0.1, semantic 0.2, keyword 0); below it a memory is unrelated."
        ),
    ] = None,
    kind: Kind | None = None,
    category: Label | None = None,
    subject: Annotated[str | None, Field(max_length=128)] = None,
    tags: Annotated[Tags, Field(description="Memories carrying ALL of these tags.")] = [],  # noqa: B006
    importance_min: Unit | None = None,
    importance_max: Unit | None = None,
    status: Annotated[
        Literal["live", "active", "any"],
        Field(description="live: also deprecated (ranked lower); active: not deprecated; any: also archived."),
    ] = "live",
    include_expired: bool = False,
    include_rules: Annotated[bool, Field(description="Also your organization's verified rules.")] = True,
    valid_at: ValidAtArg = None,
    as_of: AsOfArg = None,
    fusion: Annotated[
        Literal["calibrated", "zscore", "rrf"] | None,
        Field(description="hybrid only: calibrated (default), or zscore / rrf, relative to the candidates."),
    ] = None,
    semantic_weight: Annotated[
        Unit | None, Field(description="hybrid only: the semantic share of the score (default 0.3).")
    ] = None,
    graph_weight: Annotated[
        Unit | None, Field(description="hybrid only: weight of the knowledge graph's PageRank signal (zscore).")
    ] = None,
    detail: Detail = "brief",
) -> SearchResults:
    """Find what the memory knows about a question or topic: the most relevant memories first, each
    with a score 0-1 that means the same in every query (0.1 barely related, 0.5 and up a strong
    match). Use it before answering from memory; fewer than `limit` come back when fewer are related."""
    gw = call.gw
    system = call.principal.system_namespace
    rules = (
        (system,) if include_rules and system and system != call.namespace and call.principal.can_read(system) else ()
    )
    for name, given in (("fusion", fusion), ("semantic_weight", semantic_weight), ("graph_weight", graph_weight)):
        if given is not None and mode != "hybrid":
            raise InvalidInput(name, f"only with mode 'hybrid' (this search is {mode})")
    if graph_weight and fusion not in (None, "zscore"):
        raise InvalidInput("graph_weight", "the graph signal is fused by z-score (fusion 'zscore' or unset)")
    extra: dict[str, Any] = {
        "fusion": "zscore" if graph_weight else fusion or "calibrated",
        "semantic_weight": 0.3 if semantic_weight is None else semantic_weight,
        "graph_weight": graph_weight or 0.0,
    }
    q = SearchMemories(
        namespace=call.namespace,
        now=gw.now(),
        mode=mode,
        rule_namespaces=rules,
        query=query,
        limit=limit,
        threshold=threshold,
        kind=kind,
        category=category,
        subject=subject,
        tags=tuple(tags),
        importance_min=importance_min,
        importance_max=importance_max,
        status=status,
        include_expired=include_expired,
        as_of=await gw.as_of(as_of),
        valid_at=v.utc(valid_at, "valid_at"),
        **extra,
    )
    got: SearchResult = await call.app.reads.send(call, q)
    now = got.as_of.time if got.as_of is not None and got.as_of.time is not None else gw.now()
    items = [
        result(
            gw,
            call,
            h.memory,
            now,
            detail,
            score=h.score,
            semantic_score=h.semantic,
            keyword_score=h.keyword,
            graph_score=h.graph,
            match=h.group,
            demoted=h.demoted,
        )
        for h in got.hits
    ]
    call.read([i.id for i in items])
    full = detail == "full"
    return SearchResults(
        results=items,
        mode=got.mode if full else None,
        threshold=got.threshold if full else None,
        model=got.model if full else None,
        subgraph_nodes=got.subgraph_nodes if graph_weight else None,
        as_of=AsOfInfo.of(got.as_of),
    )
