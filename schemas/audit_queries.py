"""The compliance trail's query and its records: who touched a memory, what an agent did, in a time window.
Served by the auditor (services/auditor/trail_queries.py), not by a projector; re-exported by
schemas/queries.py.
"""

from __future__ import annotations

from typing import ClassVar

from msgspec import Struct

from schemas.events import UtcTime
from schemas.query_base import Query


class AuditQuery(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Served by the auditor: who touched a memory, what an agent did, in a time window."""

    OPERATION: ClassVar[str] = "audit.query"
    namespaces: tuple[str, ...] = ()  # the namespaces the asking admin may read; empty: `namespace` only
    memory_id: str | None = None
    agent_id: str | None = None
    action: str | None = None  # prefix: "memory_", "read:", "denied:"
    outcome: str | None = None
    since: UtcTime | None = None
    until: UtcTime | None = None
    limit: int = 100
    offset: int = 0
    trail_seq: int | None = None  # only this record


class AuditRow(Struct, frozen=True, kw_only=True):
    trail_seq: int
    source: str
    source_seq: int
    recorded_at: UtcTime
    action: str
    outcome: str
    namespace: str
    agent_id: str
    role: str
    request_id: str
    memory_ids: list[str]
    code: str | None
    occurred_at: UtcTime


class AuditResult(Struct, frozen=True, kw_only=True):
    records: list[AuditRow]
    total: int
