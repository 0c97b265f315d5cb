"""The groups of native tools (services/gateway/profiles/native.py serves them): every one, and the default set.
The settings (MNEME_GATEWAY_TOOLS) and the command line's help name them from here."""

from __future__ import annotations

from typing import Literal, get_args

ToolGroup = Literal["core", "time", "governance", "audit", "graph", "code", "system", "debug"]
TOOL_GROUPS: tuple[str, ...] = get_args(ToolGroup)
DEFAULT_TOOL_GROUPS: tuple[str, ...] = ("core", "time", "governance", "audit", "graph")
