"""The `server-memory` profile: the reference knowledge-graph server's contract over the one log.

1. The surface: tools/list equals the reference server's own list (../shared/seeds/server-memory-tools.json,
   bundled as services/gateway/profiles/server_memory_tools.json), which is also the golden snapshot.
2. Behaviour, scenario by scenario, as the reference's source defines it: skip existing names, relations
   need both ends, observations deduplicated, deletes idempotent with their messages, search_nodes a
   case-insensitive substring match whose relations touch either end, errors as plain text.
3. What the reference cannot do: two writers at once lose nothing; every write is an event, so the graph as
   it stood before a delete is still readable (`as_of`, through the native graph tools).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, ClientSession
from mcp.client.stdio import stdio_client

from mneme.app import compose
from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import running_url
from services.gateway.server import build_server
from tests.harness import Stack, ToolFailure, gateway_params, serve_params, text_of

pytestmark = pytest.mark.anyio

SEED = Path(__file__).resolve().parents[2] / "shared" / "seeds" / "server-memory-tools.json"
BUNDLED = Path(__file__).resolve().parents[1] / "services" / "gateway" / "profiles" / "server_memory_tools.json"


class KG:
    """One MCP client on the server-memory profile: `await kg("tool", **args)` -> (structured, text)."""

    def __init__(self, client: Client):
        self.client = client

    async def __call__(self, tool: str, **args: Any) -> tuple[Any, str]:
        res = await self.client.call_tool(tool, args)
        if res.is_error:
            raise ToolFailure(json.dumps({"error": {"code": "TEXT", "message": text_of(res)}}))
        return res.structured_content, text_of(res)


@pytest.fixture
async def kg(stack: Stack) -> AsyncIterator[KG]:
    async with Client(build_server(stack.gateway, profile="server-memory")) as c:
        yield KG(c)


def snapshot(tools: list[Any]) -> list[dict[str, Any]]:
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]


async def test_tools_list_over_stdio_is_the_reference_servers_own(tmp_path: Path) -> None:
    """`mneme serve --profile server-memory` with the mcp package's ClientSession (protocol 2025-11-25, the one
    the reference's list was captured with): the very same list, and a call through it."""
    reference = json.loads(BUNDLED.read_text())["tools"]
    if SEED.exists():  # the bundled copy is the seed, unchanged
        assert json.loads(SEED.read_text())["tools"] == reference
    params = serve_params(tmp_path / "d", "--profile", "server-memory", env={**os.environ})
    async with stdio_client(params) as (r, w), ClientSession(r, w) as cs:
        init = await cs.initialize()
        assert (init.server_info.name, init.server_info.version) == ("memory-server", "0.6.3")
        assert snapshot((await cs.list_tools()).tools) == reference
        res = await cs.call_tool(
            "create_entities", {"entities": [{"name": "A", "entityType": "t", "observations": []}]}
        )
        assert not res.is_error and res.structured_content == {
            "entities": [{"name": "A", "entityType": "t", "observations": []}]
        }


async def test_tools_list_in_process(kg: KG) -> None:
    """The newer protocol (2026-07-28) has no `execution` on a tool: the rest is the reference's list."""
    listed = snapshot((await kg.client.list_tools()).tools)
    reference = [{k: v for k, v in t.items() if k != "execution"} for t in json.loads(BUNDLED.read_text())["tools"]]
    assert listed == reference


async def test_create_entities_skips_existing_names_and_repeats(kg: KG) -> None:
    got, text = await kg(
        "create_entities",
        entities=[
            {"name": "Alice", "entityType": "person", "observations": ["likes tea", "likes tea"]},
            {"name": "Bob", "entityType": "person", "observations": []},
            {"name": "Alice", "entityType": "robot", "observations": ["repeat in one call"]},
        ],
    )
    assert got == {
        "entities": [
            {"name": "Alice", "entityType": "person", "observations": ["likes tea"]},
            {"name": "Bob", "entityType": "person", "observations": []},
        ]
    }
    assert json.loads(text) == got["entities"] and text.startswith("[\n  {")  # the array, two-space indents
    again, _ = await kg(
        "create_entities",
        entities=[
            {"name": "Alice", "entityType": "person", "observations": ["new"]},
            {"name": "Carol", "entityType": "person", "observations": []},
        ],
    )
    assert [e["name"] for e in again["entities"]] == ["Carol"]
    graph, _ = await kg("read_graph")
    assert [e["name"] for e in graph["entities"]] == ["Alice", "Bob", "Carol"]  # the order they were created
    assert graph["entities"][0]["observations"] == ["likes tea"]  # an existing entity is left as it is


async def test_relations_need_both_ends_and_are_not_repeated(kg: KG) -> None:
    await kg("create_entities", entities=[{"name": n, "entityType": "person", "observations": []} for n in "AB"])
    with pytest.raises(ToolFailure) as e:
        await kg("create_relations", relations=[
            {"from": "A", "to": "B", "relationType": "knows"},
            {"from": "A", "to": "Zed", "relationType": "knows"},
        ])  # fmt: skip
    assert e.value.error["message"] == "Entity with name Zed not found"
    graph, _ = await kg("read_graph")
    assert graph["relations"] == [], "nothing was written: the call failed as a whole"
    rel = {"from": "A", "to": "B", "relationType": "knows"}
    got, text = await kg("create_relations", relations=[rel, rel])
    assert got == {"relations": [rel]} and json.loads(text) == [rel]
    again, _ = await kg("create_relations", relations=[rel, {"from": "B", "to": "A", "relationType": "knows"}])
    assert again["relations"] == [{"from": "B", "to": "A", "relationType": "knows"}]


async def test_observations_add_dedupe_and_delete(kg: KG) -> None:
    await kg("create_entities", entities=[{"name": "Alice", "entityType": "person", "observations": ["a"]}])
    got, _ = await kg("add_observations", observations=[{"entityName": "Alice", "contents": ["a", "b", "c", "b"]}])
    assert got == {"results": [{"entityName": "Alice", "addedObservations": ["b", "c"]}]}
    with pytest.raises(ToolFailure) as e:
        await kg("add_observations", observations=[{"entityName": "Nobody", "contents": ["x"]}])
    assert e.value.error["message"] == "Entity with name Nobody not found"
    got, text = await kg("delete_observations", deletions=[{"entityName": "Alice", "observations": ["b"]}])
    assert got == {"success": True, "message": "Observations deleted successfully"} and text == got["message"]
    got, _ = await kg(
        "delete_observations",
        deletions=[
            {"entityName": "Alice", "observations": ["c", "zzz"]},
            {"entityName": "Ghost", "observations": ["q"]},
        ],
    )
    assert got["message"] == "Deleted 1 of 3 observations. Entities not found: Ghost"
    nodes, _ = await kg("open_nodes", names=["Alice"])
    assert nodes["entities"][0]["observations"] == ["a"]


async def test_delete_entities_takes_their_relations_and_says_what_was_missing(kg: KG) -> None:
    await kg("create_entities", entities=[{"name": n, "entityType": "t", "observations": []} for n in ("A", "B", "C")])
    await kg("create_relations", relations=[
        {"from": "A", "to": "B", "relationType": "r"}, {"from": "B", "to": "C", "relationType": "r"},
    ])  # fmt: skip
    got, text = await kg("delete_entities", entityNames=["B", "Nope"])
    assert got == {"success": True, "message": "Deleted 1 of 2 entities. Not found: Nope"} and text == got["message"]
    graph, _ = await kg("read_graph")
    assert [e["name"] for e in graph["entities"]] == ["A", "C"] and graph["relations"] == []
    got, _ = await kg("delete_entities", entityNames=["A"])
    assert got["message"] == "Entities deleted successfully"
    got, _ = await kg("delete_relations", relations=[{"from": "A", "to": "B", "relationType": "r"}])
    assert got["message"] == "Deleted 0 of 1 relations. The rest matched nothing."
    # a deleted entity can be created again
    got, _ = await kg("create_entities", entities=[{"name": "B", "entityType": "t2", "observations": ["back"]}])
    assert got["entities"] == [{"name": "B", "entityType": "t2", "observations": ["back"]}]


async def test_search_nodes_and_open_nodes(kg: KG) -> None:
    await kg("create_entities", entities=[
        {"name": "Alice", "entityType": "person", "observations": ["Works at ACME"]},
        {"name": "Bob", "entityType": "person", "observations": ["plays chess"]},
        {"name": "ACME", "entityType": "company", "observations": []},
        {"name": "Zoe", "entityType": "cat", "observations": []},
    ])  # fmt: skip
    await kg("create_relations", relations=[
        {"from": "Alice", "to": "ACME", "relationType": "works_at"},
        {"from": "Bob", "to": "Alice", "relationType": "knows"},
        {"from": "Zoe", "to": "Bob", "relationType": "owned_by"},
    ])  # fmt: skip
    got, text = await kg("search_nodes", query="acme")  # name of one, observation of another, any case
    assert [e["name"] for e in got["entities"]] == ["Alice", "ACME"]
    assert got["relations"] == [  # either end among the found
        {"from": "Alice", "to": "ACME", "relationType": "works_at"},
        {"from": "Bob", "to": "Alice", "relationType": "knows"},
    ]
    assert json.loads(text) == got
    got, _ = await kg("search_nodes", query="PERSON")  # types match too
    assert [e["name"] for e in got["entities"]] == ["Alice", "Bob"]
    got, _ = await kg("open_nodes", names=["Zoe", "Missing"])
    assert [e["name"] for e in got["entities"]] == ["Zoe"]
    assert got["relations"] == [{"from": "Zoe", "to": "Bob", "relationType": "owned_by"}]
    got, _ = await kg("search_nodes", query="no such thing")
    assert got == {"entities": [], "relations": []}


async def test_bad_input_is_refused_naming_the_field(kg: KG) -> None:
    with pytest.raises(ToolFailure) as e:
        await kg("create_entities", entities=[{"name": "  ", "entityType": "t", "observations": []}])
    assert "entities[0].name" in e.value.error["message"]
    with pytest.raises(ToolFailure):
        await kg("create_entities", entities=[{"name": "x", "observations": []}])  # entityType is required
    graph, _ = await kg("read_graph")
    assert graph == {"entities": [], "relations": []}, "nothing half-written"


async def test_two_gateways_writing_one_graph_lose_nothing(stack: Stack) -> None:
    """The reference loses writes when two processes share its file (its issues #1819, #2579, #4797): here
    two gateways add observations to one entity and create entities at once, and every write lands."""
    gw2 = compose.gateway(stack.nc, GatewaySettings())
    async with (
        Client(build_server(stack.gateway, profile="server-memory")) as c1,
        Client(build_server(gw2, profile="server-memory")) as c2,
    ):
        a, b = KG(c1), KG(c2)
        await a("create_entities", entities=[{"name": "Hub", "entityType": "t", "observations": []}])

        async def writer(kg: KG, tag: str) -> None:
            for i in range(15):
                await kg("add_observations", observations=[{"entityName": "Hub", "contents": [f"{tag}-{i}"]}])
                await kg("create_entities", entities=[{"name": f"{tag}{i}", "entityType": "t", "observations": []}])

        await asyncio.gather(writer(a, "x"), writer(b, "y"))
        gw2_seq = gw2.app.marks.high_water
        stack.gateway.app.marks.wrote(gw2_seq)
        graph, _ = await a("read_graph")
    hub = next(e for e in graph["entities"] if e["name"] == "Hub")
    assert sorted(hub["observations"]) == sorted([f"x-{i}" for i in range(15)] + [f"y-{i}" for i in range(15)])
    assert len(graph["entities"]) == 31


async def test_two_processes_writing_one_graph_lose_nothing(tmp_path: Path) -> None:
    """Over stdio, as agents run it: `mneme serve --profile server-memory` and a second process, `mneme gateway
    --profile server-memory` on the same log, add observations to one entity and create entities at once."""
    data = tmp_path / "d"
    env = {**os.environ}
    async with (
        stdio_client(serve_params(data, "--profile", "server-memory", env=env)) as (r1, w1),
        ClientSession(r1, w1) as one,
    ):
        await one.initialize()
        url = running_url(data / "nats")
        assert url is not None
        params = gateway_params(
            url, "--profile", "server-memory", env={**env, "MNEME_GATEWAY_CONSISTENCY": "linearizable"}
        )
        async with stdio_client(params) as (r2, w2), ClientSession(r2, w2) as two:
            await two.initialize()

            async def call(s: ClientSession, tool: str, **args: Any) -> Any:
                res = await s.call_tool(tool, args)
                assert not res.is_error, text_of(res)
                return res.structured_content

            await call(one, "create_entities", entities=[{"name": "Hub", "entityType": "t", "observations": []}])

            async def writer(s: ClientSession, tag: str) -> None:
                for i in range(12):
                    await call(s, "add_observations", observations=[{"entityName": "Hub", "contents": [f"{tag}{i}"]}])
                    await call(
                        s, "create_entities", entities=[{"name": f"{tag}{i}", "entityType": "t", "observations": []}]
                    )

            await asyncio.gather(writer(one, "p"), writer(two, "q"))
            graph = await call(two, "read_graph")
    hub = next(e for e in graph["entities"] if e["name"] == "Hub")
    assert sorted(hub["observations"]) == sorted([f"p{i}" for i in range(12)] + [f"q{i}" for i in range(12)])
    assert len(graph["entities"]) == 25
