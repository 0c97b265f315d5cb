"""The native code and system tools (groups served when an operator asks for them).

code_index (dry run first, then a run), code_status to completed, code_search, code_forget; memory_status's
counts and lag; memory_reset refused to agents, a no-op without confirm, and for an admin with confirm
everything gone while `as_of` still reads the namespace as it was before.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from tests.harness import Stack, ToolFailure, start_stack

pytestmark = pytest.mark.anyio
FIXTURE = Path(__file__).parent / "fixtures" / "coderepo"
ALL = ["core", "time", "governance", "audit", "graph", "code", "system"]


@pytest.fixture
async def admin(tmp_path: Path, nats_server: EmbeddedNats) -> AsyncIterator[Stack]:
    gs = GatewaySettings(tools=ALL, role="admin")
    s = await start_stack(tmp_path / "data", nats_server, gs, vectors=True)
    yield s
    await s.close()


async def test_code_tools(admin: Stack, tmp_path: Path) -> None:
    s = admin
    repo = tmp_path / "proj"
    shutil.copytree(FIXTURE, repo, symlinks=True)
    dry = await s.call("code_index", path=str(repo), dry_run=True)
    assert dry["project"] == "proj" and dry["files"] >= 6 and dry["bytes"] > 0
    assert (await s.call("code_status"))["results"] == [], "a dry run records nothing"
    run = await s.call("code_index", path=str(repo))
    assert run["files"] == dry["files"] and run["chunks"] > 0
    deadline = asyncio.get_running_loop().time() + 60
    while (st := (await s.call("code_status", project="proj"))["results"][0])["status"] != "completed":
        assert asyncio.get_running_loop().time() < deadline, st
        await asyncio.sleep(0.05)
    assert st["chunks_embedded"] == st["chunks"] == run["chunks"] and st["percent"] == 100.0
    found = await s.call("code_search", query="take parts out of stock", language="python", limit=3)
    assert found["results"][0]["path"] == "src/inventory.py" and found["pending"] == 0
    again = await s.call("code_index", path=str(repo))
    assert again["files"] == 0 and again["unchanged"] == dry["files"], "nothing changed: nothing recorded"
    with pytest.raises(ToolFailure) as e:
        await s.call("code_index", path=str(repo / "nope"))
    assert e.value.code == "INVALID_INPUT" and e.value.field == "path"
    gone = await s.call("code_forget", project="proj")
    assert gone["results"][0]["project"] == "proj"
    assert (await s.call("code_status"))["results"] == []


async def test_status_and_reset(admin: Stack) -> None:
    s = admin
    for i in range(3):
        await s.call("memory_add", content=f"fact {i}")
    await s.call("graph_entity", name="Alice", type="person")
    await s.call("graph_entity", name="Bob", type="person")
    await s.call("graph_relate", source="Alice", target="Bob", type="knows")
    status = await s.call("memory_status")
    assert (status["memories"], status["entities"], status["relations"]) == (3, 2, 1)
    assert status["embedding"]["status"] in ("ready", "loading") and status["embedding"]["dimensions"] > 0
    assert status["lag_events"] >= 0 and status["log_head"] >= 6 and status["healthy"] is True
    before = await s.last_seq()
    assert await s.call("memory_reset") == {
        "reset": False,
        "message": "Confirmation required. Set confirm=true to delete all data.",
    }
    done = await s.call("memory_reset", confirm=True)
    assert done == {
        "reset": True,
        "memories": 3,
        "entities": 2,
        "relations": 1,
        "code_chunks": 0,
        "kept": 0,
        "before_seq": before,
    }
    # the reset itself is one audited event, after its deletes
    await s.settle()
    trail = (await s.call("audit_query", action="namespace_reset"))["results"]
    assert [(r["action"], r["agent_id"]) for r in trail] == [("namespace_reset", s.gateway.principal.actor.agent_id)]
    assert await s.last_seq() == before + 3 + 2 + 1 + 1, "a delete per memory, entity and relation, then the reset"
    after = await s.call("memory_status")
    assert (after["memories"], after["entities"], after["relations"]) == (0, 0, 0)
    assert len((await s.call("memory_list", as_of=before))["results"]) == 3, "the history before the reset stays"
    assert len((await s.call("graph_get", as_of=before))["results"]) == 2


async def test_reset_is_for_admins(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    s = await start_stack(tmp_path / "data", nats_server, GatewaySettings(tools=ALL))
    try:
        await s.call("memory_add", content="keep me")
        with pytest.raises(ToolFailure) as e:
            await s.call("memory_reset", confirm=True)
        assert e.value.code == "PERMISSION_ERROR"
        assert len((await s.call("memory_list"))["results"]) == 1
    finally:
        await s.close()


async def test_a_replay_after_a_reset_equals_the_live_projection(admin: Stack, tmp_path: Path) -> None:
    """The namespace_reset event is in the log for the audit trail only: a replay folds the deletes before it
    and passes over it, to the digest the live projector has."""
    from mneme.app.replay import replay
    from mneme.app.settings import CoreSettings, ProjectorSettings

    s = admin
    for i in range(4):
        await s.call("memory_add", content=f"fact {i}", entities=["Alice"] if i == 0 else [])
    await s.call("memory_reset", confirm=True)
    await s.call("memory_add", content="after the reset")
    head = await s.last_seq()
    assert await s.projector.follower.wait_for(head, 20, committed=True)
    live = s.projector.view.canonical_digest()
    core = CoreSettings(data_dir=s.data_dir, nats_url=s.url)
    got = await replay(core, ProjectorSettings(vectors="off"), output=tmp_path / "r", use_snapshots=False)
    assert (got["events"], got["verify"]["ok"], got["digest"]) == (head, True, live)
    assert len((await s.call("memory_list"))["results"]) == 1
