"""Forged messages that contradict the log's subjects or its history: refused, dead-lettered, never a stall.

A gateway never writes these (a create expects its memory's subject to be empty; a change goes on its
memory's subject as it stands), so only a writer that bypasses it can:
- a second create of an id the log already has: live and committed, deleted, or earlier in the same batch;
- a change to a memory of store `s` published under store `t`'s subject;
- an envelope whose own fields contradict its subject (another namespace, another memory, a create under
  another store): refused while decoding, so the auditor dead-letters it too and the trail says so.
Before, the first two failed the rows' commit on a duplicate key, or made every later path claim in a store
answer CONFLICT after 25 attempts; the projection stalled until someone removed the message by hand.
Each case must leave the projection equal to a fresh rebuild of the log (invariant 1).
Real nats-server, projector, auditor, gateway (tests/harness.py).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from mneme.app.maintenance import rebuild
from mneme.app.settings import CoreSettings, ProjectorSettings
from mneme.embedded_nats import EmbeddedNats
from schemas import subjects as S
from schemas.events import Envelope, MemoryCreated, MemoryDeleted, MemoryUpdated, encode_envelope
from schemas.placement import misplaced
from services.projector.vector_index import point_id
from tests.harness import Stack, forged_envelope, start_stack

pytestmark = pytest.mark.anyio


async def publish(stack: Stack, subject: str, env: Envelope) -> None:
    await stack.nc.jetstream().publish(subject, encode_envelope(env), stream=S.EVENTS_STREAM)


async def committed(stack: Stack) -> None:
    follower = stack.projector.follower
    assert await follower.wait_for(await stack.last_seq(), 20, committed=True), follower.stalled
    assert follower.stalled is None and not follower.fold_failed


async def equals_a_rebuild(stack: Stack, tmp_path: Path) -> None:
    await committed(stack)
    live = stack.view.canonical_digest()
    fresh = await rebuild(CoreSettings(nats_url=stack.url, data_dir=tmp_path / "fresh"), ProjectorSettings())
    assert fresh["events"] == await stack.last_seq()
    assert fresh["digest"] == live


def reasons(stack: Stack) -> str:
    letter = stack.projector.follower.last_dead_letter
    return letter.reason if letter else ""


async def test_a_second_create_of_a_committed_live_id_is_refused(stack: Stack, tmp_path: Path) -> None:
    made = await stack.call("memory_add", content="the original", store="s", path="p/one")
    await committed(stack)  # (committed and out of the overlay: staging cannot see it without DuckDB)
    before = stack.projector.follower.dead_letters
    forged = MemoryCreated(memory_id=made["id"], version=1, content="forged", store="s", path="p/two")
    await publish(stack, S.memory_subject("default", "s", made["id"]), forged_envelope(forged, made["id"]))
    after = await stack.call("memory_add", content="after", store="s", path="p/after")
    await committed(stack)
    got = await stack.call("memory_get", id=made["id"])
    assert (got["content"], got["path"], got["version"]) == ("the original", "p/one", 1)
    assert stack.projector.follower.dead_letters == before + 1 and "second create" in reasons(stack)
    # the forged message is on the memory's subject and its store's: the next change and path claim expect it
    assert (await stack.call("memory_update", id=made["id"], content="changed"))["version"] == 2
    await stack.call("memory_move", id=after["id"], to_path="p/moved")
    await equals_a_rebuild(stack, tmp_path)


async def test_a_create_of_a_deleted_id_is_refused_in_a_later_batch_and_in_the_same_one(
    stack: Stack, tmp_path: Path
) -> None:
    gone = await stack.call("memory_add", content="to be deleted", store="s", path="p/gone")
    await stack.call("memory_retire", id=gone["id"], mode="delete")
    await committed(stack)
    js = stack.nc.jetstream()
    forged = MemoryCreated(memory_id=gone["id"], version=1, content="back from the dead", store="s", path="p/gone")
    await publish(stack, S.memory_subject("default", "s", gone["id"]), forged_envelope(forged, gone["id"]))
    # the same within one batch: create, delete and create again, published back to back
    mid = str(uuid.uuid4())
    subject = S.memory_subject("default", "s", mid)
    first = MemoryCreated(memory_id=mid, version=1, content="one batch", store="s", path="p/batch")
    await js.publish(subject, encode_envelope(forged_envelope(first, mid)), stream=S.EVENTS_STREAM)
    await js.publish(
        subject,
        encode_envelope(forged_envelope(MemoryDeleted(memory_id=mid, version=2), mid)),
        stream=S.EVENTS_STREAM,
    )
    again = MemoryCreated(memory_id=mid, version=1, content="one batch, again", store="s", path="p/batch")
    await js.publish(subject, encode_envelope(forged_envelope(again, mid)), stream=S.EVENTS_STREAM)
    await committed(stack)  # (until its commit finds the id in the history, the overlay shows the forged create)
    await stack.call("memory_add", content="after", store="s", path="p/gone")  # the freed path is free again
    await committed(stack)
    for m in (gone["id"], mid):
        with pytest.raises(Exception, match="MEMORY_NOT_FOUND"):
            await stack.call("memory_get", id=m)
    assert stack.projector.follower.dead_letters >= 2
    await equals_a_rebuild(stack, tmp_path)


async def test_a_change_published_under_another_store_is_refused(stack: Stack, tmp_path: Path) -> None:
    made = await stack.call("memory_add", content="in store s", store="s", path="p/one")
    await stack.call("memory_add", content="in store t", store="t", path="p/one")
    forged = MemoryUpdated(memory_id=made["id"], version=2, content="changed from store t")
    await publish(stack, S.memory_subject("default", "t", made["id"]), forged_envelope(forged, made["id"]))
    # both stores take new paths at once (before: CONFLICT after 25 attempts in store s)
    await stack.call("memory_add", content="after, in s", store="s", path="p/two")
    await stack.call("memory_add", content="after, in t", store="t", path="p/two")
    got = await stack.call("memory_get", id=made["id"])
    assert (got["content"], got["version"]) == ("in store s", 1)
    assert "misplaced" in reasons(stack)
    assert (await stack.call("memory_update", id=made["id"], content="a real change"))["version"] == 2
    await equals_a_rebuild(stack, tmp_path)


async def test_an_envelope_that_contradicts_its_subject_is_dead_lettered_by_every_consumer(stack: Stack) -> None:
    mid = str(uuid.uuid4())
    cases = [  # (subject, envelope): a create under another store, another namespace, another memory's subject
        (S.memory_subject("default", "t", mid), MemoryCreated(memory_id=mid, version=1, content="x", store="s")),
        (S.memory_subject("elsewhere", "s", mid), MemoryCreated(memory_id=mid, version=1, content="x", store="s")),
        (S.memory_subject("default", "s", str(uuid.uuid4())), MemoryCreated(memory_id=mid, version=1, content="x",
                                                                              store="s")),
    ]  # fmt: skip
    for subject, ev in cases:
        assert misplaced(subject, forged_envelope(ev, mid)) is not None
        await publish(stack, subject, forged_envelope(ev, mid))
    ok = MemoryCreated(memory_id=mid, version=1, content="placed", store="s")
    assert misplaced(S.memory_subject("default", "s", mid), forged_envelope(ok, mid)) is None
    await stack.call("memory_add", content="after", store="s", path="p/after")
    await committed(stack)
    with pytest.raises(Exception, match="MEMORY_NOT_FOUND"):
        await stack.call("memory_get", id=mid)
    assert stack.projector.follower.dead_letters == 3
    await stack.settle()
    assert sum(f.dead_letters for f in stack.auditor.followers) == 3
    codes = stack.trail.con.execute("SELECT code FROM audit_trail WHERE action = 'dead_letter'").fetchall()
    assert len(codes) == 3 and all("misplaced" in c[0] for c in codes), codes
    assert stack.trail.verify()[1] is None


async def test_the_vector_index_refuses_a_second_create_whatever_version_it_names(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    stack = await start_stack(tmp_path / "data", nats_server, vectors=True)
    try:
        made = await stack.call("memory_add", content="the original text about harbour tides")
        await stack.call("memory_update", id=made["id"], content="the second text about harbour tides")
        follower = stack.projector.vector_follower
        assert follower is not None and await follower.wait_for(await stack.last_seq(), 60, committed=True)
    finally:
        await stack.close()
    # a new process: the vector view holds no state of the memory, so only the index can tell
    stack = await start_stack(tmp_path / "data", nats_server, vectors=True)
    try:
        mid = made["id"]
        for version in (1, 7):
            forged = MemoryCreated(memory_id=mid, version=version, content=f"forged version {version}")
            await publish(stack, S.memory_subject("default", None, mid), forged_envelope(forged, mid))
        follower, vectors = stack.projector.vector_follower, stack.projector.gen.vectors
        assert follower is not None and vectors is not None
        assert await follower.wait_for(await stack.last_seq(), 60, committed=True), follower.stalled
        points = vectors.index.retrieve([point_id(mid, v) for v in (1, 2, 7)])
        assert sorted(points) == sorted(point_id(mid, v) for v in (1, 2))  # no point for the forged version 7
        assert "the original text" in points[point_id(mid, 1)].payload["state"]
        hits = await stack.call("memory_search", query="forged version", mode="keyword")
        assert all("forged" not in r["content"] for r in hits["results"]), hits
        await committed(stack)
        assert (await stack.call("memory_get", id=mid))["content"] == "the second text about harbour tides"
    finally:
        await stack.close()
