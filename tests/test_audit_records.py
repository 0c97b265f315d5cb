"""Every write and every read of a run leaves exactly one audit record with the right agent and
request id; denied attempts are recorded; admins query the trail, agents may not."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from tests.harness import ToolFailure, start_stack

pytestmark = pytest.mark.anyio


async def test_one_record_per_write_and_read_with_agent_and_request_id(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    # context="optional": each call gives its request id in its context
    gs = GatewaySettings(
        agent_id="alice",
        role="admin",
        organization="acme",
        namespaces=["acme/*"],
        namespace="acme/web",
        context="optional",
    )
    stack = await start_stack(tmp_path / "d", nats_server, gs)
    try:
        ctx = lambda rid: {"request_id": rid}  # noqa: E731
        a = await stack.call("memory_add", content="fact one", context=ctx("w1"))
        await stack.call("memory_update", id=a["id"], content="fact one, revised", context=ctx("w2"))
        await stack.call("memory_get", id=a["id"], context=ctx("r1"))
        await stack.call("memory_list", context=ctx("r2"))
        await stack.call("memory_lock", id=a["id"], context=ctx("w3"))
        await stack.settle()
        page = await stack.call("audit_query", namespace="acme/web", limit=100)
        by_request = Counter(r["request_id"] for r in page["results"])
        assert by_request == {"w1": 1, "w2": 1, "r1": 1, "r2": 1, "w3": 1}, page["results"]
        actions = {r["request_id"]: r["action"] for r in page["results"]}
        assert actions == {
            "w1": "memory_created",
            "w2": "memory_updated",
            "r1": "read:memory_get",
            "r2": "read:memory_list",
            "w3": "memory_locked",
        }
        assert {r["agent_id"] for r in page["results"]} == {"alice"}
        assert all(a["id"] in r["memory_ids"] for r in page["results"])
        who = await stack.call("audit_query", namespace="acme/web", memory_id=a["id"], action="read:")
        assert [r["request_id"] for r in who["results"]] == ["r1", "r2"]
        # access statistics come from the read records, not from the memory's own events
        assert await stack.projector.access_follower.wait_for(
            (await stack.nc.jetstream().stream_info("MNEME_ACCESS")).state.last_seq, 10, committed=True
        )
        got = await stack.call("memory_get", id=a["id"])
        assert got["access_count"] == 2 and got["version"] == 3
        # that get is a read too, and the stats right after it count it (read-your-reads, issue 28 item 4)
        assert (await stack.call("memory_stats"))["most_accessed"] == [{"id": a["id"], "count": 3}]
        assert stack.trail.verify()[1] is None
    finally:
        await stack.close()


async def test_denied_attempts_are_recorded_and_agents_cannot_query(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    # context="optional": each call gives its request id in its context
    gs = GatewaySettings(
        agent_id="bot",
        role="agent",
        organization="acme",
        namespaces=["acme/web"],
        namespace="acme/web",
        context="optional",
    )
    stack = await start_stack(tmp_path / "d", nats_server, gs)
    try:
        m = await stack.call("memory_add", content="x", context={"request_id": "ok-1"})
        for tool, args, code in [
            ("memory_lock", {"id": m["id"]}, "PERMISSION_ERROR"),
            ("memory_add", {"content": "rule", "kind": "business_rule"}, "WRITE_NOT_ALLOWED"),
            ("memory_list", {"namespace": "acme/other"}, "SCOPE_VIOLATION"),
            ("audit_query", {}, "PERMISSION_ERROR"),
        ]:
            with pytest.raises(ToolFailure) as err:
                await stack.call(tool, **args, context={"request_id": f"deny-{tool}"})
            assert err.value.code == code
        await stack.settle()
        rows = stack.trail.con.execute(
            "SELECT request_id, action, outcome, code, agent_id FROM audit_trail "
            "WHERE outcome = 'denied' ORDER BY trail_seq"
        ).fetchall()
        assert rows == [
            ("deny-memory_lock", "denied:memory_lock", "denied", "PERMISSION_ERROR", "bot"),
            ("deny-memory_add", "denied:memory_add", "denied", "WRITE_NOT_ALLOWED", "bot"),
            ("deny-memory_list", "denied:memory_list", "denied", "SCOPE_VIOLATION", "bot"),
            ("deny-audit_query", "denied:audit_query", "denied", "PERMISSION_ERROR", "bot"),
        ]
    finally:
        await stack.close()


async def test_a_trimmed_surface_hides_internal_fields_from_agents_not_admins(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    agent = GatewaySettings(agent_id="bot", role="agent", namespace="acme/web", trim_for_agents=True)
    stack = await start_stack(tmp_path / "d", nats_server, agent)
    try:
        mid = (await stack.call("memory_add", content="x"))["id"]
        await stack.call("memory_update", id=mid, content="y")
        got = await stack.call("memory_get", id=mid)
        assert got.get("seq") is None and got.get("access_count") is None and got["version"] == 2
        assert [h["version"] for h in got["history"]] == [2, 1]
        assert all(h.get("seq") is None and h.get("request_id") is None for h in got["history"])
        listed = await stack.call("memory_list", detail="full")
        assert listed["results"][0].get("seq") is None
        stack.gateway.principal = stack.gateway.principal.__class__(
            agent_id="root", role="admin", default_namespace="acme/web"
        )
        full = await stack.call("memory_get", id=mid)
        assert full["seq"] > 0 and full["history"][0]["request_id"]
    finally:
        await stack.close()
