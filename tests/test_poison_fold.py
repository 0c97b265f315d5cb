"""Messages that decode but that no gateway would write: the folds must take them and go on.

- An integer past 64 bits anywhere in an event or an access record, or past 32 bits in a version (an older
  mneme wrote them; a forged or damaged message may): refused while decoding, so every consumer
  dead-letters it and goes on, and no read of another memory, no list of the namespace, breaks over it.
- A change whose version is not past the memory's (a replayed or forged message): skipped by the folds;
  before, the rows view wrote a second (id, version) row and its commit failed on the primary key, again
  and again, with the projection stalled. Its position still counts as the memory's and the store's last
  one, so the next change and path claim there expect it.

A second create of an id the log has, and an event on a subject that contradicts it, are refused and
dead-lettered: tests/test_forged_placement.py.
Real nats-server, projector, auditor, gateway (tests/harness.py).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from schemas import subjects as S
from schemas.access import AskedQuery, ReadRecorded, encode_access
from schemas.events import MemoryCreated, MemoryUpdated, encode_envelope
from tests.harness import Stack, forged_envelope

pytestmark = pytest.mark.anyio


async def test_wide_integers_are_dead_lettered_not_folded(stack: Stack) -> None:
    js = stack.nc.jetstream()
    kept = await stack.call("memory_add", content="an ordinary memory", metadata={"n": 1})
    wide = []
    cases: list[tuple[int, dict[str, Any]]] = [(2**64, {}), (1, {"n": 2**70}), (1, {"deep": [{"x": -(2**63) - 1}]})]
    for i, (version, metadata) in enumerate(cases):
        mid = str(uuid.uuid4())
        ev = MemoryCreated(memory_id=mid, version=version, content=f"wide {i}", metadata=metadata)
        wide.append(mid)
        await js.publish(
            S.memory_subject("default", None, mid), encode_envelope(forged_envelope(ev, mid)), stream=S.EVENTS_STREAM
        )
    read = ReadRecorded(record_id=str(uuid.uuid4()), at=datetime.now(UTC), agent_id="a", role="agent",
                        request_id="r", namespace="default", operation="memory_list",
                        query=AskedQuery(operation="memory.list", arguments={"limit": 2**64}))  # fmt: skip
    await js.publish(S.access_subject("read", "default"), encode_access(read), stream=S.ACCESS_STREAM)

    after = await stack.call("memory_add", content="after the wide ones")
    assert (await stack.call("memory_get", id=after["id"]))["content"] == "after the wide ones"
    assert (await stack.call("memory_get", id=kept["id"]))["metadata"] == {"n": 1}
    listed = await stack.call("memory_list", limit=50)
    ids = {m["id"] for m in listed["results"]}
    assert {kept["id"], after["id"]} <= ids and not ids & set(wide)
    for mid in wide:
        with pytest.raises(Exception, match="MEMORY_NOT_FOUND"):
            await stack.call("memory_get", id=mid)
    await stack.settle()
    assert stack.projector.follower.dead_letters == 3
    assert stack.projector.follower.stalled is None
    assert sum(f.dead_letters for f in stack.auditor.followers) == 4
    reasons = stack.trail.con.execute(
        "SELECT code FROM audit_trail WHERE action = 'dead_letter' ORDER BY trail_seq"
    ).fetchall()
    assert len(reasons) == 4 and all("64 bits" in r[0] or "<= 2147483647" in r[0] for r in reasons), reasons
    assert stack.trail.verify()[1] is None


async def test_a_change_with_an_old_version_is_skipped(stack: Stack) -> None:
    js = stack.nc.jetstream()
    made = await stack.call("memory_add", content="version one", store="s", path="p/one")
    await stack.call("memory_update", id=made["id"], content="version two")
    mid = made["id"]
    for version in (1, 2, 0, -5):  # replays of old changes, and nonsense
        ev = MemoryUpdated(memory_id=mid, version=version, content=f"forged at version {version}")
        await js.publish(
            S.memory_subject("default", "s", mid), encode_envelope(forged_envelope(ev, mid)), stream=S.EVENTS_STREAM
        )
    after = await stack.call("memory_add", content="after", store="s", path="p/after")
    head = await stack.last_seq()
    assert await stack.projector.follower.wait_for(head, 20, committed=True), stack.projector.follower.stalled
    got = await stack.call("memory_get", id=mid)
    assert got["content"] == "version two" and got["version"] == 2
    assert (await stack.call("memory_get", id=after["id"]))["content"] == "after"
    # the skipped messages are on the memory's subject and its store's: the next change and the next path
    # claim there expect them (they lost forever before, CONFLICT after 25 attempts)
    assert (await stack.call("memory_update", id=mid, content="version three"))["version"] == 3
    await stack.call("memory_add", content="a new path", store="s", path="p/two")
    assert await stack.projector.follower.wait_for(await stack.last_seq(), 20, committed=True)
    versions = stack.view.con.execute("SELECT version FROM memory_versions WHERE id = ? ORDER BY version", [mid])
    assert [r[0] for r in versions.fetchall()] == [1, 2, 3]
    await stack.settle()
    assert stack.trail.verify()[1] is None
