"""The gateway's application layer (services/gateway/application) on the in-memory event log: read-your-writes
owned by the use cases, idempotency and no lost updates through them, what a read records. No nats-server: the
same write side and deciders as production, the log in memory (tests/app_world.py)."""

from __future__ import annotations

import asyncio

import pytest

from mneme.errors import IdempotencyKeyReused, PathExists
from mneme.memory_log import InMemoryEventLog
from mneme.principals import Principal
from schemas.commands import CreateMemory, UpdateMemory
from schemas.queries import GetMemory
from tests.app_world import App, Caller

pytestmark = pytest.mark.anyio
ANN = Principal(agent_id="ann")


async def test_a_write_raises_the_mark_and_the_next_read_waits_for_it_and_is_recorded() -> None:
    app = App.over(InMemoryEventLog())
    call = Caller(ANN)
    assert await app.marks.mark() == 0
    w = await app.memories.create(call, CreateMemory(namespace="default", content="billing uses Postgres 16"))
    assert w.seq == 1 and await app.marks.mark() == 1
    row = await app.reads.resolve(call, w.memory.id if w.memory else "")
    assert row.memory.content == "billing uses Postgres 16"
    asked = [q for q in app.rows.asked if isinstance(q, GetMemory)]
    assert asked[-1].min_seq == 1  # the read waited for the write
    assert [a.query for a in call.answered] == [asked[-1]]  # the read record keeps what it was answered
    assert call.answered[0].applied_seq == 1


async def test_a_retry_is_one_memory_and_a_reused_request_id_says_where_it_landed() -> None:
    log = InMemoryEventLog()
    app = App.over(log)
    cmd = CreateMemory(namespace="default", content="the deploy runs on Fridays")
    first = await app.memories.create(Caller(ANN, request_id="r-7"), cmd)
    again = await app.memories.create(Caller(ANN, request_id="r-7"), cmd)
    assert again.duplicate and again.memory is not None and first.memory is not None
    assert again.memory.id == first.memory.id and await log.last_seq() == 1
    other = App.over(log)  # another gateway: its mark is 0 until it learns where the first write landed
    with pytest.raises(IdempotencyKeyReused) as err:
        await other.memories.create(Caller(ANN, request_id="r-7"), CreateMemory(namespace="default", content="x"))
    assert err.value.details["seq"] == 1 and await other.marks.mark() == 1


async def test_two_gateways_updating_one_memory_at_once_lose_neither_change() -> None:
    log = InMemoryEventLog()
    a, b = App.over(log), App.over(log)
    w = await a.memories.create(Caller(ANN), CreateMemory(namespace="default", content="v1", store="s", path="p"))
    assert w.memory is not None
    mid = w.memory.id

    async def update(app: App, rid: str, **fields: object) -> None:
        cmd = UpdateMemory(namespace="default", memory_id=mid, **fields)  # type: ignore[arg-type]
        await app.memories.apply("update", Caller(ANN, request_id=rid), cmd)

    await asyncio.gather(update(a, "u-a", tags=("one",)), update(b, "u-b", importance=0.9))
    row = await a.reads.resolve(Caller(ANN), None, "s", "p")
    assert row.memory.version == 3 and row.memory.tags == ("one",) and row.memory.importance == 0.9


async def test_a_path_is_held_by_one_memory_across_gateways() -> None:
    log = InMemoryEventLog()
    a, b = App.over(log), App.over(log)
    got = await asyncio.gather(
        a.memories.create(Caller(ANN, request_id="a"), CreateMemory(namespace="default", content="A", store="s",
                                                                    path="x")),
        b.memories.create(Caller(ANN, request_id="b"), CreateMemory(namespace="default", content="B", store="s",
                                                                    path="x")),
        return_exceptions=True,
    )  # fmt: skip
    assert sorted(type(g).__name__ for g in got) == ["PathExists", "Written"]
    assert any(isinstance(g, PathExists) and g.field == "path" for g in got)


async def test_change_resolves_by_store_and_path_and_the_mark_follows_the_write() -> None:
    app = App.over(InMemoryEventLog())
    call = Caller(ANN)
    await app.memories.create(call, CreateMemory(namespace="default", content="old", store="s", path="p"))
    row, w = await app.memories.change(
        "update", Caller(ANN, request_id="r-2"), (None, "s", "p"),
        lambda mid: UpdateMemory(namespace="default", memory_id=mid, content="new"),
    )  # fmt: skip
    assert row.memory.content == "old" and w.memory is not None and w.memory.content == "new"
    assert await app.marks.mark() == w.seq == 2


async def test_linearizable_reads_wait_for_the_head_of_the_log_not_this_gateways_writes() -> None:
    log = InMemoryEventLog()
    writer, reader = App.over(log), App.over(log)
    reader.marks.consistency = "linearizable"
    w = await writer.memories.create(Caller(ANN), CreateMemory(namespace="default", content="seen by all"))
    assert await reader.marks.mark() == w.seq
    assert (await reader.reads.resolve(Caller(ANN), w.memory.id if w.memory else "")).memory.content == "seen by all"
