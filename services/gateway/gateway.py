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
from typing import Literal, TypeVar

from mcp.server.mcpserver.exceptions import ToolError

from mneme.domain import validation as v
from mneme.errors import InvalidContext, InvalidInput, MnemeError, ScopeViolation
from mneme.eventlog import EventLogInterface
from mneme.ids import event_id_for, new_id
from mneme.logs import request_id as request_id_var
from mneme.principals import Directory, Principal
from schemas.access import AccessDenied
from schemas.queries import AsOf
from services.gateway.access_log import AccessLog, Answered, read_record
from services.gateway.application import Application, Audit, Code, Graph, Memories, Namespaces, Reads, ReadYourWrites
from services.gateway.application.consistency import Consistency
from services.gateway.code_indexer import CodeIndexer
from services.gateway.commands import Clock, CommandService, utc_now
from services.gateway.error_styles import NATIVE_ERRORS, ErrorStyle
from services.gateway.graph_commands import GraphCommands
from services.gateway.models import Memory
from services.gateway.params import Intent, RequestContext
from services.gateway.queries import QueryClient
from services.gateway.rate_limits import Limits

log = logging.getLogger("mneme.gateway")

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
    gw: Gateway = field(repr=False)  # the gateway it runs on (its settings: clock, stores, trimming, as_of)
    read_ids: list[str] = field(default_factory=list)
    answered: list[Answered] = field(default_factory=list)  # the projector answers, for the read record

    @property
    def app(self) -> Application:
        """The use cases (services/gateway/application): every read and write of a tool goes through them."""
        return self.gw.app

    def read(self, ids: list[str]) -> None:
        self.read_ids.extend(ids)


@dataclass
class Gateway:
    commands: CommandService
    queries: QueryClient
    log: EventLogInterface
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

    code_roots: tuple[Path, ...] | None = None  # the directories index_project may index (None: any)

    @cached_property
    def graph_commands(self) -> GraphCommands:
        """The knowledge graph's write side, over the same log and query client."""
        return GraphCommands(self.log, self.queries, self.now)

    @cached_property
    def code_indexer(self) -> CodeIndexer:
        """The code index's writer: scans and chunks here, records runs in the log."""
        return CodeIndexer(
            self.log,
            self.queries,
            self.now,
            allowed_roots=list(self.code_roots) if self.code_roots is not None else None,
        )

    @cached_property
    def app(self) -> Application:
        """The application layer over this gateway's write sides, query client and log."""
        marks = ReadYourWrites(self.log, self.consistency)
        reads = Reads(self.queries, self.log, marks, self.now)
        graph = Graph(self.graph_commands, marks)
        memories = Memories(self.commands, reads, graph, marks)
        code = Code(self.code_indexer, marks)
        namespaces = Namespaces(self.log, reads, memories, graph, code, marks, self.now)
        audit = Audit(self.queries, self.access, marks, self.now)
        return Application(marks, reads, memories, graph, code, namespaces, audit)

    def log_went_back(self, head: int) -> None:
        """The log ends before this gateway's mark (it lost events: QueryClient.answer): wait for what it holds."""
        self.app.marks.went_back(head)

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
                        answered=call.answered,
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
