"""The native surface: the golden snapshot of its tools/list (tests/golden/native.tools.json).

Every tool's name, description, input schema, output schema and annotations, in the order served: the order
of the tools, of each schema's properties and of its `required` list is part of the surface, so the test
compares the rendered text as well as the parsed JSON. After an intended change to the surface, regenerate
the snapshot with

    MNEME_UPDATE_GOLDEN=1 PYTHONPATH=. .venv/bin/python -m pytest tests/test_native_surface.py -k golden

and review the diff.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from services.gateway.server import build_server

pytestmark = pytest.mark.anyio

GOLDEN = Path(__file__).parent / "golden" / "native.tools.json"
INSTRUCTIONS = (
    "mneme is a shared, event-sourced memory. Store facts with memory_add (optionally at a store path), "
    "read them back with memory_get / memory_list / memory_recent. Every change is versioned; "
    "pass request_id to make a write safe to retry."
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


# what each tool on the mechanism must be allowed to do (not in tools/list, so not in the snapshot): the intent
# each passed to gw.run before the native tools moved onto the mechanism
INTENTS = {
    "memory_add": "write", "memory_update": "write", "memory_move": "write", "memory_delete": "write",
    "memory_restore": "write", "memory_prune_expired": "write",
    "memory_get": "read", "memory_list": "read", "memory_recent": "read", "memory_stats": "read",
    "memory_verify": "admin", "memory_lock": "admin", "memory_unlock": "admin", "memory_deprecate": "write",
    "audit_query": "read",
    "memory_search": "read", "memory_search_keyword": "read", "memory_recall": "read",
    "memory_history": "read", "memory_diff": "read", "memory_valid": "read", "memory_invalidate": "write",
    "memory_mark_outdated": "write",
}  # fmt: skip


def test_declared_intents() -> None:
    from services.gateway import profiles

    assert {s.name: s.intent for s in profiles.load("native").tools.specs} == INTENTS
