"""Follow the log from a checkpoint and fold it: the loop every consumer shares.

Delivery: an ordered push consumer (the fastest nats-py delivery, with flow control
and heartbeats, in order) starting right after the sink's committed checkpoint.
The callback only queues; a bounded queue blocks it, which delays flow-control
replies, which pauses the server: back-pressure end to end.

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
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from mneme.dead_letters import DeadLetters
from mneme.sink import LogAhead, Positioned, Sink, ahead_of_log, mark_of, positions_of
from schemas import subjects as S
from schemas.dead_letter import DeadLetter
from schemas.events import decode_envelope
from schemas.placement import misplaced

log = logging.getLogger("mneme.follow")


class LogFollower:
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
        self.js = js
        self.stream, self.subjects, self.decode, self.check = stream, subjects, decode, check
        self.sink = sink
        self.staged = self.committed = sink.checkpoint
        self.batch_max = batch_max
        self.catch_up_batch = max(batch_max, catch_up_batch or batch_max)
        self.linger = linger
        self.advanced = asyncio.Condition()
        self._queue: asyncio.Queue[Msg] = asyncio.Queue(maxsize=queue_max)
        self._wake = asyncio.Event()
        self._commit_asked = False
        self._commit_wanted = 0  # the highest sequence a reader waits to see committed
        self.stop_at = stop_at
        self.pending_msgs_limit = pending_msgs_limit
        self._last_seen = 0
        self._resync_from: int | None = None
        self.resyncs = 0
        self.idle_check = 2.0  # seconds without a message before the tail of the stream is checked
        self._stopping = False
        self._ended = False  # stop() ends the loop
        self._sub_gen = 0
        self._last_arrival = 0.0
        self._paused = 0
        self._pending = 0
        self._first_pending = 0.0
        self._task: asyncio.Task[None] | None = None
        self._in_flight: asyncio.Future[object] | None = None
        self._sub: JetStreamContext.PushSubscription | None = None
        self.consumer = consumer
        self.letters = DeadLetters(js, stream, consumer)
        self.stalled: str | None = None  # why commits fail (the disk is full...): None while they succeed
        self.fold_failed = False  # a sink could not fold a decodable message: stopped until a restart
        self._retry_in = 0.5
        self.diverged: str | None = None  # why its state is ahead of the log (LogAhead): it folds no more
        self.on_diverged: Callable[[str], None] | None = None  # told once, when that is found while running
        self._reconnects = self._reconnects_now()

    @property
    def dead_letters(self) -> int:
        return self.letters.count  # messages skipped since start (the MNEME_DLQ stream keeps every one)

    @property
    def last_dead_letter(self) -> DeadLetter | None:
        return self.letters.last

    @property
    def applied(self) -> int:
        return self.staged

    @property
    def received(self) -> int:
        """The last sequence received (queued, staged or committed)."""
        return self._last_seen

    async def start(self) -> None:
        """Follow the log from the sink's checkpoint; LogAhead (nothing started) if that state is not the log's."""
        if (why := await self.check_log()) is not None:
            self.diverged = why
            raise LogAhead(why)
        self._reconnects = self._reconnects_now()
        self._task = asyncio.create_task(self._loop(), name="log-follower")
        await self._subscribe(self.committed + 1)

    async def check_log(self, positions: list[tuple[str, int, str | None]] | None = None) -> str | None:
        """Why the sink's committed state (or `positions`) is not a prefix of the log, or None (ahead_of_log)."""
        if positions is None:  # (every position: a FanOut starts from its lowest, maybe 0 while another is ahead)
            positions = positions_of(self.sink, self.consumer or self.stream)
        if all(seq == 0 for _, seq, _ in positions):  # a fresh read model asks nothing of the log
            return None
        return await ahead_of_log(self.js, self.stream, positions)

    def _reconnects_now(self) -> int:
        nc = getattr(self.js, "_nc", None)
        return int(getattr(nc, "stats", {}).get("reconnects", 0)) if nc is not None else 0

    async def _recheck_after_reconnect(self) -> bool:
        """The connection came back (the server may have restarted on another store): True if the state is
        ahead of the log, and then the follower has stopped folding."""
        now = self._reconnects_now()
        if now == self._reconnects:
            return False
        try:
            why = await self.check_log()
        except Exception:  # noqa: BLE001 - not reachable yet: check again at the next turn
            return False
        self._reconnects = now
        if why is None:
            return False
        await self._diverge(why)
        return True

    async def _diverge(self, why: str) -> None:
        """Stop folding for good (a restart or a rebuild takes over), say so once, and tell the owner."""
        self.diverged = why
        self.stalled = f"ahead of the log: {why}"[:500]
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
        log.error("%s: %s; it folds no more and is rebuilt from the log", self.consumer or self.stream, why)
        self._ended = True
        if self.on_diverged is not None:
            self.on_diverged(why)
        async with self.advanced:
            self.advanced.notify_all()

    async def _subscribe(self, start: int) -> None:
        cfg = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start)
        self._last_seen = start - 1
        # the tail check counts silence from here (from 0.0, the first wake-up, e.g. a reader's wait_for,
        # took a subscription that had not delivered yet for a stalled one and subscribed again)
        self._last_arrival = asyncio.get_running_loop().time()
        # A 1 s heartbeat: after a NATS restart the ordered consumer notices its server-side
        # consumer is gone within ~2 s (the default 5 s heartbeat took 10-14 s) and recreates it.
        # (nats-py keeps its own default limit unless one is given)
        extra: dict[str, Any] = {"pending_msgs_limit": self.pending_msgs_limit} if self.pending_msgs_limit else {}
        self._sub_gen += 1
        gen = self._sub_gen

        async def on_msg(msg: Msg) -> None:
            if gen == self._sub_gen:  # a message still in flight from a replaced subscription is not ours
                await self._on_msg(msg)

        self._sub = await self.js.subscribe(
            self.subjects,
            stream=self.stream,
            cb=on_msg,
            ordered_consumer=True,
            config=cfg,
            idle_heartbeat=1.0,
            **extra,
        )

    async def _on_msg(self, msg: Msg) -> None:
        seq = msg.metadata.sequence.stream
        if self._resync_from is not None or seq <= self._last_seen:
            return  # a gap was seen: everything until the new subscription is ignored (and refetched)
        if seq != self._last_seen + 1 and not await self._is_hole(self._last_seen + 1):
            # nats-py dropped messages (its pending buffer overflowed: it answers flow control on arrival,
            # so the server does not wait for us) and the ordered consumer does not notice: fetch again
            # from the first missing sequence.
            log.warning(
                "%s: sequences %d..%d were lost in delivery; fetching again from %d",
                self.stream,
                self._last_seen + 1,
                seq - 1,
                self._last_seen + 1,
            )
            self._resync_from = self._last_seen + 1
            self.resyncs += 1
            self._wake.set()
            return
        self._last_arrival = asyncio.get_running_loop().time()
        if self.stop_at is None or seq <= self.stop_at:  # (past stop_at: not folded in a point-in-time copy)
            # a put that never completes (the callback was abandoned: observed as exactly one lost sequence,
            # queue_max + 1, in tests/test_follow_gaps.py; the nats-py path not pinned down) must not count
            # as seen, so the next message reveals the gap
            await self._queue.put(msg)
        self._last_seen = seq
        self._wake.set()

    async def _is_hole(self, seq: int) -> bool:
        """True when the stream itself has no message at `seq` (deleted or purged), so skipping it is right."""
        try:
            await self.js.get_msg(self.stream, seq=seq)
        except NotFoundError:
            return True
        except Exception:  # noqa: BLE001 - cannot tell: fetch again, which is always safe
            return False
        return False

    async def _check_tail(self) -> None:
        """Nothing arrived for a while: if the stream holds more than we have seen, the last messages were
        dropped in delivery (no later message will reveal that gap): fetch again."""
        self._last_arrival = asyncio.get_running_loop().time()
        if self._resync_from is not None or self._sub is None or self._stopping:
            return
        try:
            head = (await self.js.stream_info(self.stream)).state.last_seq
        except Exception:  # noqa: BLE001 - NATS unreachable: the ordered consumer reconnects by itself
            return
        if head < self.committed and self.stop_at is None:  # the log is shorter than what is folded
            await self._diverge(f"{self.consumer or self.stream}: checkpoint at {self.stream} #{self.committed}, "
                                f"past the log's last sequence #{head}")  # fmt: skip
            return
        if self.stop_at is not None:
            head = min(head, self.stop_at)
        if head > self._last_seen:
            log.warning("%s: delivery stopped at %d of %d; fetching again", self.stream, self._last_seen, head)
            self._resync_from = self._last_seen + 1
            self.resyncs += 1

    async def _resync(self) -> None:
        start = self._resync_from
        assert start is not None
        if self._stopping:  # stop() has unsubscribed: no new subscription
            return
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception:  # the connection may be gone; the new subscription decides
                log.debug("unsubscribe before a resync failed", exc_info=True)
        self._resync_from = None
        try:
            await self._subscribe(start)
        except Exception as exc:  # noqa: BLE001 - e.g. JetStream's API times out during a leader election:
            # ask again at the next turn; a failure here must never end the loop (the replica would stop for good)
            log.warning("%s: following again from %d failed (%s: %s); retrying", self.consumer or self.stream, start,
                        type(exc).__name__, exc)  # fmt: skip
            self._resync_from = start
            await asyncio.sleep(self._retry_in)

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
