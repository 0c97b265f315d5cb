"""The registry of read models: for each query type, the read model that answers it, what it waits for, and how.

A route says which follower's position the query waits for (the rows', or the vector index's for a search), whether
a point read may answer from staged state (read-your-writes before the commit), whether an answer that a commit
landing meanwhile would move is asked again (so the position it records is its own), and whether it writes (the
follower's commits hold still while it runs). `run_query` is the one dispatch: every handler runs on a worker
thread against one generation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from mneme.errors import MnemeError
from schemas.queries import (
    GraphEntities,
    GraphTraverse,
    ListMemories,
    MemoryHistory,
    MemoryStats,
    ProjectorStatus,
    ReindexCategories,
    SearchMemories,
)
from services.projector.code_queries import CODE_HANDLERS
from services.projector.generation import Generation
from services.projector.graph_queries import HANDLERS as GRAPH_HANDLERS
from services.projector.memories_queries import HANDLERS as MEMORY_HANDLERS
from services.projector.memories_queries import STAGED_READS
from services.projector.memories_sql import resolve_as_of


@dataclass(frozen=True)
class Route:
    answer: Callable[[Generation, Any], Any]
    follows: Literal["rows", "vectors"] = "rows"  # whose position `min_seq` is waited for
    staged: bool = False  # a point read answered from staged state (unless it reads the past: as_of)
    repeat: bool = False  # asked again when a commit lands while it runs (the recorded position is its own)
    writes: bool = False  # it writes rows: the follower's commits hold still meanwhile


def _rows(handler: Callable[[Any, Any], Any]) -> Callable[[Generation, Any], Any]:
    return lambda gen, q: handler(gen.view, q)


def _code(handler: Callable[[Any, Any], Any]) -> Callable[[Generation, Any], Any]:
    def answer(gen: Generation, q: Any) -> Any:
        if gen.code is None:
            raise MnemeError("this projector keeps no code index (it runs without vectors)")
        return handler(gen.code, q)

    return answer


def _search(gen: Generation, q: SearchMemories) -> Any:
    assert gen.searcher is not None
    return gen.searcher.search(q, resolve_as_of(gen.view, q.as_of))


def _status(gen: Generation, q: Any) -> Any:  # (answered by the projector itself: it reads the log and the model)
    raise MnemeError("the projector's status is answered by the projector, not a read model")


REPEATED = (ListMemories, MemoryStats, MemoryHistory, GraphEntities, GraphTraverse)

ROUTES: dict[type, Route] = {
    **{t: Route(_rows(h), staged=t in STAGED_READS, repeat=t in REPEATED) for t, h in MEMORY_HANDLERS.items()},
    **{t: Route(_rows(h), repeat=t in REPEATED) for t, h in GRAPH_HANDLERS.items()},
    **{t: Route(_code(h)) for t, h in CODE_HANDLERS.items()},
    SearchMemories: Route(_search, follows="vectors", repeat=True),
    ProjectorStatus: Route(_status),
}
ROUTES[ReindexCategories] = Route(_rows(MEMORY_HANDLERS[ReindexCategories]), writes=True)


def route_of(query: Any) -> Route:
    route = ROUTES.get(type(query))
    if route is None:
        raise MnemeError(f"no read model answers {type(query).__name__}")
    return route


def run_query(gen: Generation, query: Any) -> Any:
    """The answer of the read model that `query`'s route names, on `gen` (call it on a worker thread)."""
    return route_of(query).answer(gen, query)
