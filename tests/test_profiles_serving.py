"""Serving profiles: `--profile` chooses the stdio surface; HTTP serves every profile at once, each at its
own path with its own tool list, over one memory and one set of principals."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from mcp import Client

from mneme.app.cli import _stores
from mneme.app.preflight import Refused
from services.gateway import profiles
from tests.harness import MNEME, free_port, wait_listening

pytestmark = pytest.mark.anyio


def test_an_unknown_profile_is_refused_before_anything_starts(tmp_path: Path) -> None:
    t0 = time.monotonic()
    res = subprocess.run(
        [MNEME, "serve", "--data-dir", str(tmp_path / "d"), "--profile", "bogus"],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert res.returncode != 0 and "bogus" in res.stderr and "native" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "d").exists()
    assert time.monotonic() - t0 < 10


def test_store_flags_add_to_the_environment_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MNEME_GATEWAY_STORES", '{"notes": "acme/notes"}')
    assert _stores(["kb=acme/kb", "scratch"]) == {"notes": "acme/notes", "kb": "acme/kb", "scratch": ""}
    with pytest.raises(Refused):
        _stores(["=x"])
    monkeypatch.setenv("MNEME_GATEWAY_STORES", "not json")
    with pytest.raises(Refused):
        _stores(["kb"])


async def test_http_serves_every_profile_at_its_own_path(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([MNEME, "serve", "--data-dir", str(tmp_path / "d"), "--transport", "http",
                             "--host", "127.0.0.1", "--port", str(port)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "MNEME_GATEWAY_HTTP_ANONYMOUS": "true"})  # fmt: skip
    try:
        wait_listening(proc, port)
        lists: dict[str, set[str]] = {}
        for name in profiles.names():
            async with Client(f"http://127.0.0.1:{port}{profiles.http_path(name)}") as client:
                init = client.initialize_result if hasattr(client, "initialize_result") else None
                lists[name] = {t.name for t in (await client.list_tools()).tools}
                assert lists[name], name
                if init is not None and getattr(init, "server_info", None) is not None:
                    assert init.server_info.name.endswith(name) or name == "native"
        assert "memory_add" in lists["native"]
        for name, tools in lists.items():  # each its own list
            if name != "native":
                assert tools != lists["native"], name
        proc.terminate()
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
