"""The projector process: folds the log into the memories view and answers queries.

Consumption: `LogFollower` from the view's own checkpoint. The checkpoint lives in
DuckDB with the rows (invariant 5), so it is the one cursor; a server-side durable
consumer would be a second cursor that can disagree with it after a crash.

Queries: one queue-group subscriber per operation on a FastStream router (the query
plane), so replicas share the load; the swap and snapshot requests of `mneme replay`
and `mneme snapshot` are a second router (the control plane). Both are served by the
projector's `Plane` (mneme/query_server.py). A replica joins the queue group only
once it has caught up with the log as it stood at start, so a rebuilding replica
never answers with stale rows. A query waits until `min_seq` is applied
(read-your-writes), or fails with PROJECTION_LAG.

Which follower feeds which read model is services/projector/generation.py (`wire`); how a new generation
is swapped in, services/projector/blue_green.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from faststream.nats import NatsRouter
from nats.aio.client import Client as NATS

from mneme.catch_up import fold_progress
from mneme.follow import LogFollower
from mneme.query_server import Answer, Plane, Tasks, answered
from mneme.sink import Sink
from schemas import subjects as S
from schemas.control import SnapshotRequest, SwapReply, SwapRequest
from schemas.queries import QUERY_TYPES, REPAIR_TYPES, Query, Reply
from services.projector import blue_green
from services.projector.answers import Answers
from services.projector.catch_up import catch_up as catch_up
from services.projector.code_view import CodeView
from services.projector.generation import Generation, wire
from services.projector.index_pace import IndexPace
from services.projector.memories_view import MemoriesView
from services.projector.options import Control, Tuning
from services.projector.read_models import run_query
from services.projector.search import Searcher
from services.projector.snapshot import Snapshots, snapshot_failed
from services.projector.vector_view import VectorView

log = logging.getLogger("mneme.projector")
DEFAULT_TUNING = Tuning()


class Projector:
    def __init__(
        self,
        nc: NATS,
        view: MemoriesView,
        *,
        vectors: VectorView | None = None,
        code: CodeView | None = None,
        also: tuple[Sink, ...] = (),
        also_access: tuple[Sink, ...] = (),
        tuning: Tuning = DEFAULT_TUNING,
        control: Control | None = None,
        log_nc: NATS | None = None,
    ):
        """The read models it folds into: `view` (rows, graph, access statistics), `vectors`, `code`, and
        `also` / `also_access`: more sinks fed by the same followers of the event log and of the access stream
        (a benchmark's probes): one delivery, one decode. `tuning`: how it folds and answers; `control`: the
        control plane of the data directory it serves (services/projector/options.py). `log_nc`: a second
        connection for the followers, so a catch-up that overruns the server's buffer for its connection (a
        slow consumer, disconnected and resumed) never takes the query path with it."""
        self.nc = nc
        self.js = (log_nc or nc).jetstream()
        self.tuning, self.control = tuning, control
        self.also, self.also_access = also, also_access
        self.code = code  # the code index: a sink of the event follower beside the views, answering code queries
        if code is not None:
            also = (*also, code)
            self.also = also
        self.gen = self.generation(view, vectors, also=also, also_access=also_access)
        self.answers = Answers(self)
        self.pace = IndexPace(self)  # what a gateway beside it paces writes against
        snaps = control.snapshots if control is not None else None
        self.snapshotter = Snapshots(self, snaps, control.snapshot_every) if control and snaps else None
        self.serving = asyncio.Event()
        self.plane = Plane(nc, log)  # the query and control planes (drained at stop)
        self.tasks = Tasks()  # the projector's other tasks (drained at stop too)
        self.swap_lock = asyncio.Lock()
        self.retired: list[LogFollower] = []  # swapped-out followers still feeding other sinks (the trail)
        self.start_target = 0  # the log head at start: semantic search answers INDEXING until dense reaches it
        self._vector_start: asyncio.Task[None] | None = None
        self.vector_clock: tuple[float, int] | None = None  # (when, position) the vector follower started at
        self._rows_clock: tuple[float, int] | None = None  # (when, position) the rows' follower started at
        # no read model ahead of the log: why the read models are being rebuilt (reads are refused meanwhile),
        # what the owner does about it (mneme/app/ahead.py), and each rebuild so far (mneme status)
        self.rebuilding: str | None = None
        self.on_ahead: Callable[[str], None] | None = None
        self.rebuilds: list[dict[str, Any]] = []

    def generation(
        self,
        view: MemoriesView,
        vectors: VectorView | None,
        *,
        also: tuple[Sink, ...] = (),
        also_access: tuple[Sink, ...] = (),
    ) -> Generation:
        """A generation of these read models, its followers wired (services/projector/generation.py)."""
        return wire(self, view, vectors, also=also, also_access=also_access, on_diverged=self._ahead)

    def _ahead(self, why: str) -> None:
        """A follower found its read model ahead of the log while running: refuse reads from now on, and let the
        owner rebuild (mneme/app/ahead.py); without one, the reads stay refused until a restart rebuilds."""
        if self.rebuilding is None:
            self.rebuilding = why
            if self.on_ahead is not None:
                self.on_ahead(why)

    async def check_log(self) -> str | None:
        """Why the serving generation's read models are not a prefix of the log (LogFollower.check_log), or None."""
        for f in self.gen.followers:
            if (why := await f.check_log()) is not None:
                return why
        return None

    # the serving generation's parts (what callers and tests use)
    @property
    def view(self) -> MemoriesView:
        return self.gen.view

    @property
    def follower(self) -> LogFollower:
        return self.gen.follower

    @property
    def access_follower(self) -> LogFollower:
        return self.gen.access_follower

    @property
    def vectors(self) -> VectorView | None:
        return self.gen.vectors

    @property
    def vector_follower(self) -> LogFollower | None:
        return self.gen.vector_follower

    @property
    def searcher(self) -> Searcher | None:
        return self.gen.searcher

    @property
    def applied(self) -> int:
        return self.follower.applied

    async def start(self, *, serve_queries: bool = True) -> None:
        target = await self.start_generation()
        if serve_queries:
            self._spawn(self._join_when_caught_up(target))
        if self.control is not None and (self.control.opener or self.control.snapshots):
            await self.plane.serve(self.control_router(self.control.control_id))
        if self.snapshotter is not None and self.snapshotter.every:
            self._spawn(self.snapshotter.periodically())

    async def start_generation(self) -> int:
        """Start the serving generation's followers (and fillers); returns the log's head found at start."""
        target = (await self.js.stream_info(S.EVENTS_STREAM)).state.last_seq
        self.start_target = target  # semantic search answers INDEXING until the dense vectors reach it
        gen = self.gen
        self._rows_clock = (time.monotonic(), gen.follower.committed)
        for f in gen.followers:
            if f is not gen.vector_follower:
                await f.start()
        if gen.vector_follower is not None:
            # rows first: both folds share one GIL, so a new replica answers get, list and stats sooner when the
            # vector fold starts once the rows have caught up with the log it found (searches say INDEXING meanwhile)
            self._vector_start = asyncio.create_task(self._start_vectors(gen, target))
        if self.code is not None:
            self.code.start_filler()
        if self.gen.vectors is not None:
            if self.gen.vectors.background:
                self.gen.vectors.start_filler()
            else:
                self._spawn(self._fill_when_model_ready(self.gen.vectors))
        return target

    async def stop_generation(self) -> Generation:
        """Stop the serving generation's followers and fillers (a rebuild replaces its files); returns it, for
        the caller to close. Nothing is saved: its positions may be ahead of the log."""
        gen = self.gen
        if self._vector_start is not None and not self._vector_start.done():
            self._vector_start.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._vector_start
        if gen.vectors is not None:
            gen.vectors.stop_embedding()
        for f in gen.followers:
            await f.stop(catch_up=0)
        while gen.inflight:
            await asyncio.sleep(0.01)
        return gen

    def reopen(self, view: MemoriesView, vectors: VectorView | None, code: CodeView | None) -> None:
        """Serve from freshly opened read models (after a rebuild in place); `start_generation` starts them."""
        self.also = tuple(s for s in self.also if s is not self.code) + ((code,) if code is not None else ())
        self.code = code
        self.gen = self.generation(view, vectors, also=self.also, also_access=self.also_access)

    async def serve_again_when_caught_up(self, target: int) -> None:
        """After a rebuild in place: reads are answered again once the rows have folded the log to `target`."""
        while not await self.gen.follower.wait_for(target, 3600):
            pass
        self.rebuilding = None
        log.info("projector serving queries again at sequence %d after the rebuild", self.applied)

    async def _start_vectors(self, gen: Generation, target: int) -> None:
        while not await gen.follower.wait_for(target, 3600):
            pass
        assert gen.vector_follower is not None
        self.vector_clock = (time.monotonic(), gen.vector_follower.committed)
        await gen.vector_follower.start()

    async def _fill_when_model_ready(self, vectors: VectorView) -> None:
        if await asyncio.to_thread(vectors.model.wait, None):
            await asyncio.to_thread(vectors.fill_pending)

    async def _join_when_caught_up(self, target: int) -> None:
        while not await self.gen.follower.wait_for(target, 3600):  # the rows: searches wait for the vectors
            pass
        if await self.plane.serve(self.query_router()):
            self.serving.set()
            log.info("projector serving queries at sequence %d", self.applied)

    def query_router(self) -> NatsRouter:
        """The query plane: one subscriber per query operation, in the projectors' queue group."""
        router = self.plane.router()
        for op, query_type in QUERY_TYPES.items():
            self.plane.query(
                router, S.query_subject(op), S.PROJECTOR_QUEUE, query_type, self._answer, lambda: self.applied
            )
        for op, query_type in REPAIR_TYPES.items():  # every replica repairs its own read models: no queue group
            self.plane.query(router, S.repair_subject(op), "", query_type, self._answer, lambda: self.applied)
        return router

    def control_router(self, control_id: str) -> NatsRouter:
        """The control plane of the data directory `control_id` names: swap (with an opener) and snapshot (with
        a snapshot directory)."""
        router = self.plane.router()
        if self.control is not None and self.control.opener is not None:
            self.plane.control(
                router, S.control_subject(control_id, "swap"), SwapRequest, self._answer_swap, blue_green.swap_failed
            )
        if self.snapshotter is not None:
            self.plane.control(
                router, S.control_subject(control_id, "snapshot"), SnapshotRequest, self.snapshotter.answer,
                snapshot_failed,
            )  # fmt: skip
        return router

    async def stop(self) -> None:
        self.serving.clear()  # a gateway in this process asks over NATS from now on
        if self._vector_start is not None and not self._vector_start.done():
            self._vector_start.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._vector_start
        # no new requests; those already running (on worker threads) finish before the view closes
        drain = self.tuning.wait_timeout + 5
        await asyncio.gather(self.plane.stop(drain), self.tasks.drain(drain))
        if self.gen.vectors is not None:  # a stop must not wait for a backlog's embeddings (they are redone)
            self.gen.vectors.stop_embedding()
        for f in [*self.gen.followers, *self.retired]:
            await f.stop()
        if self.gen.vectors is not None:  # the vector position is saved lazily: save it now
            await asyncio.to_thread(self.gen.vectors.save)

    # -- blue/green ---------------------------------------------------------------------
    async def swap(self, view: MemoriesView, vectors: VectorView | None) -> Generation:
        """Serve from a new generation, caught up with the log meanwhile; returns the old one, stopped, for the
        caller to close (services/projector/blue_green.py)."""
        return await blue_green.swap(self, view, vectors)

    async def _answer_swap(self, req: SwapRequest) -> SwapReply:
        return await blue_green.answer_swap(self, req)

    async def snapshot(self) -> dict[str, Any]:
        """Write a snapshot of the serving generation now (its followers hold their commits meanwhile)."""
        assert self.snapshotter is not None
        return await self.snapshotter.take()

    def _spawn(self, coro: Any) -> None:
        self.tasks.spawn(coro)

    def catch_up_progress(self) -> dict[str, Any] | None:
        """While the rows fold the log found at start (a new replica, `mneme serve` on a log without
        projections) and queries are not served yet: how far (done, total, events/s, eta_s); else None."""
        if self.serving.is_set() or self._rows_clock is None:
            return None
        return fold_progress("catching_up", self._rows_clock, self.follower.committed, self.start_target)

    async def answer_here(self, query: Query) -> Answer | Reply | None:
        """A query from a gateway in this process (`mneme serve`), answered as the query plane answers it,
        without the NATS round trip and without the codec (the result as the read model made it); a failure is
        the Reply the plane would send; None while this projector does not serve queries (ask over NATS)."""
        if not self.serving.is_set():
            return None
        return await answered(self._answer_object, query, lambda: self.applied, log, query.OPERATION)

    async def _answer(self, query: Query) -> Reply:
        return (await self._answer_object(query)).reply()

    async def _answer_object(self, query: Query) -> Answer:
        gen = self.gen  # the whole query runs on one generation, even if a swap happens meanwhile
        gen.inflight += 1
        try:
            return await self.answers.reply(gen, query)
        finally:
            gen.inflight -= 1

    def run_query(self, query: Any) -> Any:
        return run_query(self.gen, query)
