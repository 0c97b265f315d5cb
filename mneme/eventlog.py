"""The write side of the log: append an event with idempotency and optimistic concurrency.

`Nats-Msg-Id` makes a retried append one event (invariant 6); the expected last
subject sequence serializes changes to one aggregate, or to a whole store when a
path is claimed (invariant 4). nats-server checks the expected sequence BEFORE the
duplicate window, so a retry whose first attempt landed comes back as a conflict:
`landed` tells the two apart by looking for our own message id on the subject.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import StorageType, StreamConfig
from nats.js.errors import APIError, NoStreamResponseError, NotFoundError, ServiceUnavailableError

from mneme.errors import ConcurrencyConflict, Unavailable
from schemas import subjects as S

_LAST_SEQ = re.compile(r"wrong last sequence: (\d+)")


@dataclass(frozen=True, slots=True)
class Stored:
    """A message read back from the log: its stream sequence (always set, unlike nats-py's optional one)."""

    seq: int
    headers: dict[str, str] | None
    data: bytes | None


class WrongLastSequence(ConcurrencyConflict):
    def __init__(self, last_seq: int):
        super().__init__(f"the aggregate moved on (last sequence {last_seq})", details={"last_seq": last_seq})
        self.last_seq = last_seq


async def ensure_streams(js: JetStreamContext, *, replicas: int = 1) -> None:
    config = StreamConfig(
        name=S.EVENTS_STREAM,
        subjects=[S.EVENTS_SUBJECTS],
        storage=StorageType.FILE,
        num_replicas=replicas,
        allow_direct=True,
        duplicate_window=120.0,
        description="mneme: the event log, system of record (no expiry)",
    )
    access = StreamConfig(
        name=S.ACCESS_STREAM,
        subjects=[S.ACCESS_SUBJECTS],
        storage=StorageType.FILE,
        num_replicas=replicas,
        duplicate_window=120.0,
        description="mneme: read and denied-access records (audit trail, access statistics)",
    )
    dead = StreamConfig(
        name=S.DEAD_LETTER_STREAM,
        subjects=[S.DEAD_LETTER_SUBJECTS],
        storage=StorageType.FILE,
        num_replicas=replicas,
        duplicate_window=120.0,
        max_msgs=100_000,  # the newest are kept; the log still holds every message they point at
        description="mneme: messages a consumer could not fold (schemas/dead_letter.py), with the reason",
    )
    from mneme.heartbeat import ensure_bucket

    await ensure_bucket(js, replicas=replicas)
    for cfg in (config, access, dead):
        assert cfg.name is not None
        try:  # (looked up first: a service's NATS user may read streams but not create them)
            await js.stream_info(cfg.name)
            continue
        except NotFoundError:
            pass
        try:
            await js.add_stream(cfg)
        except APIError as exc:
            if exc.err_code != 10058:  # stream name already in use: keep the existing stream
                raise


async def dead_letter_count(js: JetStreamContext) -> int:
    """How many dead letters the MNEME_DLQ stream holds (0 when it does not exist yet)."""
    try:
        return int((await js.stream_info(S.DEAD_LETTER_STREAM)).state.messages)
    except NotFoundError:
        return 0


def _unconfirmed(failure: Exception) -> Unavailable:
    """A write sent at least once and never confirmed: it may have landed (a retry with the same id is safe)."""
    return Unavailable(
        f"the event log (NATS JetStream) did not confirm the write ({type(failure).__name__}); it may or may not "
        "have been applied: retry with the same request_id (details.request_id) to apply it once"
    )


class EventLogInterface(Protocol):
    """What the write side uses of the log: `EventLog` here, and `InMemoryEventLog` (mneme/memory_log.py) for
    application tests, both are one (mypy checks it there; tests/test_event_log_contract.py runs one contract)."""

    async def append(
        self,
        subject: str,
        data: bytes,
        *,
        msg_id: str,
        expected_seq: int | None,
        expected_subject: str | None = None,
        digest: str | None = None,
    ) -> tuple[int, bool]: ...

    def after(self, subject_filter: str, after_seq: int, limit: int = 64) -> AsyncIterator[Stored]: ...

    async def landed(self, subject_filter: str, after_seq: int, msg_id: str) -> Stored | None: ...

    async def header(self, seq: int, name: str) -> str | None: ...

    async def last_on(self, subject: str) -> Stored | None: ...

    async def last_record_time(self) -> datetime | None: ...

    async def last_seq(self) -> int: ...


class EventLog:
    def __init__(self, js: JetStreamContext, *, timeout: float = 3.0, connected: Callable[[], bool] | None = None):
        self.js = js
        self.timeout = timeout
        self.connected = connected or (lambda: True)

    async def append(
        self,
        subject: str,
        data: bytes,
        *,
        msg_id: str,
        expected_seq: int | None,
        expected_subject: str | None = None,
        digest: str | None = None,
    ) -> tuple[int, bool]:
        """Publish one event. Returns (stream sequence, duplicate). `digest` names the request's arguments;
        `expected_seq` None: no concurrency check (an append-only record, such as a code-index run's)."""
        if not self.connected():  # fail fast instead of queueing a write behind a reconnect
            raise Unavailable("NATS is unreachable: the write was not sent; retry with the same request_id")
        headers = {S.HDR_MSG_ID: msg_id}
        if expected_seq is not None:
            headers[S.HDR_EXPECTED_LAST_SUBJECT_SEQ] = str(expected_seq)
        if digest:
            headers[S.HDR_REQUEST_DIGEST] = digest
        if expected_subject:
            headers[S.HDR_EXPECTED_LAST_SUBJECT_SEQ_SUBJECT] = expected_subject
        # A stream without a leader (an election in a cluster: a few seconds) answers no one, or 503: the same
        # message, with the same Nats-Msg-Id, is published again until the timeout, so it lands at most once.
        deadline = time.monotonic() + self.timeout
        pause = 0.05
        failure: Exception | None = None  # the last attempt's, once one was sent
        while True:
            left = deadline - time.monotonic()
            if not self.connected():  # reconnecting to another node of the cluster: wait for it, not past the timeout
                if left > pause:
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 0.5)
                    continue
                if failure is None:
                    raise Unavailable("NATS is unreachable: the write was not sent; retry with the same request_id")
                raise _unconfirmed(failure)
            try:
                ack = await self.js.publish(subject, data, timeout=max(left, 0.05), headers=headers)
                return ack.seq, bool(ack.duplicate)
            except ServiceUnavailableError as exc:
                failure = exc
            except APIError as exc:
                if exc.err_code == S.ERR_WRONG_LAST_SEQUENCE:
                    m = _LAST_SEQ.search(exc.description or "")
                    raise WrongLastSequence(int(m.group(1)) if m else 0) from None
                raise Unavailable(f"the event log refused the write: {exc.description}") from None
            except (
                TimeoutError,
                nats.errors.TimeoutError,
                nats.errors.NoRespondersError,
                NoStreamResponseError,
                nats.errors.ConnectionClosedError,
                nats.errors.OutboundBufferLimitError,
            ) as exc:
                failure = exc
            if deadline - time.monotonic() <= pause:
                raise _unconfirmed(failure)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)

    async def after(self, subject_filter: str, after_seq: int, limit: int = 64) -> AsyncIterator[Stored]:
        """The messages on `subject_filter` after `after_seq`, oldest first, at most `limit` (direct gets)."""
        seq = after_seq
        for _ in range(limit):
            try:
                msg = await self.js.get_msg(
                    S.EVENTS_STREAM, seq=seq + 1, subject=subject_filter, next=True, direct=True
                )
            except NotFoundError:
                return
            except (TimeoutError, nats.errors.TimeoutError, nats.errors.NoRespondersError):
                raise Unavailable("the event log (NATS JetStream) did not answer") from None
            assert msg.seq is not None  # a message read from a stream has its sequence
            yield Stored(msg.seq, msg.headers, msg.data)
            seq = msg.seq

    async def landed(self, subject_filter: str, after_seq: int, msg_id: str) -> Stored | None:
        """Our own message on `subject_filter` after `after_seq`, if it is there (its sequence and headers)."""
        async for msg in self.after(subject_filter, after_seq):  # bounded: conflicts are a handful of messages
            if (msg.headers or {}).get(S.HDR_MSG_ID) == msg_id:
                return msg
        return None

    async def header(self, seq: int, name: str) -> str | None:
        """One header of the message at `seq` (None when it has none, or the message is gone)."""
        try:
            msg = await self.js.get_msg(S.EVENTS_STREAM, seq=seq, direct=True)
        except NotFoundError:
            return None
        except (TimeoutError, nats.errors.TimeoutError, nats.errors.NoRespondersError):
            raise Unavailable("the event log (NATS JetStream) did not answer") from None
        return (msg.headers or {}).get(name)

    async def last_on(self, subject: str) -> Stored | None:
        """The newest message on one subject (an aggregate's last event), or None if it has none."""
        try:
            msg = await self.js.get_last_msg(S.EVENTS_STREAM, subject, direct=True)
        except NotFoundError:
            return None
        except (TimeoutError, nats.errors.TimeoutError, nats.errors.NoRespondersError):
            raise Unavailable("the event log (NATS JetStream) did not answer") from None
        assert msg.seq is not None
        return Stored(msg.seq, msg.headers, msg.data)

    async def last_record_time(self) -> datetime | None:
        """When the stream recorded its newest event, by the NATS server's clock (None: an empty log)."""
        head = await self.last_seq()
        if head == 0:
            return None
        try:
            msg = await self.js.get_msg(S.EVENTS_STREAM, seq=head, direct=True)
        except Exception:  # noqa: BLE001 - purged meanwhile, or NATS away: no time to compare with
            return None
        return msg.time

    async def last_seq(self) -> int:
        try:
            info = await self.js.stream_info(S.EVENTS_STREAM)
        except (TimeoutError, nats.errors.TimeoutError, nats.errors.NoRespondersError):
            raise Unavailable("the event log (NATS JetStream) did not answer") from None
        except ServiceUnavailableError:  # 503: the stream has no leader yet (an election in a cluster)
            raise Unavailable("the event log (NATS JetStream) is electing a leader; retry shortly") from None
        return info.state.last_seq
