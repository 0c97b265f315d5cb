"""`mneme serve --transport http` as an operator meets it: its configuration is checked and its port
bound before anything starts, it says where it listens, a running server's files are left alone, and
Ctrl-C stops it quietly."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.cli_checks import ENV, free_port, mneme, refused
from tests.harness import MNEME, nats_pid, wait_dead, wait_listening

pytestmark = pytest.mark.anyio


def test_anonymous_http_beyond_loopback_is_refused_before_anything_starts(tmp_path: Path) -> None:
    data = tmp_path / "d"
    t0 = time.monotonic()
    res = mneme("serve", "--data-dir", str(data), "--transport", "http", "--host", "0.0.0.0", "--port",
                str(free_port()), env={"MNEME_GATEWAY_HTTP_ANONYMOUS": "true"})  # fmt: skip
    seconds = time.monotonic() - t0
    line = refused(res, "loopback", "0.0.0.0", "MNEME_GATEWAY_PRINCIPALS_FILE")
    assert "set MNEME_GATEWAY_HTTP_ANONYMOUS" not in line, "it does not ask for the flag that is set"
    assert seconds < 1.5, f"refused after {seconds:.2f} s: it started things first"
    assert not data.exists(), "NATS or the projector started"
    refused(mneme("serve", "--data-dir", str(data), "--transport", "http"), "MNEME_GATEWAY_PRINCIPALS_FILE")


async def test_a_running_http_server_is_left_alone_and_stops_quietly(tmp_path: Path) -> None:
    data, port = tmp_path / "d", free_port()
    env = {**ENV, "MNEME_GATEWAY_HTTP_ANONYMOUS": "true"}
    argv = [MNEME, "serve", "--data-dir", str(data), "--transport", "http", "--port", str(port)]
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_listening(proc, port)
        # the trail and the projection are held by the server: audit verify and export go through it (issue 28,
        # item 13); a rebuild into the held file itself is refused, one line, nothing replaced (a rebuild of the
        # serving generation swaps a new one in through the server: tests/test_ops_beside_serve.py)
        for args in (["verify"], ["export", "--out", str(tmp_path / "t.jsonl")]):
            res = mneme("audit", *args, "--data-dir", str(data))
            assert res.returncode == 0 and json.loads(res.stdout)["live"] is True, res.stdout + res.stderr
        before = (data / "projector.duckdb").stat().st_ino
        refused(mneme("rebuild", "--data-dir", str(data), "--output", str(data / "projector.duckdb")),
                "projector.duckdb", "held by a running mneme serve")  # fmt: skip
        assert (data / "projector.duckdb").stat().st_ino == before and not list(data.glob("*.rebuild*"))
        # a second server on the same port: one line, before it starts anything
        other = tmp_path / "other"
        refused(mneme("serve", "--data-dir", str(other), "--transport", "http", "--port", str(port),
                      env={"MNEME_GATEWAY_HTTP_ANONYMOUS": "true"}), f"127.0.0.1:{port}", "in use")  # fmt: skip
        assert not other.exists()
        # a snapshot goes through the server: a short summary
        res = mneme("snapshot", "--data-dir", str(data))
        assert res.returncode == 0, res.stderr
        summary = json.loads(res.stdout)
        assert summary["ok"] and summary["live"] and len(res.stdout) < 1000, res.stdout
        assert "error" not in summary and "seq" in summary, res.stdout  # the summary, as at rest
        child = nats_pid(data)
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert proc.wait(20) == 0
        assert wait_dead(child)
        err = proc.stderr.read() if proc.stderr else ""
        assert err.strip() == f"mneme: listening on http://127.0.0.1:{port}/mcp", err
    finally:
        if proc.poll() is None:
            proc.kill()
