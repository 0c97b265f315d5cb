"""The profile mechanism: a typed tool function declared once (intent, annotations, group) becomes an MCP
tool with its own schema, runs authorized through the gateway, and fails in its profile's error format."""

from __future__ import annotations

import json
from typing import Annotated

import pytest
from mcp import Client
from pydantic import BaseModel, Field

from schemas.commands import CreateMemory
from services.gateway import profiles
from services.gateway.error_styles import ErrorStyle
from services.gateway.gateway import Call
from services.gateway.params import CREATE, READ
from services.gateway.server import build_server
from services.gateway.toolkit import ContextPolicy, Profile, Toolset
from tests.harness import Stack, text_of

pytestmark = pytest.mark.anyio

tools = Toolset()


class Saved(BaseModel):
    id: str
    namespace: str


@tools.tool(intent="write", hints=CREATE)
async def save_note(
    call: Call, text: Annotated[str, Field(min_length=1, max_length=50)], tag: str | None = None
) -> Saved:
    """Save a note."""
    assert call.gw is not None
    w = await call.app.memories.create(
        call, CreateMemory(namespace=call.namespace, content=text, tags=(tag,) if tag else ())
    )
    assert w.memory is not None
    return Saved(id=w.memory.id, namespace=w.memory.namespace)


@tools.tool(intent="read", hints=READ, group="extra")
async def read_note(call: Call, id: str) -> Saved:
    """Read a note."""
    assert call.gw is not None
    row = await call.app.reads.resolve(call, id)
    call.read([row.memory.id])
    return Saved(id=row.memory.id, namespace=row.memory.namespace)


STYLE = ErrorStyle(
    codes={"MEMORY_NOT_FOUND": "NOT_THERE", "INVALID_INPUT": "BAD", "INVALID_CONTEXT": "NO_CONTEXT"},
    with_field=False,
    messages={"MEMORY_NOT_FOUND": lambda m, d: "no such note"},
)


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    toys: tuple[tuple[str, ContextPolicy, tuple[str, ...] | None], ...] = (
        ("toy", "never", None),
        ("toy-strict", "required", ("core",)),
    )
    for name, policy, groups in toys:
        profile = Profile(name=name, tools=tools, instructions="a toy", errors=STYLE, context=policy, groups=groups)
        monkeypatch.setitem(profiles.PROFILES, name, __name__ + f".{name}")
        monkeypatch.setitem(__import__("sys").modules, __name__ + f".{name}", type("M", (), {"PROFILE": profile}))


async def test_a_profile_tool_has_its_own_schema_hints_and_errors(stack: Stack, toy: None) -> None:
    async with Client(build_server(stack.gateway, profile="toy")) as c:
        listed = {t.name: t for t in (await c.list_tools()).tools}
        assert set(listed) == {"save_note", "read_note"}
        save = listed["save_note"]
        assert save.annotations is not None and save.output_schema is not None
        assert save.description == "Save a note." and save.annotations.idempotent_hint is False
        assert set(save.input_schema["properties"]) == {"text", "tag"} and save.input_schema["required"] == ["text"]
        assert "id" in save.output_schema["properties"]
        got = await c.call_tool("save_note", {"text": "hello"})
        assert not got.is_error and got.structured_content["namespace"] == "default"
        back = await c.call_tool("read_note", {"id": got.structured_content["id"]})
        assert back.structured_content["id"] == got.structured_content["id"]
        # the profile's error format, for domain errors and for argument errors alike
        missing = await c.call_tool("read_note", {"id": "7d1f0c8e-8d1c-4c1e-9a2b-3c4d5e6f7a8b"})
        assert missing.is_error and json.loads(text_of(missing)) == {
            "error": {"code": "NOT_THERE", "message": "no such note"}
        }
        bad = await c.call_tool("save_note", {"text": ""})
        err = json.loads(text_of(bad))["error"]
        assert err["code"] == "BAD" and "field" not in err
    # the memory is the one memory: the native surface reads it
    native = await stack.call("memory_get", id=got.structured_content["id"])
    assert native["content"] == "hello"


async def test_context_policy_and_groups(stack: Stack, toy: None) -> None:
    async with Client(build_server(stack.gateway, profile="toy-strict")) as c:
        listed = {t.name: t for t in (await c.list_tools()).tools}
        assert set(listed) == {"save_note"}  # group "extra" is not served
        assert "context" in listed["save_note"].input_schema["required"]
        # required in the schema, refused by the gateway (so the refusal is audited), in the profile's format
        refused = await c.call_tool("save_note", {"text": "x"})
        assert refused.is_error and json.loads(text_of(refused))["error"]["code"] == "NO_CONTEXT"
        ok = await c.call_tool("save_note", {"text": "x", "context": {"agent_id": "local-agent", "intent": "write"}})
        assert not ok.is_error
        wrong = await c.call_tool("save_note", {"text": "x", "context": {"agent_id": "someone-else"}})
        assert json.loads(text_of(wrong))["error"]["code"] == "SCOPE_VIOLATION"
