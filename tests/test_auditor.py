"""The auditor's trail: one hash-chained record per event, gap-free across restarts, tamper-evident."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import duckdb
import pytest

from mneme.app import compose
from services.auditor.trail import Trail
from tests.harness import MNEME, Stack

pytestmark = pytest.mark.anyio


async def _writes(stack: Stack, n: int, prefix: str) -> None:
    for i in range(n):
        mid = (await stack.call("memory_add", content=f"{prefix} {i}", store="s", path=f"{prefix}/{i}"))["id"]
        if i % 3 == 0:
            await stack.call("memory_update", id=mid, tags=["x"])


async def test_every_event_is_recorded_once_across_a_restart(stack: Stack, tmp_path: Path) -> None:
    await _writes(stack, 20, "before")
    assert await stack.auditor.follower.wait_for(await stack.last_seq(), 10)
    # stop the auditor, write more, start a new one on the same trail file
    await stack.auditor.stop()
    path = stack.trail.con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()")
    row = path.fetchone()
    assert row is not None
    trail_file = row[0]
    stack.trail.close()
    await _writes(stack, 20, "after")
    head = await stack.last_seq()
    trail = Trail(trail_file)
    auditor = compose.auditor(stack.nc, trail)
    await auditor.start()
    try:
        assert await auditor.follower.wait_for(head, 10)
        rows = trail.con.execute(
            "SELECT source_seq, agent_id, request_id, action FROM audit_trail "
            "WHERE source = 'events' ORDER BY trail_seq"
        ).fetchall()
        assert [r[0] for r in rows] == list(range(1, head + 1)), "gap or duplicate in the trail"
        assert all(r[1] == "local-agent" and r[2] for r in rows)
        assert {r[3] for r in rows} == {"memory_created", "memory_updated"}
        assert trail.verify() == (head, None)
    finally:
        await auditor.stop()
        trail.close()


async def test_tampering_is_named_by_audit_verify(stack: Stack) -> None:
    await _writes(stack, 10, "t")
    assert await stack.auditor.follower.wait_for(await stack.last_seq(), 10)
    await stack.auditor.stop()
    stack.trail.close()
    data = stack.data_dir
    db = str(data / "audit.duckdb")

    def verify() -> dict[str, object]:
        out = subprocess.run([MNEME, "audit", "verify", "--data-dir", str(data)], capture_output=True, timeout=60)
        return json.loads(out.stdout.splitlines()[-1]) | {"exit": out.returncode}

    assert verify() == {"records": 14, "ok": True, "first_broken_seq": None, "exit": 0}
    con = duckdb.connect(db)
    con.execute("UPDATE audit_trail SET agent_id = 'mallory' WHERE trail_seq = 7")
    con.close()
    assert verify() == {"records": 6, "ok": False, "first_broken_seq": 7, "exit": 1}
    con = duckdb.connect(db)
    con.execute("UPDATE audit_trail SET agent_id = 'local-agent' WHERE trail_seq = 7")
    assert con.execute("SELECT count(*) FROM audit_trail").fetchone() == (14,)
    con.execute("DELETE FROM audit_trail WHERE trail_seq = 9")
    con.close()
    assert verify() == {"records": 8, "ok": False, "first_broken_seq": 10, "exit": 1}


async def test_a_held_auditor_follows_once_released(stack: Stack, tmp_path: Path) -> None:
    """`mneme serve` holds the trail's catch-up until the rows have caught up (Auditor.start(after=...))."""
    await _writes(stack, 6, "held")
    head = await stack.last_seq()
    trail = Trail(str(tmp_path / "held.duckdb"))
    auditor = compose.auditor(stack.nc, trail)
    released = asyncio.Event()
    await auditor.start(after=released)
    try:
        await asyncio.sleep(0.5)
        assert auditor.follower.committed == 0 and trail.verify() == (0, None)  # nothing followed yet
        released.set()
        assert await auditor.follower.wait_for(head, 10)
        assert trail.verify() == (head, None)
    finally:
        await auditor.stop()
        trail.close()


async def test_a_held_auditor_follows_after_at_most_and_stops_while_held(stack: Stack, tmp_path: Path) -> None:
    await _writes(stack, 3, "late")
    head = await stack.last_seq()
    trail = Trail(str(tmp_path / "late.duckdb"))
    auditor = compose.auditor(stack.nc, trail)
    await auditor.start(after=asyncio.Event(), at_most=0.3)  # never set: the trail follows after 0.3 s
    try:
        assert await auditor.follower.wait_for(head, 10)
    finally:
        await auditor.stop()
        trail.close()
    never = Trail(str(tmp_path / "never.duckdb"))
    held = compose.auditor(stack.nc, never)
    await held.start(after=asyncio.Event(), at_most=60)
    await asyncio.wait_for(held.stop(), 10)  # a stop while held does not wait for the hold
    assert held.follower.committed == 0
    never.close()
