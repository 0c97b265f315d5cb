"""Follow the log from a checkpoint and fold it in batches: the loop every consumer shares.

An ordered push consumer (the fastest nats-py delivery, with flow control and
heartbeats, in order) starts right after the consumer's own checkpoint. The
callback only queues; one task takes everything that has arrived (up to
`batch_max`) and hands it, in log order, to `apply` on a worker thread. The
bounded queue blocks the callback, which delays flow-control replies, which
pauses the server: back-pressure end to end.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy

from schemas import subjects as S
from schemas.events import Envelope, decode_envelope

log = logging.getLogger("mneme.follow")


@dataclass(frozen=True, slots=True)
class Positioned:
    """An event with where and when the log recorded it."""

    seq: int
    recorded_at: datetime
    envelope: Envelope


class LogFollower:
    def __init__(
        self,
        js: JetStreamContext,
        apply: Callable[[list[Positioned]], int],
        *,
        start_after: int,
        batch_max: int = 5000,
        queue_max: int = 20000,
    ):
        self.js = js
        self.apply = apply
        self.applied = start_after
        self.batch_max = batch_max
        self.advanced = asyncio.Condition()
        self._queue: asyncio.Queue[Msg] = asyncio.Queue(maxsize=queue_max)
        self._task: asyncio.Task[None] | None = None
        self._in_flight: asyncio.Future[int] | None = None
        self._sub = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="log-follower")
        cfg = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=self.applied + 1)
        # A 1 s heartbeat: after a NATS restart the ordered consumer notices its server-side
        # consumer is gone within ~2 s (the default 5 s heartbeat took 10-14 s) and recreates it.
        self._sub = await self.js.subscribe(
            S.EVENTS_SUBJECTS, stream=S.EVENTS_STREAM, cb=self._queue.put, ordered_consumer=True, config=cfg,
            idle_heartbeat=1.0,
        )  # fmt: skip

    async def stop(self) -> None:
        """Stop delivery, fold what has already arrived, then end the loop."""
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:  # noqa: BLE001 - the connection may be gone at shutdown
                pass
        if self._task:
            while not self._queue.empty() and not self._task.done():
                await asyncio.sleep(0.01)
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if self._in_flight is not None:
            # the batch already handed to a worker thread commits (or rolls back) before we return,
            # so whoever closes the database next never closes it under a running transaction
            await asyncio.wait({self._in_flight})

    async def wait_for(self, seq: int, timeout: float) -> bool:
        if self.applied >= seq:
            return True
        try:
            async with self.advanced:
                await asyncio.wait_for(self.advanced.wait_for(lambda: self.applied >= seq), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def _loop(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self.batch_max:
                try:
                    batch.append(self._queue.get_nowait())
                except asyncio.QueueEmpty:
                    break
            positioned = []
            for m in batch:
                md = m.metadata
                try:
                    positioned.append(Positioned(md.sequence.stream, md.timestamp, decode_envelope(m.data)))
                except msgspec.DecodeError as exc:  # a poison message must not stop the consumer
                    log.error("skipping undecodable event at sequence %d: %s", md.sequence.stream, exc)
            if positioned:
                # shielded: a cancel at shutdown must not abandon a half-run transaction
                self._in_flight = asyncio.ensure_future(asyncio.to_thread(self.apply, positioned))
                await asyncio.shield(self._in_flight)
            self.applied = max(self.applied, batch[-1].metadata.sequence.stream)
            async with self.advanced:
                self.advanced.notify_all()
