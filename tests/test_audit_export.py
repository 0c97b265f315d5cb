"""`mneme audit export` (JSON Lines, Parquet, filters) and audit queries by agent and time window."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from tests.harness import MNEME, start_stack

pytestmark = pytest.mark.anyio


async def test_export_and_query_by_agent_and_time(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    gs = GatewaySettings(agent_id="dana", role="admin", namespace="acme/web", namespaces=["acme/*"])
    stack = await start_stack(tmp_path / "d", nats_server, gs)
    try:
        t0 = datetime.now(UTC)
        ids = [(await stack.call("memory_add", content=f"m{i}"))["id"] for i in range(3)]
        await stack.call("memory_get", id=ids[0])
        await stack.gateway.access.flush()
        t1 = datetime.now(UTC) + timedelta(seconds=1)
        window = await stack.call("audit_query", agent_id="dana", since=t0.isoformat(), until=t1.isoformat())
        assert window["total"] == 4
        assert {r["action"] for r in window["results"]} == {"memory_created", "read:memory_get"}
        later = await stack.call("audit_query", agent_id="dana", since=t1.isoformat())
        assert later["total"] == 0
        assert (await stack.call("audit_query", agent_id="someone-else"))["total"] == 0
        stats = await stack.call("memory_stats")
        assert stats["total"] == 3
        await stack.settle()  # the stats call's read record, published in the background, is in the trail
    finally:
        await stack.close()

    data = tmp_path / "d"
    out = tmp_path / "trail.jsonl"
    res = subprocess.run(
        [MNEME, "audit", "export", "--data-dir", str(data), "--out", str(out)],
        capture_output=True,
        timeout=60,
        check=True,
    )
    # 3 creates, 1 get, and the 3 audit queries and the stats call above: reads are recorded too
    assert json.loads(res.stdout.splitlines()[-1])["records"] == 8
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["trail_seq"] for r in rows] == list(range(1, 9)) and all(len(r["hash"]) == 64 for r in rows)
    assert [r["action"] for r in rows][-4:] == ["read:audit_query"] * 3 + ["read:memory_stats"]
    assert rows[1]["prev_hash"] == rows[0]["hash"]

    pq = tmp_path / "created.parquet"
    res = subprocess.run([MNEME, "audit", "export", "--data-dir", str(data), "--out", str(pq), "--format", "parquet",
                          "--action-prefix", "memory_", "--memory", ids[1]], capture_output=True, timeout=60,
                         check=True)  # fmt: skip
    assert json.loads(res.stdout.splitlines()[-1])["records"] == 1
    got = duckdb.connect().execute(f"SELECT action, agent_id, memory_ids FROM read_parquet('{pq}')").fetchall()
    assert got == [("memory_created", "dana", [ids[1]])]
