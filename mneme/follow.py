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
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import msgspec
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from schemas import subjects as S
from schemas.dead_letter import DeadLetter, encode_dead_letter
from schemas.events import decode_envelope
from schemas.placement import misplaced

log = logging.getLogger("mneme.follow")


@dataclass(frozen=True, slots=True)
class Positioned:
    """A decoded message with where and when its stream recorded it (an Envelope for the event log)."""

    seq: int
    recorded_at: datetime
    envelope: Any
    subject: str = ""  # where the stream holds it ("" when a fold is fed by hand: taken as placed)


# A sink may also record the messages its follower skipped, in log order (the audit trail does):
#     def dead_letter(self, letter: DeadLetter) -> None
# and hand back messages that decoded but that its fold refused (a create of an id the log already has, a
# change published under another store than its memory's): the follower dead-letters each of them:
#     def take_refused(self) -> list[tuple[Positioned, str]]  # (the message, why), emptied by the call


# And keep the log's word for where it stands (no read model ahead of the log, DESIGN.md invariant 1):
#     def mark(self, seq: int, mark: str) -> None  # the identity of the message at `seq` (the last one staged)
#     def positions(self) -> list[tuple[str, int, str | None]]  # (what, committed seq, the mark saved with it)
# A sink writes the mark of its checkpoint in the transaction that writes the checkpoint; a follower compares
# it with the log when it starts and when its connection comes back (LogFollower.check_log).


def mark_of(data: bytes | None) -> str:
    """A message's identity for a checkpoint: 8 bytes of BLAKE2b of its data (an event's data holds its id)."""
    return hashlib.blake2b(data or b"", digest_size=8).hexdigest()


class Marks:
    """The marks of the last positions a sink staged (seq -> mark, oldest first), for its commits to write beside
    the checkpoint they save. A sink whose saved position lags what it staged (the vectors: the dense filler)
    saves the latest marked position at or below it."""

    def __init__(self, keep: int = 4096):
        self._at: dict[int, str] = {}
        self.keep = keep
        self.fed = False  # marks arrive (a follower feeds the sink; a fold fed by hand has none)

    def add(self, seq: int, mark: str) -> None:
        self.fed = True
        self._at[seq] = mark
        if len(self._at) > self.keep:
            del self._at[next(iter(self._at))]

    def at(self, seq: int) -> str | None:
        return self._at.get(seq)

    def upto(self, seq: int) -> tuple[int, str] | None:
        """The latest marked position at or below `seq` (and forget those before it)."""
        best = None
        for s in list(self._at):
            if s > seq:
                break
            if best is not None:
                del self._at[best[0]]
            best = (s, self._at[s])
        return best


def positions_of(sink: Any, name: str) -> list[tuple[str, int, str | None]]:
    if (own := getattr(sink, "positions", None)) is not None:
        return list(own())
    return [(name, sink.checkpoint, None)]


class LogAhead(Exception):
    """A read model's committed state is not a prefix of the log: it holds a position past the log's last
    sequence, or the event at its checkpoint is not the one it applied (the log lost events in a power cut and
    took new ones under the same sequences, or an older copy of the log's store was put back)."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


class Sink(Protocol):
    @property
    def checkpoint(self) -> int: ...  # the committed position, read once at start (a sink may compute it)

    def stage(self, batch: list[Positioned], upto: int) -> None: ...  # fold in memory; `upto` >= last seq

    def stage_reads_disk(self, batch: list[Positioned]) -> bool: ...  # False: cheap enough for the event loop

    def commit(self) -> int: ...  # write what is staged with the checkpoint; returns the checkpoint


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
        self.dead_letters = 0  # messages skipped since start (the MNEME_DLQ stream keeps every one)
        self.last_dead_letter: DeadLetter | None = None
        self._publishing: set[asyncio.Task[None]] = set()
        self.stalled: str | None = None  # why commits fail (the disk is full...): None while they succeed
        self.fold_failed = False  # a sink could not fold a decodable message: stopped until a restart
        self._retry_in = 0.5
        self.diverged: str | None = None  # why its state is ahead of the log (LogAhead): it folds no more
        self.on_diverged: Callable[[str], None] | None = None  # told once, when that is found while running
        self._reconnects = self._reconnects_now()

    @property
    def applied(self) -> int:
        return self.staged

    @property
    def received(self) -> int:
        """The last sequence received (queued, staged or committed)."""
        return self._last_seen

    async def start(self) -> None:
        """Follow the log from the sink's checkpoint; LogAhead (nothing started) if that state is not the log's."""
        # (every position of the sink: a FanOut starts from its lowest, which may be 0 while another is ahead)
        held = any(seq > 0 for _, seq, _ in positions_of(self.sink, ""))
        if held and (why := await self.check_log()) is not None:
            self.diverged = why
            raise LogAhead(why)
        self._reconnects = self._reconnects_now()
        self._task = asyncio.create_task(self._loop(), name="log-follower")
        await self._subscribe(self.committed + 1)

    async def check_log(self, positions: list[tuple[str, int, str | None]] | None = None) -> str | None:
        """Why the sink's committed state is not a prefix of the log, or None: each committed position must be at
        or below the stream's last sequence, and the message at it must be the one the sink applied there (its
        mark). A position saved without a mark (before marks existed) is checked against the length only; one
        whose message the stream no longer holds (deleted) cannot be compared and passes."""
        last = (await self.js.stream_info(self.stream)).state.last_seq
        if positions is None:
            positions = positions_of(self.sink, self.consumer or self.stream)
        for what, seq, mark in positions:
            if seq > last:
                return f"{what}: checkpoint at {self.stream} #{seq}, past the log's last sequence #{last}"
            if seq == 0 or mark is None:
                continue
            try:
                msg = await self.js.get_msg(self.stream, seq=seq)
            except NotFoundError:
                continue
            if mark_of(msg.data) != mark:
                return f"{what}: applied another event at {self.stream} #{seq} than the log holds there now"
        return None

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
        await self._subscribe(start)

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
        if self._publishing:  # dead letters on their way out
            await asyncio.wait(set(self._publishing), timeout=5.0)
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
                dead.append((len(positioned), self._dead_letter(m, f"undecodable: {type(exc).__name__}: {exc}")))
                continue
            if self.check is not None and (why := self.check(m.subject, decoded)) is not None:
                dead.append((len(positioned), self._dead_letter(m, why)))
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
            self._dead_letter_at(p.seq, p.subject, data, p.recorded_at, why)

    async def _fold(self, positioned: list[Positioned], upto: int) -> None:
        if len(positioned) > self.batch_max or self.sink.stage_reads_disk(positioned):  # (a catch-up's batch:
            # the event loop is not held for its whole fold)
            await self._run(self.sink.stage, positioned, upto)
        else:  # pure folding in memory: a thread hop would cost more than the work
            self.sink.stage(positioned, upto)

    def _dead_letter(self, m: Msg, reason: str) -> DeadLetter:
        """Count, log and (a named consumer) publish a message that cannot be folded; the caller skips it."""
        md = m.metadata
        return self._dead_letter_at(md.sequence.stream, m.subject, m.data or b"", md.timestamp, reason)

    def _dead_letter_at(self, seq: int, subject: str, data: bytes, recorded_at: datetime, reason: str) -> DeadLetter:
        letter = DeadLetter(
            consumer=self.consumer or "unnamed",
            stream=self.stream,
            seq=seq,
            subject=subject,
            reason=reason[:500],
            size=len(data),
            head_b64=DeadLetter.head(data),
            recorded_at=recorded_at,
            skipped_at=datetime.now(UTC),
        )
        self.dead_letters += 1
        self.last_dead_letter = letter
        log.error("%s: dead-lettered %s sequence %d (%s)", letter.consumer, self.stream, letter.seq, letter.reason)
        if self.consumer is not None:
            task = asyncio.create_task(self._publish_dead_letter(letter))
            self._publishing.add(task)
            task.add_done_callback(self._publishing.discard)
        return letter

    async def _publish_dead_letter(self, letter: DeadLetter) -> None:
        """On `mneme.dlq.<consumer>`, once per (consumer, stream, sequence) within the stream's duplicate
        window: a restart that meets the same message again within it does not count it twice."""
        msg_id = f"{letter.consumer}:{letter.stream}:{letter.seq}"
        try:
            await self.js.publish(
                S.dead_letter_subject(letter.consumer),
                encode_dead_letter(letter),
                stream=S.DEAD_LETTER_STREAM,
                timeout=5.0,
                headers={S.HDR_MSG_ID: msg_id},
            )
        except Exception as exc:  # noqa: BLE001 - still counted and logged; the stream keeps the message
            log.warning("could not publish the dead letter for %s sequence %d: %s", letter.stream, letter.seq, exc)


class CatchUpStalled(Exception):
    """A catch-up (a replay's, a rebuild's) that cannot finish: a fold failed, or nothing moved for too long (a
    commit that keeps failing, delivery that stopped). Raised instead of waiting for ever."""


class StallWatch:
    """Tells when followers catching up have stopped: a fold failed, or no position (staged or committed) of
    any of them moved for `after` seconds. `check(target)` raises CatchUpStalled with their reasons."""

    def __init__(self, followers: list[LogFollower], after: float | None):
        self.followers, self.after = followers, after
        self._where: list[tuple[int, int]] = []
        self._moved = time.monotonic()

    def check(self, target: int) -> None:
        now = time.monotonic()
        where = [(f.staged, f.committed) for f in self.followers]
        if where != self._where:
            self._where, self._moved = where, now
        failed = any(f.fold_failed for f in self.followers)
        if not failed and (self.after is None or now - self._moved <= self.after):
            return
        at = min(f.committed for f in self.followers)
        why = "; ".join(f"{f.consumer or f.stream}: {f.stalled}" for f in self.followers if f.stalled)
        raise CatchUpStalled(
            f"folding stopped at sequence {at} of {target}"
            + ("" if failed else f" (nothing moved for {now - self._moved:.0f} s)")
            + f": {why or 'no events arrived'}"
        )


class FanOut:
    """Several sinks behind one follower (one delivery, one decode): what `mneme serve` runs.

    It starts from the lowest checkpoint; each sink skips positions it already has, so
    sinks that committed at different points converge after a crash.
    """

    def __init__(self, *sinks: Sink):
        self.sinks = sinks
        self.checkpoint = min(s.checkpoint for s in sinks)

    def stage_reads_disk(self, batch: list[Positioned]) -> bool:
        return any(s.stage_reads_disk(batch) for s in self.sinks)

    def stage(self, batch: list[Positioned], upto: int) -> None:
        for s in self.sinks:
            s.stage(batch, upto)

    def commit(self) -> int:
        self.checkpoint = min(s.commit() for s in self.sinks)
        return self.checkpoint

    def mark(self, seq: int, mark: str) -> None:
        for s in self.sinks:
            if (own := getattr(s, "mark", None)) is not None:
                own(seq, mark)

    def positions(self) -> list[tuple[str, int, str | None]]:
        return [p for s in self.sinks for p in positions_of(s, type(s).__name__)]

    def dead_letter(self, letter: DeadLetter) -> None:
        for s in self.sinks:
            if (record := getattr(s, "dead_letter", None)) is not None:
                record(letter)

    def take_refused(self) -> list[tuple[Positioned, str]]:
        refused: dict[int, tuple[Positioned, str]] = {}  # (two sinks refusing one message: one dead letter)
        for s in self.sinks:
            if (take := getattr(s, "take_refused", None)) is not None:
                for p, why in take():
                    refused.setdefault(p.seq, (p, why))
        return [refused[k] for k in sorted(refused)]

    def remove(self, sink: Sink) -> None:
        """Stop feeding `sink` (a projection swapped out); the others go on. Takes effect at the next stage."""
        self.sinks = tuple(s for s in self.sinks if s is not sink)


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
