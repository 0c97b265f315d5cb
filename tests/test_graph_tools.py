"""The native knowledge-graph tools: entities, observations, relations, traversal, deletes, and `as_of`.

A known graph (a chain with a cycle and a branch) is traversed at depths 1-3 in each direction; deleting
closes validity, so the graph as of before the delete is still read; names compare by their key.
"""

from __future__ import annotations

import pytest

from tests.harness import Stack, ToolFailure

pytestmark = pytest.mark.anyio


async def build(stack: Stack) -> None:
    """A -> B -> C -> A (a cycle), C -> D, E -> A; all "links"."""
    for n in "ABCDE":
        await stack.call("graph_entity", name=n, type="node")
    for src, dst in [("A", "B"), ("B", "C"), ("C", "A"), ("C", "D"), ("E", "A")]:
        await stack.call("graph_relate", source=src, target=dst, type="links")


def names(got: dict) -> dict[str, int]:
    return {e["name"]: e["depth"] for e in got["results"]}


async def test_traversal_by_depth_and_direction_with_a_cycle(stack: Stack) -> None:
    await build(stack)
    out1 = await stack.call("graph_get", related_to="A", depth=1)
    assert names(out1) == {"A": 0, "B": 1}
    out3 = await stack.call("graph_get", related_to="A", depth=3)
    assert names(out3) == {"A": 0, "B": 1, "C": 2, "D": 3}  # C -> A closes the cycle: A is not visited again
    assert {(r["source"], r["target"]) for r in out3["relations"]} == {("A", "B"), ("B", "C"), ("C", "A"), ("C", "D")}
    inc = await stack.call("graph_get", related_to="A", depth=2, direction="incoming")
    assert names(inc) == {"A": 0, "C": 1, "E": 1, "B": 2}
    both = await stack.call("graph_get", related_to="D", depth=2, direction="both")
    assert names(both) == {"D": 0, "C": 1, "A": 2, "B": 2}
    capped = await stack.call("graph_get", related_to="A", depth=3, direction="both", limit=3)
    assert len(capped["results"]) == 3 and capped["truncated"] is True
    with pytest.raises(ToolFailure) as e:
        await stack.call("graph_get", related_to="Nobody")
    assert e.value.code == "ENTITY_NOT_FOUND" and e.value.field == "related_to"


async def test_entities_observations_and_names_by_key(stack: Stack) -> None:
    got = await stack.call("graph_entity", name="Ada  Lovelace", type="person", add=["wrote the first program"])
    assert got["created"] is True and got["entity"]["observations"] == ["wrote the first program"]
    again = await stack.call("graph_entity", name="ada lovelace", add=["born 1815", "wrote the first program"])
    assert again["created"] is False and again["added"] == ["born 1815"]
    assert again["entity"]["name"] == "Ada  Lovelace" and again["entity"]["type"] == "person"
    less = await stack.call("graph_entity", name="ADA LOVELACE", remove=["born 1815"])
    assert less["removed"] == ["born 1815"] and less["entity"]["observations"] == ["wrote the first program"]
    found = await stack.call("graph_get", text="FIRST PROGRAM")
    assert [e["name"] for e in found["results"]] == ["Ada  Lovelace"]
    with pytest.raises(ToolFailure) as e:
        await stack.call("graph_relate", source="Ada Lovelace", target="Babbage", type="knew")
    assert e.value.code == "ENTITY_NOT_FOUND" and e.value.field == "target"
    with pytest.raises(ToolFailure) as e:
        await stack.call("graph_relate", source="Babbage", target="Ada Lovelace", type="knew")
    assert e.value.code == "ENTITY_NOT_FOUND" and e.value.field == "source"
    with pytest.raises(ToolFailure) as e:
        await stack.call("graph_relate", source="Ada Lovelace", target="Ada Lovelace", type="is", weight=1.5)
    assert e.value.code == "INVALID_INPUT" and e.value.field == "weight"


async def test_delete_closes_validity_and_as_of_reads_the_past(stack: Stack) -> None:
    await build(stack)
    before = await stack.last_seq()
    gone = await stack.call("graph_forget", entities=["C", "Nobody"])
    assert gone == {"entities": 1, "relations": 0, "not_found": ["Nobody"]}
    now = await stack.call("graph_get")
    assert [e["name"] for e in now["results"]] == ["A", "B", "D", "E"]
    assert {(r["source"], r["target"]) for r in now["relations"]} == {("A", "B"), ("E", "A")}
    past = await stack.call("graph_get", as_of=before)
    assert [e["name"] for e in past["results"]] == ["A", "B", "C", "D", "E"]
    assert len(past["relations"]) == 5
    walk_then = await stack.call("graph_get", related_to="A", depth=3, as_of=before)
    assert "D" in names(walk_then)
    rel = await stack.call("graph_forget", relations=[{"source": "A", "target": "B", "type": "links"}])
    assert rel["relations"] == 1
    assert (await stack.call("graph_get", names=["a"]))["relations"] == [
        {"id": now["relations"][1]["id"], "source": "E", "target": "A", "type": "links", "weight": 1.0}
    ]
    back = await stack.call("graph_entity", name="C", type="node")
    assert back["created"] is True and back["entity"]["observations"] == []  # created anew: its relations stay gone
    assert names(await stack.call("graph_get", related_to="C", direction="both")) == {"C": 0}


async def test_memory_add_names_the_entities_it_is_about(stack: Stack) -> None:
    """An explicit link on write: the entities are created when new, and the memory mentions them whatever its
    content says (a graph-weighted search then reaches it from them)."""
    got = await stack.call("memory_add", content="prefers oat milk in coffee", entities=["Bob", "bob ", "Coffee"])
    assert [e["name"] for e in (await stack.call("graph_get"))["results"]] == ["Bob", "Coffee"]
    rows = (
        stack.view.reader()
        .execute(
            "SELECT e.name, m.explicit FROM graph_mentions m JOIN graph_entities e ON e.id = m.entity_id "
            "AND e.seq_to IS NULL WHERE m.memory_id = ? AND m.seq_to IS NULL",
            [got["id"]],
        )
        .fetchall()
    )
    # Bob because its writer said so; Coffee for that, and because the content names it too
    assert sorted(rows) == [("Bob", True), ("Coffee", False), ("Coffee", True)]
    with pytest.raises(ToolFailure) as e:
        await stack.call("memory_add", content="x", entities=["   "])
    assert e.value.code == "INVALID_INPUT" and e.value.field == "entities[0]"
