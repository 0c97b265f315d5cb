"""Disk full for the projection directory, with a real projector process (a file-size limit, RLIMIT_FSIZE,
stands in for a small filesystem: DuckDB's write fails the same way, "File too large" for "No space left").

Writes to the log go on (the log is NATS's, elsewhere); the projector stops folding cleanly, says why in
`mneme status` (unhealthy, "stalled"), and when space returns (the limit raised on the running process)
it goes on from where it stopped: every acknowledged write is read back, and its rows equal a replay.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mneme.app import compose
from mneme.app.maintenance import rebuild
from mneme.app.settings import CoreSettings, GatewaySettings, ProjectorSettings
from mneme.embedded_nats import EmbeddedNats
from mneme.eventlog import ensure_streams
from services.gateway.server import build_server
from tests.harness import MNEME, result_of
from tests.test_projector_recovery import digest_of

pytestmark = pytest.mark.anyio

LIMIT = 3_000_000  # bytes any one file of the projector may reach
CONTENT = 5_000  # characters per memory: 1,000 memories overflow the limit


def status(url: str) -> dict[str, Any]:
    out = subprocess.run([MNEME, "status", "--json", "--nats-url", url], capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)


def projector_figures(st: dict[str, Any]) -> dict[str, Any]:
    found = [s for s in st.get("services", []) if s.get("role") == "projector"]
    assert len(found) == 1, f"expected one projector in mneme status: {st.get('services')} {st.get('problems')}"
    return found[0]["projector"]["projector-rows"]


async def test_a_full_disk_stalls_the_projector_cleanly_and_it_resumes(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    url = nats_server.url or ""
    data = tmp_path / "projector"
    env = {**os.environ, "MNEME_PROJECTOR_VECTORS": "off", "MNEME_DATA_DIR": str(data)}
    env.pop("MNEME_NATS_URL", None)

    def small_disk() -> None:  # in the child, before exec
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    err = (tmp_path / "projector.err").open("w")
    proc = subprocess.Popen(
        [MNEME, "projector", "--nats-url", url], env=env, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=small_disk
    )
    nc = await compose.connect(url, "test-writer")
    await ensure_streams(nc.jetstream())  # (the projector makes them too, but may still be starting)
    try:
        gw = compose.gateway(nc, GatewaySettings())
        async with Client(build_server(gw)) as client:
            ids = []
            for i in range(1000):  # acknowledged by the log whatever the projector's disk
                res = result_of(await client.call_tool("memory_add", {"content": f"{i} " + "x" * CONTENT}))
                ids.append(res["id"])
            head = res["seq"]

            deadline = time.monotonic() + 60
            st: dict[str, Any] = {}
            while time.monotonic() < deadline:
                st = await anyio.to_thread.run_sync(status, url)
                if any("stalled" in p for p in st.get("problems", [])):
                    break
                await anyio.sleep(1)
            else:
                raise AssertionError(f"the projector never said it stalled: {st.get('problems')}")
            assert proc.poll() is None, "the projector died instead of stalling"
            assert st["healthy"] is False
            rows = projector_figures(st)
            assert "File too large" in rows["stalled"] or "No space" in rows["stalled"]
            assert rows["committed"] < head

            resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                st = await anyio.to_thread.run_sync(status, url)
                rows = projector_figures(st)
                if rows["committed"] >= head and "stalled" not in rows:
                    break
                await anyio.sleep(1)
            else:
                raise AssertionError(f"the projector did not resume: {rows}")
            assert st["healthy"], st["problems"]
            for mid in (ids[0], ids[len(ids) // 2], ids[-1]):
                got = result_of(await client.call_tool("memory_get", {"id": mid}))
                assert got["id"] == mid
    finally:
        proc.terminate()  # (a clean stop: what is staged is committed)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        err.close()
        await compose.close_nats(nc)
    log = (tmp_path / "projector.err").read_text()
    assert "commits work again" in log, log[-2000:]
    # the rows it committed after the stall equal a fresh fold of the log
    fresh = await rebuild(CoreSettings(nats_url=url, data_dir=tmp_path / "fresh"), ProjectorSettings(vectors="off"))
    assert fresh["events"] == head
    assert digest_of(data / "projector.duckdb") == fresh["digest"]
