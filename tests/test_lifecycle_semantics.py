"""What the tools say about a memory's lifecycle agrees (issue 9, items 5-7): diffs, expired paths, restore,
and access statistics in past reads."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.gateway.time_tools import content_diff
from tests.harness import Stack, ToolFailure

pytestmark = pytest.mark.anyio


def test_content_diff_keeps_lines_apart_without_a_final_newline() -> None:
    assert content_diff("v2 text", "v1 text", "a", "b") == "--- a\n+++ b\n@@ -1 +1 @@\n-v2 text\n+v1 text"
    two = content_diff("one\ntwo", "one\nthree\n", "a", "b").splitlines()
    assert two[-2:] == ["-two", "+three"]


async def test_memory_diff_without_trailing_newline(stack: Stack) -> None:
    m = await stack.call("memory_add", content="v1 text")
    await stack.call("memory_update", id=m["id"], content="v2 text")
    d = await stack.call("memory_diff", id=m["id"], from_version=1, to_version=2)
    assert d["content_diff"].splitlines()[-2:] == ["-v1 text", "+v2 text"]


async def test_an_expired_path_is_taken_and_every_tool_says_so(stack: Stack) -> None:
    """Decision: an expired memory keeps its path (hidden by default, shown with include_expired) until it is
    pruned or permanently deleted: get says it expired, add names the holder, prune frees the path."""
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    m = await stack.call("memory_add", content="frozen", store="tmp", path="frozen", expires_at=past)
    with pytest.raises(ToolFailure) as err:
        await stack.call("memory_get", id="tmp:frozen")
    assert err.value.code == "MEMORY_NOT_FOUND" and "expired" in err.value.error["message"]
    assert "include_expired" in err.value.error["message"]
    shown = await stack.call("memory_get", id="tmp:frozen", include_expired=True)
    assert shown["id"] == m["id"] and shown["expired"] is True
    listed = await stack.call("memory_list", store="tmp", include_expired=True)
    assert [x["id"] for x in listed["results"]] == [m["id"]]
    with pytest.raises(ToolFailure) as err:
        await stack.call("memory_add", content="new", store="tmp", path="frozen")
    assert err.value.code == "ALREADY_EXISTS" and err.value.error["details"]["memory_id"] == m["id"]
    assert "expired" in err.value.error["message"]
    # writes reach it by path (clear_expiry revives it, as the cortex contract expects) ...
    revived = await stack.call("memory_update", id="tmp:frozen", clear_expiry=True)
    assert "expires_at" in revived["updated_fields"]
    got = await stack.call("memory_get", id="tmp:frozen")
    assert got["id"] == m["id"] and got.get("expires_at") is None
    # ... and pruning frees the path
    await stack.call("memory_update", id="tmp:frozen", expires_at=past)
    assert (await stack.call("memory_prune_expired"))["pruned"] == 1
    assert (await stack.call("memory_add", content="new", store="tmp", path="frozen"))["id"] != m["id"]


async def test_restore_brings_back_archived_memories_only(stack: Stack) -> None:
    m = await stack.call("memory_add", content="old advice")
    await stack.call("memory_retire", id=m["id"], mode="deprecate", reason="superseded")
    head = await stack.last_seq()
    with pytest.raises(ToolFailure) as err:
        await stack.call("memory_restore", id=m["id"])
    assert err.value.code == "INVALID_STATE" and "deprecated" in err.value.error["message"]
    assert await stack.last_seq() == head
    assert (await stack.call("memory_get", id=m["id"]))["status"] == "deprecated"
    await stack.call("memory_retire", id=m["id"], mode="archive")
    assert (await stack.call("memory_restore", id=m["id"]))["status"] == "active"
    # active already: nothing to do, nothing written
    head = await stack.last_seq()
    assert (await stack.call("memory_restore", id=m["id"]))["status"] == "active"
    assert await stack.last_seq() == head


async def test_past_reads_carry_no_access_statistics(stack: Stack) -> None:
    m = await stack.call("memory_add", content="read me")
    for _ in range(3):
        await stack.call("memory_get", id=m["id"])
    await stack.settle()
    await stack.call("memory_update", id=m["id"], content="read me again")
    await stack.settle()
    assert await stack.projector.access_follower.wait_for(
        (await stack.nc.jetstream().stream_info("MNEME_ACCESS")).state.last_seq, 10, committed=True
    )
    now = await stack.call("memory_get", id=m["id"])
    assert now["access_count"] >= 3 and now["accessed_at"] is not None
    then = await stack.call("memory_get", id=m["id"], as_of=m["seq"])
    assert then["content"] == "read me" and then.get("access_count") is None and then.get("accessed_at") is None
    page = await stack.call("memory_list", as_of=m["seq"], detail="full")
    assert page["results"][0].get("access_count") is None
    assert (await stack.call("memory_stats", as_of=m["seq"]))["most_accessed"] == []
    with pytest.raises(ToolFailure) as err:
        await stack.call("memory_list", as_of=m["seq"], sort_by="access_count")
    assert err.value.code == "INVALID_INPUT" and err.value.field == "sort_by"
