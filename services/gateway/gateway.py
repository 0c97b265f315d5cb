"""The gateway's state-free core: who is calling, what they may touch, which log position they
have seen, and the two sides (commands, queries). Tools call `run`; it owns no read model.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, TypeVar

from mcp.server.mcpserver.exceptions import ToolError

from mneme.domain import validation as v
from mneme.domain.state import MemoryState
from mneme.errors import InvalidContext, InvalidInput, MemoryNotFound, MnemeError, ScopeViolation
from mneme.eventlog import EventLog
from mneme.ids import event_id_for, new_id
from mneme.logs import request_id as request_id_var
from mneme.principals import Directory, Principal
from schemas.access import AccessDenied
from schemas.commands import DeleteMemory
from schemas.queries import AsOf, AsOfResolved, ExpiredMemories, GetMemory, MemoryRow, VersionInfo
from services.gateway.access_log import AccessLog, answers, read_record
from services.gateway.code_indexer import CodeIndexer
from services.gateway.commands import Clock, CommandService, Written, utc_now
from services.gateway.error_styles import NATIVE_ERRORS, ErrorStyle
from services.gateway.graph_commands import GraphCommands
from services.gateway.models import Memory
from services.gateway.params import Intent, RequestContext
from services.gateway.queries import QueryClient
from services.gateway.rate_limits import Limits

log = logging.getLogger("mneme.gateway")

Consistency = Literal["gateway", "linearizable"]
T = TypeVar("T")
# refusals the trail must show (a wrong id or bad input is not an attempt on someone's memory)
DENIALS = frozenset({"SCOPE_VIOLATION", "INVALID_CONTEXT", "WRITE_NOT_ALLOWED", "MEMORY_LOCKED", "PERMISSION_ERROR"})


@dataclass
class Call:
    """One tool call, authorized: the principal, the namespace it acts in, its request id."""

    principal: Principal
    tool: str
    namespace: str
    request_id: str
    gw: Gateway = field(repr=False)  # the gateway it runs on: tool bodies reach commands and queries here
    read_ids: list[str] = field(default_factory=list)

    def read(self, ids: list[str]) -> None:
        self.read_ids.extend(ids)


@dataclass
class Gateway:
    commands: CommandService
    queries: QueryClient
    log: EventLog
    access: AccessLog
    principal: Principal = field(default_factory=lambda: Principal(agent_id="local-agent"))
    directory: Directory | None = None
    require_context: bool = False
    trim_for_agents: bool = False
    consistency: Consistency = "gateway"
    stores: dict[str, str] = field(default_factory=dict)  # store registry (cortex profile): store name -> namespace
    native_context: Literal["never", "optional", "required"] = "never"  # the native tools' `context` argument
    tool_groups: tuple[str, ...] | None = None  # the native tool groups served (None: all)
    clock: Clock = utc_now
    limits: Limits = field(default_factory=Limits)  # per-principal rate and in-flight caps (RATE_LIMIT)
    _high_water: int = 0

    code_roots: tuple[Path, ...] | None = None  # the directories index_project may index (None: any)

    @cached_property
    def graph(self) -> GraphCommands:
        """The knowledge graph's write side, over the same log and query client."""
        return GraphCommands(self.log, self.queries, self.now)

    @cached_property
    def code(self) -> CodeIndexer:
        """The code index's writer: scans and chunks here, records runs in the log."""
        return CodeIndexer(
            self.log,
            self.queries,
            self.now,
            allowed_roots=list(self.code_roots) if self.code_roots is not None else None,
        )

    # -- read-your-writes (invariant 3) -------------------------------------------------
    # DESIGN.md keys this per client session. mcp 2.x's 2026-07-28 protocol is stateless
    # (each request stands alone, with no session to hang a mark on), so the mark is kept
    # per gateway: every read through this gateway waits for every write made through it,
    # a superset of read-your-writes that costs nothing measurable (the projector applies
    # the log in order anyway). Reads through another gateway: consistency="linearizable".
    def noted(self, seq: int) -> None:
        self._high_water = max(self._high_water, seq)

    def log_went_back(self, head: int) -> None:
        """The log ends before this gateway's mark (it lost events: QueryClient.ask): wait for what it holds."""
        self._high_water = min(self._high_water, head)

    async def min_seq(self) -> int:
        if self.consistency == "linearizable":
            return await self.log.last_seq()
        return self._high_water

    def now(self) -> datetime:
        return self.clock()

    def shown(self, call: Call, memory: Memory) -> Memory:
        """A memory as this caller may see it: trimmed for agents when the surface says so."""
        return memory.trimmed() if self.trim_for_agents and not call.principal.trusted_view() else memory

    # -- authorization -------------------------------------------------------------------
    def principal_for(self, headers: Mapping[str, str] | None) -> Principal:
        """The bearer token's principal over HTTP (the HTTP app already refused unknown tokens),
        else the configured one (stdio)."""
        if self.directory is not None and headers:
            found = self.directory.for_headers(headers)
            if found is None:
                raise ScopeViolation("unknown or missing bearer token", field=None)
            return found
        return self.principal

    def authorize(
        self,
        principal: Principal,
        tool: str,
        intent: Intent,
        context: RequestContext | None,
        namespace: str | None,
        context_required: bool = False,
    ) -> Call:
        if context is None and (self.require_context or context_required):
            raise InvalidContext(
                "this tool requires a context object (agent_id, organization_id, repository_id, intent, request_id)",
                "context",
            )
        ctx = context or RequestContext()
        for name in ("agent_id", "organization_id", "repository_id"):  # (here, not in the schema: refused in
            value = getattr(ctx, name)  # the surface's format and recorded, as a missing one is)
            if value is not None and not value.strip():
                raise InvalidContext(f"context.{name} must not be empty", f"context.{name}")
        if ctx.agent_id is not None and ctx.agent_id != principal.agent_id:
            raise ScopeViolation(
                f"context.agent_id {ctx.agent_id!r} is not the authenticated agent", "context.agent_id"
            )
        if ctx.organization_id is not None and principal.organization not in (None, ctx.organization_id):
            raise ScopeViolation(
                "context.organization_id is not the principal's organization", "context.organization_id"
            )
        if ctx.intent is not None and _rank(ctx.intent) < _rank(intent):
            raise InvalidContext(f"intent {ctx.intent!r} does not allow {tool} (needs {intent!r})", "context.intent")
        if ctx.repository_id is not None:  # the repository the caller says it works in must be its own
            org = ctx.organization_id or principal.organization
            repo_ns = v.namespace(f"{org}/{ctx.repository_id}" if org else ctx.repository_id, "context.repository_id")
            if not (principal.can_read(repo_ns) if intent == "read" else principal.can_write(repo_ns)):
                raise ScopeViolation(
                    f"{principal.agent_id} is not bound to repository {repo_ns!r}", "context.repository_id"
                )
            if namespace is None:
                namespace = repo_ns
            elif not (
                namespace == repo_ns
                or namespace.startswith(repo_ns + "/")
                or (intent == "read" and namespace == principal.system_namespace)
            ):
                raise InvalidContext(
                    f"namespace {namespace!r} is outside context.repository_id {repo_ns!r}", "namespace"
                )
        ns = v.namespace(namespace if namespace is not None else principal.default_namespace)
        allowed = principal.can_read(ns) if intent == "read" else principal.can_write(ns)
        if not allowed:
            what = "read" if intent == "read" else "write"
            raise ScopeViolation(f"{principal.agent_id} may not {what} namespace {ns!r}")
        if self.require_context and ctx.repository_id is None:
            raise InvalidContext("context.repository_id is required", "context.repository_id")
        return Call(principal=principal, tool=tool, namespace=ns, request_id=ctx.request_id or new_id(), gw=self)

    # -- running a tool ------------------------------------------------------------------
    async def run(
        self,
        headers: Mapping[str, str] | None,
        tool: str,
        intent: Intent,
        context: RequestContext | None,
        namespace: str | None,
        body: Callable[[Call], Awaitable[T]],
        *,
        errors: ErrorStyle = NATIVE_ERRORS,
        context_required: bool = False,
    ) -> T:
        """Authorize, run the body, record the read (or the refusal); domain errors become JSON tool errors."""
        principal = self.principal
        call: Call | None = None
        slot: str | None = None
        started, failed = time.perf_counter(), None
        try:
            principal = self.principal_for(headers)
            self.limits.acquire(principal.agent_id)  # RATE_LIMIT before anything else runs
            slot = principal.agent_id
            call = self.authorize(principal, tool, intent, context, namespace, context_required)
            request_id_var.set(call.request_id)  # (logs: joins this call's lines in every process)
            with answers() as answered:
                result = await body(call)
            if intent == "read":
                await self.access.record(
                    read_record(
                        record_id=event_id_for(f"access:{call.request_id}:{tool}"),
                        at=self.now(),
                        agent_id=principal.agent_id,
                        role=principal.role,
                        request_id=call.request_id,
                        namespace=call.namespace,
                        operation=tool,
                        memory_ids=call.read_ids,
                        answered=answered,
                    )
                )
            return result
        except MnemeError as exc:
            failed = exc.code
            if exc.code in DENIALS:
                rid = call.request_id if call else (context.request_id if context and context.request_id else new_id())
                ns = call.namespace if call else (namespace or principal.default_namespace)
                await self.access.record(
                    AccessDenied(
                        record_id=event_id_for(f"denied:{rid}:{tool}"),
                        at=self.now(),
                        agent_id=principal.agent_id,
                        role=principal.role,
                        request_id=rid,
                        namespace=ns,
                        operation=tool,
                        code=exc.code,
                        message=exc.message,
                        memory_id=exc.details.get("memory_id"),
                    )
                )
            raise ToolError(errors.render(exc.code, exc.message, exc.field, exc.details)) from None
        finally:
            if slot is not None:
                self.limits.release(slot)
            if log.isEnabledFor(logging.INFO):
                ms = round((time.perf_counter() - started) * 1000, 2)
                fields = {"tool": tool, "agent": principal.agent_id, "outcome": failed or "ok", "ms": ms}
                log.info("call %s %s", tool, failed or "ok", extra={"fields": fields})

    # -- helpers shared by tools ---------------------------------------------------------
    async def change(
        self,
        call: Call,
        memory_id: str | None,
        store: str | None,
        path: str | None,
        request_id: str | None,
        build: Callable[[str], Any],
        apply: Callable[..., Awaitable[Written]],
    ) -> tuple[MemoryRow, Written]:
        """Change an existing memory: resolve it (by id or store + path), build the command for its id,
        run it through the write side, note the log position. Returns the row it found and the write."""
        min_seq = await self.min_seq()
        row = await self.resolve(call.namespace, memory_id, store, path, min_seq)
        w = await apply(
            build(row.memory.id), actor=call.principal.actor, request_id=request_id or call.request_id, min_seq=min_seq
        )
        self.noted(w.seq)
        return row, w

    async def prune_expired(self, call: Call, store: str | None, request_id: str | None = None) -> list[MemoryState]:
        """Permanently delete every expired memory of the call's namespace (or of one store), one event each.
        Returns the memories pruned; one pruned by someone else meanwhile, or not this caller's to delete
        (locked, protected), is skipped."""
        rid = request_id or call.request_id
        pruned: list[MemoryState] = []
        seen: set[str] = set()
        while True:
            got = await self.queries.ask(
                ExpiredMemories(
                    namespace=call.namespace, now=self.now(), min_seq=await self.min_seq(), store=store, limit=500
                )
            )
            batch = [r.memory for r in got.items if r.memory.id not in seen]
            if not batch:
                return pruned
            for m in batch:
                seen.add(m.id)
                cmd = DeleteMemory(namespace=call.namespace, memory_id=m.id, permanent=True, reason="expired")
                try:
                    w = await self.commands.delete(
                        cmd, actor=call.principal.actor, request_id=rid, min_seq=await self.min_seq()
                    )
                except MnemeError as exc:
                    if exc.code in ("MEMORY_NOT_FOUND", "MEMORY_LOCKED", "WRITE_NOT_ALLOWED"):
                        continue
                    raise
                self.noted(w.seq)
                pruned.append(m)

    async def resolve(
        self,
        ns: str,
        memory_id: str | None,
        store: str | None,
        path: str | None,
        min_seq: int,
        *,
        history: int = 0,
        version: int | None = None,
    ) -> MemoryRow:
        return (await self.resolve_with_history(ns, memory_id, store, path, min_seq, history=history, version=version))[
            0
        ]

    async def resolve_with_history(
        self,
        ns: str,
        memory_id: str | None,
        store: str | None,
        path: str | None,
        min_seq: int,
        *,
        history: int = 0,
        version: int | None = None,
        as_of: AsOf | None = None,
    ) -> tuple[MemoryRow, list[VersionInfo], AsOfResolved | None]:
        """A memory by id, or by store + path (expired ones included: writes may touch them), with its
        recent versions on request, in one projector round trip (and the past moment, for as_of)."""
        if memory_id is not None:
            query = GetMemory(
                namespace=ns,
                now=self.now(),
                min_seq=min_seq,
                memory_id=v.memory_id(memory_id),
                include_expired=True,
                history=history,
                version=version,
                as_of=as_of,
            )
            ref = memory_id
        elif store is not None and path is not None:
            query = GetMemory(
                namespace=ns,
                now=self.now(),
                min_seq=min_seq,
                store=v.store(store),
                path=v.path(path),
                include_expired=True,
                history=history,
                version=version,
                as_of=as_of,
            )
            ref = f"{store}:{path}"
        elif store is not None:
            raise InvalidInput("path", "give path with store (or give id)")
        elif path is not None:
            raise InvalidInput("store", "give store with path (or give id)")
        else:
            raise InvalidInput("id", "give id, or store and path")
        if as_of is None:  # a miss is confirmed at the head of the log (not in the past: that is fixed)
            got = await self.queries.ask_confirmed(query, lambda got: got.item is None, self.log.last_seq)
        else:
            got = await self.queries.ask(query)
        if got.item is None:
            raise MemoryNotFound(ref if version is None else f"{ref} version {version}")
        return got.item, got.history, got.as_of

    async def as_of(self, value: int | str | None) -> AsOf | None:
        """`as_of` as a tool takes it: a stream sequence (an integer) or an ISO 8601 time (UTC when it has no
        offset). A sequence past the head of the log, a time in the future or a malformed value is refused."""
        if value is None:
            return None
        if isinstance(value, int) or (isinstance(value, str) and value.strip().isascii() and value.strip().isdigit()):
            seq = int(value)
            if seq < 0 or seq >= 2**63:
                raise InvalidInput("as_of", "a log sequence is 0 or more, and below 2**63")
            head = await self.log.last_seq()
            if seq > head:
                raise InvalidInput("as_of", f"sequence {seq} is beyond the head of the log ({head})")
            return AsOf(seq=seq)
        try:
            t = datetime.fromisoformat(value.strip())
        except (ValueError, TypeError):
            raise InvalidInput(
                "as_of", f"{value!r} is neither an ISO 8601 time (2026-11-26T14:02:00Z) nor a log sequence number"
            ) from None
        at = v.utc(t, "as_of")
        assert at is not None
        if at > self.now():  # by this gateway's clock; the log's own clock (record time) may be ahead of it
            logged = await self.log.last_record_time()
            if logged is None or at > logged:
                raise InvalidInput("as_of", f"{at.isoformat()} is in the future")
        return AsOf(time=at)


def split_ref(ref: str) -> tuple[str | None, str | None, str | None]:
    """A memory as the native tools name it: its id, or store:path. Returns (id, store, path)."""
    if ":" in ref:
        store, _, path = ref.partition(":")
        return None, v.store(store, "id"), v.path(path, "id")
    return ref, None, None


def _rank(intent: Intent) -> int:
    return {"read": 0, "write": 1, "admin": 2}[intent]
