"""Issue 28, item 13: `mneme rebuild`, `mneme audit verify` and `mneme audit export` work beside a running
`mneme serve` on the same data directory, through it (its NATS; no second nats-server), while it keeps
serving; and the progress of a fold written anywhere but a terminal is lines, not one long `\\r` line."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import duckdb
import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client

from mneme.app.progress import Progress
from tests.cli_checks import mneme
from tests.harness import result_of, serve_params

pytestmark = pytest.mark.anyio


async def run(*args: str) -> tuple[int, dict, str]:
    res = await asyncio.to_thread(mneme, *args)
    lines = res.stdout.strip().splitlines()
    return res.returncode, (json.loads(lines[-1]) if lines else {}), res.stderr


async def test_audit_verify_and_export_beside_a_running_serve(tmp_path: Path) -> None:
    data = tmp_path / "d"
    async with stdio_client(serve_params(data)) as (r, w), ClientSession(r, w) as cs:
        await cs.initialize()
        ids = [result_of(await cs.call_tool("memory_add", {"content": f"note {i}"}))["id"] for i in range(5)]
        for i in ids[:3]:
            result_of(await cs.call_tool("memory_get", {"id": i}))
        url = (data / "nats" / "client-url").read_text()

        code, verified, err = await run("audit", "verify", "--data-dir", str(data))
        assert code == 0, err
        assert verified == {"records": verified["records"], "ok": True, "first_broken_seq": None, "live": True}
        assert verified["records"] >= 5
        full, reads = tmp_path / "all.jsonl", tmp_path / "reads.parquet"
        code, exported, err = await run("audit", "export", "--data-dir", str(data), "--out", str(full))
        assert code == 0 and exported["live"] is True and exported["records"] >= 5, err
        code, filtered, err = await run("audit", "export", "--data-dir", str(data), "--out", str(reads),
                                        "--format", "parquet", "--action-prefix", "read:")  # fmt: skip
        assert code == 0 and filtered["records"] == 3, (filtered, err)
        got = duckdb.connect().execute(f"SELECT action, memory_ids[1] FROM read_parquet('{reads}')").fetchall()
        assert got == [("read:memory_get", i) for i in ids[:3]]
        assert (data / "nats" / "client-url").read_text() == url, "a second nats-server started"
        result_of(await cs.call_tool("memory_add", {"content": "still serving"}))
    live = full.read_text().splitlines()

    # at rest, the same trail exports the same lines (the live export is a prefix: the serve recorded more since)
    at_rest = tmp_path / "rest.jsonl"
    code, _, err = await run("audit", "export", "--data-dir", str(data), "--out", str(at_rest))
    assert code == 0, err
    assert at_rest.read_text().splitlines()[: len(live)] == live and all('"hash"' in line for line in live)

    # a trail changed at rest, then served again: verified beside the serve, the break is named
    con = duckdb.connect(str(data / "audit.duckdb"))
    con.execute("UPDATE audit_trail SET agent_id = 'mallory' WHERE trail_seq = 2")
    con.close()
    async with stdio_client(serve_params(data)) as (r, w), ClientSession(r, w) as cs:
        await cs.initialize()
        result_of(await cs.call_tool("memory_list", {}))
        code, verified, err = await run("audit", "verify", "--data-dir", str(data))
        assert code == 1 and verified["first_broken_seq"] == 2 and verified["live"] is True, (verified, err)


async def test_rebuild_beside_a_running_serve_swaps_in_while_it_serves(tmp_path: Path) -> None:
    data = tmp_path / "d"
    async with stdio_client(serve_params(data)) as (r, w), ClientSession(r, w) as cs:
        await cs.initialize()
        texts = ["the harbour opens at six", "the ferry leaves at noon", "the lighthouse is closed"]
        ids = [result_of(await cs.call_tool("memory_add", {"content": t}))["id"] for t in texts]
        result_of(await cs.call_tool("memory_update", {"id": ids[0], "content": "the harbour opens at seven"}))
        url_file = data / "nats" / "client-url"
        before = url_file.read_text()

        res = await asyncio.to_thread(mneme, "rebuild", "--data-dir", str(data))
        assert res.returncode == 0, res.stderr
        out = json.loads(res.stdout)
        assert out["events"] == 4 and out["swap"]["live"] is True and out["digest"], out
        assert Path(out["path"]).is_file() and Path(out["path"]).parent.parent == data / "projections"
        assert "\r" not in res.stderr and res.stderr.strip().splitlines()[-1].startswith("4/4 events"), res.stderr
        assert url_file.read_text() == before, "a second nats-server started"

        # the serve goes on, from the rebuilt generation: reads (by meaning too) and writes
        got = result_of(await cs.call_tool("memory_get", {"id": ids[0]}))
        assert got["content"] == "the harbour opens at seven" and got["version"] == 2
        found = result_of(await cs.call_tool("memory_search", {"query": "when does the ferry leave"}))
        assert found["results"][0]["id"] == ids[1], found
        result_of(await cs.call_tool("memory_add", {"content": "the harbour master retires"}))
        assert result_of(await cs.call_tool("memory_list", {}))["total"] == 4
        status = await asyncio.to_thread(mneme, "status", "--data-dir", str(data))
        assert status.returncode == 0, status.stdout + status.stderr


def test_progress_in_a_file_is_lines_at_most_every_few_seconds_and_the_last() -> None:
    now = [0.0]
    out = io.StringIO()
    progress = Progress(out, every=5.0, tty=False, clock=lambda: now[0])
    for done in range(0, 1001, 10):  # 100 steps over 20 s
        now[0] = done / 50
        progress(done, 1000, max(now[0], 0.001))
    progress(1000, 1000, 20.0)  # the final line once
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and out.getvalue().endswith("\n")
    assert 4 <= len(lines) <= 6, lines
    assert lines[0].startswith("0/1000 events") and lines[-1].startswith("1000/1000 events (100%)"), lines
    assert sum(line.startswith("1000/1000") for line in lines) == 1

    tty = io.StringIO()
    bar = Progress(tty, tty=True)
    bar(5, 10, 1.0)
    bar(10, 10, 2.0)
    bar(10, 10, 2.0)
    assert tty.getvalue().count("\r") == 2 and tty.getvalue().endswith("\n") and tty.getvalue().count("\n") == 1
