"""Follow the log from a checkpoint and fold it: the loop every consumer shares.

Delivery (mneme/follow_delivery.py, the base of LogFollower): an ordered push consumer
starting right after the sink's committed checkpoint, with back-pressure end to end,
gaps fetched again, and the check that the sink's state is a prefix of the log.

Two steps per event, both on a worker thread, in log order:
- stage: fold the event into the sink's memory at once (`staged` advances). A
  projector answers point reads (read-your-writes) from staged state.
- commit: write everything staged, with the checkpoint, in one transaction
  (`committed` advances; invariant 5). A commit happens when `linger` seconds have
  passed since the first uncommitted event, when `batch_max` events wait, as soon as
  what a reader waits for is staged (`wait_for(..., committed=True)`), and at stop.
Committing one event per transaction costs a DuckDB round of ~5-8 ms; batching
makes it tens of microseconds per event.

Catching up (another full batch already waits in the queue when one is taken: a
replay, a new replica, a restart behind the log), a commit waits for `catch_up_batch`
events instead, and not for the linger: per event, a commit costs less the more it
holds (the rows' fold of 100,000 events: ~70 us an event in commits of 5,000, ~55 in
commits of 20,000). Nothing reads those events before they are committed except point
reads, which read staged state, and waiters, whose commit comes when their event is staged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from mneme.dead_letters import DeadLetters
from mneme.follow_delivery import Delivery
from mneme.sink import LogAhead, Positioned, Sink, mark_of
from schemas import subjects as S
from schemas.dead_letter import DeadLetter
from schemas.events import decode_envelope
from schemas.placement import misplaced

log = logging.getLogger("mneme.follow")


class LogFollower(Delivery):
    def __init__(
        self,
        js: JetStreamContext,
        sink: Sink,
        *,
        batch_max: int = 5000,
        linger: float = 0.1,
        queue_max: int = 20000,
        catch_up_batch: int | None = None,
        stream: str = S.EVENTS_STREAM,
        subjects: str = S.EVENTS_SUBJECTS,
        decode: Callable[[bytes], Any] = decode_envelope,
        check: Callable[[str, Any], str | None] | None = misplaced,
        stop_at: int | None = None,
        pending_msgs_limit: int | None = None,
        consumer: str | None = None,
    ):
        """`stop_at`: fold nothing past this sequence (a point-in-time copy of the log).
        `pending_msgs_limit`: nats-py's buffer of undelivered messages (tests make it small to force drops).
        `consumer`: the name a message it cannot decode is dead-lettered under (`mneme.dlq.<consumer>`);
        None (a rebuild, a replay): counted and logged, not published.
        `check`: why a decoded message cannot be on its subject (dead-lettered), or None: by default the
        event log's rule (schemas/placement.py).
        `catch_up_batch`: the events a commit holds while a backlog waits (None: `batch_max`)."""
        super().__init__(
            js,
            sink,
            stream=stream,
            subjects=subjects,
            queue_max=queue_max,
            stop_at=stop_at,
            pending_msgs_limit=pending_msgs_limit,
            consumer=consumer,
        )
        self.decode, self.check = decode, check
        self.staged = self.committed = sink.checkpoint
        self.batch_max = batch_max
        self.catch_up_batch = max(batch_max, catch_up_batch or batch_max)
        self.linger = linger
        self._commit_asked = False
        self._commit_wanted = 0  # the highest sequence a reader waits to see committed
        self._paused = 0
        self._pending = 0
        self._first_pending = 0.0
        self._task: asyncio.Task[None] | None = None
        self._in_flight: asyncio.Future[object] | None = None
        self.letters = DeadLetters(js, stream, consumer)
        self.fold_failed = False  # a sink could not fold a decodable message: stopped until a restart

    @property
    def dead_letters(self) -> int:
        return self.letters.count  # messages skipped since start (the MNEME_DLQ stream keeps every one)

    @property
    def last_dead_letter(self) -> DeadLetter | None:
        return self.letters.last

    @property
    def applied(self) -> int:
        return self.staged

    async def start(self) -> None:
        """Follow the log from the sink's checkpoint; LogAhead (nothing started) if that state is not the log's."""
        if (why := await self.check_log()) is not None:
            self.diverged = why
            raise LogAhead(why)
        self._reconnects = self._reconnects_now()
        self._task = asyncio.create_task(self._loop(), name="log-follower")
        await self._subscribe(self.committed + 1)

    @contextlib.asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        """No commit starts while inside (staging goes on): the sink's files hold still, e.g. for a snapshot."""
        self._paused += 1
        try:
            await self.idle()
            yield
        finally:
            self._paused -= 1
            self._wake.set()

    async def stop(self, catch_up: float = 1.0) -> None:
        """Take in what the stream holds at this moment (for at most `catch_up` seconds: an event appended
        just before a clean shutdown reaches the trail and the projection now, not at the next start), then
        stop delivery, stage and commit what has arrived, and end the loop."""
        if catch_up > 0 and self._task is not None and not self._task.done() and self._resync_from is None:
            try:
                async with asyncio.timeout(catch_up):
                    info = await self.js.stream_info(self.stream)
                head = info.state.last_seq if self.stop_at is None else min(info.state.last_seq, self.stop_at)
                await self.wait_for(head, catch_up, committed=False)
            except Exception:  # noqa: BLE001 - NATS may be gone at shutdown: stop with what has arrived
                pass
        self._stopping = True
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:  # noqa: BLE001 - the connection may be gone at shutdown
                pass
        if self._task and not self._task.done():
            while not self._queue.empty() and not self._task.done():
                await asyncio.sleep(0.005)
            if self.staged > self.committed and self.stalled is None:  # (stalled: the next try may be 10 s
                await self.wait_for(self.staged, 60, committed=True)  # away, and fail again: stop now)
            # ended by the flag as well as the cancel: a cancel that lands inside an await which completes in the
            # same turn can be lost (asyncio.wait_for on 3.11, in nats-py's requests too), and the loop would go on
            self._ended = True
            self._wake.set()
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self.letters.drain()  # dead letters on their way out
        if self._in_flight is not None:
            # work already handed to a worker thread finishes before we return, so whoever
            # closes the database next never closes it under a running transaction
            await asyncio.wait({self._in_flight})

    async def idle(self) -> None:
        """Wait for the stage or commit running on a worker thread, if any."""
        if self._in_flight is not None and not self._in_flight.done():
            await asyncio.wait({self._in_flight})

    def request_commit(self) -> None:
        self._commit_asked = True
        self._wake.set()

    async def wait_for(self, seq: int, timeout: float, *, committed: bool = True) -> bool:
        """Wait until `seq` is committed (or only staged). False on timeout."""
        if (self.committed if committed else self.staged) >= seq:
            return True
        if committed:  # a commit now if it is staged, else as soon as it is (see _loop)
            if self.staged >= seq:
                self.request_commit()
            else:
                self._commit_wanted = max(self._commit_wanted, seq)
        try:  # (asyncio.timeout, not wait_for: on 3.11 wait_for can lose a cancel, and its canceller then waits)
            async with asyncio.timeout(timeout), self.advanced:
                await self.advanced.wait_for(lambda: (self.committed if committed else self.staged) >= seq)
        except TimeoutError:
            return False
        return True

    async def _run(self, fn: object, *args: object) -> object:
        # shielded: a cancel at shutdown must not abandon a half-run transaction
        self._in_flight = asyncio.ensure_future(asyncio.to_thread(fn, *args))  # type: ignore[arg-type]
        return await asyncio.shield(self._in_flight)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._ended:
            if await self._recheck_after_reconnect():
                return
            self._wake.clear()
            if self._queue.empty() and (not self._commit_asked or self._paused):
                timeout = self.idle_check
                if self._pending and not self._paused:
                    timeout = min(self.idle_check, self._first_pending + self.linger - loop.time())
                if timeout > 0:
                    try:  # (not wait_for: on 3.11 it loses a cancel that lands as the wake does, and stop() hung)
                        async with asyncio.timeout(timeout):
                            await self._wake.wait()
                    except TimeoutError:
                        pass
                if self._queue.empty() and loop.time() - self._last_arrival >= self.idle_check:
                    await self._check_tail()
                    if self.diverged is not None:
                        return
            if self.stalled is not None:  # the last commit failed: take nothing new (the queue fills, NATS
                await asyncio.sleep(self._retry_in)  # waits), try the commit again after a backoff
                self._commit_asked = True
            # catching up (a backlog past this batch): take and commit more at a time (module docstring)
            backlog = self._queue.qsize() > self.batch_max
            batch: list[Msg] = []
            take = self.catch_up_batch - self._pending if backlog else self.batch_max  # (a commit <= catch_up_batch)
            while self.stalled is None and len(batch) < take:
                try:
                    batch.append(self._queue.get_nowait())
                except asyncio.QueueEmpty:
                    break
            if batch:
                try:
                    await self._stage(batch)
                except Exception as exc:  # noqa: BLE001 - a fold that cannot take a decodable event: see _fold_failed
                    await self._fold_failed(batch, exc)
                    return
                if self._pending == 0:
                    self._first_pending = loop.time()
                self._pending += len(batch)
                if self.committed < self._commit_wanted <= self.staged:  # what a reader waits for is staged
                    self._commit_asked = True
                async with self.advanced:
                    self.advanced.notify_all()
            due = self._commit_asked or self._pending >= (self.catch_up_batch if backlog else self.batch_max)
            due = due or (not backlog and self._pending > 0 and loop.time() - self._first_pending >= self.linger)
            if self._paused:
                due = False
            if self._resync_from is not None and self._queue.empty():
                await self._resync()  # everything before the gap is staged; fetch from the first missing one
            if self._pending and due:
                self._commit_asked = False
                pending, self._pending = self._pending, 0
                try:
                    await self._run(self.sink.commit)
                except Exception as exc:  # noqa: BLE001 - e.g. the disk is full: stall, keep what is staged, retry
                    self._pending = pending
                    self._stall(exc)
                    continue
                if self.stalled is not None:
                    log.warning("%s: commits work again (%s resolved)", self.consumer, self.stalled)
                    self.stalled, self._retry_in = None, 0.5
                self.committed = self.staged
                self._take_refused()  # (a commit may have staged its batch again and refused more)
                async with self.advanced:
                    self.advanced.notify_all()
            elif self._commit_asked and not self._pending:
                self._commit_asked = False

    async def _fold_failed(self, batch: list[Msg], exc: Exception) -> None:
        """A sink raised while folding messages that decoded (a projection bug, or an event no fold expects).
        What is staged may be half-folded, so nothing more is committed: the follower stops where its last
        commit left it, says why in `stalled` (`mneme status` shows it), and a restart (after the fix) folds
        again from there. Never a silent stop, never a half-applied batch on disk."""
        first, last = batch[0].metadata.sequence.stream, batch[-1].metadata.sequence.stream
        self.stalled = f"fold failed in {self.stream} #{first}..#{last}: {type(exc).__name__}: {exc}"[:500]
        self.fold_failed = True
        if self._sub is not None:  # nothing more is taken in (the queue would fill and hold delivery)
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
        log.error("%s: %s; folding stopped at the last commit (#%d) until a restart", self.consumer, self.stalled,
                  self.committed, exc_info=exc)  # fmt: skip
        async with self.advanced:
            self.advanced.notify_all()

    def _stall(self, exc: Exception) -> None:
        first = self.stalled is None
        self.stalled = f"commit failed: {type(exc).__name__}: {exc}"[:500]
        self._retry_in = 0.5 if first else min(self._retry_in * 2, 10.0)
        log.error("%s: %s; nothing new is folded until a commit succeeds (next try in %.1f s)",
                  self.consumer, self.stalled, self._retry_in)  # fmt: skip

    async def _stage(self, batch: list[Msg]) -> None:
        positioned: list[Positioned] = []
        dead: list[tuple[int, DeadLetter]] = []  # (where in `positioned` it was, the letter)
        for m in batch:
            md = m.metadata
            try:
                decoded = self.decode(m.data)
            except Exception as exc:  # noqa: BLE001 - a poison message must not stop the consumer
                dead.append((len(positioned), self.letters.of(m, f"undecodable: {type(exc).__name__}: {exc}")))
                continue
            if self.check is not None and (why := self.check(m.subject, decoded)) is not None:
                dead.append((len(positioned), self.letters.of(m, why)))
                continue
            positioned.append(Positioned(md.sequence.stream, md.timestamp, decoded, m.subject))
        upto = batch[-1].metadata.sequence.stream
        if log.isEnabledFor(logging.DEBUG):  # one line per message, with the request id of the call behind it
            for p in positioned:
                rid = getattr(p.envelope, "request_id", None)
                log.debug("%s folded %s #%d", self.consumer, self.stream, p.seq, extra={"request_id": rid})
        start = 0
        for at, letter in dead:  # fold up to each poison message, record it, go on (the trail stays in order)
            await self._fold(positioned[start:at], letter.seq - 1)
            if (record := getattr(self.sink, "dead_letter", None)) is not None:
                record(letter)
            start = at
        await self._fold(positioned[start:], upto)
        if (mark := getattr(self.sink, "mark", None)) is not None:
            mark(upto, mark_of(batch[-1].data))
        self.staged = max(self.staged, upto)
        self._take_refused()

    def _take_refused(self) -> None:
        """Dead-letter what the sink's fold refused (after a stage, and after a commit that staged again)."""
        if (take := getattr(self.sink, "take_refused", None)) is None:
            return
        for p, why in take():
            data = msgspec.json.encode(p.envelope)  # (the message as decoded: the stream keeps the original)
            self.letters.at(p.seq, p.subject, data, p.recorded_at, why)

    async def _fold(self, positioned: list[Positioned], upto: int) -> None:
        if len(positioned) > self.batch_max or self.sink.stage_reads_disk(positioned):  # (a catch-up's batch:
            # the event loop is not held for its whole fold)
            await self._run(self.sink.stage, positioned, upto)
        else:  # pure folding in memory: a thread hop would cost more than the work
            self.sink.stage(positioned, upto)


def access_follower(
    js: JetStreamContext, sink: Sink, *, batch_max: int = 5000, linger: float = 0.1, consumer: str | None = None
) -> LogFollower:
    """A follower of the access stream (read and denied records) instead of the event log."""
    from schemas.access import decode_access

    return LogFollower(
        js,
        sink,
        batch_max=batch_max,
        linger=linger,
        stream=S.ACCESS_STREAM,
        subjects=S.ACCESS_SUBJECTS,
        decode=decode_access,
        check=None,
        consumer=consumer,
    )
