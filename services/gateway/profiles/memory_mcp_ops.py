"""memory-mcp's mapping onto the domain: tenants (user_id), memories, the knowledge graph, status and reset.

Tenants. The contract's `user_id` isolates: a memory or entity stored with a user id is visible only with that
user id. It is a namespace: the caller's own namespace plus one segment for the user, `user-<user_id>` when the
id is 1-59 letters, digits, '_', '-', '.' (e.g. `default/user-alice`), else `userh-<24 hex of its sha256>` (an
e-mail address, say); the two forms never collide. Tools without `user_id` act in the caller's namespace.
The principal must be allowed the user's namespace (its patterns, e.g. `default/*`).

Entity ids. An entity's id is the domain's (derived from namespace and name); an entity of a user's graph is
named `<id>@<user_id>`, so that create_relation and get_related (which take ids, not a user id) reach it.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

from mneme.domain import validation as v
from mneme.embedding import MODELS
from mneme.errors import InvalidInput, MemoryNotFound, MnemeError, ScopeViolation
from schemas.queries import (
    CodeProjects,
    GraphEntities,
    ListMemories,
    MemoryRow,
    MemoryStats,
    ProjectorStatus,
    SearchMemories,
)
from services.gateway.gateway import Call
from services.gateway.params import Intent
from services.gateway.profiles.memory_mcp_models import CacheStats, EmbeddingStatus, ResetCounts

_PLAIN_USER = re.compile(r"[A-Za-z0-9_.-]{1,59}")
RESET_REASON = "reset_all_memory"
BATCH = 500


class EntityNotFound(MnemeError):
    code = "ENTITY_NOT_FOUND"

    def __init__(self, ref: str, field: str):
        super().__init__(f"Entity not found: {ref}", field=field, details={"id": ref})


# -- tenants -------------------------------------------------------------------------------------------------
def user_segment(user_id: str) -> str:
    if _PLAIN_USER.fullmatch(user_id) and user_id not in (".", ".."):
        return f"user-{user_id}"
    return "userh-" + hashlib.sha256(user_id.encode()).hexdigest()[:24]


def given(value: str | None) -> str | None:
    """An optional text argument: null or blank is absent."""
    return value if value is not None and value.strip() else None


def enter(call: Call, user_id: str | None, intent: Intent, base: str | None = None) -> str:
    """The namespace a call with this user id acts in (the caller's own without one), checked against the
    principal; the call acts there from now on (its reads are recorded there)."""
    uid = given(user_id)
    if uid is None:
        return call.namespace
    ns = v.namespace(f"{base or call.namespace}/{user_segment(uid)}", "user_id")
    p = call.principal
    if not (p.can_read(ns) if intent == "read" else p.can_write(ns)):
        what = "read" if intent == "read" else "write"
        raise ScopeViolation(f"{p.agent_id} may not {what} namespace {ns!r} (user_id {uid!r})", "user_id")
    call.namespace = ns
    return ns


def entity_ref(eid: str, user_id: str | None) -> str:
    uid = given(user_id)
    return f"{eid}@{uid}" if uid is not None else eid


def split_entity_ref(ref: str) -> tuple[str, str | None]:
    eid, at, uid = ref.partition("@")  # the domain's ids hold no '@'
    return eid, (uid if at else None)


# -- memories ------------------------------------------------------------------------------------------------
async def memory_row(call: Call, ref: str) -> MemoryRow:
    """A memory of the call's namespace by id; an id that is not one of mneme's (a UUID) names no memory."""
    try:
        mid = v.memory_id(ref)
    except InvalidInput:
        raise MemoryNotFound(ref) from None
    return await call.app.reads.resolve(call, mid)


async def memory_rows(call: Call, **filters: Any) -> tuple[list[MemoryRow], int]:
    got = await call.app.reads.ask(call, ListMemories, sort_by="created_at", **filters)
    call.read([r.memory.id for r in got.items])
    return got.items, got.total


# -- status --------------------------------------------------------------------------------------------------
def model_dimensions(model: str) -> int:
    for name, spec in MODELS.items():
        if model in (name, spec.id):
            return spec.dim
    return 0


async def embedding_status(call: Call) -> EmbeddingStatus:
    """Whether semantic search answers now (the projector owns the model): a one-result semantic probe.
    ready: it answered; loading: the model is loading or the index is still embedding; error: anything else
    (the model failed to load, no vector index)."""
    app = call.app
    probe = SearchMemories(
        namespace=call.namespace, now=call.gw.now(), mode="semantic", query="status", limit=1, threshold=1.0
    )
    status: Literal["loading", "ready", "error"] = "ready"
    model = ""
    try:
        got = await app.reads.probe(call, probe)  # (a probe says "loading", it does not wait)
        model = got.model or ""
    except MnemeError as exc:
        status = "loading" if exc.code in ("EMBEDDING_MODEL_LOADING", "INDEXING") else "error"
        model = str(exc.details.get("model", ""))
    model = MODELS[model].id if model in MODELS else model  # the model's id, as a search names it
    # the embedding cache lives in the projector: its statistics come with the projector's status
    proj = await app.reads.status(call, ProjectorStatus(namespace=call.namespace, now=call.gw.now()))
    model = model or proj.model or ""
    return EmbeddingStatus(
        status=status,
        model=model,
        dimensions=model_dimensions(model) or proj.dimensions,
        cache_stats=CacheStats(hits=proj.cache_hits, misses=proj.cache_misses, size=proj.cache_size),
    )


async def counts(call: Call) -> tuple[int, int]:
    """Memories (every status) and entities of the call's namespace."""
    reads = call.app.reads
    stats = await reads.ask(call, MemoryStats, top_tags=0)
    graph = await reads.ask(call, GraphEntities, limit=0, relations="none")
    return stats.total, graph.total


# -- reset ---------------------------------------------------------------------------------------------------
async def reset_namespace(call: Call) -> ResetCounts:
    """Everything of the call's namespace deleted (services/gateway/application/namespaces.py), counted."""
    got = await call.app.namespaces.reset(call, RESET_REASON)
    return ResetCounts(
        memories=got.memories, entities=got.entities, relations=got.relations, code_chunks=got.code_chunks
    )


async def code_chunks(call: Call) -> int:
    """Code chunks indexed in the call's namespace."""
    got = await call.app.reads.status(call, CodeProjects(namespace=call.namespace, now=call.gw.now()))
    return sum(p.total_chunks for p in got.projects)
