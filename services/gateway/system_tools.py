"""System tools (group "system", served when an operator asks): the memory's status for one namespace, and
resetting a namespace (admins; confirm=true, otherwise nothing happens). The reset deletes each memory,
entity, relation and code project by its own audited event, so the history before it stays readable with
`as_of`."""

from __future__ import annotations

from typing import Annotated

from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from mneme.errors import PermissionDenied
from schemas.queries import ProjectorStatus
from services.gateway.gateway import Call
from services.gateway.params import READ, Namespace
from services.gateway.server import package_version
from services.gateway.toolkit import Toolset

tools = Toolset(group="system", flow=True)
RESET = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


class Embedding(BaseModel):
    status: str = Field(description="loading, ready, error or off.")
    model: str | None = None
    dimensions: int
    error: str | None = None
    cache_hits: int
    cache_misses: int
    cache_size: int


class StatusOut(BaseModel):
    version: str
    healthy: bool
    memories: int
    entities: int
    relations: int
    code_chunks: int
    embedding: Embedding
    lag_events: int = Field(description="Events the projector has not applied yet.")
    lag_s: float
    log_head: int
    dead_letters: int = Field(default=0, description="Log messages a consumer could not fold (see mneme status).")


class ResetOut(BaseModel):
    reset: bool
    message: str | None = None
    memories: int | None = None
    entities: int | None = None
    relations: int | None = None
    code_chunks: int | None = None
    kept: int | None = Field(default=None, description="Memories you may not delete (locked, protected), kept.")
    before_seq: int | None = Field(default=None, description="as_of this log position reads everything as it was.")


@tools.tool(intent="read", hints=READ)
async def memory_status(call: Call, namespace: Namespace = None) -> StatusOut:
    """Health and size: counts, the embedding model and its cache, how far the projection is behind the log."""
    gw = call.gw
    s = await call.app.reads.send(call, ProjectorStatus(namespace=call.namespace, now=gw.now()))
    return StatusOut(
        version=package_version(),
        healthy=s.model_status != "error" and s.lag_seconds < 60,
        memories=s.memories,
        entities=s.entities,
        relations=s.relations,
        code_chunks=s.code_chunks,
        embedding=Embedding(
            status=s.model_status,
            model=s.model,
            dimensions=s.dimensions,
            error=s.model_error,
            cache_hits=s.cache_hits,
            cache_misses=s.cache_misses,
            cache_size=s.cache_size,
        ),
        lag_events=s.lag_events,
        lag_s=s.lag_seconds,
        log_head=s.head_seq,
        dead_letters=s.dead_letters,
    )


@tools.tool(intent="admin", hints=RESET)
async def memory_reset(
    call: Call,
    confirm: Annotated[
        bool, Field(strict=True, description="Must be true: everything in the namespace is deleted.")
    ] = False,
    namespace: Namespace = None,
) -> ResetOut:
    """Admins: delete every memory, entity, relation and code project of a namespace. Without confirm=true
    nothing happens."""
    if not call.principal.is_admin:
        raise PermissionDenied("reset a namespace")
    if confirm is not True:
        return ResetOut(reset=False, message="Confirmation required. Set confirm=true to delete all data.")
    got = await call.app.namespaces.reset(call, "memory_reset")
    return ResetOut(
        reset=True,
        memories=got.memories,
        entities=got.entities,
        relations=got.relations,
        code_chunks=got.code_chunks,
        kept=got.kept,
        before_seq=got.before_seq,
    )
