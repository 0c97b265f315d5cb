"""`mneme serve --transport http`: the same tools over streamable HTTP on loopback."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from mcp import Client

from tests.harness import MNEME, ToolFailure, nats_pid, result_of, wait_dead

pytestmark = pytest.mark.anyio


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_tools_over_streamable_http_and_clean_stop(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([MNEME, "serve", "--data-dir", str(tmp_path / "d"), "--transport", "http",
                             "--host", "127.0.0.1", "--port", str(port)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "MNEME_GATEWAY_HTTP_ANONYMOUS": "true"})  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                assert time.monotonic() < deadline, "HTTP server did not listen"
                time.sleep(0.05)
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert "memory_add" in names and "memory_stats" in names
            for i in range(20):  # read-your-writes over HTTP, request by request
                added = result_of(await client.call_tool("memory_add", {"content": f"over http {i}"}))
                got = result_of(await client.call_tool("memory_get", {"id": added["id"]}))
                assert got["content"] == f"over http {i}"
            with pytest.raises(ToolFailure) as err:
                result_of(await client.call_tool("memory_list", {"sort_by": "size"}))
            assert err.value.code == "INVALID_INPUT" and err.value.field == "sort_by"
        child = nats_pid(tmp_path / "d")
        proc.terminate()
        assert proc.wait(20) == 0
        assert wait_dead(child), "nats-server outlived mneme serve --transport http"
        err = proc.stderr.read().decode() if proc.stderr else ""
        assert "Traceback" not in err and "CancelledError" not in err, err  # SIGTERM stops it quietly
    finally:
        if proc.poll() is None:
            proc.kill()
