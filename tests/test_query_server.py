"""One query server for the projector and the auditor (mneme/query_server.py): a read model that does not reach
the caller's min_seq within the wait answers PROJECTION_LAG with the same details from both services (the
auditor used to answer from behind, silently); an undecodable query is INVALID_INPUT from both. Requests run
concurrently (one waiting for its min_seq holds no other back), and a stop lets running ones finish."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import nats
import nats.errors
import pytest

from mneme.embedded_nats import EmbeddedNats
from mneme.errors import MnemeError
from mneme.query_server import Plane
from schemas import subjects as S
from schemas.queries import AuditQuery, GetMemory, ListMemories, Reply
from services.gateway.queries import QueryClient
from tests.harness import start_stack

pytestmark = pytest.mark.anyio


async def test_a_timeout_answers_the_same_lag_error_from_projector_and_auditor(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    stack = await start_stack(tmp_path, nats_server)
    try:
        added = await stack.call("memory_add", content="The lag probe: one memory so the log is not empty")
        assert added["id"]
        stack.projector.tuning = dataclasses.replace(stack.projector.tuning, wait_timeout=0.3)
        stack.auditor.wait_timeout = 0.3
        head = (await stack.nc.jetstream().stream_info(S.EVENTS_STREAM)).state.last_seq
        ahead = head + 1000  # a position the log will not reach during the test
        client = QueryClient(stack.nc, timeout=5.0)
        now = datetime.now(UTC)
        errors: dict[str, MnemeError] = {}
        for name, query in (
            ("projector", ListMemories(namespace="default", now=now, min_seq=ahead)),
            ("auditor", AuditQuery(namespace="default", now=now, min_seq=ahead)),
        ):
            t0 = time.monotonic()
            with pytest.raises(MnemeError) as err:
                await client.ask(query)
            assert time.monotonic() - t0 < 3, f"{name}: the wait is bounded by its wait_timeout"
            errors[name] = err.value
        for name, exc in errors.items():
            d = exc.to_dict()
            assert d["code"] == "PROJECTION_LAG", (name, d)
            assert d["details"] == {"applied_seq": head, "min_seq": ahead}, (name, d)
            assert f"not yet {ahead}" in d["message"], (name, d)
        assert set(errors["projector"].to_dict()) == set(errors["auditor"].to_dict())

        # and the position they were waiting for is served at once
        ok = await client.ask(AuditQuery(namespace="default", now=now, min_seq=head))
        assert ok is not None
    finally:
        await stack.close()


async def test_an_undecodable_query_is_invalid_input_from_both(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    stack = await start_stack(tmp_path, nats_server)
    try:
        replies: dict[str, Any] = {}
        for name, op in (("projector", ListMemories.OPERATION), ("auditor", AuditQuery.OPERATION)):
            msg = await stack.nc.request(S.query_subject(op), b"\xc1 not msgpack", timeout=5)
            replies[name] = msgspec.msgpack.decode(msg.data)
        for name, reply in replies.items():
            assert reply["error"]["code"] == "INVALID_INPUT", (name, reply)
            assert reply["error"]["message"].startswith("bad query:"), (name, reply)
    finally:
        await stack.close()


async def test_a_query_waiting_for_its_min_seq_holds_no_other_back(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    stack = await start_stack(tmp_path, nats_server)
    try:
        added = await stack.call("memory_add", content="The concurrency probe: answered while another query waits")
        stack.projector.tuning = dataclasses.replace(stack.projector.tuning, wait_timeout=3.0)
        ahead = await stack.last_seq() + 1000
        client = QueryClient(stack.nc, timeout=10.0)
        now = datetime.now(UTC)
        # one of each kind waits for a position the log will not reach...
        waiting = [
            asyncio.create_task(client.ask(ListMemories(namespace="default", now=now, min_seq=ahead))),
            asyncio.create_task(client.ask(GetMemory(namespace="default", now=now, memory_id="x", min_seq=ahead))),
        ]
        await asyncio.sleep(0.2)
        # ...while the same operations, asked for what is there, answer at once
        t0 = time.monotonic()
        got = await client.ask(GetMemory(namespace="default", now=now, memory_id=added["id"]))
        listed = await client.ask(ListMemories(namespace="default", now=now))
        assert time.monotonic() - t0 < 1.5
        assert got.item is not None and listed.total == 1
        assert not any(t.done() for t in waiting)
        for t in waiting:
            with pytest.raises(MnemeError, match="not yet"):
                await t
    finally:
        await stack.close()


async def test_stop_lets_running_requests_finish_and_takes_no_new_ones(nats_server: EmbeddedNats) -> None:
    nc = await nats.connect(nats_server.url or "")
    subject = "test.plane"
    try:
        plane = Plane(nc, logging.getLogger("test.plane"))
        started = asyncio.Event()

        async def slow(query: GetMemory) -> Reply:
            started.set()
            await asyncio.sleep(0.5)
            return Reply(applied_seq=7)

        router = plane.router()
        plane.query(router, subject, "plane-test", GetMemory, slow, lambda: 0)
        assert await plane.serve(router)
        assert plane.subjects == [subject]
        payload = msgspec.msgpack.encode(GetMemory(namespace="default", now=datetime.now(UTC), memory_id="x"))
        asked = asyncio.create_task(nc.request(subject, payload, timeout=5))
        await started.wait()
        t0 = time.monotonic()
        await plane.stop(5)
        assert 0.2 < time.monotonic() - t0 < 2, "the stop waited for the running request, no longer"
        reply = msgspec.msgpack.decode((await asked).data, type=Reply)
        assert reply.applied_seq == 7 and reply.error is None
        with pytest.raises(nats.errors.NoRespondersError):  # unsubscribed: a new request finds nobody
            await nc.request(subject, payload, timeout=2)
        assert not await plane.serve(plane.router()), "a stopped plane serves nothing more"

        # a request still running when the drain ends is cancelled: the stop is bounded
        plane = Plane(nc, logging.getLogger("test.plane"))
        started.clear()
        router = plane.router()
        plane.query(router, subject, "plane-test", GetMemory, slow, lambda: 0)
        await plane.serve(router)
        asked = asyncio.create_task(nc.request(subject, payload, timeout=1))
        await started.wait()
        t0 = time.monotonic()
        await plane.stop(0.1)
        assert time.monotonic() - t0 < 0.4
        assert not plane.running
        with pytest.raises(nats.errors.TimeoutError):
            await asked
    finally:
        await nc.close()


@pytest.mark.anyio
async def test_an_answer_over_one_nats_message_is_refused_at_once_not_dropped(nats_server: EmbeddedNats) -> None:
    """NATS drops a reply over its max_payload: the asker used to wait out its whole timeout for nothing. The
    plane answers INVALID_INPUT instead, naming the size and what to ask for."""
    nc = await nats.connect(nats_server.url or "")
    subject = "test.plane.large"
    try:
        plane = Plane(nc, logging.getLogger("test.plane"))

        async def huge(query: GetMemory) -> Reply:
            return Reply(applied_seq=3, result=msgspec.Raw(b"\x00" * (nc.max_payload + 1)))

        router = plane.router()
        plane.query(router, subject, "plane-test", GetMemory, huge, lambda: 0)
        assert await plane.serve(router)
        payload = msgspec.msgpack.encode(GetMemory(namespace="default", now=datetime.now(UTC), memory_id="x"))
        t0 = time.monotonic()
        reply = msgspec.msgpack.decode((await nc.request(subject, payload, timeout=5)).data, type=Reply)
        assert time.monotonic() - t0 < 2
        assert reply.error is not None and reply.error["code"] == "INVALID_INPUT", reply.error
        assert reply.error["field"] == "limit" and "one NATS message" in reply.error["message"]
        assert reply.applied_seq == 3
        await plane.stop(1)
    finally:
        await nc.close()
