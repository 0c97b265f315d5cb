"""The `agent-memory` profile (../shared/seeds/agent-memory-server-tools.md) over the one memory.

Scenarios: the contract document has no scenario list; its scenarios are taken to be its sections: the
store_memory example, store_memory updating an existing memory, the query_memories example, query_memories'
filters / search / sort / pagination, update_memory, delete_memory, get_memory_stats, its error responses and
its tool registration. Each has an end-to-end test named after it (test_scenario_*), through the mcp package's
ClientSession over stdio against `mneme serve` with MNEME_GATEWAY_PROFILE=agent-memory. One server is shared
by the module (each scenario keeps to its own words and tags); get_memory_stats has its own, since it counts
the whole namespace. Before the shared server starts, a native `mneme serve` run as an admin seeds one locked
memory in the same data directory (the PERMISSION_ERROR cases).

The rest runs in process (tests/harness.py start_stack with the vector index, one gateway per test, each in
its own namespace): the contract's input schemas, output shapes and examples, its invalid inputs, the
importance levels on the native 0-1 scale, the search text, the accessed_at sort, the error mapping, and the
cross-profile checks with the native surface.

Golden snapshot: tests/golden/agent-memory.tools.json is the profile's tools/list (name, description, input
schema, output schema, annotations). When the surface changes on purpose, regenerate it with
    MNEME_UPDATE_GOLDEN=1 PYTHONPATH=. .venv/bin/python -m pytest tests/test_profile_agent_memory.py -k golden
and check the diff in.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import jsonschema
import pytest
from mcp import Client, ClientSession
from mcp.client.stdio import stdio_client

from mneme.app import compose
from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from services.gateway.profiles.agent_memory_shapes import ERRORS
from services.gateway.server import build_server
from tests.harness import Stack, ToolFailure, result_of, serve_params, start_stack

pytestmark = pytest.mark.anyio

PROFILE = "agent-memory"
GOLDEN = Path(__file__).parent / "golden" / "agent-memory.tools.json"
UUID_V4 = r"^[a-f0-9]{8}-[a-f0-9]{4}-4[a-f0-9]{3}-[89ab][a-f0-9]{3}-[a-f0-9]{12}$"
UNKNOWN_ID = "0b7c6a1e-2f3d-4e5f-8a9b-0c1d2e3f4a5b"  # well formed, never written
CONTRACT_CODES = {
    "INVALID_INPUT",
    "NOT_FOUND",
    "STORAGE_ERROR",
    "PERMISSION_ERROR",
    "CORRUPTED_DATA",
    "LIMIT_EXCEEDED",
    "INTERNAL_ERROR",
}
T = TypeVar("T")

# -- the contract, as the seed document states it -------------------------------------------------------
_ID = {"type": "string", "pattern": UUID_V4}
_TYPE = {"type": "string", "enum": ["core", "learning", "task"]}
_LEVEL = {"type": "string", "enum": ["high", "medium", "low"]}
CONTRACT_INPUTS: dict[str, dict[str, Any]] = {
    "store_memory": {
        "required": ["type", "content"],
        "properties": {
            "type": {**_TYPE, "description": "Type of memory to store"},
            "content": {"type": "string", "description": "The memory content", "minLength": 1, "maxLength": 5000},
            "category": {
                "type": "string",
                "description": "Optional category (e.g., 'preference', 'fact', 'pattern')",
                "maxLength": 50,
            },
            "tags": {
                "type": "array",
                "items": {"type": "string", "maxLength": 30},
                "description": "Optional tags for categorization",
                "maxItems": 10,
            },
            "importance": {**_LEVEL, "description": "Memory importance level", "default": "medium"},
            "id": {**_ID, "description": "Memory ID for updates (omit for new memories)"},
        },
    },
    "query_memories": {
        "required": [],
        "properties": {
            "type": {**_TYPE, "description": "Filter by memory type"},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Filter by tags (AND logic)"},
            "search": {"type": "string", "description": "Search text in memory content", "maxLength": 200},
            "importance": {**_LEVEL, "description": "Filter by importance level"},
            "category": {"type": "string", "description": "Filter by category"},
            "archived": {"type": "boolean", "description": "Include archived memories", "default": False},
            "limit": {
                "type": "integer",
                "description": "Maximum number of results",
                "minimum": 1,
                "maximum": 100,
                "default": 10,
            },
            "offset": {
                "type": "integer",
                "description": "Number of results to skip (for pagination)",
                "minimum": 0,
                "default": 0,
            },
            "sort_by": {
                "type": "string",
                "enum": ["created_at", "updated_at", "accessed_at", "importance", "access_count"],
                "description": "Field to sort by",
                "default": "accessed_at",
            },
            "sort_order": {"type": "string", "enum": ["asc", "desc"], "description": "Sort order", "default": "desc"},
        },
    },
    "update_memory": {
        "required": ["id"],
        "properties": {
            "id": {**_ID, "description": "UUID of the memory to update"},
            "content": {"type": "string", "description": "Updated content", "minLength": 1, "maxLength": 5000},
            "category": {"type": "string", "maxLength": 50},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 30}, "maxItems": 10},
            "importance": _LEVEL,
            "archived": {"type": "boolean", "description": "Archive or unarchive the memory"},
        },
    },
    "delete_memory": {
        "required": ["id"],
        "properties": {
            "id": {**_ID, "description": "UUID of the memory to delete"},
            "permanent": {
                "type": "boolean",
                "description": "If false (default), archives instead of deleting",
                "default": False,
            },
        },
    },
    "get_memory_stats": {"required": [], "properties": {}},
}
CONTRACT_OUTPUTS: dict[str, dict[str, str]] = {  # property -> JSON type
    "store_memory": {"id": "string", "created": "boolean", "memory": "object"},
    "query_memories": {
        "memories": "array",
        "total": "integer",
        "limit": "integer",
        "offset": "integer",
        "has_more": "boolean",
    },
    "update_memory": {"memory": "object", "updated_fields": "array"},
    "delete_memory": {"success": "boolean", "action": "string", "id": "string"},
    "get_memory_stats": {
        "total_memories": "integer",
        "by_type": "object",
        "by_importance": "object",
        "archived_count": "integer",
        "total_storage_kb": "number",
        "oldest_memory": "string",
        "newest_memory": "string",
        "most_accessed": "object",
        "top_tags": "array",
    },
}
STORE_EXAMPLE = {
    "type": "core",
    "content": "User prefers pytest over unittest for Python testing",
    "category": "preference",
    "tags": ["python", "testing"],
    "importance": "high",
}
QUERY_EXAMPLE = {"tags": ["python"], "importance": "high", "limit": 5, "sort_by": "accessed_at", "sort_order": "desc"}
REGISTRATION = (
    "Store a new memory or update an existing one. Memories persist across sessions and help maintain "
    "context."
)  # the contract's "Tool Registration" example


# -- helpers ---------------------------------------------------------------------------------------------
class Calls:
    """A tool caller (a ClientSession over stdio or an in-process Client): structured result or ToolFailure."""

    def __init__(self, session: Any):
        self.s = session

    async def __call__(self, tool: str, **args: Any) -> dict[str, Any]:
        return result_of(await self.s.call_tool(tool, args))

    async def fails(self, tool: str, **args: Any) -> dict[str, Any]:
        """The error object, checked to be the contract's: exactly {code, message}, a contract code."""
        res = await self.s.call_tool(tool, args)
        assert res.is_error, f"{tool} {args} did not fail: {res.structured_content}"
        body = json.loads(res.content[0].text)
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
        assert body["error"]["code"] in CONTRACT_CODES and body["error"]["message"], body
        return body["error"]


async def eventually(check: Callable[[], Awaitable[T]], timeout: float = 15.0) -> T:
    """Access statistics are folded from the access stream a moment after the read: poll until `check` holds."""
    deadline = time.monotonic() + timeout
    while True:
        got = await check()
        if got:
            return got
        assert time.monotonic() < deadline, "timed out waiting for the access statistics"
        await anyio.sleep(0.05)


def ids(page: dict[str, Any]) -> list[str]:
    return [m["id"] for m in page["memories"]]


def surface(tools: list[Any]) -> list[dict[str, Any]]:
    """tools/list as the golden snapshot holds it."""
    out = []
    for t in sorted(tools, key=lambda t: t.name):
        d = t.model_dump(by_alias=True, exclude_none=True, mode="json")
        out.append({k: d[k] for k in ("name", "description", "inputSchema", "outputSchema", "annotations") if k in d})
    return out


def server_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "MNEME_GATEWAY_PROFILE": PROFILE, **extra}


@asynccontextmanager
async def agent_memory_server(data: Path, **env: str) -> AsyncIterator[Calls]:
    async with stdio_client(serve_params(data, env=server_env(**env))) as (r, w), ClientSession(r, w) as cs:
        await cs.initialize()
        yield Calls(cs)


# -- fixtures --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def anyio_backend() -> str:  # module scope, so the shared servers below can be module scoped
    return "asyncio"


@pytest.fixture(scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Calls, str]]:
    """`mneme serve` with the agent-memory profile over stdio, and the id of a memory an admin locked."""
    data = tmp_path_factory.mktemp("agent-memory-serve") / "d"
    admin = {**os.environ, "MNEME_GATEWAY_ROLE": "admin", "MNEME_GATEWAY_AGENT_ID": "root"}
    async with stdio_client(serve_params(data, env=admin)) as (r, w), ClientSession(r, w) as cs:
        await cs.initialize()
        native = Calls(cs)
        locked = (await native("memory_add", content="Release branches are cut on Thursdays", kind="core"))["id"]
        await native("memory_lock", id=locked, reason="team policy")
    async with agent_memory_server(data) as call:
        yield call, locked


@pytest.fixture(scope="module")
async def local(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    """A stack in this process with the vector index (search), shared by the in-process tests."""
    base = tmp_path_factory.mktemp("agent-memory-local")
    server = EmbeddedNats(base / "nats")
    await server.start()
    stack = None
    try:
        stack = await start_stack(base / "data", server, vectors=True)
        yield stack
    finally:
        if stack is not None:
            await stack.close()
        await server.stop()


@asynccontextmanager
async def clients(
    stack: Stack, namespace: str, role: str = "agent", consistency: str = "gateway"
) -> AsyncIterator[tuple[Calls, Calls]]:
    """(agent-memory, native) over one gateway acting in `namespace`."""
    gw = compose.gateway(
        stack.nc,
        GatewaySettings(agent_id=f"{role}-{namespace}", role=role, namespace=namespace, consistency=consistency),
    )
    async with Client(build_server(gw, profile=PROFILE)) as am, Client(build_server(gw)) as native:
        yield Calls(am), Calls(native)
    await gw.access.flush()


# -- scenarios, end to end over stdio ----------------------------------------------------------------------
async def test_scenario_store_memory_example_usage(served: tuple[Calls, str]) -> None:
    call, _ = served
    got = await call("store_memory", **STORE_EXAMPLE)
    assert got["created"] is True and re.fullmatch(UUID_V4, got["id"]) and got["memory"]["id"] == got["id"]
    m = got["memory"]
    assert {k: m[k] for k in ("type", "content", "category", "tags", "importance", "archived")} == {
        "type": "core",
        "content": STORE_EXAMPLE["content"],
        "category": "preference",
        "tags": ["python", "testing"],
        "importance": "high",
        "archived": False,
    }
    assert m["created_at"] == m["updated_at"] == m["accessed_at"] and m["access_count"] == 0
    # importance defaults to medium; category and tags are optional
    plain = (await call("store_memory", type="task", content="Rotate the staging TLS certificate"))["memory"]
    assert plain["importance"] == "medium" and plain["category"] is None and plain["tags"] == []
    # it persists: a query finds it
    found = await call("query_memories", search="pytest unittest", tags=["testing"])
    assert got["id"] in ids(found)


async def test_scenario_store_memory_updates_an_existing_memory(served: tuple[Calls, str]) -> None:
    call, _ = served
    first = await call(
        "store_memory",
        type="learning",
        content="The nightly build takes 40 minutes",
        category="ci",
        tags=["build", "nightly"],
        importance="low",
    )
    again = await call("store_memory", id=first["id"], type="core", content="The nightly build takes 25 minutes")
    assert again["created"] is False and again["id"] == first["id"]
    m = again["memory"]
    assert m["content"] == "The nightly build takes 25 minutes" and m["type"] == "core"
    assert m["category"] == "ci" and m["tags"] == ["build", "nightly"] and m["importance"] == "low"  # kept
    assert m["created_at"] == first["memory"]["created_at"] and m["updated_at"] > first["memory"]["updated_at"]
    replaced = await call(
        "store_memory",
        id=first["id"],
        type="core",
        content="The nightly build takes 25 minutes",
        category="builds",
        tags=[],
        importance="high",
    )
    assert {k: replaced["memory"][k] for k in ("category", "tags", "importance")} == {
        "category": "builds",
        "tags": [],
        "importance": "high",
    }
    page = await call("query_memories", search="nightly build")
    assert ids(page).count(first["id"]) == 1 and page["memories"][ids(page).index(first["id"])]["type"] == "core"
    assert (await call.fails("store_memory", id=UNKNOWN_ID, type="core", content="x"))["code"] == "NOT_FOUND"
    assert (await call.fails("store_memory", id="not-a-uuid", type="core", content="x"))["code"] == "INVALID_INPUT"


async def test_scenario_query_memories_example_usage(served: tuple[Calls, str]) -> None:
    call, _ = served
    words = ["dataclasses", "pathlib", "f-strings", "typing", "ruff", "pytest-fixtures"]
    mine = [
        (
            await call(
                "store_memory",
                type="core",
                content=f"Python style rule {i}: prefer {w}",
                tags=["python"],
                importance="high",
            )
        )["id"]
        for i, w in enumerate(words)
    ]
    low = (await call("store_memory", type="core", content="Python 2 is gone", tags=["python"], importance="low"))["id"]
    target = mine[1]
    await call("query_memories", search="pathlib")  # a read: the memory accessed most recently comes first

    async def read() -> bool:  # (polling reads only the target itself)
        page = await call("query_memories", search="pathlib")
        return ids(page) == [target] and page["memories"][0]["access_count"] >= 1

    await eventually(read)
    page = await call("query_memories", **QUERY_EXAMPLE)
    assert page["limit"] == 5 and page["offset"] == 0 and len(page["memories"]) == 5
    assert page["total"] >= 6 and page["has_more"] is True and low not in ids(page)
    assert all("python" in m["tags"] and m["importance"] == "high" for m in page["memories"])
    assert ids(page)[0] == target
    stamps = [m["accessed_at"] for m in page["memories"]]
    assert stamps == sorted(stamps, reverse=True)


async def test_scenario_query_memories_filters_search_sort_and_pagination(served: tuple[Calls, str]) -> None:
    call, _ = served
    tag = "q-filters"

    async def put(type_: str, content: str, importance: str, category: str, *more: str) -> str:
        return (
            await call(
                "store_memory", type=type_, content=content, importance=importance, category=category, tags=[tag, *more]
            )
        )["id"]

    a = await put("core", "Deploys go through the blue green pipeline", "high", "process", "deploy")
    b = await put("learning", "Flaky tests usually come from shared temp directories", "medium", "testing", "flaky")
    c = await put("task", "Migrate the deploy scripts to the new pipeline", "low", "process", "deploy", "todo")
    d = await put("learning", "Retrying a flaky test hides the real bug", "low", "testing", "flaky")
    # each filter, alone and combined (all must hold); tags with AND
    assert set(ids(await call("query_memories", tags=[tag], type="learning"))) == {b, d}
    assert set(ids(await call("query_memories", tags=[tag, "deploy"]))) == {a, c}
    assert ids(await call("query_memories", tags=[tag, "deploy", "todo"])) == [c]
    assert set(ids(await call("query_memories", tags=[tag], category="testing"))) == {b, d}
    assert ids(await call("query_memories", tags=[tag], importance="medium")) == [b]
    assert set(ids(await call("query_memories", tags=[tag], importance="low"))) == {c, d}
    assert ids(await call("query_memories", tags=[tag], type="task", category="process", importance="low")) == [c]
    # search text: words of the content, case and endings ignored, combined with the filters
    assert set(ids(await call("query_memories", tags=[tag], search="PIPELINE"))) == {a, c}
    assert set(ids(await call("query_memories", tags=[tag], search="tests"))) == {b, d}
    assert ids(await call("query_memories", tags=[tag], search="pipeline", type="task")) == [c]
    assert (await call("query_memories", tags=[tag], search="kubernetes"))["total"] == 0
    # archived memories only when asked
    await call("delete_memory", id=d)
    assert d not in ids(await call("query_memories", tags=[tag]))
    shown = await call("query_memories", tags=[tag], archived=True)
    assert d in ids(shown) and next(m for m in shown["memories"] if m["id"] == d)["archived"] is True
    # sort and pagination: total counts every match, has_more says whether a page follows
    created = [a, b, c]
    p1 = await call("query_memories", tags=[tag], sort_by="created_at", sort_order="asc", limit=2)
    p2 = await call("query_memories", tags=[tag], sort_by="created_at", sort_order="asc", limit=2, offset=2)
    assert (p1["total"], p1["has_more"], p2["total"], p2["has_more"]) == (3, True, 3, False)
    assert ids(p1) + ids(p2) == created
    assert ids(await call("query_memories", tags=[tag], sort_by="created_at")) == created[::-1]
    assert ids(await call("query_memories", tags=[tag], sort_by="importance", sort_order="desc")) == [a, b, c]
    assert ids(await call("query_memories", tags=[tag], sort_by="importance", sort_order="asc")) == [c, b, a]
    await call("update_memory", id=b, content="Flaky tests usually come from shared temporary directories")
    assert ids(await call("query_memories", tags=[tag], sort_by="updated_at"))[0] == b
    assert (await call("query_memories", tags=[tag], offset=10))["memories"] == []
    # access_count: the memory returned by more queries sorts first
    for _ in range(3):
        await call("query_memories", tags=[tag, "todo"])

    async def most_read_first() -> bool:
        page = await call("query_memories", tags=[tag], sort_by="access_count")
        return ids(page)[0] == c and page["memories"][0]["access_count"] >= 3

    await eventually(most_read_first)


async def test_scenario_update_memory(served: tuple[Calls, str]) -> None:
    call, locked = served
    mid = (
        await call(
            "store_memory",
            type="learning",
            content="The API rate limit is 100 requests per minute",
            category="api",
            tags=["limits"],
            importance="medium",
        )
    )["id"]
    up = await call("update_memory", id=mid, content="The API rate limit is 600 requests per minute", importance="high")
    assert sorted(up["updated_fields"]) == ["content", "importance"]
    assert up["memory"]["content"].endswith("600 requests per minute") and up["memory"]["importance"] == "high"
    assert up["memory"]["category"] == "api" and up["memory"]["tags"] == ["limits"]  # untouched
    same = await call(
        "update_memory", id=mid, content="The API rate limit is 600 requests per minute", importance="high"
    )
    assert same["updated_fields"] == []
    assert (await call("update_memory", id=mid, tags=["limits", "api"]))["updated_fields"] == ["tags"]
    cleared = await call("update_memory", id=mid, category="", tags=[])
    assert sorted(cleared["updated_fields"]) == ["category", "tags"]
    assert cleared["memory"]["category"] is None and cleared["memory"]["tags"] == []
    # archive and unarchive
    arch = await call("update_memory", id=mid, archived=True)
    assert arch["updated_fields"] == ["archived"] and arch["memory"]["archived"] is True
    assert mid not in ids(await call("query_memories", search="rate limit"))
    assert (await call("update_memory", id=mid, archived=True))["updated_fields"] == []
    back = await call("update_memory", id=mid, archived=False, importance="low")
    assert sorted(back["updated_fields"]) == ["archived", "importance"] and back["memory"]["archived"] is False
    assert mid in ids(await call("query_memories", search="rate limit"))
    # refusals, in the contract's format
    assert (await call.fails("update_memory", id=mid))["code"] == "INVALID_INPUT"
    assert (await call.fails("update_memory", id=UNKNOWN_ID, content="x"))["code"] == "NOT_FOUND"
    assert (await call.fails("update_memory", id=locked, content="Release branches are cut on Fridays"))[
        "code"
    ] == "PERMISSION_ERROR"


async def test_scenario_delete_memory(served: tuple[Calls, str]) -> None:
    call, locked = served
    mid = (await call("store_memory", type="task", content="Clean up the obsolete feature flags", tags=["flags"]))["id"]
    assert await call("delete_memory", id=mid) == {"success": True, "action": "archived", "id": mid}
    assert mid not in ids(await call("query_memories", tags=["flags"]))
    assert mid in ids(await call("query_memories", tags=["flags"], archived=True))
    assert await call("delete_memory", id=mid, permanent=False) == {"success": True, "action": "archived", "id": mid}
    restored = await call("update_memory", id=mid, archived=False)
    assert restored["memory"]["archived"] is False and mid in ids(await call("query_memories", tags=["flags"]))
    assert await call("delete_memory", id=mid, permanent=True) == {"success": True, "action": "deleted", "id": mid}
    assert mid not in ids(await call("query_memories", tags=["flags"], archived=True))
    assert (await call.fails("delete_memory", id=mid))["code"] == "NOT_FOUND"
    assert (await call.fails("update_memory", id=mid, content="x"))["code"] == "NOT_FOUND"
    assert (await call.fails("delete_memory", id=locked, permanent=True))["code"] == "PERMISSION_ERROR"


async def test_scenario_get_memory_stats(tmp_path: Path) -> None:
    async with agent_memory_server(tmp_path / "d") as call:
        empty = await call("get_memory_stats")
        assert empty == {
            "total_memories": 0,
            "by_type": {"core": 0, "learning": 0, "task": 0},
            "by_importance": {"high": 0, "medium": 0, "low": 0},
            "archived_count": 0,
            "total_storage_kb": 0.0,
            "oldest_memory": None,
            "newest_memory": None,
            "most_accessed": None,
            "top_tags": [],
        }
        unknown = await call.fails("get_memory_stats", verbose=True)
        assert unknown == {
            "code": "INVALID_INPUT",
            "message": "verbose: unknown argument; this tool takes no arguments",
        }
        stored = [
            await call(
                "store_memory", type="core", content="Use UTC everywhere", tags=["time", "style"], importance="high"
            ),
            await call("store_memory", type="core", content="Logs go to stderr", tags=["style"]),
            await call(
                "store_memory",
                type="learning",
                content="Docker layer caching needs a stable COPY order",
                tags=["docker", "style"],
                importance="low",
            ),
            await call("store_memory", type="task", content="Remove the legacy cron job", tags=["ops"]),
        ]
        await call("delete_memory", id=stored[3]["id"])
        for _ in range(3):
            await call("query_memories", search="docker")
        await call("query_memories", search="utc")

        # read-your-reads (issue 28, item 4): the stats right after the reads count them, with no wait
        stats = await call("get_memory_stats")
        assert stats["most_accessed"] is not None and stats["most_accessed"]["access_count"] == 3, stats
        assert stats["total_memories"] == 3 and stats["archived_count"] == 1
        assert stats["by_type"] == {"core": 2, "learning": 1, "task": 0}
        assert stats["by_importance"] == {"high": 1, "medium": 1, "low": 1}
        size = sum(len(s["memory"]["content"].encode()) + len("{}") for s in stored)  # content and metadata bytes
        assert stats["total_storage_kb"] == round(size / 1024, 3)
        assert stats["oldest_memory"] == stored[0]["memory"]["created_at"]
        assert stats["newest_memory"] == stored[3]["memory"]["created_at"]
        most = stats["most_accessed"]
        assert most["id"] == stored[2]["id"] and most["content"] == stored[2]["memory"]["content"]
        assert stats["top_tags"] == [
            {"tag": "style", "count": 3},
            {"tag": "docker", "count": 1},
            {"tag": "time", "count": 1},
        ]


async def test_scenario_error_responses(served: tuple[Calls, str]) -> None:
    call, locked = served
    cases: list[tuple[str, dict[str, Any]]] = [
        ("store_memory", {"type": "episodic", "content": "x"}),
        ("store_memory", {"type": "core", "content": ""}),
        ("store_memory", {"type": "core", "content": "x" * 5001}),
        ("store_memory", {"content": "x"}),
        ("query_memories", {"limit": 101}),
        ("delete_memory", {"id": UNKNOWN_ID.upper()}),
        ("query_memories", {"colour": "red"}),
        ("forget_everything", {}),
    ]
    for tool, args in cases:
        err = await call.fails(tool, **args)
        assert err["code"] == "INVALID_INPUT", (tool, args, err)
    assert await call.fails("update_memory", id=UNKNOWN_ID, content="x") == {
        "code": "NOT_FOUND",
        "message": f"Memory not found: {UNKNOWN_ID}",
    }
    denied = await call.fails("store_memory", id=locked, type="core", content="Release branches are cut on Fridays")
    assert denied["code"] == "PERMISSION_ERROR" and locked in denied["message"]


async def test_scenario_tool_registration(served: tuple[Calls, str]) -> None:
    call, _ = served
    listed = (await call.s.list_tools()).tools
    assert [t.name for t in listed] == [
        "store_memory",
        "query_memories",
        "update_memory",
        "delete_memory",
        "get_memory_stats",
    ]
    by_name = {t.name: t for t in listed}
    assert by_name["store_memory"].description.startswith(REGISTRATION)
    assert all(t.description and t.input_schema["type"] == "object" and t.output_schema for t in listed)
    assert surface(listed) == json.loads(GOLDEN.read_text())  # over stdio, the same surface as the snapshot


# -- the contract's surface, in process --------------------------------------------------------------------
async def test_golden_tools_list(local: Stack) -> None:
    async with clients(local, "golden") as (am, _):
        now = surface((await am.s.list_tools()).tools)
    if os.environ.get("MNEME_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(now, indent=2, ensure_ascii=False) + "\n")
    assert GOLDEN.exists(), "no snapshot yet: run with MNEME_UPDATE_GOLDEN=1"
    assert now == json.loads(GOLDEN.read_text()), (
        "the agent-memory tool surface changed: if on purpose, "
        "regenerate tests/golden/agent-memory.tools.json with MNEME_UPDATE_GOLDEN=1 and check the diff in"
    )


async def test_input_schemas_are_the_contracts(local: Stack) -> None:
    async with clients(local, "schemas") as (am, _):
        listed = {t.name: t for t in (await am.s.list_tools()).tools}
    assert set(listed) == set(CONTRACT_INPUTS)
    for name, contract in CONTRACT_INPUTS.items():
        schema = listed[name].input_schema
        assert sorted(schema.get("required", [])) == sorted(contract["required"]), name
        assert list(schema["properties"]) == list(contract["properties"]), name  # the same arguments, in order
        for prop, want in contract["properties"].items():
            got = schema["properties"][prop]
            for key, value in want.items():
                assert got.get(key) == value, (name, prop, key, got.get(key), value)
            assert "default" not in got or "default" in want, (name, prop)  # no default the contract lacks
            assert "anyOf" not in got, (name, prop)  # optional arguments are not nullable unions


async def test_output_shapes_are_the_contracts(local: Stack) -> None:
    async with clients(local, "outputs") as (am, _):
        listed = {t.name: t for t in (await am.s.list_tools()).tools}
    for name, props in CONTRACT_OUTPUTS.items():
        schema = listed[name].output_schema
        for prop, kind in props.items():
            got = schema["properties"][prop]
            kinds = {got.get("type")} | {a.get("type") for a in got.get("anyOf", ())}
            if "$ref" in got or any("$ref" in a for a in got.get("anyOf", ())):
                kinds.add("object")
            assert kind in kinds, (name, prop, got)
    stats = listed["get_memory_stats"].output_schema["$defs"]
    assert set(stats["ByType"]["properties"]) == {"core", "learning", "task"}
    assert set(stats["ByImportance"]["properties"]) == {"high", "medium", "low"}
    assert set(stats["TagCount"]["properties"]) == {"tag", "count"}


async def test_contract_examples_are_accepted(local: Stack) -> None:
    async with clients(local, "examples") as (am, _):
        listed = {t.name: t for t in (await am.s.list_tools()).tools}
        jsonschema.validate(STORE_EXAMPLE, listed["store_memory"].input_schema)
        jsonschema.validate(QUERY_EXAMPLE, listed["query_memories"].input_schema)
        stored = await am("store_memory", **STORE_EXAMPLE)
        page = await am("query_memories", **QUERY_EXAMPLE)
        assert ids(page) == [stored["id"]]
        for tool, result in (("store_memory", stored), ("query_memories", page)):
            jsonschema.validate(result, listed[tool].output_schema)


INVALID = [  # (tool, arguments): each refused as INVALID_INPUT, nothing written
    ("store_memory", {"content": "x"}),
    ("store_memory", {"type": "core"}),
    ("store_memory", {"type": "note", "content": "x"}),
    ("store_memory", {"type": "core", "content": ""}),
    ("store_memory", {"type": "core", "content": "   "}),
    ("store_memory", {"type": "core", "content": "x" * 5001}),
    ("store_memory", {"type": "core", "content": "x", "category": "c" * 51}),
    ("store_memory", {"type": "core", "content": "x", "category": None}),
    ("store_memory", {"type": "core", "content": "x", "tags": [f"t{i}" for i in range(11)]}),
    ("store_memory", {"type": "core", "content": "x", "tags": ["t" * 31]}),
    ("store_memory", {"type": "core", "content": "x", "tags": "python"}),
    ("store_memory", {"type": "core", "content": "x", "importance": "urgent"}),
    ("store_memory", {"type": "core", "content": "x", "importance": 0.9}),
    ("store_memory", {"type": "core", "content": "x", "id": "1234"}),
    ("store_memory", {"type": "core", "content": "x", "id": UNKNOWN_ID.upper()}),
    ("store_memory", {"type": "core", "content": "x", "id": "0b7c6a1e-2f3d-1e5f-8a9b-0c1d2e3f4a5b"}),  # version 1
    ("store_memory", {"type": "core", "content": "x", "kind": "core"}),
    ("query_memories", {"type": "episodic"}),
    ("query_memories", {"importance": "critical"}),
    ("query_memories", {"search": "s" * 201}),
    ("query_memories", {"limit": 0}),
    ("query_memories", {"limit": 101}),
    ("query_memories", {"offset": -1}),
    ("query_memories", {"sort_by": "relevance"}),
    ("query_memories", {"sort_order": "up"}),
    ("query_memories", {"archived": "sometimes"}),
    ("update_memory", {}),
    ("update_memory", {"content": "x"}),
    ("update_memory", {"id": "nope", "content": "x"}),
    ("update_memory", {"id": UNKNOWN_ID, "content": "x" * 5001}),
    ("update_memory", {"id": UNKNOWN_ID, "tags": ["t" * 31]}),
    ("update_memory", {"id": UNKNOWN_ID, "importance": "none"}),
    ("update_memory", {"id": UNKNOWN_ID, "category": "c" * 51}),
    ("delete_memory", {}),
    ("delete_memory", {"id": "nope"}),
    ("delete_memory", {"id": UNKNOWN_ID, "permanent": "maybe"}),
    ("delete_memory", {"id": UNKNOWN_ID, "permanent": "true"}),  # (destroys data: a JSON true only)
    ("get_memory_stats", {"verbose": True}),
]


@pytest.mark.parametrize(("tool", "args"), INVALID, ids=[f"{t}-{i}" for i, (t, _) in enumerate(INVALID)])
async def test_invalid_inputs_are_refused_with_the_contracts_error(
    local: Stack, tool: str, args: dict[str, Any]
) -> None:
    before = await local.last_seq()
    async with clients(local, "invalid") as (am, _):
        err = await am.fails(tool, **args)
    assert err["code"] == "INVALID_INPUT", err
    assert await local.last_seq() == before


async def test_error_codes_are_only_the_contracts() -> None:
    domain = [
        "INVALID_INPUT",
        "MEMORY_NOT_FOUND",
        "ALREADY_EXISTS",
        "INVALID_STATE",
        "MEMORY_LOCKED",
        "WRITE_NOT_ALLOWED",
        "PERMISSION_ERROR",
        "SCOPE_VIOLATION",
        "INVALID_CONTEXT",
        "IDEMPOTENCY_KEY_REUSED",
        "CONFLICT",
        "PROJECTION_LAG",
        "UNAVAILABLE",
        "EMBEDDING_MODEL_LOADING",
        "INTERNAL",
        "UNKNOWN_TOOL",
        "SOMETHING_NEW",
    ]
    for code in domain:
        err = json.loads(ERRORS.render(code, "what happened", "field", {"memory_id": "m"}))["error"]
        assert set(err) == {"code", "message"} and err["code"] in CONTRACT_CODES and err["message"] == "what happened"
    rendered = {c: json.loads(ERRORS.render(c, "m"))["error"]["code"] for c in domain}
    assert rendered["MEMORY_NOT_FOUND"] == "NOT_FOUND" and rendered["MEMORY_LOCKED"] == "PERMISSION_ERROR"
    assert rendered["UNAVAILABLE"] == "STORAGE_ERROR" and rendered["INTERNAL"] == "INTERNAL_ERROR"
    assert rendered["SOMETHING_NEW"] == "INTERNAL_ERROR"


# -- behaviour over the one memory, in process -------------------------------------------------------------
async def test_importance_levels_on_the_native_scale(local: Stack) -> None:
    async with clients(local, "levels") as (am, native):
        stored = {
            lv: (await am("store_memory", type="core", content=f"level {lv}", importance=lv))["id"]
            for lv in ("high", "medium", "low")
        }
        for lv, mid in stored.items():
            assert (await native("memory_get", id=mid))["importance"] == {"high": 0.9, "medium": 0.5, "low": 0.2}[lv]
        edges = {
            x: (await native("memory_add", content=f"native importance {x}", importance=x))["id"]
            for x in (0.0, 0.39, 0.4, 0.69, 0.7, 1.0)
        }
        page = await am("query_memories", search="native importance", limit=100)
        assert {m["id"]: m["importance"] for m in page["memories"]} == {
            edges[0.0]: "low",
            edges[0.39]: "low",
            edges[0.4]: "medium",
            edges[0.69]: "medium",
            edges[0.7]: "high",
            edges[1.0]: "high",
        }
        for lv, want in (("high", {0.7, 1.0}), ("medium", {0.4, 0.69}), ("low", {0.0, 0.39})):
            got = await am("query_memories", search="native importance", importance=lv)
            assert set(ids(got)) == {edges[x] for x in want}, lv
        # a level the memory already reads back as keeps its finer value; another level stores the level's value
        assert (await am("update_memory", id=edges[1.0], importance="high"))["updated_fields"] == []
        assert (await native("memory_get", id=edges[1.0]))["importance"] == 1.0
        assert (await am("update_memory", id=edges[1.0], importance="medium"))["updated_fields"] == ["importance"]
        assert (await native("memory_get", id=edges[1.0]))["importance"] == 0.5
        stats = await am("get_memory_stats")
        assert stats["by_importance"] == {"high": 2, "medium": 4, "low": 3}


async def test_search_text_matches_words_of_the_content(local: Stack) -> None:
    async with clients(local, "search") as (am, _):
        a = (await am("store_memory", type="learning", content="Caching the Docker layers halves the build time"))["id"]
        b = (await am("store_memory", type="learning", content="The build server runs out of disk on Mondays"))["id"]
        c = (await am("store_memory", type="core", content="Prefer explicit timeouts on every HTTP call"))["id"]
        assert ids(await am("query_memories", search="docker")) == [a]
        assert ids(await am("query_memories", search="DOCKER LAYER")) == [a]  # case and word endings ignored
        assert set(ids(await am("query_memories", search="builds"))) == {a, b}
        assert set(ids(await am("query_memories", search="docker disk"))) == {a, b}  # any of the words
        assert ids(await am("query_memories", search="timeout")) == [c]
        assert (await am("query_memories", search="kubernetes"))["total"] == 0
        assert (await am("query_memories", search="   "))["total"] == 3  # blank: no search filter
        p = await am("query_memories", search="build", limit=1, sort_by="created_at", sort_order="asc")
        assert (ids(p), p["total"], p["has_more"]) == ([a], 2, True)


async def test_accessed_at_sort_counts_a_never_read_memory_as_read_when_created(local: Stack) -> None:
    async with clients(local, "accessed") as (am, _):
        made = [
            (await am("store_memory", type="task", content=f"step {w}"))["id"] for w in ("alpha", "bravo", "charlie")
        ]
        page = await am("query_memories")
        assert ids(page) == made[::-1]  # never read: newest first
        assert [m["accessed_at"] for m in page["memories"]] == [m["created_at"] for m in page["memories"]]
        await am("query_memories", search="alpha")  # reads the first again, after the others

        async def folded() -> bool:  # (polling reads only that memory)
            return (await am("query_memories", search="alpha"))["memories"][0]["access_count"] >= 2

        await eventually(folded)
        newer = (await am("store_memory", type="task", content="step delta"))["id"]
        order = ids(await am("query_memories", sort_by="accessed_at"))
        assert order[:2] == [newer, made[0]]  # created after the last read of alpha; alpha read after the others


async def test_cross_profile_native_reads_what_agent_memory_writes_and_back(local: Stack) -> None:
    async with clients(local, "cross") as (am, native):
        stored = await am("store_memory", **STORE_EXAMPLE)
        got = await native("memory_get", id=stored["id"])
        assert (got["kind"], got["content"], got["category"], got["tags"], got["importance"], got["namespace"]) == (
            "core",
            STORE_EXAMPLE["content"],
            "preference",
            ["python", "testing"],
            0.9,
            "cross",
        )
        assert stored["id"] in [m["id"] for m in (await native("memory_list", kind="core"))["results"]]
        recalled = await native("memory_search", query="which test framework does the user prefer?", threshold=0.0)
        assert stored["id"] in [r["id"] for r in recalled["results"]]
        # the native surface writes; agent-memory reads, updates and counts it
        fact = await native(
            "memory_add",
            content="Grafana dashboards live in the ops repo",
            kind="fact",
            category="ops",
            tags=["Grafana"],
            importance=0.75,
        )
        page = await am("query_memories", search="grafana dashboards")
        assert ids(page) == [fact["id"]]
        m = page["memories"][0]
        # a kind the contract cannot name shows under its nearest type (issue 28, item 5): a fact is core
        assert (m["type"], m["importance"], m["category"], m["tags"]) == ("core", "high", "ops", ["grafana"])
        assert fact["id"] in ids(await am("query_memories", type="core"))
        assert fact["id"] not in ids(await am("query_memories", type="learning"))
        assert ids(await am("query_memories", tags=["grafana"], category="ops")) == [fact["id"]]
        up = await am("update_memory", id=fact["id"], tags=["grafana", "dashboards"], archived=True)
        assert sorted(up["updated_fields"]) == ["archived", "tags"]
        after = await native("memory_get", id=fact["id"])
        assert after["status"] == "archived" and after["tags"] == ["grafana", "dashboards"]
        stats = await am("get_memory_stats")
        assert stats["by_type"] == {"core": 1, "learning": 0, "task": 0} and stats["archived_count"] == 1
        await native("memory_restore", id=fact["id"])
        assert (await am("get_memory_stats"))["by_type"] == {"core": 2, "learning": 0, "task": 0}
        assert await am("delete_memory", id=fact["id"], permanent=True) == {
            "success": True,
            "action": "deleted",
            "id": fact["id"],
        }
        with pytest.raises(ToolFailure) as gone:
            await native("memory_get", id=fact["id"])
        assert gone.value.code == "MEMORY_NOT_FOUND"


async def test_a_memory_locked_natively_refuses_agent_memory_changes(local: Stack) -> None:
    # two gateways: the agent's reads wait for the head of the log (linearizable), so it sees the admin's writes
    async with (
        clients(local, "locked", role="admin") as (_, admin),
        clients(local, "locked", consistency="linearizable") as (am, _),
    ):
        mid = (await admin("memory_add", content="Production deploys need two approvals", kind="core"))["id"]
        await admin("memory_lock", id=mid, reason="policy")
        for tool, args in (
            ("update_memory", {"id": mid, "content": "one approval"}),
            ("update_memory", {"id": mid, "archived": True}),
            ("store_memory", {"id": mid, "type": "core", "content": "one approval"}),
            ("delete_memory", {"id": mid}),
        ):
            err = await am.fails(tool, **args)
            assert err["code"] == "PERMISSION_ERROR" and mid in err["message"], (tool, err)
        assert ids(await am("query_memories", search="approvals")) == [mid]  # still readable


async def test_other_profiles_kinds_show_as_the_contracts_types(local: Stack) -> None:
    """Issue 28, item 5: after a cortex write (kind note) get_memory_stats answered by_type {"note": 1}, outside
    the contract's enum. Every kind shows, counts and filters as one of core, learning, task."""
    async with clients(local, "kinds") as (am, native):
        written = {
            kind: (await native("memory_add", content=f"A memory of kind {kind}", kind=kind))["id"]
            for kind in ("note", "decision", "lesson", "skill", "todo", "goal")
        }
        own = (await am("store_memory", type="task", content="Ship the release notes"))["id"]
        shown = {m["id"]: m["type"] for m in (await am("query_memories", limit=100))["memories"]}
        assert shown == {
            written["note"]: "core",
            written["decision"]: "core",
            written["lesson"]: "learning",
            written["skill"]: "learning",
            written["todo"]: "task",
            written["goal"]: "task",
            own: "task",
        }
        for t in ("core", "learning", "task"):
            assert set(ids(await am("query_memories", type=t, limit=100))) == {i for i, s in shown.items() if s == t}
        assert (await am("get_memory_stats"))["by_type"] == {"core": 2, "learning": 2, "task": 3}
