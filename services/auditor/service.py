"""The auditor process: follows the event log and the access stream into the hash-chained trail,
and answers audit queries (who touched memory X, what did agent Y do) for admins."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from mneme.follow import LogFollower, access_follower
from mneme.query_server import QueryServer, error_reply, wait_applied
from schemas import subjects as S
from schemas.queries import AuditQuery, Reply, encoder
from services.auditor import trail_queries
from services.auditor.trail import ACCESS, EVENTS, Trail

log = logging.getLogger("mneme.auditor")


class Auditor:
    def __init__(
        self,
        nc: NATS,
        trail: Trail,
        *,
        batch_max: int = 5000,
        linger: float = 0.1,
        fed_by: list[LogFollower] | None = None,
        wait_timeout: float = 10.0,
    ):
        """`fed_by`: the followers (events first, then access) that already feed this trail as extra
        sinks (mneme serve); the auditor then only answers queries, committing through them.
        `wait_timeout`: how long a query waits for the trail to reach its min_seq before PROJECTION_LAG."""
        self.nc = nc
        self.trail = trail
        js = nc.jetstream()
        self.own = fed_by is None
        self.followers: list[LogFollower] = fed_by or [
            LogFollower(js, trail.source(EVENTS), batch_max=batch_max, linger=linger),
            access_follower(js, trail.source(ACCESS), batch_max=batch_max, linger=linger),
        ]
        self._sub: Any = None
        self.wait_timeout = wait_timeout
        self.queries = QueryServer(log)
        self._decode = msgspec.msgpack.Decoder(AuditQuery)

    @property
    def follower(self) -> LogFollower:
        return self.followers[0]

    @property
    def applied(self) -> int:
        return self.followers[0].applied

    async def start(self) -> None:
        if self.own:
            for f in self.followers:
                await f.start()
        self._sub = await self.nc.subscribe(
            S.query_subject(AuditQuery.OPERATION), queue=S.AUDITOR_QUEUE, cb=self.queries.serve(self._answer)
        )

    async def stop(self) -> None:
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:  # noqa: BLE001 - connection may be gone at shutdown
                pass
        await self.queries.drain(self.wait_timeout)
        if self.own:
            for f in self.followers:
                await f.stop()

    async def _answer(self, msg: Msg) -> Reply:
        applied = self.trail.checkpoints[EVENTS]
        try:
            q = self._decode.decode(msg.data)
            # what has arrived is committed before it is asked about, and the trail has the caller's writes
            for f in self.followers:
                await wait_applied([(f, "audit trail")], f.staged, self.wait_timeout)
            if q.min_seq and self.followers:
                await wait_applied([(self.followers[0], "audit trail")], q.min_seq, self.wait_timeout)
            result = await asyncio.to_thread(trail_queries.query, self.trail, q)
            return Reply(applied_seq=self.trail.checkpoints[EVENTS], result=msgspec.Raw(encoder.encode(result)))
        except Exception as exc:  # noqa: BLE001 - every failure is a reply (a query never takes the auditor down)
            return error_reply(exc, applied, log, "audit")
