"""The code index end to end: memory-mcp's code tools over a real stack (NATS, DuckDB, the bundled model).

Indexing the fixture repository records the run in the log; the projector folds it and embeds the chunks; the
status goes from indexing to completed with progress; search finds a function by what it does; a re-index
records only what changed (an edit, an add, a delete); every path error is refused; delete_project removes a
project; and the index is rebuilt from the log alone, after the files are gone.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mneme.app.settings import GatewaySettings
from mneme.embed_cache import EmbeddingCache
from mneme.embedded_nats import EmbeddedNats
from mneme.follow import LogFollower
from schemas.queries import CodeIndexStatus
from services.gateway.server import build_server
from services.projector.code_queries import status as code_status
from services.projector.code_view import CodeView
from tests.harness import Stack, ToolFailure, shared_model, start_stack, text_of

pytestmark = pytest.mark.anyio
FIXTURE = Path(__file__).parent / "fixtures" / "coderepo"


class MM:
    def __init__(self, client: Client):
        self.client = client

    async def __call__(self, tool: str, **args: Any) -> Any:
        res = await self.client.call_tool(tool, args)
        if res.is_error:
            raise ToolFailure(json.dumps({"error": {"code": "TEXT", "message": text_of(res)}}))
        return res.structured_content


@pytest.fixture
async def env(tmp_path: Path, nats_server: EmbeddedNats) -> AsyncIterator[tuple[Stack, MM, Path]]:
    stack = await start_stack(tmp_path / "data", nats_server, GatewaySettings(), vectors=True)
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo, symlinks=True)
    async with Client(build_server(stack.gateway, profile="memory-mcp")) as c:
        yield stack, MM(c), repo
    await stack.close()


async def until_completed(mm: MM, project: str, timeout: float = 60) -> dict[str, Any]:
    seen = []
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        s = await mm("get_index_status", project_id=project)
        seen.append(s["status"])
        if s["status"] == "completed":
            s["seen"] = seen
            return s
        assert asyncio.get_running_loop().time() < deadline, s
        await asyncio.sleep(0.05)


async def test_index_search_reindex_and_delete(env: tuple[Stack, MM, Path]) -> None:
    _, mm, repo = env
    got = await mm("index_project", path=str(repo))
    assert got["project_id"] == "repo" and got["files_indexed"] >= 6 and got["chunks_created"] >= got["files_indexed"]
    done = await until_completed(mm, "repo")
    assert done["total_files"] == got["files_indexed"] and done["indexed_files"] == done["total_files"]
    assert done["total_chunks"] == got["chunks_created"] and done["progress_percent"] == 100.0
    assert done["completed_at"] is not None and set(done["seen"]) <= {"indexing", "completed"}
    assert (await mm("list_projects")) == {"projects": ["repo"], "count": 1}

    found = await mm("search_code", query="restock a part in the inventory by sku", limit=5)
    top = found["results"][0]
    assert top["file_path"] == "src/inventory.py" and top["language"] == "python"
    assert "restock" in top["content"] and 1 <= top["start_line"] <= top["end_line"]
    assert found["count"] == len(found["results"]) <= 5

    # an edit, an add and a delete: only those are recorded again
    (repo / "src" / "inventory.py").write_text(
        (repo / "src" / "inventory.py").read_text() + "\n\ndef audit_shelves() -> int:\n    return 42\n"
    )
    (repo / "svc" / "extra.go").write_text('package svc\n\nfunc Ping() string { return "pong" }\n')
    (repo / "crate" / "lib.rs").unlink()
    again = await mm("index_project", path=str(repo))
    assert again["project_id"] == "repo" and again["files_indexed"] == 2
    done2 = await until_completed(mm, "repo")
    hits = await mm("search_code", query="audit shelves", project_id="repo", limit=3)
    assert any("audit_shelves" in h["content"] for h in hits["results"])
    everything = await mm("search_code", query="rust", limit=50)
    assert all(h["file_path"] != "crate/lib.rs" for h in everything["results"])
    assert done2["total_chunks"] != done["total_chunks"]

    recall = await mm("recall", query="restock inventory", include_code=True, include_memories=True)
    assert recall["code_count"] >= 1 and any(r["source"] == "code" and r["file_path"] for r in recall["results"])

    gone = await mm("delete_project", project_id="repo")
    assert gone["chunks_deleted"] == done2["total_chunks"]
    assert (await mm("list_projects")) == {"projects": [], "count": 0}
    assert (await mm("get_index_status", project_id="repo"))["status"] == "pending"


async def test_every_path_error_is_refused(env: tuple[Stack, MM, Path]) -> None:
    _, mm, repo = env
    (repo / "afile.txt").write_text("x")
    for path in (repo / "missing", repo / "afile.txt"):
        with pytest.raises(ToolFailure) as e:
            await mm("index_project", path=str(path))
        assert e.value.error["message"].startswith(f"Invalid path: {path}")
    assert (await mm("list_projects"))["count"] == 0, "nothing was recorded"


async def test_allowed_roots_refuse_a_path_outside(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    stack = await start_stack(tmp_path / "data", nats_server, GatewaySettings(code_roots=[tmp_path / "allowed"]))
    try:
        (tmp_path / "allowed").mkdir()
        async with Client(build_server(stack.gateway, profile="memory-mcp")) as c:
            with pytest.raises(ToolFailure) as e:
                await MM(c)("index_project", path=str(tmp_path))
        assert e.value.error["message"].startswith(f"Invalid path: {tmp_path}")
    finally:
        await stack.close()


async def test_the_code_index_is_rebuilt_from_the_log_without_the_files(
    env: tuple[Stack, MM, Path], tmp_path: Path
) -> None:
    stack, mm, repo = env
    await mm("index_project", path=str(repo))
    before = await until_completed(mm, "repo")
    live = stack.projector.code
    assert live is not None
    rows_before = (
        live.reader()
        .execute("SELECT id, path, start_line, end_line, chunk_type, name, code FROM code_chunks ORDER BY id")
        .fetchall()
    )
    shutil.rmtree(repo)  # the files are gone; the log has what the index needs
    model = shared_model()
    rebuilt = CodeView(str(tmp_path / "rebuilt.duckdb"), model, EmbeddingCache(tmp_path / "cache.sqlite"))
    follower = LogFollower(stack.nc.jetstream(), rebuilt)
    await follower.start()
    try:
        assert await follower.wait_for(await stack.last_seq(), 30, committed=True)
    finally:
        await follower.stop()
    while rebuilt.fill_once():
        pass
    rows_after = (
        rebuilt.reader()
        .execute("SELECT id, path, start_line, end_line, chunk_type, name, code FROM code_chunks ORDER BY id")
        .fetchall()
    )
    assert rows_after == rows_before and len(rows_after) == before["total_chunks"]
    assert rebuilt.pending() == 0
    status = await asyncio.to_thread(
        code_status,
        rebuilt,
        CodeIndexStatus(namespace="default", now=stack.gateway.now(), project_id="repo"),
    )
    assert status.status == "completed" and status.total_chunks == before["total_chunks"]
    rebuilt.close()


def test_pieces_of_one_long_line_are_each_kept(tmp_path: Path) -> None:
    """A line over the token budget is cut into pieces with the same line range: each piece is its own chunk."""
    from datetime import UTC, datetime

    from mneme.sink import Positioned
    from schemas.code_events import CodeChunk, CodeFileIndexed
    from schemas.events import Actor, Envelope

    pieces = tuple(CodeChunk(start_line=1, end_line=1, chunk_type="lines", name=None, header="a.py", code=c)
                   for c in ("x = [1, 2,", " 3, 4]"))  # fmt: skip
    ev = CodeFileIndexed(project_id="p", run_id="r", path="a.py", language="python", sha256="s", size=9, chunks=pieces)
    env = Envelope(event_id="e", schema_version=1, namespace="ns", aggregate_id="p", occurred_at=datetime.now(UTC),
                   actor=Actor(agent_id="a"), request_id="r", event=ev)  # fmt: skip
    view = CodeView(str(tmp_path / "c.duckdb"), shared_model(), EmbeddingCache(None), background=False)
    view.stage([Positioned(1, env.occurred_at, env)], 1)
    view.commit()
    got = view.reader().execute("SELECT code FROM code_chunks ORDER BY code").fetchall()
    view.close()
    assert got == [(" 3, 4]",), ("x = [1, 2,",)]


def test_status_pending_indexing_completed_and_failed(tmp_path: Path) -> None:
    """The status of a project through a run's events: indexing while files are recorded and chunks wait for
    their vectors, completed when every chunk has one, failed (with the error) when the run says so."""
    from datetime import UTC, datetime

    from mneme.sink import Positioned
    from schemas.code_events import CodeChunk, CodeFileIndexed, CodeIndexFinished, CodeIndexStarted
    from schemas.events import Actor, Envelope
    from schemas.queries import CodeIndexStatus

    now = datetime.now(UTC)

    def at(seq: int, ev: Any) -> Positioned:
        env = Envelope(event_id=f"e{seq}", schema_version=1, namespace="ns", aggregate_id=ev.project_id,
                       occurred_at=now, actor=Actor(agent_id="a"), request_id="r", event=ev)  # fmt: skip
        return Positioned(seq, now, env)

    view = CodeView(str(tmp_path / "c.duckdb"), shared_model(), EmbeddingCache(None), background=False)

    def status(project: str) -> Any:
        return code_status(view, CodeIndexStatus(namespace="ns", now=now, project_id=project))

    assert status("p").status == "pending" and not status("p").found
    header = "a.py \u203a f"
    chunk = CodeChunk(start_line=1, end_line=2, chunk_type="function", name="f", header=header, code="def f(): ...")
    view.stage([at(1, CodeIndexStarted(project_id="p", run_id="r1", root="/x", total_files=2, total_bytes=20))], 1)
    view.stage([at(2, CodeFileIndexed(project_id="p", run_id="r1", path="a.py", language="python", sha256="s",
                                      size=10, chunks=(chunk,)))], 2)  # fmt: skip
    view.commit()
    mid = status("p")
    assert (mid.status, mid.indexed_files, mid.total_files, mid.total_chunks, mid.embedded_chunks) == (
        "indexing",
        1,
        2,
        1,
        0,
    )
    assert 0 < mid.progress_percent < 100
    view.stage([at(3, CodeIndexFinished(project_id="p", run_id="r1", status="completed"))], 3)
    view.commit()
    assert status("p").status == "indexing", "every chunk needs its vector first"
    while view.fill_once():
        pass
    done = status("p")
    assert (done.status, done.progress_percent, done.embedded_chunks) == ("completed", 100.0, 1)
    assert done.completed_at is not None
    view.stage([at(4, CodeIndexStarted(project_id="q", run_id="r2", root="/y", total_files=1, total_bytes=5))], 4)
    view.stage([at(5, CodeIndexFinished(project_id="q", run_id="r2", status="failed", error="OSError: gone"))], 5)
    view.commit()
    failed = status("q")
    assert (failed.status, failed.error) == ("failed", "OSError: gone")
    view.close()


def test_events_without_code_move_the_checkpoint_without_a_write(tmp_path: Path) -> None:
    """A commit of other events covers them in memory (no transaction on code.duckdb for each of a busy log's
    commits); the saved position moves with code events, every PERSIST_EVERY events and at close. After a
    crash the view resumes from the saved position and folds each code event once."""
    from datetime import UTC, datetime

    import duckdb

    from mneme.sink import Positioned
    from schemas.code_events import CodeIndexFinished, CodeIndexStarted
    from schemas.events import Actor, Envelope, MemoryArchived
    from services.projector import code_view

    now = datetime.now(UTC)
    every = code_view.PERSIST_EVERY

    def at(seq: int, ev: Any) -> Positioned:
        env = Envelope(event_id=f"e{seq}", schema_version=1, namespace="ns", aggregate_id="p", occurred_at=now,
                       actor=Actor(agent_id="a"), request_id="r", event=ev)  # fmt: skip
        return Positioned(seq, now, env)

    def other(seq: int) -> Positioned:
        return at(seq, MemoryArchived(memory_id="m", version=2))

    def saved() -> int:
        with duckdb.connect(str(path), read_only=True) as con:
            return int(con.execute("SELECT seq FROM code_checkpoints").fetchall()[0][0])

    path = tmp_path / "c.duckdb"
    view = CodeView(str(path), shared_model(), EmbeddingCache(None), background=False)
    view.stage([at(1, CodeIndexStarted(project_id="p", run_id="r1", root="/x", total_files=1, total_bytes=1))], 1)
    assert view.commit() == 1
    for seq in range(2, 50):
        view.stage([other(seq)], seq)
        assert view.commit() == seq and view.checkpoint == seq
    view.con.close()  # a crash: nothing saved since the code event
    assert saved() == 1, "no write for commits without code events"

    view = CodeView(str(path), shared_model(), EmbeddingCache(None), background=False)
    assert view.checkpoint == 1
    view.stage([other(seq) for seq in range(2, 50)], 49)  # the follower refolds from the saved position
    view.stage([at(50, CodeIndexFinished(project_id="p", run_id="r1", status="failed", error="x"))], 50)
    assert view.commit() == 50
    view.stage([other(every + 50)], every + 50)
    view.commit()
    view.stage([other(every + 51)], every + 51)
    view.commit()
    rows = view.reader().execute("SELECT count(*), min(status) FROM code_projects").fetchall()
    view.close()
    assert rows == [(1, "failed")]
    assert saved() == every + 51, "saved every PERSIST_EVERY events, and at close"
