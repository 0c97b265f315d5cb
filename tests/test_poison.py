"""Poison messages: arbitrary bytes and malformed envelopes on the event and access streams.

Each one is skipped by every consumer that meets it, dead-lettered on `mneme.dlq.<consumer>` with the
reason, counted in the status, recorded in the audit trail (which still verifies); the consumers go on,
and writes after the poison are read back at once. Real nats-server, projector, auditor, gateway.
"""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import pytest

from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from mneme.eventlog import dead_letter_count
from schemas import subjects as S
from schemas.dead_letter import decode_dead_letter
from tests.harness import Stack, start_stack

pytestmark = pytest.mark.anyio


def poison_events(rng: random.Random) -> list[bytes]:
    envelope_like = {
        "event_id": str(uuid.uuid4()),
        "namespace": "default",
        "aggregate_id": str(uuid.uuid4()),
        "event": {"type": "memory_exploded", "v": 1},
    }
    fixed = [
        b"",
        b"\x00\x01\x02\xff\xfe",
        b"{not json",
        b"[]",
        b"null",
        json.dumps({"event_id": 1}).encode(),
        json.dumps(envelope_like).encode(),
        b'{"a":' * 1000 + b"1" + b"}" * 1000,
        "\ud800".encode("utf-8", "surrogatepass"),
    ]
    return fixed + [rng.randbytes(rng.randint(1, 300)) for _ in range(11)]


async def test_poison_is_dead_lettered_counted_audited_and_skipped(stack: Stack) -> None:
    js = stack.nc.jetstream()
    before = await stack.call("memory_add", content="before the poison", store="s", path="p/before")
    rng = random.Random(14)
    events = poison_events(rng)
    for data in events:
        await js.publish(S.memory_subject("default", None, str(uuid.uuid4())), data, stream=S.EVENTS_STREAM)
    access = [b"\xff", b"{}", b'{"kind": "read"}'] + [rng.randbytes(50) for _ in range(4)]
    for data in access:
        await js.publish(S.access_subject("read", "default"), data, stream=S.ACCESS_STREAM)

    # writes after the poison are folded and read back at once: nothing stalled
    after = await stack.call("memory_add", content="after the poison", store="s", path="p/after")
    got = await stack.call("memory_get", id=after["id"])
    assert got["content"] == "after the poison"
    assert (await stack.call("memory_get", id=before["id"]))["content"] == "before the poison"

    await stack.settle()
    n_events, n_access = len(events), len(access)
    assert stack.projector.follower.dead_letters == n_events
    assert sum(f.dead_letters for f in stack.auditor.followers) == n_events + n_access

    # the audit trail says it happened, in log order, and still verifies
    rows = stack.trail.con.execute(
        "SELECT source, source_seq, code FROM audit_trail WHERE action = 'dead_letter' ORDER BY trail_seq"
    ).fetchall()
    assert [r[0] for r in rows].count("events") == n_events
    assert [r[0] for r in rows].count("access") == n_access
    assert all(r[2] and r[2].startswith("undecodable") for r in rows)
    seqs = [r[1] for r in rows if r[0] == "events"]
    assert seqs == sorted(seqs)
    checked, broken = stack.trail.verify()
    assert broken is None and checked > n_events + n_access

    # each consumer published one dead letter per message it skipped, with the reason and where it is
    for f in (*stack.auditor.followers, stack.projector.follower):
        await f.stop()  # (waits for the dead letters on their way out)
    info = await js.stream_info(S.DEAD_LETTER_STREAM, subjects_filter=S.DEAD_LETTER_SUBJECTS)
    by_subject = info.state.subjects or {}
    assert by_subject[S.dead_letter_subject("auditor-events")] == n_events
    assert by_subject[S.dead_letter_subject("auditor-access")] == n_access
    assert by_subject[S.dead_letter_subject("projector-rows")] == n_events
    assert await dead_letter_count(js) == sum(by_subject.values())
    first = await js.get_msg(S.DEAD_LETTER_STREAM, seq=1)
    letter = decode_dead_letter(first.data or b"")
    assert letter.stream in (S.EVENTS_STREAM, S.ACCESS_STREAM) and letter.reason.startswith("undecodable")
    original = await js.get_msg(letter.stream, seq=letter.seq)
    assert letter.size == len(original.data or b"")


async def test_status_counts_dead_letters(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    stack = await start_stack(tmp_path / "data", nats_server, GatewaySettings(tools=["core", "system"]))
    try:
        await _status_counts(stack)
    finally:
        await stack.close()


async def _status_counts(stack: Stack) -> None:
    js = stack.nc.jetstream()
    for data in (b"\x00", b"{}", b"[1,2]"):
        await js.publish(S.memory_subject("default", None, str(uuid.uuid4())), data, stream=S.EVENTS_STREAM)
    await stack.call("memory_add", content="x", store="s", path="p/x")
    assert await stack.projector.follower.wait_for(await stack.last_seq(), 10)
    status = await stack.call("memory_status")
    assert status["dead_letters"] >= 3
    assert stack.projector.follower.last_dead_letter is not None
