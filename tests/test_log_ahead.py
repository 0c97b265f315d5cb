"""No read model ahead of the log (issue 29, item 2), with real `mneme serve` processes and no FUSE.

The log's store directory is put back from an older copy (the log is then shorter than the read models), or
taken from a branch that went on differently (the log is as long, with other events under the same sequences),
under read models that went further. Every follower must notice, and nothing may be answered from that state:
the projector rebuilds its read models from the log (status shows it), the audit trail keeps the records of the
lost events as evidence and says which (`mneme audit verify`), and the memories are those of the log.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client

from tests.harness import MNEME, ToolFailure, nats_pid, result_of, serve_params

pytestmark = pytest.mark.anyio


class Call:
    def __init__(self, s: ClientSession):
        self.s = s

    async def __call__(self, tool: str, **args: Any) -> dict[str, Any]:
        return result_of(await self.s.call_tool(tool, args))


@asynccontextmanager
async def serving(data: Path, errlog: Path) -> AsyncIterator[Call]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
    with errlog.open("a") as err:
        async with stdio_client(serve_params(data, env=env), errlog=err) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            yield Call(s)


async def add(call: Call, *names: str) -> None:
    for name in names:
        await call("memory_add", content=f"fact {name}", store="s", path=f"p/{name}")


async def contents(call: Call) -> set[str]:
    """What memory_list answers, once it answers (REBUILDING is asked again, as a client would)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            page = await call("memory_list", store="s", limit=100)
            return {r["content"] for r in page["results"]}
        except ToolFailure as exc:
            if "REBUILDING" not in str(exc) or time.monotonic() > deadline:
                raise
            await anyio.sleep(0.5)


def status(data: Path) -> dict[str, Any]:
    out = subprocess.run([MNEME, "status", "--json", "--data-dir", str(data)], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    return dict(json.loads(out.stdout))


def verify(data: Path) -> tuple[dict[str, Any], str]:
    out = subprocess.run([MNEME, "audit", "verify", "--data-dir", str(data)], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    return dict(json.loads(out.stdout.splitlines()[-1])), out.stderr


async def until_status(data: Path, ok: Any, what: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        got = await anyio.to_thread.run_sync(status, data)
        svc = (got.get("services") or [{}])[0]
        if ok(svc):
            return svc
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}; last status: {json.dumps(svc)[:2000]}")
        await anyio.sleep(1)


def trail_caught_up(svc: dict[str, Any]) -> bool:
    """Every auditor consumer has committed the last event of its stream (the trail holds what the log does)."""
    followers = [f for f in (svc.get("auditor") or {}).values() if isinstance(f, dict)]
    return bool(followers) and all(f["lag_events"] == 0 and f["committed"] >= f["applied"] for f in followers)


def put_back(store: Path, data: Path) -> None:
    shutil.rmtree(data / "nats")
    shutil.copytree(store, data / "nats")
    (data / "nats" / "nats-server.pid").unlink(missing_ok=True)


def trail_lost(data: Path, lost: set[str]) -> None:
    """`mneme audit verify` (the trail at rest): the chain holds, the records of the lost events are kept and
    named, and the first one named is the first lost event's record."""
    got, err = verify(data)
    assert got["ok"] is True and got["first_broken_seq"] is None
    ranges = got["lost_from_log"]
    # the earliest lost record, whichever source's realignment was noted first (access may be before events)
    assert got["first_lost_record"] == min(r["first_record"] for r in ranges)
    assert "hold events the log no longer has" in err
    import duckdb

    con = duckdb.connect(str(data / "audit.duckdb"), read_only=True)
    try:
        (events,) = [r for r in ranges if r["source"] == "events"]
        kept = con.execute(
            "SELECT count(*) FROM audit_trail WHERE source = 'events' AND trail_seq BETWEEN ? AND ? "
            "AND action = 'memory_created'", [events["first_record"], events["last_record"]]
        ).fetchone()  # fmt: skip
        assert kept is not None and kept[0] >= len(lost)  # evidence: the lost creates are still recorded
        row = con.execute("SELECT action FROM audit_trail WHERE trail_seq = ?", [events["first_record"]]).fetchone()
        assert row is not None and row[0] == "memory_created"
    finally:
        con.close()


async def test_an_older_copy_of_the_log_under_newer_read_models_is_detected_and_rebuilt(tmp_path: Path) -> None:
    data, err = tmp_path / "d", tmp_path / "serve.err"
    async with serving(data, err) as call:
        await add(call, "a1", "a2", "a3")
    older = tmp_path / "older-nats"
    shutil.copytree(data / "nats", older)
    async with serving(data, err) as call:
        await add(call, "b1", "b2")
        await call("memory_get", id="s:p/b1")  # an access record too
        assert await contents(call) == {"fact a1", "fact a2", "fact a3", "fact b1", "fact b2"}
    put_back(older, data)  # the log is now shorter than every read model
    async with serving(data, err) as call:
        # never the divergent state: b1 and b2 are not in the log, so they are not answered
        assert await contents(call) == {"fact a1", "fact a2", "fact a3"}
        with pytest.raises(ToolFailure, match="NOT_FOUND"):
            await call("memory_get", id="s:p/b1")
        await add(call, "c1")  # the log goes on from where it is
        assert await contents(call) == {"fact a1", "fact a2", "fact a3", "fact c1"}
        svc = await until_status(
            data, lambda s: s.get("projector", {}).get("rebuilds") and s.get("auditor", {}).get("realigned"),
            "no rebuild and no realigned trail in status",
        )  # fmt: skip
        (rebuilt,) = svc["projector"]["rebuilds"]
        assert "past the log's last sequence" in rebuilt["why"]
        assert any(r["source"] == "events" and r["records"] >= 2 for r in svc["auditor"]["realigned"])
    logged = err.read_text()
    assert "read models ahead of the log" in logged and "audit trail (events) was ahead of the log" in logged
    trail_lost(data, {"b1", "b2"})


async def test_a_log_that_went_on_differently_is_detected_by_the_event_at_the_checkpoint(tmp_path: Path) -> None:
    """As long a log (or longer), other events under the same sequences: only the marks tell."""
    data, err = tmp_path / "d", tmp_path / "serve.err"
    async with serving(data, err) as call:
        await add(call, "a1", "a2")
    branch = tmp_path / "branch"
    shutil.copytree(data, branch)
    async with serving(data, err) as call:
        await add(call, "b1", "b2")
    async with serving(branch, err) as call:
        await add(call, "x1", "x2", "x3", "x4")  # the same sequences and more, other events
    put_back(branch / "nats", data)
    async with serving(data, err) as call:
        assert await contents(call) == {"fact a1", "fact a2", "fact x1", "fact x2", "fact x3", "fact x4"}
        svc = await until_status(data, lambda s: s.get("projector", {}).get("rebuilds"), "no rebuild in status")
        assert "applied another event" in svc["projector"]["rebuilds"][0]["why"]
    trail_lost(data, {"b1", "b2"})
    # the rebuilt read models equal a fresh replay of the log
    out = subprocess.run([MNEME, "rebuild", "--data-dir", str(data), "--output", str(tmp_path / "fresh.duckdb")],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    import duckdb

    def rows(path: Path) -> list[tuple[Any, ...]]:
        con = duckdb.connect(str(path), read_only=True)
        try:
            return con.execute("SELECT id, version, content, seq FROM memory_versions ORDER BY id, version").fetchall()
        finally:
            con.close()

    assert rows(data / "projector.duckdb") == rows(tmp_path / "fresh.duckdb")


async def test_a_server_that_comes_back_on_an_older_store_is_caught_while_serving(tmp_path: Path) -> None:
    """While `mneme serve` runs, its nats-server child dies and comes back (the supervisor restarts it) on an
    older copy of the store: the followers notice when their connection comes back, reads are refused until the
    read models are rebuilt, and then they answer what the log holds."""
    data, err = tmp_path / "d", tmp_path / "serve.err"
    async with serving(data, err) as call:
        await add(call, "a1", "a2")
    older = tmp_path / "older-nats"
    shutil.copytree(data / "nats", older)
    async with serving(data, err) as call:
        await add(call, "b1", "b2", "b3")
        assert len(await contents(call)) == 5
        await until_status(data, trail_caught_up, "the auditor did not record b1..b3 before the crash")
        serve = int((data / "serve.pid").read_text()) if (data / "serve.pid").exists() else None
        child = nats_pid(data)
        parent = serve or _parent_of(child)
        os.kill(parent, signal.SIGSTOP)  # the supervisor cannot restart the child before the store is swapped
        try:
            os.kill(child, signal.SIGKILL)
            _wait_gone(child)
            put_back(older, data)
        finally:
            os.kill(parent, signal.SIGCONT)
        svc = await until_status(
            data, lambda s: s.get("projector", {}).get("rebuilds"), "the running projector did not rebuild", 120
        )
        assert svc["projector"]["rebuilds"][0]["why"]
        assert await contents(call) == {"fact a1", "fact a2"}
        await add(call, "c1")
        assert await contents(call) == {"fact a1", "fact a2", "fact c1"}
    trail_lost(data, {"b1", "b2", "b3"})


def _parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return
        time.sleep(0.05)
