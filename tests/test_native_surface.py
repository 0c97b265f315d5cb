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
