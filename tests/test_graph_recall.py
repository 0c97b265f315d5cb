"""Graph-aware recall: personalized PageRank as a third signal of hybrid search.

PPR itself against networkx on a small graph; then, through a real stack (NATS, DuckDB, Qdrant Edge, the
bundled model), a recall where only the graph signal finds the right memory: it shares no word and little
meaning with the query, but it mentions an entity linked to what the query is about.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from scipy import sparse

from mneme.embedded_nats import EmbeddedNats
from schemas.queries import SearchMemories
from services.gateway.graph_commands import NewEntity, NewRelation
from services.projector.graph_signal import personalized_pagerank
from tests.harness import Stack, start_stack

pytestmark = pytest.mark.anyio


def test_ppr_equals_networkx_on_a_small_weighted_graph() -> None:
    edges = [(0, 1, 1.0), (1, 2, 0.5), (2, 0, 0.25), (2, 3, 1.0), (3, 4, 0.8), (4, 1, 0.3), (5, 3, 1.0)]
    n = 6
    g = nx.Graph()
    g.add_weighted_edges_from(edges)
    seeds = np.array([0.7, 0.0, 0.0, 0.0, 0.3, 0.0])
    want = nx.pagerank(g, alpha=0.5, personalization=dict(enumerate(seeds)), weight="weight", tol=1e-12)
    rows = [a for a, b, _ in edges] + [b for a, b, _ in edges]
    cols = [b for a, b, _ in edges] + [a for a, b, _ in edges]
    vals = [w for *_, w in edges] * 2
    adj = sparse.csr_matrix((vals, (rows, cols)), shape=(n, n))
    walk = adj @ sparse.diags(1.0 / np.asarray(adj.sum(axis=0)).ravel())
    got = personalized_pagerank(walk, seeds)
    assert np.allclose(got, [want[i] for i in range(n)], atol=1e-6)
    assert abs(got.sum() - 1.0) < 1e-6


@pytest.fixture
async def vstack(tmp_path: Path, nats_server: EmbeddedNats) -> AsyncIterator[Stack]:
    s = await start_stack(tmp_path / "data", nats_server, vectors=True)
    yield s
    await s.close()


PEOPLE = "Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Niaj Olivia Peggy Rupert Sybil Trent Victor".split()
HOBBIES = [
    "enjoys hiking in the Alps",
    "plays the piano at weddings",
    "studies maritime law in Lisbon",
    "collects vintage postcards",
    "runs a small bakery downtown",
    "coaches the junior chess team",
    "teaches pottery on Mondays",
    "mentors interns in the data team",
    "restores old motorcycles",
]


async def test_only_the_graph_signal_finds_the_linked_memory(vstack: Stack) -> None:
    """Among 150 memories, "Bob prefers oat milk" shares nothing with "Who does Alice mentor?": neither
    retriever brings it into the results. The graph does: the top hit mentions Alice and Bob, and Bob's
    other memory is one step away."""
    s = vstack
    gw = s.gateway
    target = (await s.call("memory_add", content="Bob prefers oat milk in his coffee."))["id"]
    link = (await s.call("memory_add", content="Alice mentors Bob every Friday afternoon."))["id"]
    for i in range(148):
        await s.call("memory_add", content=f"{PEOPLE[i % len(PEOPLE)]} {HOBBIES[i % len(HOBBIES)]} (note {i}).")
    ns = "default"
    actor = gw.principal.actor
    marks = gw.app.marks
    w = await gw.graph_commands.create_entities(
        ns, [NewEntity("Alice", "person"), NewEntity("Bob", "person")], actor, "r-ents", await marks.mark()
    )
    marks.wrote(w.seq)
    w = await gw.graph_commands.create_relations(
        ns, [NewRelation("Alice", "Bob", "mentors")], actor, "r-rel", await marks.mark()
    )
    marks.wrote(w.seq)

    async def ranked(weights: tuple[float, float, float]) -> tuple[list[str], dict[str, float | None], int]:
        got = await gw.queries.ask(
            SearchMemories(
                namespace=ns,
                now=gw.now(),
                min_seq=await marks.mark(),
                mode="hybrid",
                query="Who does Alice mentor?",
                fusion="zscore",
                semantic_weight=weights[0],
                keyword_weight=weights[1],
                graph_weight=weights[2],
                limit=150,
            )
        )
        return [h.memory.id for h in got.hits], {h.memory.id: h.graph for h in got.hits}, got.subgraph_nodes

    without, _, nodes0 = await ranked((0.40, 0.15, 0.0))
    assert without[0] == link and without.index(target) >= 10 and nodes0 == 0
    mixed, ppr, nodes = await ranked((0.40, 0.15, 0.45))  # memory-mcp's defaults
    assert mixed[0] == link and mixed.index(target) < without.index(target) / 2, (
        mixed.index(target),
        without.index(target),
    )
    mass = ppr[target]
    assert mass is not None and mass > 0 and nodes == 4  # two entities, two memories naming them
    # a memory that mentions no entity is an isolated node and keeps only its own seed (its first-stage score):
    # the walk lifts the target, ranked far down by both retrievers, above those ranked below it
    below = [ppr[m] or 0.0 for m in without[without.index(target) + 1 :] if m != link]
    assert below and mass > max(below)
    graph_only, _, _ = await ranked((0.0, 0.0, 1.0))
    assert graph_only[:2] == [link, target]
