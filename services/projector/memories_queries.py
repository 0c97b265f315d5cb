"""Answers to the memory queries, from the projection (invariant 2): point reads from staged state
and DuckDB, everything else from DuckDB's committed rows. The handlers of each family stand beside this
table: point reads (services/projector/memories_get.py), lists (memories_list.py), stats and the category
index (memories_stats.py), on what they share (memories_sql.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from schemas.queries import (
    ExpiredMemories,
    GetMemory,
    ListMemories,
    MemoryHistory,
    MemoryStats,
    PathOwner,
    ReindexCategories,
    StoreCategories,
)
from services.projector.memories_get import get as get
from services.projector.memories_get import get_known as get_known
from services.projector.memories_get import history as history
from services.projector.memories_get import path_owner as path_owner
from services.projector.memories_list import expired as expired
from services.projector.memories_list import list_ as list_
from services.projector.memories_sql import resolve_as_of as resolve_as_of
from services.projector.memories_sql import source as source
from services.projector.memories_stats import categories as categories
from services.projector.memories_stats import reindex_categories as reindex_categories
from services.projector.memories_stats import stats as stats
from services.projector.memories_view import MemoriesView

# Answered from staged state: they do not wait for a commit.
STAGED_READS = frozenset({GetMemory, PathOwner})  # (a get with as_of waits for the commit: see service.py)

# query type -> its answer (each handler takes its own query type)
HANDLERS: dict[type[msgspec.Struct], Callable[[MemoriesView, Any], Any]] = {
    GetMemory: get,
    ListMemories: list_,
    ExpiredMemories: expired,
    PathOwner: path_owner,
    MemoryStats: stats,
    MemoryHistory: history,
    StoreCategories: categories,
    ReindexCategories: reindex_categories,
}
