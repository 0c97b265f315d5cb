"""The auditor process: follows the event log and the access stream into the hash-chained trail,
and answers audit queries (who touched memory X, what did agent Y do) for admins, on a FastStream router
served by its `Plane` (mneme/query_server.py: the same waiting, error mapping and draining as the projector's).

With a `control_id` (its data directory's: mneme/app/compose.py) it also answers the operator's `trail` requests on
the control plane: pages of the trail's records with their hashes, so that `mneme audit verify|export` work
while this process holds the trail's DuckDB file (one process per file), without a second copy of the chain
logic: the command walks and writes the records it fetched with the code it uses on the file at rest."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import msgspec
from faststream.nats import NatsRouter
from nats.aio.client import Client as NATS

from mneme.follow import LogFollower, access_follower
from mneme.query_server import Plane, wait_applied
from mneme.sink import LogAhead
from schemas import control
from schemas import subjects as S
from schemas.control import TrailReply, TrailRequest
from schemas.queries import AuditQuery, Reply, encoder
from services.auditor import trail_queries
from services.auditor.realign import realign
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
        access_linger: float = 0.1,
        wait_timeout: float = 10.0,
        control_id: str | None = None,
    ):
        """`wait_timeout`: how long a query waits for the trail to reach its min_seq before PROJECTION_LAG.
        `control_id`: answer the operator's trail requests for that data directory."""
        self.nc = nc
        self.control_id = control_id
        self.trail = trail
        self.js = nc.jetstream()
        self.batch_max, self.linger, self.access_linger = batch_max, linger, access_linger
        self.followers: list[LogFollower] = [self._follower(EVENTS), self._follower(ACCESS)]
        self.realigned: list[dict[str, object]] = []  # each time the trail was found ahead of the log (status)
        self._realigning: set[asyncio.Task[None]] = set()
        self.wait_timeout = wait_timeout
        self.plane = Plane(nc, log)
        self._held: asyncio.Task[None] | None = None  # followers waiting to start (see start)

    def _follower(self, source: str) -> LogFollower:
        if source == EVENTS:
            f = LogFollower(
                self.js, self.trail.source(EVENTS), batch_max=self.batch_max, linger=self.linger,
                consumer="auditor-events",
            )  # fmt: skip
        else:
            f = access_follower(
                self.js, self.trail.source(ACCESS), batch_max=self.batch_max, linger=self.access_linger,
                consumer="auditor-access",
            )  # fmt: skip
        f.on_diverged = lambda why: self._spawn_realign(source, why)
        return f

    async def _start_follower(self, source: str) -> None:
        """Start `source`'s follower; if the trail is ahead of the log, realign it first (services/auditor/realign)."""
        i = 0 if source == EVENTS else 1
        try:
            await self.followers[i].start()
        except LogAhead as ahead:
            self.realigned.append(await realign(self.js, self.trail, source, ahead.why))
            self.followers[i] = self._follower(source)
            await self.followers[i].start()

    def _spawn_realign(self, source: str, why: str) -> None:
        """A follower found the trail ahead of the log while running (its connection came back to a server that
        lost events): commit what was staged, realign, and follow again from where the trail and the log agree."""

        async def again() -> None:
            i = 0 if source == EVENTS else 1
            await self.followers[i].stop(catch_up=0)
            await asyncio.to_thread(self.trail.commit)
            self.realigned.append(await realign(self.js, self.trail, source, why))
            self.followers[i] = self._follower(source)
            await self._start_follower(source)

        task = asyncio.create_task(again(), name=f"auditor-realign-{source}")
        self._realigning.add(task)
        task.add_done_callback(self._realigning.discard)

    @property
    def follower(self) -> LogFollower:
        return self.followers[0]

    @property
    def applied(self) -> int:
        return self.followers[0].applied

    async def start(self, *, after: asyncio.Event | None = None, at_most: float = 120.0) -> None:
        """Follow the log and the access stream into the trail, and serve audit queries. `after`: start the
        followers only once it is set, or after `at_most` seconds (queries are served at once and wait for
        their min_seq as usual): `mneme serve` holds the trail's catch-up until the projection's rows have
        caught up, since both fold in one process on one GIL (a cold start on 100,000 events answered its
        first get after 14.2-14.9 s with both folding, 9.4-9.6 s with the rows alone)."""
        if after is None:
            await self._follow()
        else:
            self._held = asyncio.create_task(self._follow_after(after, at_most), name="auditor-held")
        await self.plane.serve(self.query_router())
        if self.control_id is not None:
            await self.plane.serve(self.control_router(self.control_id))

    async def _follow(self) -> None:
        for source in (EVENTS, ACCESS):
            await self._start_follower(source)

    async def _follow_after(self, after: asyncio.Event, at_most: float) -> None:
        try:
            async with asyncio.timeout(at_most):  # (wait_for, on 3.11, can lose the stop's cancel)
                await after.wait()
        except TimeoutError:
            log.warning("the projection has not caught up after %.0f s: the trail follows the log now", at_most)
        await self._follow()

    def query_router(self) -> NatsRouter:
        """The audit query, in the auditors' queue group."""
        router = self.plane.router()
        self.plane.query(
            router,
            S.query_subject(AuditQuery.OPERATION),
            S.AUDITOR_QUEUE,
            AuditQuery,
            self._answer,
            lambda: self.trail.checkpoints[EVENTS],
        )
        return router

    def control_router(self, control_id: str) -> NatsRouter:
        """The operator's requests for the trail of the data directory `control_id` names."""
        router = self.plane.router()
        self.plane.control(
            router, S.control_subject(control_id, "trail"), TrailRequest, self._answer_trail, _trail_failed
        )
        return router

    async def _answer_trail(self, req: TrailRequest) -> TrailReply:
        if req.after == 0:  # what has arrived is committed before the first page
            for f in self.followers:
                await wait_applied([(f, "audit trail")], f.staged, self.wait_timeout)
        head, records = await asyncio.to_thread(trail_queries.page, self.trail, req)
        reply = TrailReply(ok=True, head=head, records=records)
        budget = max(64 * 1024, (self.nc.max_payload or 1024 * 1024) - 4096)
        while len(records) > 1 and len(control.encode(reply)) > budget:  # fewer records: one NATS message
            records = records[: len(records) // 2]
            reply = TrailReply(ok=True, head=head, records=records)
        return reply

    async def stop(self) -> None:
        await self.plane.stop(self.wait_timeout)
        for task in list(self._realigning):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._held is not None and not self._held.done():
            self._held.cancel()
            try:
                await self._held
            except asyncio.CancelledError:
                pass
        for f in self.followers:
            await f.stop()

    async def _answer(self, q: AuditQuery) -> Reply:
        # what has arrived is committed before it is asked about, and the trail has the caller's writes
        for f in self.followers:
            await wait_applied([(f, "audit trail")], f.staged, self.wait_timeout)
        if q.min_seq and self.followers:
            await wait_applied([(self.followers[0], "audit trail")], q.min_seq, self.wait_timeout)
        result = await asyncio.to_thread(trail_queries.query, self.trail, q)
        return Reply(applied_seq=self.trail.checkpoints[EVENTS], result=msgspec.Raw(encoder.encode(result)))


def _trail_failed(exc: Exception) -> TrailReply:  # reported to the operator's command
    return TrailReply(ok=False, error=f"{type(exc).__name__}: {exc}")
