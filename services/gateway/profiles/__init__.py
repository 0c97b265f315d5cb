"""The tool surfaces mneme serves, one module each, over one memory. `native` is mneme's own tool set;
the others are seed contracts (../shared/seeds) that agents in the wild are written against.
docs/profiles.md maps each profile's tools onto the domain and records every choice."""

from __future__ import annotations

import importlib

from services.gateway.toolkit import Profile

# name -> module defining `PROFILE`; the HTTP path of each is /mcp (native) or /mcp/<name>
PROFILES: dict[str, str] = {
    "native": "services.gateway.profiles.native",
    "cortex": "services.gateway.profiles.cortex",
    "agent-memory": "services.gateway.profiles.agent_memory",
    "governed": "services.gateway.profiles.governed",
    "memento": "services.gateway.profiles.memento",
    "server-memory": "services.gateway.profiles.server_memory",
    "memory-mcp": "services.gateway.profiles.memory_mcp",
}


def names() -> list[str]:
    return list(PROFILES)


def load(name: str) -> Profile:
    module = PROFILES.get(name)
    if module is None:
        raise KeyError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}")
    profile: Profile = importlib.import_module(module).PROFILE
    return profile


def http_path(name: str) -> str:
    return "/mcp" if name == "native" else f"/mcp/{name}"
