"""The event log kept in process memory: `InMemoryEventLog`, for application tests that run without a nats-server.

Like the plain-Python-object recorders of the `eventsourcing` library, it stands in for the real log
(mneme/eventlog.py `EventLog`, over NATS JetStream) with the same methods, signatures, return values and
errors, and it is honest about what callers depend on (tests/test_event_log_contract.py runs one contract
against both):

- one stream (MNEME_EVENTS, `mneme.evt.>`), sequences from 1, no gaps;
- optimistic concurrency: `expected_seq` is the last sequence on the subject appended to, or on
  `expected_subject` (a filter: `*` one token, `>` the rest), 0 when there is none; a mismatch raises
  `WrongLastSequence` with the actual last sequence. It is checked BEFORE the duplicate window, as nats-server
  does: a retry whose first attempt landed, sent with the expectation of then, is a conflict (`landed` finds it);
- idempotency: a message id already in the log makes the append return the first append's sequence and
  `duplicate` True, and nothing is stored (whatever the subject or data); an empty id is no id;
- the headers the log writes, and the ones nats-server adds (`Nats-Stream`, `Nats-Subject`, `Nats-Sequence`,
  `Nats-Time-Stamp`), read back in `Stored.headers`; an empty payload reads back as `data` None, as nats-py does;
- `after` oldest first, at most `limit`, read lazily (an append made meanwhile is seen); `landed` looks at the
  first 64 messages after `after_seq` only, as EventLog's does;
- the record time (by `clock`, standing for the server's) to the microsecond, as nats-py parses it;
- `connected`: False makes `append` fail fast with Unavailable ("not sent"), as EventLog's does (reads do not
  look at it, as EventLog's do not).

Not modeled: durability (nothing outlives the object) and purges or deleted messages; the duplicate window's
expiry (an id is remembered for ever, not 120 s); a cluster (leader elections, 503s, replicas, the publish
timeout and its retries); the other streams (MNEME_ACCESS, MNEME_DLQ: an append there is a ValueError, where
the real log would land it in that stream); publishing on a subject holding wildcards (a ValueError; nats-server
stores it as a literal subject). A subject no stream captures is Unavailable at once (the real log says so
after its timeout).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from nats.js.errors import APIError

from mneme.errors import Unavailable
from mneme.eventlog import EventLog, EventLogInterface, Stored, WrongLastSequence
from schemas import subjects as S

_OTHER_STREAMS = (S.ACCESS_SUBJECTS, S.DEAD_LETTER_SUBJECTS)
_HDR_STREAM, _HDR_SUBJECT, _HDR_SEQ, _HDR_TIME = "Nats-Stream", "Nats-Subject", "Nats-Sequence", "Nats-Time-Stamp"


def subject_matches(subject_filter: str, subject: str) -> bool:
    """NATS subject matching: `*` is one token, `>` (last) one or more; an empty filter is every subject."""
    if not subject_filter:
        return True
    want, have = subject_filter.split("."), subject.split(".")
    for i, tok in enumerate(want):
        if tok == ">":
            return i == len(want) - 1 and len(have) > i
        if i >= len(have) or (tok != "*" and tok != have[i]):
            return False
    return len(want) == len(have)


def _rfc3339_nano(t: datetime) -> str:
    """As Go's time.RFC3339Nano writes it (nats-server's `Nats-Time-Stamp`): no trailing zeros in the fraction."""
    frac = f"{t.microsecond:06d}".rstrip("0")
    return t.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


@dataclass(frozen=True, slots=True)
class _Message:
    subject: str
    headers: dict[str, str]
    data: bytes
    time: datetime

    def stored(self, seq: int) -> Stored:
        return Stored(seq, dict(self.headers), self.data or None)  # (a copy: a reader cannot change the log)


class InMemoryEventLog:
    def __init__(
        self, *, clock: Callable[[], datetime] | None = None, connected: Callable[[], bool] | None = None
    ) -> None:
        """`clock`: the server's clock, for record times (UTC now by default); `connected`: False makes appends
        fail fast, as when NATS is unreachable."""
        self.clock = clock or (lambda: datetime.now(UTC))
        self.connected = connected or (lambda: True)
        self._messages: list[_Message] = []  # the message at sequence n is [n - 1]
        self._last_by_subject: dict[str, int] = {}
        self._ids: dict[str, int] = {}  # message id -> the sequence it landed at

    # -- writes --------------------------------------------------------------------------------
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
        """Publish one event. Returns (stream sequence, duplicate); see EventLog.append."""
        await asyncio.sleep(0)  # (a publish is a round trip: other tasks run meanwhile)
        if not self.connected():
            raise Unavailable("NATS is unreachable: the write was not sent; retry with the same request_id")
        self._check_subject(subject)
        if expected_subject and expected_seq is None:
            raise Unavailable(
                "the event log refused the write: missing sequence for expected last sequence per subject"
            )
        if expected_seq is not None:  # first, as nats-server checks it: before the duplicate window
            last = self._last_matching(expected_subject or subject)
            if last != expected_seq:
                raise WrongLastSequence(last)
        if msg_id and msg_id in self._ids:
            return self._ids[msg_id], True
        headers = {S.HDR_MSG_ID: msg_id}
        if expected_seq is not None:
            headers[S.HDR_EXPECTED_LAST_SUBJECT_SEQ] = str(expected_seq)
        if digest:
            headers[S.HDR_REQUEST_DIGEST] = digest
        if expected_subject:
            headers[S.HDR_EXPECTED_LAST_SUBJECT_SEQ_SUBJECT] = expected_subject
        seq = len(self._messages) + 1
        at = self.clock().astimezone(UTC)
        headers |= {
            _HDR_STREAM: S.EVENTS_STREAM,
            _HDR_SUBJECT: subject,
            _HDR_SEQ: str(seq),
            _HDR_TIME: _rfc3339_nano(at),
        }
        self._messages.append(_Message(subject, headers, bytes(data), at))
        self._last_by_subject[subject] = seq
        if msg_id:
            self._ids[msg_id] = seq
        return seq, False

    @staticmethod
    def _check_subject(subject: str) -> None:
        tokens = subject.split(".")
        if any(t in ("*", ">") for t in tokens):
            raise ValueError(f"InMemoryEventLog: {subject!r} holds a wildcard (publishing on one is not modeled)")
        if any(subject_matches(other, subject) for other in _OTHER_STREAMS):
            raise ValueError(f"InMemoryEventLog holds the event stream only, not {subject!r}'s")
        valid = all(t and not any(c.isspace() for c in t) for t in tokens)
        if not (valid and subject_matches(S.EVENTS_SUBJECTS, subject)):  # no stream captures it: no one answers
            raise Unavailable(
                "the event log (NATS JetStream) did not confirm the write (NoStreamResponseError); it may or may "
                "not have been applied: retry with the same request_id (details.request_id) to apply it once"
            )

    def _last_matching(self, subject_filter: str) -> int:
        if "*" not in subject_filter and ">" not in subject_filter and subject_filter:
            return self._last_by_subject.get(subject_filter, 0)
        return max((s for subj, s in self._last_by_subject.items() if subject_matches(subject_filter, subj)), default=0)

    # -- reads ---------------------------------------------------------------------------------
    async def after(self, subject_filter: str, after_seq: int, limit: int = 64) -> AsyncIterator[Stored]:
        """The messages on `subject_filter` after `after_seq`, oldest first, at most `limit` (read one by one)."""
        seq = after_seq
        for _ in range(limit):
            await asyncio.sleep(0)  # (each is a direct get: appends made meanwhile are seen)
            if not -1 <= seq < 2**64 - 1:  # (the next sequence asked for is no unsigned 64-bit integer)
                raise APIError(code=408, description="Malformed Request")
            found = next(
                (
                    n
                    for n in range(max(seq + 1, 1), len(self._messages) + 1)
                    if subject_matches(subject_filter, self._messages[n - 1].subject)
                ),
                None,
            )
            if found is None:
                return
            yield self._messages[found - 1].stored(found)
            seq = found

    async def landed(self, subject_filter: str, after_seq: int, msg_id: str) -> Stored | None:
        """Our own message on `subject_filter` after `after_seq`, if it is there (within the first 64, as
        EventLog looks)."""
        async for msg in self.after(subject_filter, after_seq):
            if (msg.headers or {}).get(S.HDR_MSG_ID) == msg_id:
                return msg
        return None

    async def header(self, seq: int, name: str) -> str | None:
        """One header of the message at `seq` (None when it has none, or there is no such message)."""
        await asyncio.sleep(0)
        if seq == 0:  # (as nats-py sends it: no sequence at all)
            raise APIError(code=408, description="Empty Request")
        if not 0 < seq < 2**64:
            raise APIError(code=408, description="Malformed Request")
        if seq > len(self._messages):
            return None
        return self._messages[seq - 1].headers.get(name)

    async def last_on(self, subject: str) -> Stored | None:
        """The newest message on `subject` (a filter too), or None if it has none."""
        await asyncio.sleep(0)
        if not subject:
            raise APIError(code=408, description="Empty Request")
        seq = self._last_matching(subject)
        return self._messages[seq - 1].stored(seq) if seq else None

    async def last_record_time(self) -> datetime | None:
        """When the newest event was recorded, by `clock` (None: an empty log)."""
        await asyncio.sleep(0)
        return self._messages[-1].time if self._messages else None

    async def last_seq(self) -> int:
        await asyncio.sleep(0)
        return len(self._messages)


def _both_are_event_logs(real: EventLog, memory: InMemoryEventLog) -> tuple[EventLogInterface, EventLogInterface]:
    """(Never called: mypy checks here that both classes have the interface, signatures included.)"""
    return real, memory
