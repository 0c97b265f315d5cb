from __future__ import annotations

import pytest

from tests.harness import Stack, ToolFailure

pytestmark = pytest.mark.anyio


async def test_add_then_get_through_the_log(stack: Stack) -> None:
    added = await stack.call("memory_add", content="The user prefers pytest", store="s", path="prefs/testing")
    mem = added["memory"]
    assert mem["version"] == 1 and mem["citations"] == [] and mem["seq"] == await stack.last_seq()
    got = await stack.call("memory_get", store="s", path="prefs/testing")
    assert got["id"] == mem["id"] and got["content"] == "The user prefers pytest"
    with pytest.raises(ToolFailure) as err:
        await stack.call("memory_get", id="00000000-0000-4000-8000-000000000000")
    assert err.value.code == "MEMORY_NOT_FOUND"
