"""The native surface: the golden snapshot of its tools/list (tests/golden/native.tools.json).

Every tool's name, description, input schema, output schema and annotations, in the order served: the order
of the tools, of each schema's properties and of its `required` list is part of the surface, so the test
compares the rendered text as well as the parsed JSON. After an intended change to the surface, regenerate
the snapshot with

    MNEME_UPDATE_GOLDEN=1 PYTHONPATH=. .venv/bin/python -m pytest tests/test_native_surface.py -k golden

and review the diff.
"""

from __future__ import annotations

import inspect
import json
import os
import typing
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from services.gateway.server import build_server
from services.gateway.toolkit import ContextPolicy

pytestmark = pytest.mark.anyio

GOLDEN = Path(__file__).parent / "golden" / "native.tools.json"
INSTRUCTIONS = (
    "mneme is a memory shared by agents. Before answering from memory, memory_search it; remember new "
    "facts, preferences and decisions with memory_add; correct them with memory_update; when one is wrong "
    "or obsolete, memory_retire it. Results are brief (detail='full' for every field); pass request_id "
    "to make a write safe to retry."
)


def snapshot(tools: list[Any]) -> list[dict[str, Any]]:
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]


def render(listed: list[dict[str, Any]]) -> str:
    return json.dumps(listed, indent=2, ensure_ascii=False) + "\n"


async def test_golden_tools_list() -> None:
    """tools/list against tests/golden/native.tools.json (MNEME_UPDATE_GOLDEN=1 rewrites it)."""
    async with Client(build_server(None, profile="native")) as c:
        listed = snapshot((await c.list_tools()).tools)
    if os.environ.get("MNEME_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(render(listed))
    golden = GOLDEN.read_text()
    assert listed == json.loads(golden), "the native surface changed: review, then MNEME_UPDATE_GOLDEN=1"
    assert render(listed) == golden, "the native surface's order changed (tools, properties or required)"


async def test_server_identity() -> None:
    """The native server keeps its name and instructions."""
    mcp = build_server(None, profile="native")
    assert mcp.name == "mneme"
    assert mcp.instructions == INSTRUCTIONS


# what each tool must be allowed to do (not in tools/list, so not in the snapshot), and its group
INTENTS = {
    "memory_search": ("read", "core"),
    "memory_add": ("write", "core"),
    "memory_get": ("read", "core"),
    "memory_update": ("write", "core"),
    "memory_retire": ("write", "core"),
    "memory_list": ("read", "core"),
    "memory_restore": ("write", "core"),
    "memory_move": ("write", "core"),
    "memory_stats": ("read", "core"),
    "memory_prune_expired": ("write", "core"),
    "memory_history": ("read", "time"),
    "memory_diff": ("read", "time"),
    "memory_verify": ("admin", "governance"),
    "memory_lock": ("admin", "governance"),
    "memory_unlock": ("admin", "governance"),
    "audit_query": ("read", "audit"),
    "graph_entity": ("write", "graph"),
    "graph_relate": ("write", "graph"),
    "graph_get": ("read", "graph"),
    "graph_forget": ("write", "graph"),
    "code_index": ("write", "code"),
    "code_search": ("read", "code"),
    "code_status": ("read", "code"),
    "code_forget": ("write", "code"),
    "memory_status": ("read", "system"),
    "memory_reset": ("admin", "system"),
    "audit_reads": ("read", "debug"),
    "audit_reread": ("read", "debug"),
}

BUDGET = 40_000  # bytes of compact JSON: what an agent carries in its context for the whole native tool list


def compact(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode())


def test_declared_intents_and_groups() -> None:
    from services.gateway import profiles

    assert {s.name: (s.intent, s.group) for s in profiles.load("native").tools.specs} == INTENTS


async def test_tool_list_fits_the_budget_without_context() -> None:
    """The whole native tools/list is at most 40 KB, and no tool offers `context` unless asked to."""
    async with Client(build_server(None, profile="native")) as c:
        listed = snapshot((await c.list_tools()).tools)
    assert compact(listed) <= BUDGET, f"native tools/list is {compact(listed)} B (budget {BUDGET})"
    assert not [t["name"] for t in listed if "context" in t["inputSchema"].get("properties", {})]
    assert "title" not in json.dumps([t["inputSchema"] for t in listed])  # pydantic's generated titles are dropped


def test_every_tool_acting_on_one_memory_requires_its_id() -> None:
    """The field a tool needs at run time is required in its schema: `id` (an id or store:path)."""
    import asyncio

    async def listed() -> list[dict[str, Any]]:
        async with Client(build_server(None, profile="native")) as c:
            return snapshot((await c.list_tools()).tools)

    tools = {t["name"]: t["inputSchema"] for t in asyncio.run(listed())}
    for name in (
        "memory_get",
        "memory_update",
        "memory_retire",
        "memory_restore",
        "memory_move",
        "memory_verify",
        "memory_lock",
        "memory_unlock",
        "memory_history",
        "memory_diff",
    ):
        assert "id" in tools[name]["required"], name
        assert not {"store", "path"} & set(tools[name]["properties"]), name
    assert tools["memory_search"]["required"] == ["query"] and tools["memory_add"]["required"] == ["content"]


def test_every_list_of_results_is_called_results() -> None:
    """One name for every list: the output schema of each listing tool has `results` and no other list name."""
    from pydantic import BaseModel

    from services.gateway import profiles

    for spec in profiles.load("native").tools.specs:
        out = inspect.signature(spec.fn, eval_str=True).return_annotation
        lists = [
            n
            for n, f in out.model_fields.items()
            if typing.get_origin(f.annotation) is list
            and isinstance(item := typing.get_args(f.annotation)[0], type)
            and issubclass(item, BaseModel)
            and n not in ("top_tags", "most_accessed", "changes", "history", "relations")
        ]  # parts of one answer
        assert lists in ([], ["results"]), (spec.name, lists)


def test_no_output_field_is_required_and_nullable() -> None:
    """The native profile leaves null fields out of results, so an output field that may be null must not be
    required (else the SDK refuses the tool's own answer)."""
    from pydantic import BaseModel

    from services.gateway import profiles

    seen: set[type] = set()
    bad: list[str] = []

    def walk(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, f in model.model_fields.items():
            args = typing.get_args(f.annotation)
            if f.is_required() and (type(None) in args or f.annotation is Any):
                bad.append(f"{model.__name__}.{name}")
            for a in (f.annotation, *args, *(x for b in args for x in typing.get_args(b))):
                if isinstance(a, type) and issubclass(a, BaseModel):
                    walk(a)

    for spec in profiles.load("native").tools.specs:
        walk(inspect.signature(spec.fn, eval_str=True).return_annotation)
    assert len(seen) > 10 and not bad, bad


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        (("core",), 10),
        (("core", "time"), 12),
        (("governance", "audit"), 4),
    ],
)
async def test_operators_choose_the_groups_served(groups: tuple[str, ...], expected: int) -> None:
    from services.gateway.gateway import Gateway

    gw = Gateway.__new__(Gateway)  # only the surface options are read when a server is built
    gw.native_context, gw.tool_groups = "never", groups
    async with Client(build_server(gw, profile="native")) as c:
        names = [t.name for t in (await c.list_tools()).tools]
    assert len(names) == expected and {INTENTS[n][1] for n in names} == set(groups)


@pytest.mark.parametrize("policy", ["optional", "required"])
async def test_the_context_argument_when_an_operator_asks_for_it(policy: ContextPolicy) -> None:
    from services.gateway.gateway import Gateway

    gw = Gateway.__new__(Gateway)
    gw.native_context, gw.tool_groups = policy, None
    async with Client(build_server(gw, profile="native")) as c:
        tools = (await c.list_tools()).tools
    for t in tools:
        assert "context" in t.input_schema["properties"], t.name
        assert ("context" in t.input_schema.get("required", [])) == (policy == "required"), t.name


def test_settings_take_groups_as_a_comma_list_or_json(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    from mneme.app.settings import GatewaySettings

    monkeypatch.setenv("MNEME_GATEWAY_TOOLS", "core, time")
    assert GatewaySettings().tools == ["core", "time"]
    monkeypatch.setenv("MNEME_GATEWAY_TOOLS", '["audit"]')
    assert GatewaySettings().tools == ["audit"]
    monkeypatch.setenv("MNEME_GATEWAY_TOOLS", "core,bogus")
    with pytest.raises(ValidationError, match="tools"):
        GatewaySettings()


async def test_serve_with_chosen_groups_and_context_over_stdio(tmp_path: Path) -> None:
    """`mneme serve --tools core,audit --context required`: ten core tools and audit_query, each requiring
    `context`, and a call without one is refused as INVALID_CONTEXT (a refusal the audit trail records)."""
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    from tests.harness import ToolFailure, result_of, serve_params

    params = serve_params(tmp_path / "d", "--tools", "core,audit", "--context", "required")
    async with stdio_client(params) as (r, w), ClientSession(r, w) as cs:
        await cs.initialize()
        tools = (await cs.list_tools()).tools
        assert sorted(t.name for t in tools) == sorted(n for n, (_, g) in INTENTS.items() if g in ("core", "audit"))
        assert all("context" in t.input_schema["required"] for t in tools)
        with pytest.raises(ToolFailure) as refused:
            result_of(await cs.call_tool("memory_add", {"content": "no context"}))
        assert refused.value.code == "INVALID_CONTEXT" and refused.value.field == "context"
        added = result_of(await cs.call_tool("memory_add", {"content": "with context", "context": {"intent": "write"}}))
        got = result_of(await cs.call_tool("memory_get", {"id": added["id"], "context": {"intent": "read"}}))
        assert got["content"] == "with context"
        with pytest.raises(ToolFailure) as unknown:
            result_of(await cs.call_tool("memory_history", {"id": added["id"], "context": {}}))
        assert unknown.value.code == "UNKNOWN_TOOL"  # the time group is not served
