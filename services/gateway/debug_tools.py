"""The debugger's view of the audit trail (admins; group "debug", served when an operator names it): an agent's
recorded reads in a time window, and one of them asked again as of the log position it was answered at, beside
what it returned (services/gateway/reread.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from mneme.domain import validation as v
from mneme.errors import PermissionDenied
from services.gateway.gateway import Call
from services.gateway.params import READ, UtcTime
from services.gateway.reread import ReadsPage, Reread, readable
from services.gateway.toolkit import Toolset

tools = Toolset(group="debug", flow=True)


@tools.tool(intent="read", hints=READ)
async def audit_reads(
    call: Call,
    agent_id: Annotated[str | None, Field(max_length=128)] = None,
    since: UtcTime | None = None,
    until: UtcTime | None = None,
    namespace: Annotated[str | None, Field(max_length=255, description="Default: every one you may read.")] = None,
    limit: Annotated[int, Field(ge=1, le=100)] = 20,
    offset: Annotated[int, Field(ge=0)] = 0,
) -> ReadsPage:
    """Admins: recorded reads (every read tool's), oldest first, each with its trail_seq, query, log position
    and the ids and versions it returned."""
    if not call.principal.is_admin:
        raise PermissionDenied("read the audit trail")
    return await call.app.audit.reads(
        call,
        namespaces=(call.namespace,) if namespace is not None else readable(call.principal),
        agent_id=agent_id,
        since=v.utc(since, "since"),
        until=v.utc(until, "until"),
        limit=limit,
        offset=offset,
    )


@tools.tool(intent="read", hints=READ)
async def audit_reread(call: Call, trail_seq: Annotated[int, Field(ge=1)]) -> Reread:
    """Admins: ask a recorded read again as of the log position it was answered at: its results (versions,
    per-signal scores) beside the recorded ones, `match` and the differences. A read that cannot be asked
    again (a status, one recorded without its query) answers `rerunnable: false` and the reason instead."""
    if not call.principal.is_admin:
        raise PermissionDenied("read the audit trail")
    return await call.app.audit.reread(
        call, trail_seq, namespaces=readable(call.principal), can_read=call.principal.can_read
    )
