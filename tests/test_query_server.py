"""One query server for the projector and the auditor (mneme/query_server.py): a read model that does not reach
the caller's min_seq within the wait answers PROJECTION_LAG with the same details from both services (the
auditor used to answer from behind, silently); an undecodable query is INVALID_INPUT from both."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from mneme.embedded_nats import EmbeddedNats
from mneme.errors import MnemeError
from schemas import subjects as S
from schemas.queries import AuditQuery, ListMemories
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
        stack.projector.wait_timeout = 0.3
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
