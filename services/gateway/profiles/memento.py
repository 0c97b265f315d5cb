"""The `memento` profile (../shared/seeds/memento-tool-spec.md): facts about people, each with a subject, a
category, tags and a confidence; semantic search with a threshold; recent memories; outdated marking; stats.

A thin translation onto the one domain: store_memory is a create (kind "fact"), update_memory an update or an
invalidation recorded as outdated, the reads are the projector's search, list and stats queries. The contract
has no namespace argument: each principal works in its own default namespace, so different users' memories
are never shared. docs/profiles.md (memento) maps every tool and records every choice.

memento_models.py: the schemas; memento_store.py: the writes; memento_search.py: relevance_score.
"""

from __future__ import annotations

from typing import Any

from mneme.domain import validation as v
from mneme.errors import InvalidInput, MemoryNotFound
from schemas.queries import ListMemories, MemoryStats
from services.gateway.error_styles import ErrorStyle, without_keyword_hint
from services.gateway.gateway import Call
from services.gateway.params import READ, WRITE
from services.gateway.profiles import memento_search, memento_store
from services.gateway.profiles.memento_models import (
    CategoryArg,
    Confidence,
    Content,
    FoundMemories,
    MarkOutdated,
    MemoryIdArg,
    MemoryOut,
    MemoryStatsOut,
    NewContent,
    Query,
    Reason,
    RecentLimit,
    RecentMemories,
    RecentSubject,
    SearchCategory,
    SearchLimit,
    SearchSubject,
    StatsSubject,
    Stored,
    Subject,
    Tags,
    Threshold,
    Updated,
)
from services.gateway.profiles.vocab import MEMENTO
from services.gateway.toolkit import Profile, Toolset

tools = Toolset()


def _given(value: str | None) -> str | None:
    """An optional text argument: blank is the same as absent."""
    return value if value is not None and value.strip() else None


@tools.tool(intent="write", hints=WRITE)
async def store_memory(
    call: Call,
    content: Content,
    subject: Subject,
    category: CategoryArg,
    tags: Tags = None,
    confidence: Confidence = 1.0,
) -> Stored:
    """Store a new fact or memory about a person, preference, or situation. Use this when you learn something new that should be remembered for future conversations."""  # noqa: E501
    return await memento_store.store(call, content, subject, category, tags or [], confidence)


@tools.tool(intent="read", hints=READ)
async def search_memories(
    call: Call,
    query: Query,
    subject_filter: SearchSubject = None,
    category_filter: SearchCategory = None,
    limit: SearchLimit = 5,
    threshold: Threshold = 0.7,
) -> FoundMemories:
    """Search for relevant memories based on a query. Use this to recall information about subjects, preferences, or past context."""  # noqa: E501
    found = await memento_search.search(call, query, _given(subject_filter), category_filter, limit, threshold)
    call.read([f.id for f in found])
    return FoundMemories(memories=found)


@tools.tool(intent="read", hints=READ)
async def list_recent_memories(
    call: Call, limit: RecentLimit = 10, subject_filter: RecentSubject = None
) -> RecentMemories:
    """List the most recently stored memories. Useful for reviewing what was just learned or stored."""
    gw = call.gw
    assert gw is not None
    now = gw.now()
    got = await call.app.reads.send(  # (built here: the one `now` is also the validity time asked for)
        call,
        ListMemories(
            namespace=call.namespace,
            now=now,
            subject=_given(subject_filter),
            status="active",
            valid_at=now,
            limit=limit,
            sort_by="created_at",
            sort_order="desc",
        ),
    )
    out = [MemoryOut.of(r.memory) for r in got.items]
    call.read([m.id for m in out])
    return RecentMemories(memories=out)


@tools.tool(intent="write", hints=WRITE)
async def update_memory(
    call: Call,
    memory_id: MemoryIdArg,
    new_content: NewContent = None,
    mark_outdated: MarkOutdated = None,
    reason: Reason = None,
) -> Updated:
    """Update an existing memory when information changes or becomes outdated."""
    gw = call.gw
    assert gw is not None
    try:
        mid = v.memory_id(memory_id, "memory_id")
    except InvalidInput:  # an id that names no memory, as the contract's example (mem_xyz789)
        raise MemoryNotFound(memory_id) from None
    if not mark_outdated and new_content is None:
        raise InvalidInput("new_content", "give new_content, or mark_outdated: true")
    old = (await call.app.reads.resolve(call, mid)).memory
    if mark_outdated:
        return await memento_store.mark_outdated(call, gw, old, new_content, _given(reason))
    assert new_content is not None
    return await memento_store.new_content(call, gw, old, new_content, _given(reason))


@tools.tool(intent="read", hints=READ)
async def get_memory_stats(call: Call, subject_filter: StatsSubject = None) -> MemoryStatsOut:
    """Get statistics about the stored memories for a subject or overall system."""
    assert call.gw is not None
    r = await call.app.reads.ask(call, MemoryStats, subject=_given(subject_filter), top_tags=1)
    return MemoryStatsOut(
        total_memories=r.total - r.archived,  # what by_category and by_subject count: all but archived memories
        by_category=MEMENTO.counts(r.by_category),  # another profile's category (or none) counts as context
        by_subject={r.subject_names.get(k, k): n for k, n in r.by_subject.items()},
        oldest_memory=r.oldest,
        newest_memory=r.newest,
    )


def _not_found(message: str, details: dict[str, Any]) -> str:
    ref = message.removeprefix("Memory not found: ").split(" ")[0]
    expired = f" (it expired at {details['expired_at']})" if details.get("expired_at") else ""
    return f"Memory with ID {ref} not found{expired}"


# Every domain code lands on one of the contract's five codes. RATE_LIMIT is never sent: mneme limits no rate.
ERRORS = ErrorStyle(
    codes={
        "INVALID_INPUT": "INVALID_PARAMETER",
        "INVALID_STATE": "INVALID_PARAMETER",
        "ALREADY_EXISTS": "INVALID_PARAMETER",
        "IDEMPOTENCY_KEY_REUSED": "INVALID_PARAMETER",
        "UNKNOWN_TOOL": "INVALID_PARAMETER",
        # refusals: not worth retrying; the message says why (locked, not this principal's namespace, ...)
        "MEMORY_LOCKED": "INVALID_PARAMETER",
        "WRITE_NOT_ALLOWED": "INVALID_PARAMETER",
        "PERMISSION_ERROR": "INVALID_PARAMETER",
        "SCOPE_VIOLATION": "INVALID_PARAMETER",
        "INVALID_CONTEXT": "INVALID_PARAMETER",
        # worth retrying: the log or a projector was out of reach, behind or contended
        "CONFLICT": "STORAGE_ERROR",
        "PROJECTION_LAG": "STORAGE_ERROR",
        "UNAVAILABLE": "STORAGE_ERROR",
        "INTERNAL": "STORAGE_ERROR",
        "EMBEDDING_MODEL_LOADING": "EMBEDDING_ERROR",
        "EMBEDDING_MODEL_UNAVAILABLE": "EMBEDDING_ERROR",
    },
    with_field=False,  # the contract's error object is {code, message}; messages name the field
    with_details=False,
    messages={  # (memento has no keyword search to point to)
        "MEMORY_NOT_FOUND": _not_found,
        "EMBEDDING_MODEL_LOADING": without_keyword_hint,
        "INDEXING": without_keyword_hint,
    },
)

PROFILE = Profile(
    name="memento",
    tools=tools,
    instructions=(
        "Memento remembers facts about people, their preferences and situations. Store each new fact with "
        "store_memory: one atomic, standalone statement, always the same subject name. Search with "
        "search_memories before recommendations that depend on preferences or restrictions, and when the user "
        "asks 'do you remember...'. When information changes, update_memory (new_content, or mark_outdated)."
    ),
    errors=ERRORS,
    context="never",
)
