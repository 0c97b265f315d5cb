"""An admin's questions about recorded reads (services/gateway/reread.py): the reads of a time window, and one
asked again as of the position it was answered at; after the gateway's mark, like every read."""

from __future__ import annotations

from typing import Any

from services.gateway.access_log import AccessLog
from services.gateway.application.caller import Caller
from services.gateway.application.consistency import ReadYourWrites
from services.gateway.commands import Clock
from services.gateway.queries import QueryClient
from services.gateway.reread import ReadsPage, Reread, find_reads, reread


class Audit:
    def __init__(self, queries: QueryClient, access: AccessLog, marks: ReadYourWrites, clock: Clock) -> None:
        self.queries, self.access, self.marks, self.clock = queries, access, marks, clock

    async def reads(self, call: Caller, **filters: Any) -> ReadsPage:
        """`filters`: namespaces, agent_id, since, until, limit, offset (find_reads)."""
        mark = await self.marks.mark()
        return await find_reads(
            self.queries, self.access.js, namespace=call.namespace, now=self.clock(), min_seq=mark, **filters
        )

    async def reread(self, call: Caller, trail_seq: int, **options: Any) -> Reread:
        """`options`: namespaces, can_read (reread)."""
        mark = await self.marks.mark()
        return await reread(
            self.queries, self.access.js, trail_seq=trail_seq, namespace=call.namespace, now=self.clock(),
            min_seq=mark, **options,
        )  # fmt: skip
