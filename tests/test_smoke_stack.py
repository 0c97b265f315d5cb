from __future__ import annotations

import functools

import pytest

from tests.harness import Stack, ToolFailure

pytestmark = pytest.mark.anyio


async def test_add_then_get_through_the_log(stack: Stack) -> None:
    added = await stack.call("memory_add", content="The user prefers pytest", store="s", path="prefs/testing")
    mem = added
    assert mem["version"] == 1 and mem["seq"] == await stack.last_seq() and not mem["duplicate"]
    assert "content" not in mem, "an add returns a receipt, not the content it was given"
    got = await stack.call("memory_get", id="s:prefs/testing")
    assert got["id"] == mem["id"] and got["content"] == "The user prefers pytest" and got["citations"] == []
    assert (got["seq"], got["created_at"], got["path"]) == (mem["seq"], mem["created_at"], mem["path"])
    with pytest.raises(ToolFailure) as err:
        await stack.call("memory_get", id="00000000-0000-4000-8000-000000000000")
    assert err.value.code == "MEMORY_NOT_FOUND"


async def test_close_under_write_load_commits_or_rolls_back_cleanly(stack: Stack) -> None:
    """Shutdown while batches are being folded: no error, and the checkpoint matches the rows."""
    import anyio

    async with anyio.create_task_group() as tg:
        for i in range(300):
            tg.start_soon(functools.partial(stack.call, "memory_add", content=f"{i} " + "x" * 5000))
    await stack.close()  # must not raise (DuckDB closed under a running transaction did)
    from services.projector.memories_view import MemoriesView

    view = MemoriesView(str(stack.data_dir / "projector.duckdb"))
    try:
        rows = view.con.execute("SELECT count(*), coalesce(max(last_seq), 0) FROM memories").fetchone()
        assert rows == (view.checkpoint, view.checkpoint)
    finally:
        view.close()
