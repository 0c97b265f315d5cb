"""NATS stopped while the gateway runs: tool calls fail within a few seconds with a clear error,
and succeed again once NATS is back (same port, same JetStream store directory).

Real nats-server processes only. Takes ~10-20 s: the outage calls wait out their timeouts, and the
projector's log consumer must come back after the restart.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import anyio
import msgspec
import nats
import pytest

from mneme.embedded_nats import EmbeddedNats
from schemas import subjects as S
from schemas.queries import QUERY_TYPES, GetMemory
from tests.harness import Stack, ToolFailure, start_stack

pytestmark = pytest.mark.anyio

FAIL_WITHIN = 8.0  # seconds a tool call may take to fail while NATS is down
RECOVER_WITHIN = 20.0  # seconds after NATS is back (or after a write) for things to work again
OUTAGE_CODES = ("UNAVAILABLE", "PROJECTION_LAG")
RETRYABLE = ("UNAVAILABLE", "PROJECTION_LAG", "CONFLICT")
# what a clear outage message talks about: the broker, the log, or the projector that cannot be reached
CLEAR_WORDS = ("nats", "jetstream", "event log", "projector", "unreachable", "unavailable")


async def _fails_fast(stack: Stack, tool: str, **args: Any) -> tuple[ToolFailure, float]:
    start = time.monotonic()
    with anyio.fail_after(FAIL_WITHIN + 10):  # a hang is a failure too, but with a readable message
        with pytest.raises(ToolFailure) as err:
            await stack.call(tool, **args)
    took = time.monotonic() - start
    e = err.value
    assert e.code in OUTAGE_CODES, f"{tool} during the outage: {e.error}"
    message = e.error.get("message", "")
    assert any(w in message.lower() for w in CLEAR_WORDS), f"{tool}: unclear message {message!r}"
    assert took <= FAIL_WITHIN, f"{tool} took {took:.1f} s to fail (limit {FAIL_WITHIN} s): {e.error}"
    if tool == "memory_add":  # a write names the request id to retry with, even one the gateway made up
        expected = args.get("request_id")
        rid = e.error.get("details", {}).get("request_id")
        assert rid and (expected is None or rid == expected), e.error
    return e, took


async def _until_ok(stack: Stack, deadline: float, tool: str, **args: Any) -> dict[str, Any]:
    """Call until it succeeds; only retryable errors are tolerated on the way."""
    last: ToolFailure | None = None
    while time.monotonic() < deadline:
        try:
            return await stack.call(tool, **args)
        except ToolFailure as e:
            assert e.code in RETRYABLE, f"{tool} after recovery: non-retryable error {e.error}"
            last = e
        await anyio.sleep(0.25)
    raise AssertionError(f"{tool} did not succeed in time; last error: {last.error if last else None}")


async def test_calls_fail_fast_during_a_nats_outage_and_recover_after(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    assert nats_server.url
    port = urlparse(nats_server.url).port
    assert port
    revived: EmbeddedNats | None = None
    spy = None
    stack = await start_stack(tmp_path / "data", nats_server)
    try:
        before = await stack.call("memory_add", content="written before the outage", store="s", path="pre/one")
        pre = before
        assert pre["seq"] == 1

        # -- NATS goes away ------------------------------------------------------------------------
        await nats_server.stop()
        assert nats_server.proc is not None and nats_server.proc.poll() is not None

        # a write with a request id the client can retry with, a path write (needs a projector
        # query first), and reads by id and by path, all at once: each fails fast (timed on its
        # own) with a clear, retryable error
        outage_calls: list[tuple[str, dict[str, Any]]] = [
            ("memory_add", {"content": "written during the outage", "request_id": "outage-write-1"}),
            ("memory_add", {"content": "path write during the outage", "store": "s", "path": "pre/two"}),
            ("memory_get", {"id": pre["id"]}),
            ("memory_get", {"id": "s:pre/one"}),
            ("memory_list", {}),
        ]
        async with anyio.create_task_group() as tg:
            for tool, args in outage_calls:
                tg.start_soon(functools.partial(_fails_fast, stack, tool, **args))

        # -- NATS comes back on the same port with the same store ----------------------------------
        revived = EmbeddedNats(nats_server.store_dir, port=port)
        url = await revived.start()
        assert urlparse(url).port == port
        deadline = time.monotonic() + RECOVER_WITHIN

        # the acknowledged write survived the restart
        got = await _until_ok(stack, deadline, "memory_get", id=pre["id"])
        assert got["content"] == "written before the outage" and got["version"] == 1
        got = await _until_ok(stack, deadline, "memory_get", id="s:pre/one")
        assert got["id"] == pre["id"]

        # A plain subscriber (not in the projectors' queue group, so it never answers) sees every
        # query the gateway sends: it shows which log position each read asks the projector for.
        spy = await nats.connect(url, name="query-spy")
        asked: list[GetMemory] = []

        async def on_query(msg: Any) -> None:
            op = msg.subject[len(S.QUERY_PREFIX) + 1 :]
            q = msgspec.msgpack.decode(msg.data, type=QUERY_TYPES[op])
            if isinstance(q, GetMemory):
                asked.append(q)

        await spy.subscribe(f"{S.QUERY_PREFIX}.>", cb=on_query)
        await spy.flush()

        # read-your-writes after recovery: a new write is visible to the very next read. The read
        # may wait for the projector (PROJECTION_LAG is a clear, retryable answer), but it must
        # never claim the memory we were just told was written does not exist.
        added = await _until_ok(stack, deadline, "memory_add", content="written after", store="s", path="post/one")
        assert added["seq"] > pre["seq"]
        assert added["seq"] <= await stack.last_seq()
        read_deadline = time.monotonic() + RECOVER_WITHIN
        got = await _until_ok(stack, read_deadline, "memory_get", id=added["id"])
        assert got["content"] == "written after" and got["seq"] == added["seq"]
        got = await _until_ok(stack, read_deadline, "memory_get", id="s:post/one")
        assert got["id"] == added["id"]
        # ... and not by luck (a projector that happened to be caught up): every read of the new
        # memory asked the projector for a log position at or after the write (invariant 3)
        await spy.flush()
        await anyio.sleep(0.1)
        reads = [q for q in asked if q.memory_id == added["id"] or q.path == "post/one"]
        assert reads, "the spy saw no memory.get query for the new memory"
        assert all(q.min_seq >= added["seq"] for q in reads), (
            f"read-your-writes: the write was at seq {added['seq']}, the reads asked for min_seq "
            f"{[q.min_seq for q in reads]}"
        )

        # the projector has staged the new event (point reads see it) and commits it with its
        # checkpoint when asked (or after its linger)
        assert stack.projector.applied >= added["seq"]
        assert await stack.projector.follower.wait_for(added["seq"], 5, committed=True)
        assert stack.view.checkpoint >= added["seq"]

        # the write that failed during the outage is retried with the same request id: it takes
        # effect exactly once, whether or not the first attempt reached the log
        await _until_ok(
            stack, read_deadline, "memory_add", content="written during the outage", request_id="outage-write-1"
        )
        page = await _until_ok(stack, read_deadline, "memory_list", limit=500)
        during = [m for m in page["results"] if m["content"] == "written during the outage"]
        assert len(during) == 1, f"the retried write exists {len(during)} times"
    finally:
        try:
            if spy is not None:
                await spy.close()
            await stack.close()
        finally:
            if revived is not None:
                await revived.stop()
            await nats_server.stop()
