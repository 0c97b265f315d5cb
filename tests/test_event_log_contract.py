"""One contract, both event logs: `EventLog` over a real nats-server (JetStream) and `InMemoryEventLog`
(mneme/memory_log.py), for application tests without a server.

What the write side depends on: sequences from 1; the expected last sequence per subject (or per subject
filter: a whole store) and its conflict, checked before the duplicate window; a repeated message id answered
with the first append's sequence and stored once; `after` (order, limit, filter, read lazily), `landed` (the
first 64 only), `header`, `last_on`, `last_seq`, `last_record_time`; the headers written and read back; the
errors (WrongLastSequence with the actual last sequence, Unavailable).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import nats
import pytest
from nats.js.errors import APIError

from mneme.embedded_nats import EmbeddedNats
from mneme.errors import Unavailable
from mneme.eventlog import EventLog, Stored, WrongLastSequence, ensure_streams
from mneme.memory_log import EventLogInterface, InMemoryEventLog, subject_matches
from schemas import subjects as S

pytestmark = pytest.mark.anyio

NS = "ns"
A = S.memory_subject(NS, "notes", "a")
B = S.memory_subject(NS, "notes", "b")
C = S.memory_subject(NS, "other", "c")
NOTES = S.store_filter(NS, "notes")  # mneme.evt.ns.mem.notes.*
ALL = S.EVENTS_SUBJECTS  # mneme.evt.>
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z")


class Log:
    """One of the two logs, and what its `connected` answers."""

    def __init__(self) -> None:
        self.up = True
        self.log: EventLogInterface


@pytest.fixture(params=["nats", "memory"])
def server(request: pytest.FixtureRequest) -> EmbeddedNats | None:
    """A fresh nats-server (tests/conftest.py `nats_server`) for the real log; none for the in-memory one."""
    return request.getfixturevalue("nats_server") if request.param == "nats" else None


@pytest.fixture
async def h(server: EmbeddedNats | None) -> AsyncIterator[Log]:
    it = Log()
    if server is None:
        it.log = InMemoryEventLog(connected=lambda: it.up)
        yield it
        return
    nc = await nats.connect(server.url or "")
    try:
        await ensure_streams(nc.jetstream())
        it.log = EventLog(nc.jetstream(), timeout=1.0, connected=lambda: it.up and nc.is_connected)
        yield it
    finally:
        await nc.close()


def parse_stamp(stamp: str) -> datetime:
    """`Nats-Time-Stamp` (RFC 3339, to the nanosecond) to the microsecond, as nats-py reads a record time."""
    whole, _, frac = stamp.removesuffix("Z").partition(".")
    return datetime.fromisoformat(f"{whole}.{frac[:6].ljust(6, '0')}+00:00")


async def put(
    log: EventLogInterface,
    subject: str,
    msg_id: str,
    data: bytes = b"e",
    *,
    expected_seq: int | None = None,
    expected_subject: str | None = None,
    digest: str | None = None,
) -> int:
    """Append what must land as a new event; its sequence."""
    seq, dup = await log.append(
        subject, data, msg_id=msg_id, expected_seq=expected_seq, expected_subject=expected_subject, digest=digest
    )
    assert not dup
    return seq


async def seqs(log: EventLogInterface, subject_filter: str, after_seq: int, limit: int = 64) -> list[int]:
    return [m.seq async for m in log.after(subject_filter, after_seq, limit)]


async def conflict(
    log: EventLogInterface, subject: str, msg_id: str, *, expected_seq: int, expected_subject: str | None = None
) -> WrongLastSequence:
    """Append what must lose to another writer; the conflict."""
    with pytest.raises(WrongLastSequence) as caught:
        await log.append(subject, b"x", msg_id=msg_id, expected_seq=expected_seq, expected_subject=expected_subject)
    assert type(caught.value) is WrongLastSequence
    return caught.value


# -- append -----------------------------------------------------------------------------------------------------
async def test_an_empty_log_then_sequences_from_one(h: Log) -> None:
    assert await h.log.last_seq() == 0
    assert await h.log.last_record_time() is None
    assert await h.log.last_on(A) is None
    assert await seqs(h.log, ALL, 0) == []
    got = [await h.log.append(s, b"e", msg_id=f"m{i}", expected_seq=None) for i, s in enumerate([A, B, A, C])]
    assert got == [(1, False), (2, False), (3, False), (4, False)]
    assert await h.log.last_seq() == 4


async def test_expected_last_sequence_per_subject(h: Log) -> None:
    assert await put(h.log, A, "a1", expected_seq=0) == 1  # 0: no message on the subject yet
    lost = await conflict(h.log, A, "a2", expected_seq=0)
    assert (lost.last_seq, lost.details, lost.code, lost.retryable) == (1, {"last_seq": 1}, "CONFLICT", True)
    assert str(lost) == "the aggregate moved on (last sequence 1)"
    assert await put(h.log, B, "b1", expected_seq=0) == 2  # another subject's events do not count
    assert await put(h.log, A, "a2", expected_seq=1) == 3  # the id of a refused append is free
    assert (await conflict(h.log, A, "a3", expected_seq=2)).last_seq == 3  # behind: B's 2 is not A's
    assert (await conflict(h.log, A, "a3", expected_seq=7)).last_seq == 3  # ahead of the log
    assert (await conflict(h.log, A, "a3", expected_seq=-1)).last_seq == 3
    assert (await conflict(h.log, C, "c1", expected_seq=2)).details == {"last_seq": 0}  # none on C: 0
    assert await h.log.last_seq() == 3  # nothing a conflict refused was stored
    assert await put(h.log, A, "a3", expected_seq=None) == 4  # None: no check at all


async def test_expected_last_sequence_on_a_subject_filter(h: Log) -> None:
    """A path claim: the expectation is on the whole store (`mneme.evt.ns.mem.notes.*`), not the subject."""
    assert await put(h.log, A, "a1", expected_seq=0, expected_subject=NOTES) == 1
    lost = await conflict(h.log, B, "b1", expected_seq=0, expected_subject=NOTES)  # B has none, the store has 1
    assert lost.details == {"last_seq": 1}
    assert await put(h.log, C, "c1", expected_seq=0, expected_subject=S.store_filter(NS, "other")) == 2
    assert await put(h.log, B, "b1", expected_seq=1, expected_subject=NOTES) == 3  # C's 2 is another store's
    assert (await conflict(h.log, A, "a2", expected_seq=1, expected_subject=NOTES)).last_seq == 3
    namespace = f"{S.EVENTS_PREFIX}.{NS}.>"
    assert (await conflict(h.log, A, "a2", expected_seq=1, expected_subject=namespace)).last_seq == 3
    assert (await conflict(h.log, A, "a2", expected_seq=2, expected_subject=">")).last_seq == 3
    # the filter replaces the subject: an empty one passes at 0 though A has events
    assert await put(h.log, A, "a2", expected_seq=0, expected_subject=S.store_filter(NS, "empty")) == 4
    got = [m.headers async for m in h.log.after(A, 3)]
    assert got[0] is not None and got[0][S.HDR_EXPECTED_LAST_SUBJECT_SEQ_SUBJECT] == S.store_filter(NS, "empty")
    with pytest.raises(Unavailable, match="missing sequence for expected last sequence per subject"):
        await h.log.append(A, b"x", msg_id="a3", expected_seq=None, expected_subject=NOTES)
    assert await h.log.last_seq() == 4


async def test_concurrent_appends_at_one_expectation_land_once(h: Log) -> None:
    results = await asyncio.gather(
        *(h.log.append(A, b"x", msg_id=f"w{i}", expected_seq=0) for i in range(6)), return_exceptions=True
    )
    landed = [r for r in results if isinstance(r, tuple)]
    lost = [r for r in results if isinstance(r, WrongLastSequence)]
    assert landed == [(1, False)] and len(lost) == 5
    assert {e.last_seq for e in lost} == {1}
    assert await h.log.last_seq() == 1


# -- idempotency ------------------------------------------------------------------------------------------------
async def test_a_repeated_message_id_is_one_event(h: Log) -> None:
    assert await h.log.append(A, b"first", msg_id="k", expected_seq=0, digest="d1") == (1, False)
    await put(h.log, B, "other")
    # the same id again (the check passing): the first append's sequence, flagged, and nothing new
    assert await h.log.append(A, b"first", msg_id="k", expected_seq=1, digest="d1") == (1, True)
    assert await h.log.append(A, b"first", msg_id="k", expected_seq=None) == (1, True)
    assert await h.log.append(C, b"else", msg_id="k", expected_seq=None, digest="d2") == (1, True)  # any subject/data
    assert await h.log.last_seq() == 2
    stored = await h.log.last_on(A)
    assert stored is not None and (stored.seq, stored.data) == (1, b"first")
    assert await h.log.header(1, S.HDR_REQUEST_DIGEST) == "d1"  # the first's digest: the retry's is not kept
    assert await h.log.last_on(C) is None


async def test_the_expectation_is_checked_before_the_duplicate_window(h: Log) -> None:
    """A retry whose first attempt landed, sent with the expectation of then, is a conflict: `landed` tells."""
    assert await put(h.log, A, "k", expected_seq=0) == 1
    assert (await conflict(h.log, A, "k", expected_seq=0)).last_seq == 1
    with pytest.raises(Unavailable, match="missing sequence"):  # a malformed expectation: refused, not deduplicated
        await h.log.append(A, b"x", msg_id="k", expected_seq=None, expected_subject=NOTES)
    mine = await h.log.landed(A, 0, "k")
    assert mine is not None and mine.seq == 1
    assert await h.log.last_seq() == 1


async def test_an_empty_message_id_is_no_id(h: Log) -> None:
    assert await h.log.append(A, b"x", msg_id="", expected_seq=None) == (1, False)
    assert await h.log.append(A, b"x", msg_id="", expected_seq=None) == (2, False)
    assert await h.log.header(2, S.HDR_MSG_ID) == ""


# -- reads ------------------------------------------------------------------------------------------------------
async def test_after_order_limit_and_filter(h: Log) -> None:
    subjects = [A, B, C, A, "mneme.evt.x", B, "mneme.evt.x.y", A]
    for i, s in enumerate(subjects):
        await put(h.log, s, f"m{i}", data=f"d{i}".encode())
    assert await seqs(h.log, ALL, 0) == list(range(1, 9))
    assert [m.data async for m in h.log.after(ALL, 0)] == [f"d{i}".encode() for i in range(8)]
    assert await seqs(h.log, ALL, 3, limit=2) == [4, 5]
    assert await seqs(h.log, ALL, 0, limit=0) == []
    assert await seqs(h.log, ALL, 8) == [] and await seqs(h.log, ALL, 100) == []
    assert await seqs(h.log, ALL, -1, limit=1) == [1]
    with pytest.raises(APIError):  # (no sequence before that can be asked for)
        await seqs(h.log, ALL, -5)
    assert await seqs(h.log, A, 0) == [1, 4, 8]
    assert await seqs(h.log, A, 1) == [4, 8]
    assert await seqs(h.log, NOTES, 0) == [1, 2, 4, 6, 8]  # `*`: one token
    assert await seqs(h.log, NOTES, 2, limit=2) == [4, 6]
    assert await seqs(h.log, "mneme.evt.*", 0) == [5]  # not mneme.evt.x.y, nor the deeper memory subjects
    assert await seqs(h.log, "mneme.evt.x.>", 0) == [7]  # `>`: one token or more, never none
    assert await seqs(h.log, "mneme.evt.*.mem.*.*", 0) == [1, 2, 3, 4, 6, 8]
    assert await seqs(h.log, "mneme.>", 0) == list(range(1, 9))  # a filter wider than the stream
    assert await seqs(h.log, ">", 6) == [7, 8]
    assert await seqs(h.log, "", 6) == [7, 8]  # no filter: every subject
    assert await seqs(h.log, "mneme.evt.nothing.>", 0) == []
    assert await seqs(h.log, "elsewhere.>", 0) == []


async def test_after_reads_on_as_it_goes(h: Log) -> None:
    """Each message is read when asked for: one appended meanwhile is seen (callers read a window this way)."""
    await put(h.log, A, "m1")
    got = []
    async for m in h.log.after(A, 0, limit=3):
        got.append(m.seq)
        if m.seq == 1:
            await put(h.log, B, "m2")
            await put(h.log, A, "m3")
    assert got == [1, 3]


async def test_stored_values_and_headers(h: Log) -> None:
    before = datetime.now(UTC) - timedelta(seconds=2)
    await h.log.append(A, b'{"v":1}', msg_id="k1", expected_seq=0, expected_subject=NOTES, digest="dg")
    await h.log.append(B, b"", msg_id="k2", expected_seq=None, digest="")
    after = datetime.now(UTC) + timedelta(seconds=2)
    first, second = [m async for m in h.log.after(ALL, 0)]
    assert isinstance(first, Stored) and first.seq == 1 and first.data == b'{"v":1}'
    assert first.headers is not None
    stamp = first.headers.pop("Nats-Time-Stamp")
    assert first.headers == {
        S.HDR_MSG_ID: "k1",
        S.HDR_EXPECTED_LAST_SUBJECT_SEQ: "0",
        S.HDR_REQUEST_DIGEST: "dg",
        S.HDR_EXPECTED_LAST_SUBJECT_SEQ_SUBJECT: NOTES,
        "Nats-Stream": S.EVENTS_STREAM,
        "Nats-Subject": A,
        "Nats-Sequence": "1",
    }
    assert STAMP.fullmatch(stamp) and before < parse_stamp(stamp) < after
    assert second.data is None  # an empty payload reads back as None (nats-py's)
    assert second.headers is not None and S.HDR_REQUEST_DIGEST not in second.headers  # an empty digest: no header
    assert S.HDR_EXPECTED_LAST_SUBJECT_SEQ not in second.headers
    assert {k: second.headers[k] for k in (S.HDR_MSG_ID, "Nats-Subject", "Nats-Sequence")} == {
        S.HDR_MSG_ID: "k2",
        "Nats-Subject": B,
        "Nats-Sequence": "2",
    }
    last = await h.log.last_on(B)
    assert last is not None and (last.seq, last.data, last.headers) == (2, None, second.headers)


async def test_landed_finds_our_message_within_64(h: Log) -> None:
    await put(h.log, A, "mine", expected_seq=0)
    await put(h.log, B, "theirs")
    got = await h.log.landed(A, 0, "mine")
    assert got is not None and got.seq == 1 and got.data == b"e"
    assert got.headers is not None and got.headers[S.HDR_MSG_ID] == "mine"
    assert await h.log.landed(NOTES, 0, "theirs") is not None  # on a filter
    assert await h.log.landed(A, 1, "mine") is None  # only after `after_seq`
    assert await h.log.landed(A, 0, "theirs") is None  # on another subject
    assert await h.log.landed(A, 0, "nobody") is None
    for i in range(64):  # 64 more on A, then ours: the 65th after `after_seq` is not looked at
        await put(h.log, A, f"n{i}")
    await put(h.log, A, "late")
    assert await h.log.landed(A, 2, "n63") is not None
    assert await h.log.landed(A, 2, "late") is None
    got = await h.log.landed(A, 3, "late")
    assert got is not None and got.seq == 67


async def test_header(h: Log) -> None:
    await put(h.log, A, "k1", digest="dg1")
    await put(h.log, B, "k2")
    assert await h.log.header(1, S.HDR_REQUEST_DIGEST) == "dg1"
    assert await h.log.header(1, S.HDR_MSG_ID) == "k1"
    assert await h.log.header(2, S.HDR_REQUEST_DIGEST) is None  # it has none
    assert await h.log.header(2, "Nats-Subject") == B
    assert await h.log.header(3, S.HDR_MSG_ID) is None  # no such message
    with pytest.raises(APIError):
        await h.log.header(0, S.HDR_MSG_ID)  # (no sequence at all: the request is refused)


async def test_last_on(h: Log) -> None:
    await put(h.log, A, "a1", data=b"1")
    await put(h.log, B, "b1", data=b"2")
    await put(h.log, A, "a2", data=b"3")
    await put(h.log, C, "c1", data=b"4")
    a = await h.log.last_on(A)
    assert a is not None and (a.seq, a.data) == (3, b"3")
    assert a.headers is not None and a.headers[S.HDR_MSG_ID] == "a2"
    b = await h.log.last_on(B)
    assert b is not None and b.seq == 2
    store = await h.log.last_on(NOTES)  # a filter: the newest of the store
    assert store is not None and store.seq == 3
    everything = await h.log.last_on(ALL)
    assert everything is not None and everything.seq == 4
    assert await h.log.last_on(S.memory_subject(NS, "notes", "zz")) is None
    assert await h.log.last_on("elsewhere.x") is None


async def test_last_seq_and_last_record_time(h: Log) -> None:
    assert (await h.log.last_seq(), await h.log.last_record_time()) == (0, None)
    before = datetime.now(UTC) - timedelta(seconds=2)
    await put(h.log, A, "k1")
    first = await h.log.last_record_time()
    await put(h.log, B, "k2")
    second = await h.log.last_record_time()
    assert await h.log.last_seq() == 2
    assert first is not None and second is not None
    assert first.tzinfo is not None and first.utcoffset() == timedelta(0)
    assert before < first <= second < datetime.now(UTC) + timedelta(seconds=2)
    stamp = await h.log.header(2, "Nats-Time-Stamp")
    assert stamp is not None and parse_stamp(stamp) == second  # the head's record time, to the µs
    await put(h.log, C, "k3")
    third = await h.log.last_record_time()
    assert third is not None and third >= second
    assert third == parse_stamp(await h.log.header(3, "Nats-Time-Stamp") or "")


# -- failures ---------------------------------------------------------------------------------------------------
async def test_unreachable_fails_fast_and_sends_nothing(h: Log) -> None:
    await put(h.log, A, "k1")
    h.up = False
    with pytest.raises(Unavailable, match="was not sent") as caught:
        await h.log.append(A, b"x", msg_id="k2", expected_seq=1)
    assert caught.value.retryable
    h.up = True
    assert await h.log.last_seq() == 1
    assert await h.log.append(A, b"x", msg_id="k2", expected_seq=1) == (2, False)  # the retry lands once


async def test_a_subject_no_stream_captures_is_unavailable(h: Log) -> None:
    for subject in ("elsewhere.x", S.EVENTS_PREFIX, "mneme.evt..x"):
        with pytest.raises(Unavailable, match="may or may not have been applied"):
            await h.log.append(subject, b"x", msg_id=f"k-{subject}", expected_seq=None)
    assert await h.log.last_seq() == 0


# -- the in-memory log's own -------------------------------------------------------------------------------------
async def test_in_memory_record_times_follow_its_clock() -> None:
    t = datetime(2026, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)
    log = InMemoryEventLog(clock=lambda: t)
    await log.append(A, b"x", msg_id="k", expected_seq=None)
    assert await log.last_record_time() == t
    assert await log.header(1, "Nats-Time-Stamp") == "2026-03-01T12:00:00.25Z"  # as Go writes RFC 3339 (nano)


async def test_in_memory_refuses_what_it_does_not_model() -> None:
    log = InMemoryEventLog()
    for subject in (S.access_subject("read", NS), S.dead_letter_subject("projector-rows"), "mneme.evt.ns.*"):
        with pytest.raises(ValueError):
            await log.append(subject, b"x", msg_id="k", expected_seq=None)
    assert await log.last_seq() == 0


def test_subject_matching_as_nats_does() -> None:
    cases = [
        ("a.b.c", "a.b.c", True),
        ("a.b", "a.b.c", False),
        ("a.b.c.d", "a.b.c", False),
        ("a.*.c", "a.b.c", True),
        ("a.*", "a.b.c", False),
        ("a.>", "a.b.c", True),
        ("a.>", "a", False),
        ("a.b.c.>", "a.b.c", False),
        (">", "a", True),
        ("*.*.*", "a.b.c", True),
        ("a.*.>", "a.b", False),
        ("", "a.b", True),
    ]
    assert [subject_matches(f, s) for f, s, _ in cases] == [want for _, _, want in cases]
