"""The `memory-mcp` profile (../shared/seeds/memory-mcp-contract.md) over the one memory.

1. The surface: the golden snapshot of tools/list (tests/golden/memory-mcp.tools.json; after an intended change,
   `MNEME_UPDATE_GOLDEN=1 python -m pytest tests/test_profile_memory_mcp.py -k golden` and review the diff); the
   listed input schemas are the contract's own, and the tool functions take exactly those arguments.
2. The contract's tools and notes, each end to end through a real MCP client on one stack (nats-server, DuckDB,
   Qdrant Edge, the bundled model), a fresh principal and namespace per test: memory operations, search,
   knowledge graph, temporal, system; user_id isolation; bad input naming the field; reset with and without
   confirm.
3. One stdio session through `mneme serve --profile memory-mcp`: server info, instructions, a round trip.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
import threading
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, ClientSession
from mcp.client.stdio import stdio_client

from mneme.app import compose
from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from mneme.embedding import DEFAULT_MODEL, ModelHandle
from services.gateway.gateway import Gateway
from services.gateway.profiles import memory_mcp
from services.gateway.profiles.memory_mcp import merge_by_zscore
from services.gateway.profiles.memory_mcp_models import RecallItem
from services.gateway.server import build_server
from tests.harness import ToolFailure, open_vectors, serve_params, start_stack, text_of

pytestmark = pytest.mark.anyio

GOLDEN = Path(__file__).parent / "golden" / "memory-mcp.tools.json"
SEED = Path(__file__).resolve().parents[2] / "shared" / "seeds" / "memory-mcp-contract.md"
INSTRUCTIONS = "AI agent memory server with knowledge graph and code search. 21 tools available."
TOOLS = [
    "store_memory",
    "get_memory",
    "update_memory",
    "delete_memory",
    "list_memories",
    "search",
    "search_text",
    "recall",
    "create_entity",
    "create_relation",
    "get_related",
    "get_valid",
    "get_valid_at",
    "invalidate",
    "index_project",
    "search_code",
    "get_index_status",
    "list_projects",
    "delete_project",
    "get_status",
    "reset_all_memory",
]
MEMORY = {
    "id",
    "content",
    "memory_type",
    "event_time",
    "ingestion_time",
    "valid_from",
    "valid_until",
    "importance_score",
    "metadata",
}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def snapshot(tools: list[Any]) -> list[dict[str, Any]]:
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]


class Failure(ToolFailure):
    """A plain-text tool error (the contract's format): `message` is the text itself."""

    def __init__(self, text: str):
        super().__init__(json.dumps({"error": {"code": "TEXT", "message": text}}))
        self.message = text


class MM:
    """One MCP client on the memory-mcp profile: `await mm(tool, **args)` -> structured content, or Failure."""

    def __init__(self, client: Any):
        self.client = client

    async def __call__(self, tool: str, **args: Any) -> dict[str, Any]:
        res = await self.client.call_tool(tool, args)
        if res.is_error:
            raise Failure(text_of(res))
        assert json.loads(text_of(res)) == res.structured_content  # the text is the same JSON
        out: dict[str, Any] = res.structured_content
        return out

    async def fails(self, tool: str, **args: Any) -> str:
        with pytest.raises(Failure) as err:
            await self(tool, **args)
        return err.value.message


# == 1. the surface ==========================================================================================


async def test_golden_tools_list() -> None:
    """tools/list against tests/golden/memory-mcp.tools.json (MNEME_UPDATE_GOLDEN=1 rewrites it)."""
    async with Client(build_server(None, profile="memory-mcp")) as c:
        listed = snapshot((await c.list_tools()).tools)
    if os.environ.get("MNEME_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(listed, indent=2, ensure_ascii=False) + "\n")
    assert listed == json.loads(GOLDEN.read_text()), (
        "the memory-mcp surface changed: review, then MNEME_UPDATE_GOLDEN=1"
    )
    assert [t["name"] for t in listed] == TOOLS


def _contract() -> dict[str, tuple[str, dict[str, Any]]]:
    """Each tool of the contract document: its one-line description and its input schema."""
    text = SEED.read_text()
    parts = re.split(r"\n### \d+\. (\w+)\n", text)
    out = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        m = re.search(r"\*\*Input Schema:\*\*\n```json\n(.*?)```", body, re.S)
        assert m, name
        out[name] = (body.strip().split("\n")[0], json.loads(m.group(1)))
    return out


def test_listed_schemas_and_descriptions_are_the_contracts() -> None:
    if not SEED.exists():
        pytest.skip("the seed contract is not beside this checkout")
    contract = _contract()
    assert len(contract) == 21 and set(TOOLS) <= set(contract)
    for name in TOOLS:
        listed = memory_mcp.LISTED[name]
        assert (listed["description"], listed["inputSchema"]) == contract[name], name


def test_tool_functions_take_the_listed_arguments_with_their_defaults() -> None:
    """The listing is the contract's; the functions validate: the two name the same arguments and defaults."""
    for spec in memory_mcp.tools.specs:
        schema = memory_mcp.LISTED[spec.name]["inputSchema"]
        params = list(inspect.signature(spec.fn).parameters.values())[1:]
        assert [p.name for p in params] == list(schema["properties"]), spec.name
        required = [p.name for p in params if p.default is inspect.Parameter.empty]
        assert required == [r for r in schema.get("required", []) if r != "confirm"], spec.name
        for p in params:
            if "default" in schema["properties"][p.name]:
                assert p.default == schema["properties"][p.name]["default"], (spec.name, p.name)
        assert spec.description == memory_mcp.LISTED[spec.name]["description"]


def test_annotations() -> None:
    hints = {n: t["annotations"] for n, t in memory_mcp.LISTED.items()}
    reads = ("get_memory", "list_memories", "search", "search_text", "recall", "get_related", "get_valid")
    assert all(hints[n]["readOnlyHint"] for n in (*reads, "get_valid_at", "get_status"))
    assert hints["delete_memory"]["destructiveHint"] and hints["reset_all_memory"]["destructiveHint"]
    assert not hints["store_memory"]["idempotentHint"]


# == 2. in process ===========================================================================================


class World:
    def __init__(self, stack: Any, es: AsyncExitStack):
        self.stack, self.es = stack, es

    async def user(self, *, only_own: bool = False) -> tuple[MM, Gateway]:
        """A principal with its own default namespace; `only_own`: it may use that namespace and no other."""
        ns = f"mm-{uuid.uuid4().hex[:10]}"
        gw = compose.gateway(
            self.stack.nc,
            GatewaySettings(
                agent_id=f"agent-{uuid.uuid4().hex[:6]}",
                namespace=ns,
                namespaces=[ns] if only_own else ["*"],
                consistency="linearizable",
            ),
        )
        self.es.push_async_callback(gw.access.flush)
        client = await self.es.enter_async_context(Client(build_server(gw, profile="memory-mcp")))
        return MM(client), gw


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    base = tmp_path_factory.mktemp("memory-mcp")
    server = EmbeddedNats(base / "nats")
    await server.start()
    stack = None
    try:
        stack = await start_stack(base / "data", server, vectors=True)
        async with AsyncExitStack() as es:
            yield World(stack, es)
    finally:
        if stack is not None:
            await stack.close()
        await server.stop()


@pytest.fixture
async def mm(world: World) -> MM:
    return (await world.user())[0]


def when(iso: str) -> datetime:
    return datetime.fromisoformat(iso)


# -- memory operations ---------------------------------------------------------------------------------------
async def test_store_and_get_memory(mm: MM) -> None:
    got = await mm("store_memory", content="The build uses uv and ruff", memory_type="procedural", metadata={"a": 1})
    assert set(got) == {"id"} and uuid.UUID(got["id"])
    m = await mm("get_memory", id=got["id"])
    assert set(m) == MEMORY
    assert m["id"] == {"tb": "memories", "id": {"String": got["id"]}}
    assert m["content"] == "The build uses uv and ruff" and m["memory_type"] == "procedural"
    assert m["metadata"] == {"a": 1} and m["importance_score"] == 1.0 and m["valid_until"] is None
    assert m["event_time"] == m["valid_from"] and when(m["ingestion_time"]) <= when(m["valid_from"]) + timedelta(1)
    plain = await mm("get_memory", id=(await mm("store_memory", content="no type given"))["id"])
    assert plain["memory_type"] == "semantic" and plain["metadata"] == {}  # the defaults
    nullable = await mm("store_memory", content="nulls are absent", memory_type=None, user_id=None, metadata=None)
    assert (await mm("get_memory", id=nullable["id"]))["memory_type"] == "semantic"


async def test_memory_not_found_is_the_contracts_text(mm: MM) -> None:
    missing = str(uuid.uuid4())
    assert await mm.fails("get_memory", id=missing) == f"Memory not found: {missing}"
    assert await mm.fails("get_memory", id="abc123") == "Memory not found: abc123"  # not one of our ids
    assert await mm.fails("update_memory", id=missing, content="x") == f"Memory not found: {missing}"
    assert await mm.fails("invalidate", id="abc123") == "Memory not found: abc123"


async def test_update_memory_changes_only_what_is_given(mm: MM) -> None:
    mid = (await mm("store_memory", content="Deploys go out on Fridays", metadata={"team": "ops"}))["id"]
    up = await mm("update_memory", id=mid, content="Deploys go out on Tuesdays")
    assert set(up) == MEMORY and up["content"] == "Deploys go out on Tuesdays"
    assert up["metadata"] == {"team": "ops"} and up["memory_type"] == "semantic"
    up = await mm("update_memory", id=mid, memory_type="episodic", metadata={"team": "web"})
    assert (up["content"], up["memory_type"], up["metadata"]) == (
        "Deploys go out on Tuesdays",
        "episodic",
        {"team": "web"},
    )
    same = await mm("update_memory", id=mid)  # nothing provided: nothing updated
    assert same == up
    assert await mm("get_memory", id=mid) == up
    found = await mm("search_text", query="Tuesdays")
    assert [r["id"] for r in found["results"]] == [mid]  # re-indexed with the new content


async def test_delete_memory_is_a_hard_delete(mm: MM) -> None:
    mid = (await mm("store_memory", content="temporary note"))["id"]
    assert await mm("delete_memory", id=mid) == {"deleted": True}
    assert await mm.fails("get_memory", id=mid) == f"Memory not found: {mid}"
    assert (await mm("list_memories"))["total"] == 0
    assert await mm("delete_memory", id=mid) == {"deleted": False}  # nothing left to delete


async def test_list_memories_newest_first_with_pagination(mm: MM) -> None:
    ids = [(await mm("store_memory", content=f"note {i}"))["id"] for i in range(5)]
    page = await mm("list_memories", limit=2, offset=1)
    assert set(page) == {"memories", "total", "limit", "offset"}
    assert (page["total"], page["limit"], page["offset"]) == (5, 2, 1)
    assert [m["id"]["id"]["String"] for m in page["memories"]] == [ids[3], ids[2]]
    assert all(set(m) == MEMORY for m in page["memories"])
    default = await mm("list_memories")
    assert (default["limit"], default["offset"], len(default["memories"])) == (20, 0, 5)


# -- search ---------------------------------------------------------------------------------------------------
CORPUS = [
    ("The payment service retries failed charges three times", "semantic"),
    ("Alice prefers dark mode in every editor", "episodic"),
    ("To release: tag the commit, then run the publish workflow", "procedural"),
]


async def _corpus(mm: MM) -> list[str]:
    return [(await mm("store_memory", content=c, memory_type=t))["id"] for c, t in CORPUS]


async def test_search_is_semantic(mm: MM) -> None:
    ids = await _corpus(mm)
    got = await mm("search", query="how are declined card payments retried?")
    assert set(got) == {"results", "count", "query"} and got["query"] == "how are declined card payments retried?"
    assert got["count"] == len(got["results"]) >= 1
    top = got["results"][0]
    assert set(top) == {"id", "content", "memory_type", "score"} and top["id"] == ids[0]
    assert top["memory_type"] == "semantic" and 0 < top["score"] <= 1
    assert len((await mm("search", query="editor theme", limit=1))["results"]) == 1


async def test_search_text_is_keyword(mm: MM) -> None:
    ids = await _corpus(mm)
    got = await mm("search_text", query="publish workflow")
    assert [r["id"] for r in got["results"]] == [ids[2]] and got["count"] == 1
    assert got["results"][0]["memory_type"] == "procedural"
    assert await mm("search_text", query="kubernetes") == {"results": [], "count": 0, "query": "kubernetes"}


async def test_recall_hybrid_with_the_contracts_weights(mm: MM) -> None:
    ids = await _corpus(mm)
    got = await mm("recall", query="card payments retried")
    assert set(got) == {"results", "query", "subgraph_nodes", "memories_count", "code_count"}
    assert got["results"][0]["id"] == ids[0] and got["memories_count"] == len(got["results"]) and got["code_count"] == 0
    top = got["results"][0]
    assert set(top) == {
        "id",
        "content",
        "source",
        "score",
        "vector_score",
        "bm25_score",
        "ppr_score",
        "file_path",
        "start_line",
        "end_line",
    }
    assert top["source"] == "memory" and top["file_path"] is None and top["start_line"] is None
    assert top["vector_score"] > 0 and top["bm25_score"] > 0 and isinstance(top["ppr_score"], float)
    assert isinstance(got["subgraph_nodes"], int)
    scores = [r["score"] for r in got["results"]]
    assert scores == sorted(scores, reverse=True)
    assert len((await mm("recall", query="payments", limit=1))["results"]) == 1
    # code is not indexed yet: include_code answers the memories only; no memories, no results
    with_code = await mm("recall", query="card payments retried", include_code=True, project_id="p", language="rust")
    assert with_code["code_count"] == 0 and with_code["results"][0]["id"] == ids[0]
    none = await mm("recall", query="card payments retried", include_memories=False)
    assert none == {
        "results": [],
        "query": "card payments retried",
        "subgraph_nodes": 0,
        "memories_count": 0,
        "code_count": 0,
    }
    weighted = await mm("recall", query="card payments retried", vector_weight=1.0, bm25_weight=0.0, ppr_weight=0.0)
    assert weighted["results"][0]["id"] == ids[0]


# -- knowledge graph -----------------------------------------------------------------------------------------
async def test_entities_relations_and_traversal(mm: MM) -> None:
    alice = (await mm("create_entity", name="Alice", entity_type="person", description="backend lead"))["id"]
    mneme = (await mm("create_entity", name="mneme", entity_type="project"))["id"]
    duck = (await mm("create_entity", name="DuckDB"))["id"]
    assert (await mm("create_entity", name="alice"))["id"] == alice  # exists: the same entity
    rel = await mm("create_relation", from_entity=alice, to_entity=mneme, relation_type="works_on", weight=0.9)
    assert set(rel) == {"id"}
    await mm("create_relation", from_entity=mneme, to_entity=duck, relation_type="uses")
    assert (await mm("create_relation", from_entity=alice, to_entity=mneme, relation_type="works_on"))["id"] == rel[
        "id"
    ]

    one = await mm("get_related", entity_id=alice)
    assert set(one) == {"entities", "relations", "entity_count", "relation_count"}
    assert [e["name"] for e in one["entities"]] == ["mneme"] and one["entity_count"] == 1
    assert one["entities"][0] == {
        "id": mneme,
        "name": "mneme",
        "entity_type": "project",
        "description": None,
        "depth": 1,
    }
    assert one["relations"] == [
        {"id": rel["id"], "from_entity": alice, "to_entity": mneme, "relation_type": "works_on", "weight": 0.9}
    ]
    two = await mm("get_related", entity_id=alice, depth=2)
    assert [(e["name"], e["depth"]) for e in two["entities"]] == [("mneme", 1), ("DuckDB", 2)]
    assert two["relation_count"] == 2 and two["entities"][1]["entity_type"] is None
    assert (await mm("get_related", entity_id=alice, direction="incoming"))["entity_count"] == 0
    back = await mm("get_related", entity_id=duck, direction="incoming", depth=3)
    assert [e["name"] for e in back["entities"]] == ["mneme", "Alice"]
    both = await mm("get_related", entity_id=mneme, direction="both")
    assert {e["name"] for e in both["entities"]} == {"Alice", "DuckDB"}
    ghost = str(uuid.uuid4())
    assert await mm.fails("get_related", entity_id=ghost) == f"Entity not found: {ghost}"
    assert await mm.fails("create_relation", from_entity=alice, to_entity=ghost, relation_type="x") == (
        f"Entity not found: {ghost}"
    )


# -- temporal ------------------------------------------------------------------------------------------------
async def test_get_valid_get_valid_at_and_invalidate(mm: MM, world: World) -> None:
    before = datetime.now(UTC)
    old = (await mm("store_memory", content="The API is served from us-east-1"))["id"]
    new = (await mm("store_memory", content="The API is served from eu-west-1"))["id"]
    middle = datetime.now(UTC)
    valid = await mm("get_valid")
    assert set(valid) == {"results", "count"} and valid["count"] == 2
    assert [m["id"]["id"]["String"] for m in valid["results"]] == [new, old]
    assert await mm("invalidate", id=old, reason="moved region", superseded_by=new) == {"invalidated": True}
    assert await mm("invalidate", id=old) == {"invalidated": True}  # already invalid: it stays so
    gone = await mm("get_memory", id=old)
    assert gone["valid_until"] is not None and when(gone["valid_until"]) >= middle
    assert [m["id"]["id"]["String"] for m in (await mm("get_valid"))["results"]] == [new]
    at = await mm("get_valid_at", timestamp=middle.isoformat())
    assert set(at) == {"results", "count", "timestamp"} and at["count"] == 2 and when(at["timestamp"]) == middle
    assert (await mm("get_valid_at", timestamp=before.isoformat()))["count"] == 0  # stored after it
    assert (await mm("get_valid", limit=1))["count"] == 1
    assert (await mm("list_memories"))["total"] == 2  # soft delete: still listed, with its valid_until
    ghost = str(uuid.uuid4())
    assert await mm.fails("invalidate", id=new, superseded_by=ghost) == f"superseded_by: no memory {ghost}"


# -- user_id isolation ---------------------------------------------------------------------------------------
async def test_user_id_isolates_tenants(world: World) -> None:
    mm, gw = await world.user()
    shared = (await mm("store_memory", content="shared team fact"))["id"]
    alice = (await mm("store_memory", content="Alice's private note", user_id="alice"))["id"]
    await mm("store_memory", content="Bob's private note", user_id="bob@example.com")
    mine = await mm("get_valid", user_id="alice")
    assert [m["content"] for m in mine["results"]] == ["Alice's private note"]
    assert [m["content"] for m in (await mm("get_valid", user_id="bob@example.com"))["results"]] == [
        "Bob's private note"
    ]
    assert [m["id"]["id"]["String"] for m in (await mm("get_valid"))["results"]] == [shared]  # no user: shared only
    assert (await mm("get_valid", user_id="carol"))["count"] == 0
    assert (await mm("get_valid_at", timestamp=datetime.now(UTC).isoformat(), user_id="alice"))["count"] == 1
    assert await mm.fails("get_memory", id=alice) == f"Memory not found: {alice}"  # not without the user
    assert (await mm("list_memories"))["total"] == 1 and (await mm("search_text", query="private"))["count"] == 0
    assert (await mm("get_valid", user_id=""))["count"] == 1  # blank: no user
    # the user's namespace: the caller's plus one segment; the native surface reads it there
    native = await world.es.enter_async_context(Client(build_server(gw)))
    got = await native.call_tool(
        "memory_get", {"id": alice, "namespace": f"{gw.principal.default_namespace}/user-alice"}
    )
    assert not got.is_error and got.structured_content["content"] == "Alice's private note"
    # entities too; their ids carry the user, so relations and traversal reach them
    a = (await mm("create_entity", name="Alice", user_id="alice"))["id"]
    p = (await mm("create_entity", name="Project X", user_id="alice"))["id"]
    assert a.endswith("@alice") and (await mm("create_entity", name="Alice"))["id"] != a
    await mm("create_relation", from_entity=a, to_entity=p, relation_type="works_on")
    related = await mm("get_related", entity_id=a)
    assert [e["id"] for e in related["entities"]] == [p] and related["relations"][0]["from_entity"] == a
    shared_entity = (await mm("create_entity", name="Shared"))["id"]
    err = await mm.fails("create_relation", from_entity=a, to_entity=shared_entity, relation_type="knows")
    assert err == "to_entity: is in another user's graph than from_entity"


async def test_user_id_needs_the_users_namespace(world: World) -> None:
    mm, _ = await world.user(only_own=True)
    err = await mm.fails("store_memory", content="x", user_id="alice")
    assert "may not write namespace" in err and "user-alice" in err


# -- bad input names the field --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("tool", "args", "field"),
    [
        ("store_memory", {}, "content"),
        ("store_memory", {"content": "x", "memory_type": "factual"}, "memory_type"),
        ("store_memory", {"content": "x", "metadata": "not an object"}, "metadata"),
        ("update_memory", {"id": "x", "memory_type": "note"}, "memory_type"),
        ("list_memories", {"limit": 101}, "limit"),
        ("list_memories", {"limit": 0}, "limit"),
        ("list_memories", {"offset": -1}, "offset"),
        ("search", {"query": "x", "limit": 51}, "limit"),
        ("search_text", {"query": "x", "limit": 0}, "limit"),
        ("search", {"query": "   "}, "query"),
        ("recall", {"query": "x", "limit": 51}, "limit"),
        ("recall", {"query": "x", "vector_weight": -0.1}, "vector_weight"),
        ("get_valid", {"limit": 101}, "limit"),
        ("get_valid_at", {"timestamp": "yesterday"}, "timestamp"),
        ("get_related", {"entity_id": "x", "depth": 4}, "depth"),
        ("get_related", {"entity_id": "x", "direction": "sideways"}, "direction"),
        ("create_relation", {"from_entity": "a", "to_entity": "b", "relation_type": "r", "weight": 1.5}, "weight"),
        ("create_entity", {"name": "  "}, "name"),
        ("reset_all_memory", {"confirm": "yes"}, "confirm"),
        ("get_memory", {"id": "x", "user_id": "alice"}, "user_id"),
    ],
)
async def test_bad_input_names_the_field(mm: MM, tool: str, args: dict[str, Any], field: str) -> None:
    message = await mm.fails(tool, **args)
    assert message.startswith(f"{field}:"), message


# -- system ---------------------------------------------------------------------------------------------------
async def test_get_status(mm: MM) -> None:
    await mm("store_memory", content="one")
    await mm("store_memory", content="two")
    await mm("create_entity", name="E")
    got = await mm("get_status")
    assert set(got) == {
        "version",
        "status",
        "memories_count",
        "entities_count",
        "code_chunks_count",
        "embedding",
        "db_dimension",
    }
    assert (got["status"], got["memories_count"], got["entities_count"], got["code_chunks_count"]) == (
        "healthy",
        2,
        1,
        0,
    )
    emb = got["embedding"]
    assert emb["status"] == "ready" and emb["model"] == "paraphrase-MiniLM-L3-v2" and emb["dimensions"] == 384
    assert set(emb["cache_stats"]) == {"hits", "misses", "size"} and got["db_dimension"] == 384
    assert got["version"]


async def test_reset_all_memory_needs_confirm(mm: MM) -> None:
    mid = (await mm("store_memory", content="keep me unless confirmed"))["id"]
    refused = {"reset": False, "message": "Confirmation required. Set confirm=true to delete all data."}
    assert await mm("reset_all_memory", confirm=False) == refused
    assert await mm("reset_all_memory") == refused  # missing is refused the same way, not an error
    assert (await mm("get_memory", id=mid))["content"] == "keep me unless confirmed"


async def test_reset_all_memory_with_confirm(world: World) -> None:
    mm, gw = await world.user()
    ids = [(await mm("store_memory", content=f"memory {i}"))["id"] for i in range(5)]
    # invalidated memories are deleted and counted too (issue 28, item 6: 61 reported for 63 stored)
    await mm("invalidate", id=ids[3], reason="outdated")
    await mm("invalidate", id=ids[4], superseded_by=ids[0])
    a = (await mm("create_entity", name="A"))["id"]
    b = (await mm("create_entity", name="B"))["id"]
    await mm("create_relation", from_entity=a, to_entity=b, relation_type="knows")
    await mm("create_relation", from_entity=b, to_entity=a, relation_type="knows")
    got = await mm("reset_all_memory", confirm=True)
    assert got == {"reset": True, "deleted": {"memories": 5, "entities": 2, "relations": 2, "code_chunks": 0}}
    status = await mm("get_status")
    assert (status["memories_count"], status["entities_count"]) == (0, 0)
    assert (await mm("list_memories"))["total"] == 0
    assert await mm.fails("get_related", entity_id=a) == f"Entity not found: {a}"
    again = await mm("reset_all_memory", confirm=True)
    assert again["deleted"] == {"memories": 0, "entities": 0, "relations": 0, "code_chunks": 0}
    # one delete event each: the history before the reset stays in the log, readable natively
    native = await world.es.enter_async_context(Client(build_server(gw)))
    history = (await native.call_tool("memory_history", {"id": ids[0]})).structured_content
    assert [v["event"] for v in history["results"]] == ["memory_created", "memory_deleted"]


# == 3. over stdio ===========================================================================================


async def test_stdio_session(tmp_path: Path) -> None:
    params = serve_params(tmp_path / "d", "--profile", "memory-mcp", env={**os.environ})
    async with stdio_client(params) as (r, w), ClientSession(r, w) as cs:
        init = await cs.initialize()
        assert init.instructions == INSTRUCTIONS
        assert (init.server_info.name, init.server_info.version) == ("memory-mcp", "0.1.0")
        assert snapshot((await cs.list_tools()).tools) == json.loads(GOLDEN.read_text())
        s = MM(cs)
        mid = (await s("store_memory", content="Served over stdio", memory_type="episodic"))["id"]
        assert (await s("get_memory", id=mid))["memory_type"] == "episodic"
        assert [r["id"] for r in (await s("search_text", query="stdio"))["results"]] == [mid]
        missing = str(uuid.uuid4())
        res = await cs.call_tool("get_memory", {"id": missing})
        assert res.is_error and text_of(res) == f"Memory not found: {missing}"
        assert await s("reset_all_memory", confirm=False) == {
            "reset": False,
            "message": "Confirmation required. Set confirm=true to delete all data.",
        }


# -- while the embedding model loads, and when it failed -----------------------------------------------------
async def _model_stack(tmp_path: Path, factory: Any) -> tuple[Any, EmbeddedNats]:
    server = EmbeddedNats(tmp_path / "nats")
    await server.start()
    handle = ModelHandle(DEFAULT_MODEL, factory=factory).start()
    stack = await start_stack(tmp_path / "data", server, vectors=open_vectors(tmp_path / "data", model=handle))
    stack.projector.tuning = dataclasses.replace(stack.projector.tuning, wait_timeout=1.0)
    return stack, server


@pytest.mark.parametrize("model", ["loading", "error"])
async def test_without_the_model_search_is_not_ready_and_search_text_works(tmp_path: Path, model: str) -> None:
    """'Embedding service not ready. Please try again.' for search and recall; store_memory and search_text
    (the contract: "does NOT require embedding model") work; get_status reports the model's status."""
    release = threading.Event()

    def factory() -> Any:
        if model == "loading":
            release.wait(60)
        raise RuntimeError("no model here")

    stack, server = await _model_stack(tmp_path, factory)
    try:
        async with Client(build_server(stack.gateway, profile="memory-mcp")) as c:
            mm = MM(c)
            mid = (await mm("store_memory", content="Keyword search needs no model"))["id"]
            assert [r["id"] for r in (await mm("search_text", query="keyword"))["results"]] == [mid]
            assert await mm.fails("search", query="anything") == "Embedding service not ready. Please try again."
            assert await mm.fails("recall", query="anything") == "Embedding service not ready. Please try again."
            emb = (await mm("get_status"))["embedding"]
            # loading or failed, the projector names the model it is configured with, and its dimension
            assert emb["status"] == model and emb["dimensions"] == 384
            assert emb["model"] == "paraphrase-MiniLM-L3-v2"
    finally:
        release.set()
        await stack.close()
        await server.stop()


def test_recall_merges_memories_and_code_in_score_order() -> None:
    """With code included, each side is z-scored over its own results and the merged list shows that
    normalised score (0..1), so it reads in `score` order; the raw signals stay in vector/bm25/ppr_score."""

    def item(i: str, source: Any, score: float) -> RecallItem:
        return RecallItem(
            id=i, content=i, source=source, score=score, vector_score=score, bm25_score=0.0, ppr_score=0.0
        )

    memories = [item("m1", "memory", 0.681), item("m2", "memory", 0.436), item("m3", "memory", 0.377)]
    code = [item("c1", "code", 0.339), item("c2", "code", 0.126)]
    merged = merge_by_zscore(memories, code, 10)
    scores = [r.score for r in merged]
    assert scores == sorted(scores, reverse=True) and all(0.0 <= s <= 1.0 for s in scores), merged
    assert [r.id for r in merged][:2] in (["m1", "c1"], ["c1", "m1"])  # each side's best leads
    assert {r.id: r.vector_score for r in merged} == {"m1": 0.681, "m2": 0.436, "m3": 0.377, "c1": 0.339, "c2": 0.126}
    assert len(merge_by_zscore(memories, code, 3)) == 3
