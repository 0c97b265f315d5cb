"""The `cortex` profile (../shared/seeds/mcp-memory-tools-spec.md) over the one memory.

Every scenario of the contract has an end-to-end test named after it (test_scenario_<scenario>), driven by the
mcp package's ClientSession over stdio against one `mneme serve` with MNEME_GATEWAY_PROFILE=cortex, shared by
the module. The rest run in process: the contract's examples against the input schemas, the golden tools/list,
the store registry's rule, the reindex's repair of the category index, and the cross-profile checks (what
cortex writes the native surface reads, and the other way round).

The golden snapshot is tests/golden/cortex.tools.json. After a deliberate change of the surface, regenerate it:
    MNEME_UPDATE_GOLDEN=1 PYTHONPATH=. .venv/bin/python -m pytest tests/test_profile_cortex.py -k golden
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import Client, ClientSession
from mcp.client.stdio import stdio_client

from mneme.embedded_nats import EmbeddedNats
from mneme.errors import InvalidInput
from mneme.principals import Principal
from services.gateway.profiles.cortex_support import StoreNotRegistered, parse_store_option, scope, store_namespace
from services.gateway.server import build_server
from tests.harness import Stack, hints_of, serve_params, start_stack

pytestmark = pytest.mark.anyio

GOLDEN = Path(__file__).parent / "golden" / "cortex.tools.json"
TOOLS = [
    "add_memory",
    "get_memory",
    "update_memory",
    "remove_memory",
    "move_memory",
    "list_memories",
    "prune_memories",
    "reindex_store",
    "cortex_get_recent_memories",
]
INVALID_PARAMS, INVALID_REQUEST, INTERNAL_ERROR = -32602, -32600, -32603
# The stdio server's registry: "" registers a store without a namespace (the default namespace).
STORES = {
    "notes": "",
    "team": "acme/team",
    "fresh": "",
    "prune": "",
    "noexpired": "",
    "broken": "",
    "recent": "",
    "recent-cat": "",
    "recent-limit": "",
    "recent-few": "",
    "recent-empty": "",
    "recent-expired": "",
    "recent-incl": "",
    "recent-stale": "",
}
# Injected into the server's interpreter (sitecustomize): the reindex of store "broken" fails in the projector.
FAULT = """
import os
if os.environ.get("CORTEX_TEST_FAIL_REINDEX"):
    from mneme.errors import MnemeError
    from schemas.queries import ReindexCategories
    from services.projector import memories_queries as mq

    _real = mq.HANDLERS[ReindexCategories]

    def _failing(view, q):
        if q.store == os.environ["CORTEX_TEST_FAIL_REINDEX"]:
            raise MnemeError("disk full: the category index could not be written")
        return _real(view, q)

    mq.HANDLERS[ReindexCategories] = _failing
"""


def days(n: float) -> str:
    return (datetime.now(UTC) + timedelta(days=n)).isoformat()


def when(value: str) -> datetime:
    return datetime.fromisoformat(value)


class Cortex:
    """A cortex client: results as the contract gives them (text), with their structured content."""

    def __init__(self, call: Any):
        self._call = call

    async def raw(self, tool: str, **args: Any) -> Any:
        return await self._call(tool, args)

    async def text(self, tool: str, **args: Any) -> str:
        res = await self.raw(tool, **args)
        assert not res.is_error, res.content[0].text
        return res.content[0].text

    async def data(self, tool: str, **args: Any) -> dict[str, Any]:
        res = await self.raw(tool, **args)
        assert not res.is_error, res.content[0].text
        assert json.loads(res.content[0].text) == res.structured_content  # the text is the same JSON
        return res.structured_content

    async def error(self, tool: str, **args: Any) -> tuple[int, str]:
        """The McpError: its code and its message ("MCP error <code>: <message>")."""
        res = await self.raw(tool, **args)
        assert res.is_error, f"{tool} succeeded: {res.content[0].text}"
        err = json.loads(res.content[0].text)["error"]
        assert set(err) == {"code", "message"} and err["message"].startswith(f"MCP error {err['code']}: ")
        return err["code"], err["message"].split(": ", 1)[1]


@pytest.fixture(scope="module")
def anyio_backend() -> str:  # module scope, so the shared server and stack below can be module scoped
    return "asyncio"


@pytest.fixture(scope="module")
async def cx(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cortex]:
    """One `mneme serve --profile cortex` over stdio for every scenario test (each uses its own paths/stores)."""
    base = tmp_path_factory.mktemp("cortex-stdio")
    (base / "inject").mkdir()
    (base / "inject" / "sitecustomize.py").write_text(FAULT)
    path = os.pathsep.join(p for p in (str(base / "inject"), os.environ.get("PYTHONPATH")) if p)
    env = {
        **os.environ,
        "MNEME_GATEWAY_PROFILE": "cortex",
        "MNEME_GATEWAY_STORES": json.dumps(STORES),
        "CORTEX_TEST_FAIL_REINDEX": "broken",
        "PYTHONPATH": path,
    }
    async with stdio_client(serve_params(base / "data", env=env)) as (r, w), ClientSession(r, w) as cs:
        await cs.initialize()
        yield Cortex(cs.call_tool)


@pytest.fixture(scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Stack, Cortex]]:
    """In process: a stack whose gateway serves the native surface (stack.call) and the cortex profile."""
    base = tmp_path_factory.mktemp("cortex-inproc")
    server = EmbeddedNats(base / "nats")
    await server.start()
    stack = None
    try:
        stack = await start_stack(base / "data", server)
        stack.gateway.stores.update({"notes": "", "team": "acme/team", "kb": "acme/kb", "later": ""})
        async with Client(build_server(stack.gateway, profile="cortex")) as client:
            yield stack, Cortex(client.call_tool)
    finally:
        if stack is not None:
            await stack.close()
        await server.stop()


# == Add memory tool =========================================================================================


async def test_scenario_adding_a_memory(cx: Cortex) -> None:
    assert (
        await cx.text("add_memory", store="notes", path="add/plain", content="We deploy on Fridays")
        == "Memory created at add/plain"
    )
    got = await cx.data("get_memory", store="notes", path="add/plain")
    assert got["path"] == "add/plain" and got["content"] == "We deploy on Fridays"


async def test_scenario_auto_create_store_on_first_write(cx: Cortex) -> None:
    # "fresh" is registered and has never been written: it is empty, and exists once written to
    assert await cx.data("list_memories", store="fresh") == {
        "category": "all",
        "count": 0,
        "memories": [],
        "subcategories": [],
    }
    empty = await cx.data("reindex_store", store="fresh")
    assert empty["categories"] == 0 and empty["memories"] == 0
    assert (
        await cx.text("add_memory", store="fresh", path="first/memory", content="the first")
        == "Memory created at first/memory"
    )
    assert (await cx.data("get_memory", store="fresh", path="first/memory"))["content"] == "the first"
    assert (await cx.data("reindex_store", store="fresh"))["memories"] == 1


async def test_scenario_auto_create_category(cx: Cortex) -> None:
    code, msg = await cx.error("list_memories", store="notes", category="brand/new")
    assert code == INVALID_PARAMS and msg == "Category not found: brand/new"
    await cx.text("add_memory", store="notes", path="brand/new/idea", content="a new idea")
    listed = await cx.data("list_memories", store="notes", category="brand/new")
    assert [m["path"] for m in listed["memories"]] == ["brand/new/idea"]
    assert {"path": "brand", "memory_count": 1} in (await cx.data("list_memories", store="notes"))["subcategories"]
    assert (await cx.data("list_memories", store="notes", category="brand"))["subcategories"] == [
        {"path": "brand/new", "memory_count": 1}
    ]


async def test_scenario_memory_with_optional_parameters(cx: Cortex) -> None:
    expiry = days(30)
    await cx.text(
        "add_memory",
        store="notes",
        path="add/optional",
        content="with metadata",
        tags=["infra", "db"],
        expires_at=expiry,
        citations=["docs/adr/001.md"],
    )
    meta = (await cx.data("get_memory", store="notes", path="add/optional"))["metadata"]
    assert meta["tags"] == ["infra", "db"] and meta["citations"] == ["docs/adr/001.md"]
    assert when(meta["expires_at"]) == when(expiry)


async def test_scenario_adding_a_memory_with_citations(cx: Cortex) -> None:
    cites = ["src/core/types.ts:17", "https://docs.example.com"]
    await cx.text("add_memory", store="notes", path="add/cited", content="types live in core", citations=cites)
    assert (await cx.data("get_memory", store="notes", path="add/cited"))["metadata"]["citations"] == cites


# == Get memory tool =========================================================================================


async def test_scenario_retrieving_a_memory(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="get/one", content="# Title\n\nbody", tags=["x"])
    got = await cx.data("get_memory", store="notes", path="get/one")
    assert got["path"] == "get/one" and got["content"] == "# Title\n\nbody"
    meta = got["metadata"]
    assert set(meta) == {"created_at", "updated_at", "tags", "source", "expires_at", "citations"}
    assert meta["tags"] == ["x"] and meta["source"] == "mcp" and meta["expires_at"] is None
    assert meta["created_at"] == meta["updated_at"]


async def test_scenario_memory_not_found(cx: Cortex) -> None:
    code, msg = await cx.error("get_memory", store="notes", path="get/nothing-here")
    assert (code, msg) == (INVALID_PARAMS, "Memory not found: get/nothing-here")


async def test_scenario_expired_memory_handling(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="get/expired", content="stale promo", expires_at=days(-1))
    assert await cx.error("get_memory", store="notes", path="get/expired") == (
        INVALID_PARAMS,
        "Memory expired: get/expired",
    )
    assert await cx.error("get_memory", store="notes", path="get/expired", include_expired=False) == (
        INVALID_PARAMS,
        "Memory expired: get/expired",
    )
    got = await cx.data("get_memory", store="notes", path="get/expired", include_expired=True)
    assert got["content"] == "stale promo" and when(got["metadata"]["expires_at"]) < datetime.now(UTC)


async def test_scenario_response_includes_citations(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="get/cited", content="c", citations=["a.md:1", "b.md:2"])
    assert (await cx.data("get_memory", store="notes", path="get/cited"))["metadata"]["citations"] == [
        "a.md:1",
        "b.md:2",
    ]


async def test_scenario_response_for_memory_without_citations(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="get/uncited", content="no sources")
    assert (await cx.data("get_memory", store="notes", path="get/uncited"))["metadata"]["citations"] == []


# == Update memory tool ======================================================================================


async def test_scenario_updating_content(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="upd/content", content="v1", tags=["keep"])
    before = (await cx.data("get_memory", store="notes", path="upd/content"))["metadata"]
    assert (
        await cx.text("update_memory", store="notes", path="upd/content", content="v2")
        == "Memory updated at upd/content"
    )
    after = await cx.data("get_memory", store="notes", path="upd/content")
    assert after["content"] == "v2" and after["metadata"]["tags"] == ["keep"]
    assert when(after["metadata"]["updated_at"]) > when(before["updated_at"])
    assert after["metadata"]["created_at"] == before["created_at"]


async def test_scenario_updating_metadata_only(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="upd/meta", content="unchanged", tags=["old"])
    await cx.text("update_memory", store="notes", path="upd/meta", tags=["new", "tags"])
    expiry = days(7)
    await cx.text("update_memory", store="notes", path="upd/meta", expires_at=expiry)
    got = await cx.data("get_memory", store="notes", path="upd/meta")
    assert got["content"] == "unchanged" and got["metadata"]["tags"] == ["new", "tags"]
    assert when(got["metadata"]["expires_at"]) == when(expiry)


async def test_scenario_clearing_expiry(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="upd/expiry", content="temporary", expires_at=days(3))
    await cx.text("update_memory", store="notes", path="upd/expiry", clear_expiry=True)
    got = await cx.data("get_memory", store="notes", path="upd/expiry")
    assert got["metadata"]["expires_at"] is None and got["content"] == "temporary"


async def test_scenario_updating_citations(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="upd/cite", content="c", citations=["old/a.ts:1", "old/b.ts:2"])
    await cx.text("update_memory", store="notes", path="upd/cite", citations=["new/path.ts:5"])
    assert (await cx.data("get_memory", store="notes", path="upd/cite"))["metadata"]["citations"] == ["new/path.ts:5"]


async def test_scenario_clearing_citations(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="upd/uncite", content="c", citations=["x.md", "y.md"])
    await cx.text("update_memory", store="notes", path="upd/uncite", citations=[])
    assert (await cx.data("get_memory", store="notes", path="upd/uncite"))["metadata"]["citations"] == []


async def test_scenario_preserving_citations_on_unrelated_update(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="upd/keep", content="c1", citations=["keep.md:3"])
    await cx.text("update_memory", store="notes", path="upd/keep", content="c2", tags=["t"])
    got = await cx.data("get_memory", store="notes", path="upd/keep")
    assert got["content"] == "c2" and got["metadata"]["citations"] == ["keep.md:3"]


# == Remove memory tool ======================================================================================


async def test_scenario_removing_a_memory(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="rm/gone", content="to delete")
    assert await cx.text("remove_memory", store="notes", path="rm/gone") == "Memory removed at rm/gone"
    assert await cx.error("get_memory", store="notes", path="rm/gone") == (INVALID_PARAMS, "Memory not found: rm/gone")
    assert "rm/gone" not in [
        m["path"] for m in (await cx.data("list_memories", store="notes", category="rm"))["memories"]
    ]
    await cx.text("add_memory", store="notes", path="rm/gone", content="the path is free again")


async def test_scenario_removing_non_existent_memory(cx: Cortex) -> None:
    assert await cx.error("remove_memory", store="notes", path="rm/never") == (
        INVALID_PARAMS,
        "Memory not found: rm/never",
    )


# == Move memory tool ========================================================================================


async def test_scenario_moving_a_memory(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="mv/draft", content="movable", citations=["m.md"])
    assert (
        await cx.text("move_memory", store="notes", from_path="mv/draft", to_path="mv/final/decided")
        == "Memory moved from mv/draft to mv/final/decided"
    )
    got = await cx.data("get_memory", store="notes", path="mv/final/decided")
    assert got["content"] == "movable" and got["metadata"]["citations"] == ["m.md"]
    assert (await cx.error("get_memory", store="notes", path="mv/draft"))[1] == "Memory not found: mv/draft"
    assert (await cx.data("list_memories", store="notes", category="mv/final"))["count"] == 1  # category created


async def test_scenario_moving_to_existing_path(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="mv/a", content="a")
    await cx.text("add_memory", store="notes", path="mv/b", content="b")
    assert await cx.error("move_memory", store="notes", from_path="mv/a", to_path="mv/b") == (
        INVALID_PARAMS,
        "Destination already exists: mv/b",
    )
    assert (await cx.data("get_memory", store="notes", path="mv/a"))["content"] == "a"  # nothing moved
    assert (await cx.data("get_memory", store="notes", path="mv/b"))["content"] == "b"


# == List memories tool ======================================================================================


async def test_scenario_listing_category_contents(cx: Cortex) -> None:
    for name in ("zeta", "alpha", "mid"):
        await cx.text("add_memory", store="notes", path=f"ls/cat/{name}", content=f"memory {name}")
    await cx.text("add_memory", store="notes", path="ls/cat/deeper/one", content="in a subcategory")
    got = await cx.data("list_memories", store="notes", category="ls/cat")
    assert got["category"] == "ls/cat" and got["count"] == 3
    assert [m["path"] for m in got["memories"]] == ["ls/cat/alpha", "ls/cat/mid", "ls/cat/zeta"]
    assert got["subcategories"] == [{"path": "ls/cat/deeper", "memory_count": 1}]
    assert got["memories"][0]["token_estimate"] == math.ceil(len("memory alpha") / 4)


async def test_scenario_listing_all_memories(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="root-level-note", content="at the store's root")
    await cx.text("add_memory", store="notes", path="la/one", content="in category la")
    await cx.text("add_memory", store="notes", path="la/sub/two", content="in la/sub")
    got = await cx.data("list_memories", store="notes")
    assert got["category"] == "all"
    assert "root-level-note" in [m["path"] for m in got["memories"]]
    assert all("/" not in m["path"] for m in got["memories"])  # the root level: memories, then categories
    subs = {s["path"]: s["memory_count"] for s in got["subcategories"]}
    assert subs["la"] == 2 and all("/" not in p for p in subs)
    assert got["count"] == len(got["memories"])


async def test_scenario_filtering_expired(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="ls/exp/live", content="live")
    await cx.text("add_memory", store="notes", path="ls/exp/old", content="old", expires_at=days(-2))
    hidden = await cx.data("list_memories", store="notes", category="ls/exp")
    assert [m["path"] for m in hidden["memories"]] == ["ls/exp/live"]
    shown = await cx.data("list_memories", store="notes", category="ls/exp", include_expired=True)
    assert [(m["path"], m["is_expired"]) for m in shown["memories"]] == [("ls/exp/live", False), ("ls/exp/old", True)]
    assert shown["memories"][1]["expires_at"] is not None


async def test_scenario_response_includes_updated_at(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="ls/upd/a", content="a")
    await cx.text("add_memory", store="notes", path="ls/upd/b", content="b")
    await cx.text("update_memory", store="notes", path="ls/upd/a", content="a2")
    got = await cx.data("list_memories", store="notes", category="ls/upd")
    stamps = {m["path"]: m["updated_at"] for m in got["memories"]}
    assert all(isinstance(t, str) for t in stamps.values())
    for path, stamp in stamps.items():  # the same instant the memory itself reports
        assert when(stamp) == when((await cx.data("get_memory", store="notes", path=path))["metadata"]["updated_at"])
    assert when(stamps["ls/upd/a"]) > when(stamps["ls/upd/b"])


# == Prune memories tool =====================================================================================


async def test_scenario_pruning_expired_memories(cx: Cortex) -> None:
    await cx.text("add_memory", store="prune", path="p/live", content="stays")
    await cx.text("add_memory", store="prune", path="p/old1", content="goes", expires_at=days(-1))
    await cx.text("add_memory", store="prune", path="p/deep/old2", content="goes too", expires_at=days(-3))
    got = await cx.data("prune_memories", store="prune")
    assert got["pruned_count"] == 2 and [p["path"] for p in got["pruned"]] == ["p/deep/old2", "p/old1"]
    assert all(when(p["expires_at"]) < datetime.now(UTC) for p in got["pruned"])
    listed = await cx.data("list_memories", store="prune", category="p", include_expired=True)
    assert [m["path"] for m in listed["memories"]] == ["p/live"]
    assert (await cx.error("get_memory", store="prune", path="p/old1", include_expired=True))[
        1
    ] == "Memory not found: p/old1"


async def test_scenario_no_expired_memories(cx: Cortex) -> None:
    await cx.text("add_memory", store="noexpired", path="n/live", content="live", expires_at=days(10))
    assert await cx.data("prune_memories", store="noexpired") == {"pruned_count": 0, "pruned": []}
    assert (await cx.data("get_memory", store="noexpired", path="n/live"))["content"] == "live"


# == Required store parameter ================================================================================

MINIMAL = {  # each tool's required arguments but `store`
    "add_memory": {"path": "s/x", "content": "x"},
    "get_memory": {"path": "s/x"},
    "update_memory": {"path": "s/x"},
    "remove_memory": {"path": "s/x"},
    "move_memory": {"from_path": "s/x", "to_path": "s/y"},
    "list_memories": {},
    "prune_memories": {},
    "reindex_store": {},
    "cortex_get_recent_memories": {},
}


async def test_scenario_store_parameter_required(cx: Cortex) -> None:
    for tool, args in MINIMAL.items():
        code, msg = await cx.error(tool, **args)
        assert code == INVALID_PARAMS and msg == "store: is required", (tool, msg)
        # no fallback to a default store: an empty name is no store either
        assert (await cx.error(tool, store="", **args))[0] == INVALID_PARAMS


async def test_scenario_explicit_store_accepted(cx: Cortex) -> None:
    # "team" is registered to namespace acme/team: the operation happens there, and only there
    await cx.text("add_memory", store="team", path="shared/rule", content="team rule")
    assert (await cx.data("get_memory", store="team", path="shared/rule"))["content"] == "team rule"
    assert (await cx.error("get_memory", store="notes", path="shared/rule"))[1] == "Memory not found: shared/rule"
    assert (await cx.data("reindex_store", store="team"))["path"] == "acme/team/team"


async def test_scenario_store_not_in_registry(cx: Cortex) -> None:
    for tool, args in MINIMAL.items():
        code, msg = await cx.error(tool, store="nowhere", **args)
        assert code == INVALID_PARAMS and msg.startswith("Store 'nowhere' is not registered"), (tool, msg)
        assert "notes" in msg  # the registered stores are named


# == Memory Tool Implementation ==============================================================================


async def test_scenario_add_memory_tool_delegates_to_creatememory(cx: Cortex) -> None:
    # the domain's create decides: tags normalized (lowercase, once), the path checked, uniqueness held
    res = await cx.raw("add_memory", store="notes", path="impl/created", content="x", tags=["API", "api", "Infra"])
    assert not res.is_error and res.content[0].text == "Memory created at impl/created"
    assert res.structured_content == {
        "message": "Memory created at impl/created",
        "store": "notes",
        "path": "impl/created",
    }
    assert (await cx.data("get_memory", store="notes", path="impl/created"))["metadata"]["tags"] == ["api", "infra"]
    code, msg = await cx.error("add_memory", store="notes", path="impl/../escape", content="x")
    assert code == INVALID_PARAMS and msg.startswith("path: ")
    assert await cx.error("add_memory", store="notes", path="impl/created", content="twice") == (
        INVALID_PARAMS,
        "Memory already exists: impl/created",
    )


async def test_scenario_get_memory_tool_delegates_to_getmemory(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="impl/read", content="read me", citations=["r.md"])
    res = await cx.raw("get_memory", store="notes", path="impl/read")
    assert not res.is_error and json.loads(res.content[0].text) == res.structured_content
    assert res.structured_content["content"] == "read me"
    assert res.structured_content["metadata"]["citations"] == ["r.md"]


async def test_scenario_domain_error_mapped_to_mcp_error(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="impl/mapped", content="x")
    cases: list[tuple[tuple[str, dict[str, Any]], str]] = [
        (("get_memory", {"store": "notes", "path": "impl/missing"}), "Memory not found: impl/missing"),
        (("add_memory", {"store": "notes", "path": "impl/bad*char", "content": "x"}), "path: "),
        (("add_memory", {"store": "notes", "path": "impl/t", "content": "x", "tags": ["x" * 65]}), "tags: "),
        (("update_memory", {"store": "notes", "path": "impl/mapped"}), "No updates provided."),
        (("move_memory", {"store": "notes", "from_path": "impl/mapped", "to_path": "impl/mapped/.."}), "to_path: "),
        (
            ("add_memory", {"store": "notes", "path": "impl/e", "content": "x", "expires_at": "soon"}),
            "expires_at: Must be a valid ISO 8601 date string",
        ),
    ]
    for (tool, args), start in cases:
        code, msg = await cx.error(tool, **args)
        assert code == INVALID_PARAMS and msg.startswith(start), (tool, msg)


# == Reindex store tool ======================================================================================


async def test_scenario_reindex_store_indexes(cx: Cortex) -> None:
    await cx.text("add_memory", store="notes", path="rx/a/one", content="1")
    await cx.text("add_memory", store="notes", path="rx/b/two", content="2")
    got = await cx.data("reindex_store", store="notes")
    assert got["store"] == "notes" and got["path"] == "default/notes" and got["warnings"] == []
    assert got["categories"] >= 3 and got["memories"] >= 2 and got["added"] == got["removed"] == 0
    # the rebuilt index answers as before
    assert (await cx.data("list_memories", store="notes", category="rx"))["subcategories"] == [
        {"path": "rx/a", "memory_count": 1},
        {"path": "rx/b", "memory_count": 1},
    ]


async def test_scenario_store_not_found(cx: Cortex) -> None:
    code, msg = await cx.error("reindex_store", store="no-such-store")
    assert code == INVALID_PARAMS and msg.startswith("Store 'no-such-store' is not registered")


async def test_scenario_reindex_failure(cx: Cortex) -> None:
    await cx.text("add_memory", store="broken", path="b/one", content="x")
    code, msg = await cx.error("reindex_store", store="broken")
    assert code == INTERNAL_ERROR
    assert msg == "Reindex failed for store 'broken': disk full: the category index could not be written"
    assert (await cx.data("get_memory", store="broken", path="b/one"))["content"] == "x"  # nothing else broke


# == Get recent memories tool ================================================================================


async def fill(cx: Cortex, store: str, paths: list[str], **extra: Any) -> None:
    for p in paths:
        await cx.text("add_memory", store=store, path=p, content=f"content of {p}", **extra)


async def test_scenario_retrieving_recent_memories_store_wide(cx: Cortex) -> None:
    paths = [f"c{i % 3}/m{i}" for i in range(7)]
    await fill(cx, "recent", paths)
    await cx.text("update_memory", store="recent", path="c0/m0", content="# touched\n\nm0 again")
    got = await cx.data("cortex_get_recent_memories", store="recent")
    assert got["category"] == "all" and got["count"] == 5 == len(got["memories"])  # default limit 5
    assert [m["path"] for m in got["memories"]] == ["c0/m0", "c0/m6", "c2/m5", "c1/m4", "c0/m3"]
    stamps = [when(m["updated_at"]) for m in got["memories"]]
    assert stamps == sorted(stamps, reverse=True)
    assert got["memories"][0]["content"] == "# touched\n\nm0 again"  # full content, raw markdown


async def test_scenario_scoping_to_a_category(cx: Cortex) -> None:
    await fill(cx, "recent-cat", ["project/cortex/a", "project/cortex/deep/b", "project/other/c", "elsewhere/d"])
    got = await cx.data("cortex_get_recent_memories", store="recent-cat", category="project/cortex", limit=10)
    assert got["category"] == "project/cortex"
    assert [m["path"] for m in got["memories"]] == ["project/cortex/deep/b", "project/cortex/a"]


async def test_scenario_custom_limit(cx: Cortex) -> None:
    await fill(cx, "recent-limit", [f"l/m{i:02}" for i in range(12)])
    got = await cx.data("cortex_get_recent_memories", store="recent-limit", limit=10)
    assert got["count"] == 10 and [m["path"] for m in got["memories"]] == [f"l/m{i:02}" for i in range(11, 1, -1)]
    got = await cx.data("cortex_get_recent_memories", store="recent-limit", limit=2)
    assert [m["path"] for m in got["memories"]] == ["l/m11", "l/m10"]


async def test_scenario_fewer_memories_than_limit(cx: Cortex) -> None:
    await fill(cx, "recent-few", ["f/one", "f/two"])
    got = await cx.data("cortex_get_recent_memories", store="recent-few", limit=10)
    assert got["count"] == 2 and [m["path"] for m in got["memories"]] == ["f/two", "f/one"]


async def test_scenario_empty_store_or_category(cx: Cortex) -> None:
    empty = {"category": "all", "count": 0, "memories": []}
    assert await cx.data("cortex_get_recent_memories", store="recent-empty") == empty
    # a category whose only memory was removed: it exists, and holds nothing
    await cx.text("add_memory", store="recent-empty", path="drained/only", content="x")
    await cx.text("remove_memory", store="recent-empty", path="drained/only")
    assert await cx.data("cortex_get_recent_memories", store="recent-empty", category="drained") == {
        **empty,
        "category": "drained",
    }


async def test_scenario_non_existent_category(cx: Cortex) -> None:
    got = await cx.error("cortex_get_recent_memories", store="recent", category="no/such/category")
    assert got == (INVALID_PARAMS, "Category not found: no/such/category")
    assert got == await cx.error("list_memories", store="recent", category="no/such/category")  # consistent


async def test_scenario_filtering_expired_memories(cx: Cortex) -> None:
    await fill(cx, "recent-expired", ["e/live1", "e/live2"])
    await fill(cx, "recent-expired", ["e/expired-newest"], expires_at=days(-1))  # newest, but expired
    got = await cx.data("cortex_get_recent_memories", store="recent-expired", limit=2)
    assert [m["path"] for m in got["memories"]] == ["e/live2", "e/live1"]  # excluded before the limit
    got = await cx.data("cortex_get_recent_memories", store="recent-expired", include_expired=False)
    assert got["count"] == 2


async def test_scenario_including_expired_memories(cx: Cortex) -> None:
    await fill(cx, "recent-incl", ["i/live"])
    await fill(cx, "recent-incl", ["i/expired"], expires_at=days(-1))
    got = await cx.data("cortex_get_recent_memories", store="recent-incl", include_expired=True)
    assert got["count"] == 2 and [m["path"] for m in got["memories"]] == ["i/expired", "i/live"]
    assert (await cx.data("cortex_get_recent_memories", store="recent-incl"))["count"] == 1


async def test_scenario_stale_index_entries_without_updatedat(cx: Cortex) -> None:
    # Every memory's updated_at comes from the log (the time its last event was recorded), so no entry of the
    # index ever lacks one; the ordering still puts missing timestamps last (NULLS LAST), after all others.
    await fill(cx, "recent-stale", ["s/a", "s/b", "s/c"])
    got = await cx.data("cortex_get_recent_memories", store="recent-stale", limit=100)
    stamps = [m["updated_at"] for m in got["memories"]]
    assert None not in stamps and [when(t) for t in stamps] == sorted((when(t) for t in stamps), reverse=True)
    listed = await cx.data("list_memories", store="recent-stale", category="s")
    assert all(m["updated_at"] is not None for m in listed["memories"])


async def test_scenario_response_format(cx: Cortex) -> None:
    await cx.text("add_memory", store="recent-few", path="f/tagged", content="tagged one", tags=["alpha", "beta"])
    got = await cx.data("cortex_get_recent_memories", store="recent-few", limit=1)
    assert set(got) == {"category", "count", "memories"} and got["category"] == "all" and got["count"] == 1
    entry = got["memories"][0]
    assert set(entry) == {"path", "content", "updated_at", "token_estimate", "tags"}
    assert entry == {
        "path": "f/tagged",
        "content": "tagged one",
        "updated_at": entry["updated_at"],
        "token_estimate": math.ceil(len("tagged one") / 4),
        "tags": ["alpha", "beta"],
    }
    when(entry["updated_at"])  # ISO 8601


# == The surface: golden tools/list, schemas, examples and invalid inputs ====================================


def surface(tools: list[Any]) -> list[dict[str, Any]]:
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]


async def test_golden_tools_list(shared: tuple[Stack, Cortex]) -> None:
    """tools/list as a client sees it: names, descriptions, input and output schemas, annotations.
    MNEME_UPDATE_GOLDEN=1 rewrites the snapshot after a deliberate change."""
    stack, _ = shared
    async with Client(build_server(stack.gateway, profile="cortex")) as c:
        listed = surface((await c.list_tools()).tools)
    assert [t["name"] for t in listed] == TOOLS
    if os.environ.get("MNEME_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(listed, indent=2, ensure_ascii=False) + "\n")
    assert listed == json.loads(GOLDEN.read_text()), (
        "the cortex tool surface changed: check it, then regenerate with MNEME_UPDATE_GOLDEN=1"
    )


async def test_the_listed_surface_is_the_contract(shared: tuple[Stack, Cortex]) -> None:
    stack, _ = shared
    async with Client(build_server(stack.gateway, profile="cortex")) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    for name, t in tools.items():
        assert "store" in t.input_schema["required"] and t.output_schema, name
        assert "context" not in t.input_schema["properties"], name  # the contract has no context object
    required = {n: sorted(t.input_schema["required"]) for n, t in tools.items()}
    assert required == {
        "add_memory": ["content", "path", "store"],
        "get_memory": ["path", "store"],
        "update_memory": ["path", "store"],
        "remove_memory": ["path", "store"],
        "move_memory": ["from_path", "store", "to_path"],
        "list_memories": ["store"],
        "prune_memories": ["store"],
        "reindex_store": ["store"],
        "cortex_get_recent_memories": ["store"],
    }
    recent = tools["cortex_get_recent_memories"].input_schema["properties"]
    assert (recent["limit"]["default"], recent["limit"]["minimum"], recent["limit"]["maximum"]) == (5, 1, 100)
    assert recent["include_expired"]["default"] is False
    assert tools["update_memory"].input_schema["properties"]["clear_expiry"]["default"] is False
    assert hints_of(tools["get_memory"]).read_only_hint and hints_of(tools["remove_memory"]).destructive_hint
    assert hints_of(tools["prune_memories"]).destructive_hint and not hints_of(tools["add_memory"]).idempotent_hint


EXAMPLES: list[tuple[str, dict[str, Any]]] = [  # the contract's own examples (its scenarios), as arguments
    ("add_memory", {"store": "notes", "path": "ex/a", "content": "x"}),
    (
        "add_memory",
        {
            "store": "notes",
            "path": "ex/b",
            "content": "x",
            "citations": ["src/core/types.ts:17", "https://docs.example.com"],
        },
    ),
    (
        "add_memory",
        {
            "store": "notes",
            "path": "ex/c",
            "content": "x",
            "tags": ["a"],
            "expires_at": "2030-01-01",
            "citations": ["c.md"],
        },
    ),
    ("get_memory", {"store": "notes", "path": "ex/a", "include_expired": False}),
    ("update_memory", {"store": "notes", "path": "ex/a", "clear_expiry": True}),
    ("update_memory", {"store": "notes", "path": "ex/a", "citations": ["new/path.ts:5"]}),
    ("update_memory", {"store": "notes", "path": "ex/a", "citations": []}),
    ("update_memory", {"store": "notes", "path": "ex/a", "tags": ["t"], "expires_at": "2031-02-03T04:05:06Z"}),
    ("move_memory", {"store": "notes", "from_path": "ex/b", "to_path": "ex/moved/b"}),
    ("remove_memory", {"store": "notes", "path": "ex/c"}),
    ("list_memories", {"store": "notes", "category": "ex", "include_expired": True}),
    ("list_memories", {"store": "notes"}),
    ("prune_memories", {"store": "notes"}),
    ("reindex_store", {"store": "notes"}),
    ("cortex_get_recent_memories", {"store": "notes"}),
    ("cortex_get_recent_memories", {"store": "notes", "limit": 10, "category": "ex", "include_expired": True}),
]
INVALID: list[tuple[str, dict[str, Any], str]] = [  # what the contract rules out: a missing store, empty
    # strings, the limit's bounds, wrong types
    ("add_memory", {"path": "ex/x", "content": "x"}, "store"),
    ("add_memory", {"store": "notes", "path": "ex/x", "content": ""}, "content"),
    ("add_memory", {"store": "notes", "path": "", "content": "x"}, "path"),
    ("add_memory", {"store": "notes", "path": "ex/x", "content": "x", "citations": [""]}, "citations.0"),
    ("add_memory", {"store": "notes", "path": "ex/x", "content": "x", "tags": "a,b"}, "tags"),
    ("get_memory", {"store": "notes", "path": "ex/a", "include_expired": "maybe"}, "include_expired"),
    ("update_memory", {"store": "notes", "path": "ex/a", "citations": [""]}, "citations.0"),
    ("update_memory", {"store": "notes", "path": "ex/a", "clear_expiry": "true please"}, "clear_expiry"),
    ("move_memory", {"store": "notes", "from_path": "ex/a"}, "to_path"),
    ("cortex_get_recent_memories", {"store": "notes", "limit": 0}, "limit"),
    ("cortex_get_recent_memories", {"store": "notes", "limit": 101}, "limit"),
    ("cortex_get_recent_memories", {"store": "notes", "limit": 2.5}, "limit"),
    ("cortex_get_recent_memories", {"store": "notes", "limit": "ten"}, "limit"),
    ("list_memories", {"store": 7}, "store"),
]


async def test_contract_examples_are_accepted(shared: tuple[Stack, Cortex]) -> None:
    stack, cortex = shared
    async with Client(build_server(stack.gateway, profile="cortex")) as c:
        schemas = {t.name: t.input_schema for t in (await c.list_tools()).tools}
    for tool, args in EXAMPLES:
        jsonschema.validate(args, schemas[tool])
        res = await cortex.raw(tool, **args)
        assert not res.is_error, (tool, args, res.content[0].text)


async def test_invalid_inputs_are_refused_with_the_contracts_error(shared: tuple[Stack, Cortex]) -> None:
    stack, cortex = shared
    async with Client(build_server(stack.gateway, profile="cortex")) as c:
        schemas = {t.name: t.input_schema for t in (await c.list_tools()).tools}
    for tool, args, field in INVALID:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(args, schemas[tool])
        code, msg = await cortex.error(tool, **args)
        assert code == INVALID_PARAMS and msg.startswith(f"{field}: "), (tool, args, msg)


async def test_unknown_tools_and_arguments_are_invalid_params(shared: tuple[Stack, Cortex]) -> None:
    _, cortex = shared
    assert (await cortex.error("cortex_add_memory", store="notes"))[0] == INVALID_PARAMS
    code, msg = await cortex.error("get_memory", store="notes", path="x", id="123")
    assert code == INVALID_PARAMS and msg.startswith("id: unknown argument")


# == The store registry ======================================================================================


def test_a_store_registered_without_a_namespace_lives_in_the_default_namespace() -> None:
    assert store_namespace("notes", None, "default") == "default"
    assert store_namespace("notes", "", "team") == "team"
    assert store_namespace("notes", "acme/notes", "default") == "acme/notes"
    assert parse_store_option("notes", "default") == ("notes", "default")
    assert parse_store_option("notes=", "default") == ("notes", "default")
    assert parse_store_option(" kb = acme/kb ", "default") == ("kb", "acme/kb")
    for bad in ("", "a b", "x=bad namespace!", "=acme"):
        with pytest.raises(InvalidInput):
            parse_store_option(bad, "default")


async def test_the_scope_is_the_registered_namespace(shared: tuple[Stack, Cortex]) -> None:
    stack, _ = shared
    gw = stack.gateway
    assert scope(gw, {"store": "team"}) == "acme/team"
    assert scope(gw, {"store": "notes"}) == gw.principal.default_namespace
    assert scope(gw, {}) is None
    with pytest.raises(StoreNotRegistered):  # refused before authorization, in the contract's words
        scope(gw, {"store": "unregistered"})


# == Reindex: a real rebuild of the category index ===========================================================


async def test_reindex_repairs_the_category_index_as_a_replay_would(shared: tuple[Stack, Cortex]) -> None:
    stack, cortex = shared
    await cortex.text("add_memory", store="kb", path="guides/setup/linux", content="apt install")
    await cortex.text("add_memory", store="kb", path="guides/faq", content="faq")
    await cortex.text("move_memory", store="kb", from_path="guides/faq", to_path="support/faq")
    await cortex.data("list_memories", store="kb")  # a committed read: the projection holds all of it
    view = stack.projector.view
    rows = "SELECT path, created_seq FROM categories WHERE namespace = 'acme/kb' AND store = 'kb' ORDER BY path"
    before, digest = view.reader().execute(rows).fetchall(), view.canonical_digest()
    assert [p for p, _ in before] == ["guides", "guides/setup", "support"]  # a category outlives its memories' moves
    cur = view.con.cursor()  # corrupt the index: one row lost, one row no memory justifies
    cur.execute("DELETE FROM categories WHERE namespace = 'acme/kb' AND store = 'kb' AND path = 'guides/setup'")
    cur.execute("INSERT INTO categories VALUES ('acme/kb', 'kb', 'phantom', 1)")
    cur.close()
    assert (await cortex.error("list_memories", store="kb", category="guides/setup"))[0] == INVALID_PARAMS
    got = await cortex.data("reindex_store", store="kb")
    assert got == {
        "store": "kb",
        "path": "acme/kb/kb",
        "categories": 3,
        "added": 1,
        "removed": 1,
        "memories": 2,
        "warnings": [],
    }
    assert view.reader().execute(rows).fetchall() == before and view.canonical_digest() == digest
    assert [
        m["path"] for m in (await cortex.data("list_memories", store="kb", category="guides/setup"))["memories"]
    ] == ["guides/setup/linux"]
    assert (await cortex.data("reindex_store", store="kb"))["added"] == 0  # nothing left to repair


# == Cross-profile: one memory ===============================================================================


async def test_what_cortex_writes_the_native_surface_reads(shared: tuple[Stack, Cortex]) -> None:
    stack, cortex = shared
    await cortex.text(
        "add_memory",
        store="team",
        path="decisions/db",
        content="Postgres 16",
        tags=["db"],
        citations=["adr/7.md"],
        expires_at=days(90),
    )
    native = await stack.call("memory_get", namespace="acme/team", id="team:decisions/db")
    assert native["content"] == "Postgres 16" and native["citations"] == ["adr/7.md"] and native["tags"] == ["db"]
    assert native["namespace"] == "acme/team" and native["store"] == "team" and native.get("expires_at") is not None
    listed = await stack.call("memory_list", namespace="acme/team", store="team", category_path="decisions")
    assert [m["path"] for m in listed["results"]] == ["decisions/db"]
    # the namespace isolates: the default namespace has no such memory
    assert (await stack.call("memory_list", store="team"))["total"] == 0
    await cortex.text("update_memory", store="team", path="decisions/db", citations=[])
    assert (await stack.call("memory_get", id=native["id"], namespace="acme/team"))["citations"] == []


async def test_what_the_native_surface_writes_cortex_reads(shared: tuple[Stack, Cortex]) -> None:
    stack, cortex = shared
    a = await stack.call(
        "memory_add",
        content="Ship on Tuesdays",
        store="notes",
        path="native/ship",
        tags=["Ops"],
        citations=["wiki/ship"],
    )
    got = await cortex.data("get_memory", store="notes", path="native/ship")
    assert got["content"] == "Ship on Tuesdays" and got["metadata"]["citations"] == ["wiki/ship"]
    assert [m["path"] for m in (await cortex.data("list_memories", store="notes", category="native"))["memories"]] == [
        "native/ship"
    ]
    recent = await cortex.data("cortex_get_recent_memories", store="notes", category="native")
    assert recent["memories"][0]["content"] == "Ship on Tuesdays" and recent["memories"][0]["tags"] == ["ops"]
    # archived on the native surface (restorable there) is deleted for cortex; remove_memory frees its path
    await stack.call("memory_retire", id=a["id"], mode="archive")
    assert (await cortex.error("get_memory", store="notes", path="native/ship"))[1] == "Memory not found: native/ship"
    assert (await cortex.data("list_memories", store="notes", category="native"))["count"] == 0
    assert (await cortex.error("update_memory", store="notes", path="native/ship", content="x"))[0] == INVALID_PARAMS
    assert await cortex.error("add_memory", store="notes", path="native/ship", content="x") == (
        INVALID_PARAMS,
        "Memory already exists: native/ship",
    )
    await cortex.text("remove_memory", store="notes", path="native/ship")
    await cortex.text("add_memory", store="notes", path="native/ship", content="Ship on Wednesdays")


async def test_a_registered_store_is_created_on_first_write(shared: tuple[Stack, Cortex]) -> None:
    stack, cortex = shared
    assert (await stack.call("memory_stats", store="later"))["stores"] == 0  # registered, not yet there
    assert await cortex.data("cortex_get_recent_memories", store="later") == {
        "category": "all",
        "count": 0,
        "memories": [],
    }
    await cortex.text("add_memory", store="later", path="first", content="the store begins")
    assert (await stack.call("memory_stats", store="later"))["stores"] == 1


async def test_a_locked_memory_refuses_a_cortex_agent(shared: tuple[Stack, Cortex]) -> None:
    stack, cortex = shared
    gw = stack.gateway
    await cortex.text("add_memory", store="notes", path="locked/rule", content="never force-push")
    agent = gw.principal
    gw.principal = Principal(agent_id="root", role="admin")
    try:
        mid = (await stack.call("memory_get", id="notes:locked/rule"))["id"]
        await stack.call("memory_lock", id=mid, reason="policy")
    finally:
        gw.principal = agent
    for tool, args in (
        ("update_memory", {"content": "force-push is fine"}),
        ("remove_memory", {}),
        ("move_memory", {"from_path": "locked/rule", "to_path": "locked/moved"}),
    ):
        where = {"path": "locked/rule"} if tool != "move_memory" else {}
        code, msg = await cortex.error(tool, store="notes", **where, **args)
        assert (code, msg) == (INVALID_REQUEST, "Memory is locked: locked/rule (only an admin can change it)"), tool
    assert (await cortex.data("get_memory", store="notes", path="locked/rule"))["content"] == "never force-push"
