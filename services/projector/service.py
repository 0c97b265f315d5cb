"""The projector process: folds the log into the memories view and answers queries.

Consumption: `LogFollower` from the view's own checkpoint. The checkpoint lives in
DuckDB with the rows (invariant 5), so it is the one cursor; a server-side durable
consumer would be a second cursor that can disagree with it after a crash.

Queries: one queue-group subscription per operation, so replicas share the load.
A replica joins the queue group only once it has caught up with the log as it
stood at start, so a rebuilding replica never answers with stale rows. A query
waits until `min_seq` is applied (read-your-writes), or fails with PROJECTION_LAG.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from mneme.errors import MnemeError, ProjectionLag
from mneme.follow import FanOut, LogFollower, Sink, access_follower
from schemas import subjects as S
from schemas.queries import QUERY_TYPES, Reply, SearchMemories, encoder
from services.projector.access_view import AccessView
from services.projector.memories_queries import HANDLERS, STAGED_READS, resolve_as_of
from services.projector.memories_view import MemoriesView
from services.projector.search import Searcher
from services.projector.vector_view import VectorView

log = logging.getLogger("mneme.projector")


class Projector:
    def __init__(
        self,
        nc: NATS,
        view: MemoriesView,
        *,
        batch_max: int = 5000,
        wait_timeout: float = 5.0,
        linger: float = 0.1,
        also: tuple[Sink, ...] = (),
        also_access: tuple[Sink, ...] = (),
        vectors: VectorView | None = None,
        vector_batch_max: int = 2000,
    ):
        """`also` / `also_access`: more sinks fed by the same followers of the event log and of the
        access stream (in `mneme serve`, the audit trail): one delivery, one decode."""
        self.nc = nc
        self.js = nc.jetstream()
        self.view = view
        self.wait_timeout = wait_timeout
        sink: Sink = FanOut(view, *also) if also else view
        self.follower = LogFollower(self.js, sink, batch_max=batch_max, linger=linger)
        access: Sink = AccessView(view)
        access = FanOut(access, *also_access) if also_access else access
        self.access_follower = access_follower(self.js, access, batch_max=batch_max, linger=linger)
        # the vector projection has a follower of its own: embedding never holds the rows back
        self.vectors = vectors
        self.vector_follower: LogFollower | None = None
        self.searcher: Searcher | None = None
        if vectors is not None:
            self.vector_follower = LogFollower(self.js, vectors, batch_max=vector_batch_max, linger=linger)
            self.searcher = Searcher(vectors.index, vectors.model, vectors.cache, vectors.bm25)
        self.serving = asyncio.Event()
        self._subs: list[Any] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._decoders = {op: msgspec.msgpack.Decoder(t) for op, t in QUERY_TYPES.items()}

    @property
    def applied(self) -> int:
        return self.follower.applied

    async def start(self, *, serve_queries: bool = True) -> None:
        target = (await self.js.stream_info(S.EVENTS_STREAM)).state.last_seq
        await self.follower.start()
        await self.access_follower.start()
        if self.vector_follower is not None:
            await self.vector_follower.start()
            self._spawn(self._fill_when_model_ready())
        if serve_queries:
            self._spawn(self._join_when_caught_up(target))

    async def _fill_when_model_ready(self) -> None:
        assert self.vectors is not None
        if await asyncio.to_thread(self.vectors.model.wait, None):
            await asyncio.to_thread(self.vectors.fill_pending)

    async def _join_when_caught_up(self, target: int) -> None:
        while not await self.follower.wait_for(target, 3600):
            pass
        if self.vector_follower is not None:
            while not await self.vector_follower.wait_for(target, 3600):
                pass
        for op in QUERY_TYPES:
            self._subs.append(await self.nc.subscribe(S.query_subject(op), queue=S.PROJECTOR_QUEUE, cb=self._on_query))
        self.serving.set()
        log.info("projector serving queries at sequence %d", self.applied)

    async def stop(self) -> None:
        for sub in self._subs:
            try:
                await sub.unsubscribe()
            except Exception:  # noqa: BLE001 - shutting down; the connection may be gone
                pass
        if self._tasks:  # queries already running on worker threads finish before the view closes
            await asyncio.wait(set(self._tasks), timeout=self.wait_timeout + 5)
        await self.access_follower.stop()
        await self.follower.stop()
        if self.vector_follower is not None:
            await self.vector_follower.stop()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _on_query(self, msg: Msg) -> None:
        self._spawn(self._answer(msg))

    async def _answer(self, msg: Msg) -> None:
        op = msg.subject[len(S.QUERY_PREFIX) + 1 :]
        try:
            query = self._decoders[op].decode(msg.data)
            as_of = getattr(query, "as_of", None)
            # point reads are answered from staged state; the rest, and any read of the past, need committed rows
            committed = type(query) not in STAGED_READS or as_of is not None
            need = max(query.min_seq, as_of.seq or 0) if as_of is not None else query.min_seq
            waits = [self.follower]
            if isinstance(query, SearchMemories):
                if self.vector_follower is None:
                    raise MnemeError("this projector keeps no vector index", details={"op": op})
                waits = [self.vector_follower] + ([self.follower] if as_of is not None else [])  # as_of: rows resolve it
            lagging = [f for f in waits if not await f.wait_for(need, self.wait_timeout, committed=committed)]
            if lagging:
                raise ProjectionLag(
                    f"the projection has applied sequence {self.applied}, not yet {query.min_seq}; retry shortly",
                    details={"applied_seq": self.applied, "min_seq": query.min_seq},
                )
            result = await asyncio.to_thread(self.run_query, query)
            reply = Reply(applied_seq=self.applied, result=msgspec.Raw(encoder.encode(result)))
        except MnemeError as exc:
            reply = Reply(applied_seq=self.applied, error=exc.to_dict())
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            reply = Reply(applied_seq=self.applied, error={"code": "INVALID_INPUT", "message": f"bad query: {exc}"})
        except Exception as exc:
            log.exception("query %s failed", op)
            reply = Reply(applied_seq=self.applied, error={"code": "INTERNAL", "message": type(exc).__name__})
        try:
            await msg.respond(encoder.encode(reply))
        except Exception:  # noqa: BLE001 - the asker may be gone
            log.debug("could not reply to %s", op)

    def run_query(self, query: Any) -> Any:
        if isinstance(query, SearchMemories):
            assert self.searcher is not None
            return self.searcher.search(query, resolve_as_of(self.view, query.as_of))
        return HANDLERS[type(query)](self.view, query)


async def catch_up(projector: Projector, *, progress: Callable[[int, int, float], None] | None = None) -> int:
    """Wait until the projector has applied the log as it stands now; report progress on the way."""
    target = (await projector.js.stream_info(S.EVENTS_STREAM)).state.last_seq
    start = time.monotonic()
    while not await projector.follower.wait_for(target, 0.5):
        if progress:
            progress(projector.applied, target, time.monotonic() - start)
    if progress:
        progress(projector.applied, target, time.monotonic() - start)
    return target
