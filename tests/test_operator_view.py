"""The operator's view and back-pressure, on real processes: `mneme status`, the embedded nats-server
coming back after it dies under `mneme serve`, the hint on a terminal, JSON logs joined by request id,
and per-principal rate limits (RATE_LIMIT, nothing written)."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client

from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from mneme.errors import RateLimited
from mneme.sparse import disk_usage
from services.gateway.rate_limits import Limits
from tests.harness import MNEME, ToolFailure, nats_pid, result_of, serve_params, start_stack, wait_dead

pytestmark = pytest.mark.anyio


def status(data_dir: Path) -> tuple[int, dict[str, Any]]:
    out = subprocess.run(
        [MNEME, "status", "--json", "--data-dir", str(data_dir)], capture_output=True, text=True, timeout=60
    )
    return out.returncode, json.loads(out.stdout)


async def until(fn: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            got = await fn()
            if got:
                return got
        except ToolFailure as exc:
            last = exc.error
        await anyio.sleep(0.3)
    raise AssertionError(f"{what} within {timeout} s; last: {last}")


async def test_status_and_a_nats_child_that_dies_is_started_again(tmp_path: Path) -> None:
    data = tmp_path / "data"
    code, out = status(data)
    assert code == 2 and out["running"] is False  # nothing serves there yet
    env = {**os.environ, "MNEME_LOG_FORMAT": "json", "MNEME_LOG_LEVEL": "DEBUG"}
    errlog = (tmp_path / "serve.err").open("w")
    async with stdio_client(serve_params(data, env=env), errlog=errlog) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        first = result_of(await s.call_tool("memory_add", {"content": "before the crash", "store": "s", "path": "a"}))

        async def serving() -> bool:
            code, out = await anyio.to_thread.run_sync(status, data)
            services = out.get("services", [])
            calls = [x.get("gateway", {}).get("calls", 0) for x in services]
            applied = [x.get("projector", {}).get("projector-rows", {}).get("applied", 0) for x in services]
            # (a heartbeat is a snapshot: one taken between the write's acknowledgement and its fold counts the
            # call with nothing applied yet; the next one, 5 s later, has both)
            return code == 0 and out["healthy"] and bool(calls) and max(calls) >= 1 and max(applied) >= 1

        await until(serving, 20, "status did not report a healthy serve that counted the call and folded it")
        _, out = status(data)
        assert out["streams"]["MNEME_EVENTS"]["last_seq"] == 1
        assert out["streams"]["MNEME_DLQ"]["messages"] == 0
        (svc,) = out["services"]
        assert svc["role"] == "serve" and svc["state"] == "up"
        assert svc["projector"]["projector-rows"]["applied"] == 1
        assert svc["projector"]["projector-rows"]["lag_events"] == 0
        # the auditor inside serve follows both streams itself (its trail never waits for the projection)
        assert svc["auditor"]["auditor-events"]["stream"] == "MNEME_EVENTS"
        assert svc["auditor"]["auditor-access"]["stream"] == "MNEME_ACCESS"
        assert out["projector"]["model_status"] in ("ready", "loading") and out["data_bytes"]["nats"] > 0
        # bytes on disk, as `mneme snapshot` counts them (issue 28, item 10): the vector shard's files are sparse,
        # about 250 MiB apparent for one memory
        vectors = [k for k in out["data_bytes"] if k.startswith("vectors-") and (data / k).is_dir()]
        assert vectors
        for k in vectors:
            _, apparent, on_disk = disk_usage(data / k)
            assert apparent > 100 * 2**20 and out["data_bytes"][k] <= max(on_disk, 1) * 2 < apparent, (k, out)

        # the child dies on its own: serve starts it again on the same port, the memory goes on
        pid = nats_pid(data)
        os.kill(pid, signal.SIGKILL)
        assert await anyio.to_thread.run_sync(wait_dead, pid)

        async def write_again() -> dict[str, Any]:
            return result_of(await s.call_tool("memory_add", {"content": "after the crash", "store": "s", "path": "b"}))

        second = await until(write_again, 30, "no write succeeded after the nats-server child died")
        assert nats_pid(data) != pid
        got = result_of(await s.call_tool("memory_get", {"id": first["id"]}))
        assert got["content"] == "before the crash"
        got = result_of(await s.call_tool("memory_get", {"id": second["id"]}))
        assert got["content"] == "after the crash"
    errlog.close()
    lines = [json.loads(line) for line in (tmp_path / "serve.err").read_text().splitlines() if line.startswith("{")]
    assert any("starting it again" in x["msg"] for x in lines)
    # one request id joins the gateway's call line with the folding of the event it wrote
    calls = [x for x in lines if x["msg"].startswith("call memory_add ok") and x.get("request_id")]
    assert calls
    rid = calls[-1]["request_id"]
    joined = {x["logger"] for x in lines if x.get("request_id") == rid}
    assert {"mneme.gateway", "mneme.follow"} <= joined, joined


def test_a_terminal_gets_a_hint_instead_of_silence(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [MNEME, "serve", "--data-dir", str(tmp_path / "data")], stdin=slave, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    os.close(slave)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "waits for an MCP client on stdin" in line and "--transport http" in line
    finally:
        os.close(master)  # the terminal goes away: stdin ends, serve stops
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_limits_refuse_over_rate_and_in_flight() -> None:
    lim = Limits(rate=10, burst=3, max_in_flight=2)
    lim.acquire("a")
    lim.acquire("a")
    with pytest.raises(RateLimited) as e:  # two in flight already
        lim.acquire("a")
    assert e.value.details["max_in_flight"] == 2
    lim.acquire("b")  # another principal is not held back
    lim.release("a")
    lim.acquire("a")  # the third token of the burst
    lim.release("a")
    lim.release("a")
    with pytest.raises(RateLimited) as e:  # the bucket is empty
        lim.acquire("a")
    assert e.value.code == "RATE_LIMIT" and 0 < e.value.details["retry_after_s"] <= 0.1
    time.sleep(e.value.details["retry_after_s"] + 0.01)
    lim.acquire("a")
    assert lim.refused == 2 and lim.calls == 5


async def test_a_principal_over_its_rate_gets_rate_limit_and_nothing_is_written(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    gs = GatewaySettings(rate_limit=2, rate_burst=3)
    stack = await start_stack(tmp_path / "data", nats_server, gs)
    try:
        for i in range(3):
            await stack.call("memory_add", content=f"m{i}")
        head = await stack.last_seq()
        with pytest.raises(ToolFailure) as e:
            await stack.call("memory_add", content="one too many")
        assert e.value.code == "RATE_LIMIT" and e.value.error["details"]["retry_after_s"] > 0
        assert await stack.last_seq() == head
        await anyio.sleep(e.value.error["details"]["retry_after_s"] + 0.05)
        await stack.call("memory_add", content="after waiting")
        assert await stack.last_seq() == head + 1
    finally:
        await stack.close()
