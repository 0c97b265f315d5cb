"""Closed vocabularies: a contract's enum of memory types over the domain's free `kind`.

Agents on different profiles share one memory, so a profile whose contract names a closed set of types
(agent-memory: core, learning, task; memory-mcp: episodic, semantic, procedural; memento's eight categories,
which it keeps in the domain's `category`)
meets memories written through other profiles with kinds it cannot name (a cortex `note`, a native
`decision`). Such a memory shows under the contract's nearest name, or its catch-all, and counts there in
statistics, so an answer never holds a value outside the contract's enum; a filter by a name finds exactly
the memories shown under it (`filter_of`). One table per contract, and nothing else decides it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Vocabulary:
    names: tuple[str, ...]  # the contract's enum
    default: str  # what a kind with no nearer name shows as
    synonyms: Mapping[str, str] = field(default_factory=dict)  # other kinds -> one of `names`

    def name_of(self, kind: str | None) -> str:
        if kind in self.names:
            assert kind is not None
            return kind
        return self.synonyms.get(kind or "", self.default)

    def counts(self, by_kind: Mapping[str | None, int]) -> dict[str, int]:
        """Counts by kind as counts by the contract's names (every name present, 0 when none)."""
        out = dict.fromkeys(self.names, 0)
        for kind, n in by_kind.items():
            out[self.name_of(kind)] += n
        return out

    def filter_of(self, name: str) -> dict[str, Any]:
        """The query filter (ListMemories / SearchMemories) of the memories shown as `name`: those whose kind
        is it or one of its synonyms, or, for the catch-all, those whose kind no other name claims."""
        if name != self.default:
            return {"kinds": (name, *sorted(k for k, n in self.synonyms.items() if n == name))}
        others = {k for k in self.names if k != name} | {k for k, n in self.synonyms.items() if n != name}
        return {"kinds_not": tuple(sorted(others))}


# agent-memory: core (lasting facts about the user, the project, its rules), learning (lessons, patterns, how
# things are done), task (work to do)
AGENT_MEMORY = Vocabulary(
    names=("core", "learning", "task"),
    default="core",
    synonyms={
        "learning": "learning",
        "lesson": "learning",
        "insight": "learning",
        "pattern": "learning",
        "skill": "learning",
        "procedural": "learning",
        "procedure": "learning",
        "episodic": "learning",
        "history": "learning",
        "observation": "learning",
        "experience": "learning",
        "todo": "task",
        "goal": "task",
        "plan": "task",
        "action": "task",
        "reminder": "task",
    },
)

# memory-mcp: semantic (facts and knowledge), episodic (what happened), procedural (how to do things)
MEMORY_MCP = Vocabulary(
    names=("episodic", "semantic", "procedural"),
    default="semantic",
    synonyms={
        "episode": "episodic",
        "event": "episodic",
        "history": "episodic",
        "conversation": "episodic",
        "session": "episodic",
        "observation": "episodic",
        "experience": "episodic",
        "learning": "procedural",
        "skill": "procedural",
        "procedure": "procedural",
        "howto": "procedural",
        "runbook": "procedural",
        "pattern": "procedural",
    },
)

# memento's categories: a memory's category when it is one of them, else context (a memory written through
# another profile, with its own category or none); by category alone, so its statistics count what it shows
MEMENTO = Vocabulary(
    names=("preference", "restriction", "fact", "skill", "relationship", "goal", "history", "context"),
    default="context",
)
