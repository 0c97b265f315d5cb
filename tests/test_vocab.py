"""The profiles' closed vocabularies (services/gateway/profiles/vocab.py): every kind shows as exactly one of
the contract's names, counts there, and a filter by that name finds it and nothing shown under another name."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.gateway.profiles.vocab import AGENT_MEMORY, MEMENTO, MEMORY_MCP, Vocabulary

VOCABS = [AGENT_MEMORY, MEMORY_MCP, MEMENTO]
KINDS = st.one_of(
    st.sampled_from(sorted({k for v in VOCABS for k in (*v.names, *v.synonyms)} | {"note", "fact", "decision"})),
    st.from_regex(r"[a-z][a-z0-9_-]{0,31}", fullmatch=True),
)


def matches(flt: dict[str, tuple[str, ...]], kind: str) -> bool:
    """What the projector's `kinds` / `kinds_not` filters keep."""
    if "kinds" in flt:
        return kind in flt["kinds"]
    return kind not in flt["kinds_not"]


@pytest.mark.parametrize("vocab", VOCABS, ids=["agent-memory", "memory-mcp", "memento"])
@given(kinds=st.lists(KINDS, max_size=20))
def test_every_kind_shows_counts_and_filters_as_one_name(vocab: Vocabulary, kinds: list[str]) -> None:
    for kind in kinds:
        shown = vocab.name_of(kind)
        assert shown in vocab.names
        assert [n for n in vocab.names if matches(vocab.filter_of(n), kind)] == [shown]
    by_kind: dict[str | None, int] = {}
    for kind in kinds:
        by_kind[kind] = by_kind.get(kind, 0) + 1
    counts = vocab.counts(by_kind)
    assert list(counts) == list(vocab.names) and sum(counts.values()) == len(kinds)


def test_nearest_names() -> None:
    assert [AGENT_MEMORY.name_of(k) for k in ("note", "fact", "lesson", "todo", "core", None)] == [
        "core",
        "core",
        "learning",
        "task",
        "core",
        "core",
    ]
    assert [MEMORY_MCP.name_of(k) for k in ("note", "runbook", "event", "procedural")] == [
        "semantic",
        "procedural",
        "episodic",
        "procedural",
    ]
    assert [MEMENTO.name_of(c) for c in ("ops", None, "restriction")] == ["context", "context", "restriction"]
