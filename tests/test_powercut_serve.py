"""A power cut under `mneme serve` (issue 29): every acknowledged memory survives when the log syncs before
acknowledging (the default), and the same cut loses acknowledged writes with a lazy sync (the control that
shows the harness catches a loss).

The data directory lives on the power-cut filesystem (tests/powercut): what nobody fsynced is dropped by
`cut()`. Writers send memory_add calls concurrently (pipelined JSON-RPC over stdio, answered in any
order); then the nats-server child and `mneme serve` are SIGKILLed (the child first: it would otherwise
get SIGTERM from its parent's death and flush), the power is cut, and everything starts again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client
from nats.aio.client import Client as NATS
from nats.js.errors import NotFoundError

from mneme.embedded_nats import EmbeddedNats
from tests.harness import MNEME, result_of, serve_params, wait_dead
from tests.powercut.control import PowerCutFS

pytestmark = pytest.mark.anyio
WRITERS, EACH = 4, 15


def _env(sync: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")} | {"MNEME_NATS_SYNC": sync}


def _write_concurrently(data: Path, sync: str) -> tuple[list[str], int, int]:
    """Start `mneme serve`, send WRITERS x EACH memory_adds at once, collect every acknowledged id; return
    them with the pids of serve and its nats-server child (still running)."""
    proc = subprocess.Popen(
        [MNEME, "serve", "--data-dir", str(data)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_env(sync),
    )
    assert proc.stdin and proc.stdout

    def send(msg: dict[str, Any]) -> None:
        assert proc.stdin
        proc.stdin.write((json.dumps(msg) + "\n").encode())
        proc.stdin.flush()

    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
    assert json.loads(proc.stdout.readline())["id"] == 0
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    calls = [
        {
            "jsonrpc": "2.0",
            "id": 1 + w * EACH + i,
            "method": "tools/call",
            "params": {
                "name": "memory_add",
                "arguments": {"content": f"writer {w} fact {i}", "request_id": f"w{w}-{i}"},
            },
        }
        for i in range(EACH)
        for w in range(WRITERS)
    ]
    assert proc.stdin
    proc.stdin.write(b"".join((json.dumps(c) + "\n").encode() for c in calls))
    proc.stdin.flush()
    acked = []
    for _ in calls:
        reply = json.loads(proc.stdout.readline())
        result = reply.get("result", {})
        if not result.get("isError"):
            acked.append(result["structuredContent"]["id"])
    nats = int((data / "nats" / "nats-server.pid").read_text().strip())
    return acked, proc.pid, nats


def _cut(fs: PowerCutFS, serve: int, nats: int) -> dict[str, Any]:
    for pid in (nats, serve):  # the child first: SIGTERM from its parent's death would flush it
        os.kill(pid, signal.SIGKILL)
    for pid in (nats, serve):
        assert wait_dead(pid), f"{pid} did not die"
    lost: dict[str, Any] = fs.cut()
    return lost


async def _events_in_log(data: Path) -> int:
    server = EmbeddedNats(data / "nats")
    await server.start()
    try:
        nc = NATS()
        assert server.url is not None
        await nc.connect(server.url)
        try:
            info = await nc.jetstream().stream_info("MNEME_EVENTS")
            return int(info.state.messages)
        except NotFoundError:  # the cut took the stream itself (its directory was never synced)
            return 0
        finally:
            await nc.close()
    finally:
        await server.stop()


async def test_every_acknowledged_memory_survives_a_power_cut(powercut_fs: PowerCutFS) -> None:
    data = powercut_fs.path / "data"
    acked, serve, nats = await asyncio.to_thread(_write_concurrently, data, "always")
    assert len(acked) == WRITERS * EACH and len(set(acked)) == len(acked)
    dropped = _cut(powercut_fs, serve, nats)
    assert dropped["lost_write_bytes"] >= 0  # (whatever was not synced: the read models' lazy files)
    assert await _events_in_log(data) == len(acked)  # each acknowledged write once in the log, nothing more
    async with stdio_client(serve_params(data, env=_env("always"))) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        for mid in acked:
            got = result_of(await s.call_tool("memory_get", {"id": mid}))
            assert got["id"] == mid and got["version"] == 1
        listed = result_of(await s.call_tool("memory_list", {"limit": 500}))
        assert listed["total"] == len(acked) and sorted(m["id"] for m in listed["results"]) == sorted(acked)
    verify = subprocess.run(
        [MNEME, "audit", "verify", "--data-dir", str(data)], capture_output=True, text=True, timeout=120
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr


async def test_with_a_lazy_sync_the_same_cut_loses_acknowledged_writes(powercut_fs: PowerCutFS) -> None:
    """The control: the harness sees a loss where there is one (nats-server's own default, a 2 m timer)."""
    data = powercut_fs.path / "data"
    acked, serve, nats = await asyncio.to_thread(_write_concurrently, data, "2m")
    assert len(acked) == WRITERS * EACH
    _cut(powercut_fs, serve, nats)
    assert await _events_in_log(data) < len(acked)
