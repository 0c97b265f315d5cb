"""The auditor process: follows the event log and the access stream into the hash-chained trail,
and answers audit queries (who touched memory X, what did agent Y do) for admins."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from mneme.errors import MnemeError
from mneme.follow import LogFollower, access_follower
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
    ):
        """`fed_by`: the followers (events first, then access) that already feed this trail as extra
        sinks (mneme serve); the auditor then only answers queries, committing through them."""
        self.nc = nc
        self.trail = trail
        js = nc.jetstream()
        self.own = fed_by is None
        self.followers: list[LogFollower] = fed_by or [
            LogFollower(js, trail.source(EVENTS), batch_max=batch_max, linger=linger),
            access_follower(js, trail.source(ACCESS), batch_max=batch_max, linger=linger),
        ]
        self._sub: Any = None
        self._tasks: set[asyncio.Task[None]] = set()
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
            S.query_subject(AuditQuery.OPERATION), queue=S.AUDITOR_QUEUE, cb=self._on_query
        )

    async def stop(self) -> None:
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:  # noqa: BLE001 - connection may be gone at shutdown
                pass
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=10)
        if self.own:
            for f in self.followers:
                await f.stop()

    async def _on_query(self, msg: Msg) -> None:
        task = asyncio.create_task(self._answer(msg))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, msg: Msg) -> None:
        try:
            q = self._decode.decode(msg.data)
            for f in self.followers:  # what has arrived is committed before it is asked about
                await f.wait_for(f.staged, 10, committed=True)
            if q.min_seq and self.followers:
                await self.followers[0].wait_for(q.min_seq, 10, committed=True)
            result = await asyncio.to_thread(trail_queries.query, self.trail, q)
            reply = Reply(applied_seq=self.trail.checkpoints[EVENTS], result=msgspec.Raw(encoder.encode(result)))
        except MnemeError as exc:
            reply = Reply(applied_seq=0, error=exc.to_dict())
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            reply = Reply(applied_seq=0, error={"code": "INVALID_INPUT", "message": f"bad query: {exc}"})
        except Exception as exc:  # a query must never take the auditor down
            log.exception("audit query failed")
            reply = Reply(applied_seq=0, error={"code": "INTERNAL", "message": type(exc).__name__})
        try:
            await msg.respond(encoder.encode(reply))
        except Exception:  # noqa: BLE001 - the asker may be gone
            pass
