"""Search end to end: memory_search in its three modes, semantic, keyword (BM25) and hybrid (the default).

Everything is real: the embedding model shipped in a wheel (loaded once per process), a Qdrant Edge
shard under the data directory, DuckDB, and a nats-server child. One stack serves the module; its
own gateway runs as `alice` (an agent bound to every namespace, in no organization, so no
organization rules mix into her results). Tests write into fresh namespaces of their own, so the
shared stack does not couple them. Organization rules use further gateways of organization `acme`
on the same NATS connection (`linearizable`, so they see each other's writes). The shared gateway offers the
native `context` argument (`context="optional"`), so a search can carry its own request id for the audit.

Two tests run stacks of their own: the one whose embedding model is still loading, and (beside the
shared stack) the replay, which folds the shared log a second time into a fresh index.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mneme.app import compose
from mneme.app.settings import GatewaySettings
from mneme.embed_cache import EmbeddingCache
from mneme.embedded_nats import EmbeddedNats
from mneme.embedding import DEFAULT_MODEL, ModelHandle
from schemas.commands import CreateMemory
from schemas.events import Actor
from schemas.queries import SearchMemories, SearchMode
from services.gateway.gateway import Gateway
from services.gateway.server import build_server
from services.projector.memories_view import MemoriesView
from services.projector.search import DEFAULT_THRESHOLD
from services.projector.vector_index import EdgeIndex, Where
from services.projector.vector_view import BM25, VectorView
from tests.harness import Stack, ToolFailure, open_vectors, result_of, shared_model, start_stack

pytestmark = pytest.mark.anyio

MODES: tuple[SearchMode, ...] = (
    "semantic",
    "keyword",
    "hybrid",
)  # memory_search's modes (the old memory_search, _keyword and recall)


# -- callers and the shared stack ------------------------------------------------------------------


@dataclass
class Caller:
    """One principal's in-process MCP client (its own gateway on the shared NATS connection)."""

    name: str
    gateway: Gateway
    client: Client

    async def __call__(self, tool: str, **args: Any) -> dict[str, Any]:
        return result_of(await self.client.call_tool(tool, args))

    async def search(self, mode: str, **args: Any) -> dict[str, Any]:
        return await self("memory_search", mode=mode, **args)

    async def ids(self, mode: str, **args: Any) -> list[str]:
        return [r["id"] for r in (await self.search(mode, **args))["results"]]


@dataclass
class World:
    base: Path
    stack: Stack
    alice: Caller
    es: AsyncExitStack
    callers: list[Caller] = field(default_factory=list)

    async def caller(self, name: str, **settings: Any) -> Caller:
        gs = GatewaySettings(agent_id=name, consistency="linearizable", **settings)
        gw = compose.gateway(self.stack.nc, gs)
        self.es.push_async_callback(gw.access.flush)
        c = Caller(name, gw, await self.es.enter_async_context(Client(build_server(gw))))
        self.callers.append(c)
        return c

    async def flush(self) -> None:
        for c in (self.alice, *self.callers):
            await c.gateway.access.flush()


@pytest.fixture(scope="module")
def anyio_backend() -> str:  # module scope, so the shared stack below can be module scoped
    return "asyncio"


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    base: Path = tmp_path_factory.mktemp("search")
    server = EmbeddedNats(base / "nats")
    await server.start()
    stack = None
    try:
        gs = GatewaySettings(agent_id="alice", namespaces=["*"], namespace="solo", context="optional")
        stack = await start_stack(base / "data", server, gs, vectors=True)
        async with AsyncExitStack() as es:
            es.push_async_callback(stack.gateway.access.flush)
            yield World(base, stack, Caller("alice", stack.gateway, stack.client), es)
    finally:
        if stack is not None:
            await stack.close()
        await server.stop()


def fresh(prefix: str = "t") -> str:
    return f"{prefix}/{uuid.uuid4().hex[:10]}"


async def add(caller: Caller, ns: str, content: str, **args: Any) -> str:
    return (await caller("memory_add", namespace=ns, content=content, **args))["id"]


# -- 1. paraphrases and exact words ----------------------------------------------------------------

CORPUS = {
    "emma": "Emma is lactose intolerant",
    "pytest": "The team writes tests with pytest",
    "postgres": "Our production database is PostgreSQL 16",
    "deploy": "The CI pipeline deploys to staging on every merge to main",
    "dark": "John prefers dark mode in all his editors",
    "holiday": "The office is closed on public holidays in Germany",
    "cat": "Sarah has a cat named Miso",
    "tz": "The user lives in Lisbon and works in the Western European time zone",
    "coffee": "Mark drinks his coffee black without sugar",
    "budget": "The marketing budget for Q3 is 40,000 euros",
    "k8s": "Services run on a Kubernetes cluster in eu-west-1",
    "vegan": "Lena follows a strict vegan diet",
    "spanish": "The user is learning Spanish on Duolingo every morning",
    "oncall": "Priya is on call for the payments service this week",
    "api": "The public API is rate limited to 100 requests per minute per key",
    "meet": "The weekly planning meeting is on Monday at 10am",
    "bike": "Tom commutes to work by bicycle",
    "lint": "Code is formatted with ruff and type checked with mypy",
    "peanut": "Noah has a severe peanut allergy",
    "pw": "Passwords are stored hashed with argon2",
}
# paraphrases sharing (almost) no word with their fact
PARAPHRASES = {
    "dietary restrictions for the family": "emma",
    "which test framework does the user like": "pytest",
    "what database do we use in prod": "postgres",
    "what kind of pet does Sarah own": "cat",
    "where is the user based": "tz",
    "how does Mark take his coffee": "coffee",
    "how much money can marketing spend this quarter": "budget",
    "which language is the user studying": "spanish",
    "who handles incidents for payments": "oncall",
    "how many API calls are allowed": "api",
    "when do we plan the week": "meet",
    "how does Tom get to the office": "bike",
    "food allergies": "peanut",
    "how are user credentials protected": "pw",
    "days off at the office": "holiday",
}
KEYWORDS = {  # exact words, and words that only match once stemmed
    "pytest": "pytest",
    "argon2": "pw",
    "Kubernetes": "k8s",
    "deploying": "deploy",  # deploys
    "allergies": "peanut",  # allergy
    "commuting bicycles": "bike",  # commutes, bicycle
    "holiday": "holiday",  # holidays
}


async def test_paraphrased_queries_find_their_fact_and_keywords_find_exact_and_stemmed_words(world: World) -> None:
    ns = fresh()
    by_id = {}
    for key, content in CORPUS.items():
        by_id[await add(world.alice, ns, content)] = key
    misses, dropped = [], []
    for query, want in PARAPHRASES.items():
        for mode in ("semantic", "hybrid"):
            got = await world.alice.search(mode, query=query, namespace=ns, limit=3, threshold=0.0)
            top = [by_id[r["id"]] for r in got["results"]]
            if want not in top:
                misses.append((mode, query, want, top))
                continue
            # the default threshold keeps the fact exactly when its score reaches it
            score = got["results"][top.index(want)]["score"]
            default = await world.alice.search(mode, query=query, namespace=ns, limit=3, detail="full")
            kept = want in [by_id[r["id"]] for r in default["results"]]
            assert kept == (score >= default["threshold"]), (mode, query, score)
            if not kept:
                dropped.append((mode, query))
    assert not misses, misses
    # ... which it does for every paraphrase but one: no word in common, and a cosine (0.21) this model also
    # gives unrelated text; the semantic mode's lower bar (cosine 0.2) still keeps it
    assert dropped == [("hybrid", "dietary restrictions for the family")], dropped
    for query, want in KEYWORDS.items():
        got = await world.alice.search("keyword", query=query, namespace=ns, detail="full")
        top = [by_id[r["id"]] for r in got["results"]]
        assert top and top[0] == want, (query, top)
        # the score is the share of the query's words the memory holds: all of them
        assert got["results"][0]["score"] >= 0.9 and got["results"][0]["keyword_score"] > 0, got["results"][0]
    # half the (equally rare) words: about half the score, whatever else the namespace holds
    got = {
        by_id[r["id"]]: r["score"]
        for r in (await world.alice.search("keyword", query="pytest argon2", namespace=ns))["results"]
    }
    assert set(got) == {"pytest", "pw"} and all(0.35 < x < 0.65 for x in got.values()), got
    # keyword search is no semantic search: a paraphrase without a shared word finds nothing
    got = await world.alice.search("keyword", query="dietary restrictions for the family", namespace=ns)
    assert got["results"] == []
    # results carry the memory and the scores of the mode (every field with detail="full"; the score is
    # rounded to 4 places, the semantic score is not)
    sem = await world.alice.search(
        "semantic", query="what kind of pet does Sarah own", namespace=ns, limit=1, detail="full"
    )
    (hit,) = sem["results"]
    assert hit["content"] == CORPUS["cat"] and hit["namespace"] == ns and hit["match"] == "scope"
    assert hit["score"] == pytest.approx(hit["semantic_score"], abs=1e-4) and hit["demoted"] is False
    assert sem["mode"] == "semantic" and sem["model"] == shared_model().model_id and len(sem["results"]) == 1


# -- 2. filters --------------------------------------------------------------------------------------


@dataclass
class Spec:
    key: str
    kind: str
    category: str | None
    subject: str | None
    tags: tuple[str, ...]
    importance: float
    status: str = "active"  # after the lifecycle step below
    expired: bool = False


FILTER_SPECS = [
    Spec("pref-food-emma", "preference", "food", "Emma", ("red", "blue"), 0.9),
    Spec("fact-food-john", "fact", "food", "John", ("red",), 0.5),
    Spec("note-work", "note", "work", None, ("blue",), 0.2),
    Spec("pref-work-emma", "preference", "work", "  emma ", ("red", "blue", "green"), 0.45),
    Spec("note-food-archived", "note", "food", "John", ("green",), 0.5, status="archived"),
    Spec("fact-work-deprecated", "fact", "work", "Emma", ("red",), 0.6, status="deprecated"),
    Spec("note-food-expired", "note", "food", "Emma", ("red", "blue"), 0.5, expired=True),
]
FILTER_CASES: list[dict[str, Any]] = [
    {},
    {"kind": "preference"},
    {"kind": "fact"},
    {"category": "food"},
    {"subject": "  EMMA "},
    {"subject": "john"},
    {"tags": ["red", "blue"]},
    {"tags": ["green"]},
    {"importance_min": 0.4, "importance_max": 0.6},
    {"importance_min": 0.6},
    {"importance_max": 0.45},
    {"status": "active"},
    {"status": "live"},
    {"status": "any"},
    {"include_expired": True},
    {"status": "any", "include_expired": True},
    {"status": "any", "include_expired": True, "kind": "note", "category": "food"},
    {"status": "active", "subject": "emma", "tags": ["red"]},
]


def expected(specs: list[Spec], f: dict[str, Any]) -> set[str]:
    def norm(s: str | None) -> str | None:
        return " ".join(s.split()).casefold() if s else None

    out = set()
    for s in specs:
        status = f.get("status", "live")
        if status == "live" and s.status == "archived":
            continue
        if status == "active" and s.status != "active":
            continue
        if s.expired and not f.get("include_expired", False):
            continue
        if "kind" in f and s.kind != f["kind"]:
            continue
        if "category" in f and s.category != f["category"]:
            continue
        if "subject" in f and norm(s.subject) != norm(f["subject"]):
            continue
        if not set(f.get("tags", ())) <= set(s.tags):
            continue
        if not f.get("importance_min", 0.0) <= s.importance <= f.get("importance_max", 1.0):
            continue
        out.add(s.key)
    return out


@dataclass
class FilterCorpus:
    ns: str
    ids: dict[str, str]  # spec key -> memory id

    def keys(self, ids: list[str]) -> set[str]:
        back = {v: k for k, v in self.ids.items()}
        return {back[i] for i in ids}


@pytest.fixture(scope="module")
async def filter_corpus(world: World) -> FilterCorpus:
    ns = fresh("filters")
    ids = {}
    past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    for i, s in enumerate(FILTER_SPECS):
        args: dict[str, Any] = {"kind": s.kind, "tags": list(s.tags), "importance": s.importance}
        if s.category:
            args["category"] = s.category
        if s.subject:
            args["subject"] = s.subject
        if s.expired:
            args["expires_at"] = past
        ids[s.key] = await add(world.alice, ns, f"zebra memo {i}: the {s.kind} about {s.category} ({s.key})", **args)
    for s in FILTER_SPECS:
        if s.status == "archived":
            r = await world.alice("memory_retire", id=ids[s.key], namespace=ns, mode="archive")
            assert r["status"] == "archived"
        elif s.status == "deprecated":
            d = await world.alice("memory_retire", id=ids[s.key], namespace=ns, mode="deprecate", reason="superseded")
            assert d["status"] == "deprecated"
    return FilterCorpus(ns, ids)


@pytest.mark.parametrize("mode", MODES)
async def test_filters_are_honoured_by_every_mode(world: World, filter_corpus: FilterCorpus, mode: SearchMode) -> None:
    fc = filter_corpus
    for f in FILTER_CASES:
        # threshold 0 (every candidate passes) and a generous limit: the result is exactly the filter's set
        got = await world.alice.search(
            mode, query="zebra memo", namespace=fc.ns, threshold=0.0, limit=100, detail="full", **f
        )
        keys = fc.keys([r["id"] for r in got["results"]])
        assert keys == expected(FILTER_SPECS, f), (mode, f, sorted(keys))
        # demoted exactly when not active; in order of score
        for r in got["results"]:
            assert r["demoted"] is (r["status"] != "active"), (mode, f, r)
            assert r["expired"] is (r["id"] == fc.ids["note-food-expired"]), (mode, f, r)
        # in brief, status is there only when not active and expired only when true
        brief = await world.alice.search(mode, query="zebra memo", namespace=fc.ns, threshold=0.0, limit=100, **f)
        full = {r["id"]: r for r in got["results"]}
        assert {r["id"]: r["score"] for r in brief["results"]} == {i: r["score"] for i, r in full.items()}, (mode, f)
        for b in brief["results"]:
            r = full[b["id"]]
            assert b.get("status", "active") == r["status"] and b.get("expired", False) is r["expired"], (mode, f, b)
        scores = [r["score"] for r in got["results"]]
        assert scores == sorted(scores, reverse=True), (mode, f)
        # the same filter with the tier order (an option of the projector's query): the demoted last
        args: dict[str, Any] = {k: tuple(x) if k == "tags" else x for k, x in f.items()}
        q = SearchMemories(
            namespace=fc.ns,
            now=datetime.now(UTC),
            mode=mode,
            query="zebra memo",
            threshold=0.0,
            limit=100,
            order="tiers",
            **args,
        )
        tiered = world.stack.projector.searcher.search(q).hits  # type: ignore[union-attr]
        assert {h.memory.id for h in tiered} == {r["id"] for r in got["results"]}, (mode, f)
        flags = [(h.group, h.demoted) for h in tiered]
        assert flags == sorted(flags, key=lambda x: ({"exact": 0, "scope": 1, "rules": 2}[x[0]], x[1])), (mode, f)


async def test_deprecation_scales_the_score_down_instead_of_ranking_below_every_active_memory(world: World) -> None:
    ns = fresh()
    old = await add(world.alice, ns, "All services must run on Python 3.9")
    new = await add(world.alice, ns, "Services run on Python 3.11 now")
    await add(world.alice, ns, "The cafeteria serves lunch at noon")
    await world.alice("memory_retire", id=old, namespace=ns, mode="deprecate", reason="we upgraded")
    for mode in MODES:
        for query, exact in (
            ("All services must run on Python 3.9", True),  # the deprecated memory, verbatim
            ("every service must run on Python 3.9", False),
        ):
            got = (await world.alice.search(mode, query=query, namespace=ns, threshold=0.0, detail="full"))["results"]
            by = {r["id"]: r for r in got}
            assert old in by and new in by, (mode, query, got)
            o = by[old]
            assert (o["match"], o["demoted"], o["status"]) == ("exact" if exact else "scope", True, "deprecated")
            assert not by[new]["demoted"]
            assert [r["score"] for r in got] == sorted((r["score"] for r in got), reverse=True), (mode, query)
            if mode == "semantic":  # the score: the cosine (+0.1 for containing the query) times 0.7
                # (the score is rounded to 4 places, the semantic score is not)
                want = (min(1.0, o["semantic_score"] + 0.1) if exact else o["semantic_score"]) * 0.7
                assert o["score"] == pytest.approx(want, abs=1e-4), o
                assert by[new]["score"] == pytest.approx(by[new]["semantic_score"], abs=1e-4)
        active = await world.alice.search(
            mode, query="every service must run on Python 3.9", namespace=ns, threshold=0.0, status="active"
        )
        assert old not in [r["id"] for r in active["results"]] and new in [r["id"] for r in active["results"]]


async def test_a_deprecated_memory_that_answers_the_question_stays_within_the_limit(world: World) -> None:
    """Issue 9: deprecation was a tier below every active memory, so with limit=3 a deprecated memory that
    answers the question exactly fell out behind three loosely related active ones."""
    ns = fresh()
    for content in (
        "The staging database runs PostgreSQL 15",
        "Backups of the production database run nightly",
        "The database team meets on Thursdays",
        "Database migrations are written with Alembic",
    ):
        await add(world.alice, ns, content)
    answer = await add(world.alice, ns, "The production database password rotates every 90 days")
    await world.alice("memory_retire", id=answer, namespace=ns, mode="deprecate", reason="moving to a secrets manager")
    for mode in MODES:
        got = (
            await world.alice.search(
                mode,
                query="how often does the production database password rotate?",
                namespace=ns,
                limit=3,
                detail="full",
            )
        )["results"]
        assert answer in [r["id"] for r in got], (mode, [(r["content"], r["score"]) for r in got])
        assert got[0]["id"] == answer and got[0]["demoted"] is True, (mode, got[0])


async def test_memories_whose_valid_time_ended_are_demoted(world: World) -> None:
    ns = fresh()
    ended = await add(
        world.alice,
        ns,
        "The London office uses the guest wifi network called Lobby",
        valid_until=(datetime.now(UTC) - timedelta(hours=1)).isoformat(),
    )
    current = await add(world.alice, ns, "The London office guest wifi network is called Atrium")
    for mode in MODES:
        got = (await world.alice.search(mode, query="London office guest wifi network", namespace=ns, detail="full"))[
            "results"
        ]
        assert [(r["id"], r["demoted"]) for r in got] == [(current, False), (ended, True)], (mode, got)


async def test_tag_filter_is_normalised_like_the_stored_tags(world: World) -> None:
    """Tags are stored trimmed and lower-cased (memory_add tags=["Red"] stores "red"), and memory_list
    normalises its tag filter the same way; search must too."""
    ns = fresh()
    mid = await add(world.alice, ns, "A memo tagged in capitals", tags=["Red", " Blue "])
    assert (await world.alice("memory_get", id=mid, namespace=ns))["tags"] == ["red", "blue"]
    assert [m["id"] for m in (await world.alice("memory_list", namespace=ns, tags=["Red"]))["results"]] == [mid]
    for mode in MODES:
        assert await world.alice.ids(mode, query="memo", namespace=ns, threshold=0.0, tags=["red", "blue"]) == [mid]
        assert await world.alice.ids(mode, query="memo", namespace=ns, threshold=0.0, tags=["Red", " BLUE"]) == [mid], (
            f"{mode}: the tag filter is compared raw with the normalised stored tags"
        )


# -- 3. threshold --------------------------------------------------------------------------------------


async def test_threshold_is_honoured_and_the_default_reported(world: World) -> None:
    ns = fresh()
    for content in CORPUS.values():
        await add(world.alice, ns, content)
    for mode in MODES:
        got = await world.alice.search(
            mode, query="the user's time zone and city", namespace=ns, limit=100, detail="full"
        )
        assert got["threshold"] == DEFAULT_THRESHOLD[mode] and got["mode"] == mode
        assert all(r["score"] >= got["threshold"] for r in got["results"])
        assert got["results"], mode
        scores = [r["score"] for r in got["results"]]
        for t in (0.3, 0.5, 0.75, 1.0):
            cut = await world.alice.search(
                mode, query="the user's time zone and city", namespace=ns, limit=100, threshold=t, detail="full"
            )
            assert cut["threshold"] == t
            assert all(r["score"] >= t for r in cut["results"]), (mode, t, cut["results"])
            # the same ranking, cut at the threshold (no exact matches here, one group)
            assert [r["score"] for r in cut["results"]] == [s for s in scores if s >= t], (mode, t)
    assert (await world.alice.search("semantic", query="x", namespace=ns, detail="full"))["threshold"] == 0.2
    # without a mode, memory_search is the hybrid search (what memory_recall was)
    default = await world.alice("memory_search", query="the user's time zone and city", namespace=ns, detail="full")
    assert (default["mode"], default["threshold"]) == ("hybrid", DEFAULT_THRESHOLD["hybrid"]), default
    # nothing in the corpus is about volcanoes: a strict semantic threshold returns nothing
    strict = await world.alice.search(
        "semantic", query="volcanic eruptions in Iceland", namespace=ns, threshold=0.99, detail="full"
    )
    assert strict["results"] == [] and strict["threshold"] == 0.99
    loose = await world.alice.search("semantic", query="volcanic eruptions in Iceland", namespace=ns, threshold=0.0)
    assert loose["results"], "threshold 0 returns the nearest memories, however far"
    # keyword: 1.0 keeps only the best hit(s)
    best = await world.alice.search("keyword", query="user", namespace=ns, threshold=1.0)
    assert best["results"] and all(r["score"] == 1.0 for r in best["results"])


# -- 4. updates and deletes --------------------------------------------------------------------------------


async def test_updates_and_permanent_deletes_are_reflected_at_once(world: World) -> None:
    ns = fresh()
    for content in list(CORPUS.values())[:8]:
        await add(world.alice, ns, content)
    mid = await add(world.alice, ns, "Alice's favourite fruit is mango")
    # read your writes: searched right after the write, no sleep
    assert (await world.alice.ids("semantic", query="what fruit does Alice like", namespace=ns, limit=1)) == [mid]
    up = await world.alice("memory_update", id=mid, namespace=ns, content="The backup job runs every night at 2am")
    assert up["version"] == 2
    for mode in MODES:
        got = await world.alice.search(
            mode, query="mango", namespace=ns, threshold=0.0, status="any", limit=100, detail="full"
        )
        assert all("mango" not in r["content"] for r in got["results"]), (mode, got["results"])
        for r in got["results"]:
            if r["id"] == mid:
                assert r["version"] == 2 and r["content"].startswith("The backup job")
    assert await world.alice.ids("keyword", query="mango", namespace=ns) == []
    assert mid not in await world.alice.ids("semantic", query="what fruit does Alice like", namespace=ns)
    for mode in MODES:
        got = await world.alice.search(mode, query="when do backups run", namespace=ns, detail="full")
        assert got["results"][0]["id"] == mid, (mode, got["results"])
        assert got["results"][0]["version"] == 2
    # archived: only with status any
    await world.alice("memory_retire", id=mid, namespace=ns, mode="archive")
    for mode in MODES:
        assert mid not in await world.alice.ids(mode, query="when do backups run", namespace=ns, threshold=0.0)
        got = {
            r["id"]: r
            for r in (
                await world.alice.search(mode, query="when do backups run", namespace=ns, status="any", detail="full")
            )["results"]
        }
        assert mid in got, mode
        assert (got[mid]["status"], got[mid]["demoted"]) == ("archived", True)  # ranked below active ones
    # restored: back at once
    await world.alice("memory_restore", id=mid, namespace=ns)
    assert (await world.alice.ids("hybrid", query="when do backups run", namespace=ns))[0] == mid
    # deleted for good: never again, whatever the filters
    d = await world.alice("memory_retire", id=mid, namespace=ns, mode="delete")
    assert d["status"] == "deleted"
    for mode in MODES:
        for query in ("when do backups run", "The backup job runs every night at 2am", "mango", "backup"):
            found = await world.alice.ids(
                mode, query=query, namespace=ns, threshold=0.0, status="any", include_expired=True, limit=100
            )
            assert mid not in found, (mode, query)


# -- 5. before the model is loaded ---------------------------------------------------------------------------


async def test_search_while_the_model_loads(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    gate = threading.Event()
    real = shared_model()
    assert await asyncio.to_thread(real.wait, 60)

    def slow_factory() -> Any:
        gate.wait(60)
        return real.get()

    handle = ModelHandle(DEFAULT_MODEL, factory=slow_factory).start()
    vectors = open_vectors(tmp_path / "data", model=handle)
    stack = None
    try:
        stack = await start_stack(tmp_path / "data", nats_server, vectors=vectors)
        assert not handle.ready
        a = await stack.call("memory_add", content="The nightly backup is copied to the cold storage bucket")
        b = await stack.call("memory_add", content="Grace prefers tea over coffee")
        for mode in ("semantic", "hybrid"):
            with pytest.raises(ToolFailure) as err:
                await stack.call("memory_search", mode=mode, query="where do backups go")
            assert err.value.code == "EMBEDDING_MODEL_LOADING", err.value.error
        kw = await stack.call("memory_search", mode="keyword", query="backup", detail="full")
        assert [r["id"] for r in kw["results"]] == [a["id"]] and kw.get("model") is None
        assert vectors.pending_dense == 2 and vectors.checkpoint == 0, "written without dense vectors, position held"
        gate.set()
        assert await asyncio.to_thread(handle.wait, 60)
        deadline = time.monotonic() + 20
        while vectors.pending_dense and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert vectors.pending_dense == 0, "the dense vectors were not filled in"
        got = await stack.call("memory_search", mode="semantic", query="where do backups go", detail="full")
        assert got["results"][0]["id"] == a["id"] and got["model"] == handle.model_id
        got = await stack.call("memory_search", mode="hybrid", query="what does Grace like to drink")
        assert got["results"][0]["id"] == b["id"]
        # and what is written now is embedded at once
        c = await stack.call("memory_add", content="Heidi is allergic to cats")
        got = await stack.call("memory_search", mode="semantic", query="pet allergies")
        assert got["results"][0]["id"] == c["id"]
        # nothing is held back any more: the (lazily saved) position can be saved up to the head
        assert vectors.save() == await stack.last_seq(), "the position was saved once the vectors were filled"
    finally:
        gate.set()
        if stack is not None:
            await stack.close()
        else:
            vectors.close()


async def test_a_model_that_fails_to_load_leaves_keyword_search_working(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    def broken() -> Any:
        raise RuntimeError("no model in this wheel")

    handle = ModelHandle(DEFAULT_MODEL, factory=broken).start()
    assert not await asyncio.to_thread(handle.wait, 10)
    vectors = open_vectors(tmp_path / "data", model=handle)
    stack = await start_stack(tmp_path / "data", nats_server, vectors=vectors)
    stack.projector.tuning = dataclasses.replace(
        stack.projector.tuning, wait_timeout=1.0
    )  # a lagging answer fails fast
    try:
        a = await stack.call("memory_add", content="The nightly backup is copied to the cold storage bucket")
        kw = await stack.call("memory_search", mode="keyword", query="backup")
        assert [r["id"] for r in kw["results"]] == [a["id"]]
        for mode in ("semantic", "hybrid"):
            with pytest.raises(ToolFailure) as err:
                await stack.call("memory_search", mode=mode, query="where do backups go")
            assert err.value.code == "EMBEDDING_MODEL_UNAVAILABLE", err.value.error
    finally:
        follower = stack.projector.vector_follower
        task = follower._task if follower is not None else None
        await stack.close()
        if task is not None and task.done() and not task.cancelled() and task.exception() is not None:
            # retrieved here, so the crash fails this test rather than whichever test the loop runs next
            raise AssertionError(f"the vector follower died: {task.exception()!r}")


# -- 6. audit ------------------------------------------------------------------------------------------------


async def test_each_search_is_audited_with_the_returned_ids_and_counted(world: World) -> None:
    ns = fresh()
    ids = [await add(world.alice, ns, c) for c in list(CORPUS.values())[:6]]
    rid = uuid.uuid4().hex[:8]
    returned: dict[str, list[str]] = {}
    for mode in MODES:
        got = await world.alice.search(
            mode, query="PostgreSQL production database", namespace=ns, limit=3, context={"request_id": f"{rid}-{mode}"}
        )
        returned[mode] = [r["id"] for r in got["results"]]
        assert returned[mode], mode
    empty = await world.alice.search(
        "semantic", query="volcanic eruptions", namespace=ns, threshold=0.99, context={"request_id": f"{rid}-empty"}
    )
    assert empty["results"] == []
    await world.stack.settle()
    rows = world.stack.trail.con.execute(
        "SELECT request_id, action, outcome, agent_id, namespace, memory_ids FROM audit_trail "
        "WHERE request_id LIKE ? ORDER BY trail_seq",
        [f"{rid}-%"],
    ).fetchall()
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in rows] == [
        *[(f"{rid}-{m}", "read:memory_search", "ok", "alice", ns) for m in MODES],
        (f"{rid}-empty", "read:memory_search", "ok", "alice", ns),
    ]
    assert [list(r[5]) for r in rows] == [*[returned[m] for m in MODES], []]
    # access statistics are folded from those records
    access_head = (await world.stack.nc.jetstream().stream_info("MNEME_ACCESS")).state.last_seq
    assert await world.stack.projector.access_follower.wait_for(access_head, 10, committed=True)
    counts = {i: sum(i in r for r in returned.values()) for i in ids}
    top = max(counts, key=lambda i: (counts[i], i))
    got = await world.alice("memory_get", id=top, namespace=ns)
    assert got["access_count"] == counts[top] == 3
    counts[top] += 1  # that get is a read too, and the stats after it count it (read-your-reads)
    stats = await world.alice("memory_stats", namespace=ns)
    want = sorted(((i, n) for i, n in counts.items() if n), key=lambda x: (-x[1], x[0]))[:5]
    assert [(m["id"], m["count"]) for m in stats["most_accessed"]] == want


# -- 7. ordering: exact matches, the caller's own, organization rules ----------------------------------------------


async def test_verified_organization_rules_rank_by_relevance_and_the_tier_order_remains_an_option(
    world: World,
) -> None:
    boss = await world.caller("boss", role="admin", organization="acme", namespaces=["acme/*"], namespace="acme/web")
    bob = await world.caller("bob", organization="acme", namespaces=["acme/*"], namespace="acme/web")
    dave = await world.caller("dave", organization="globex", namespaces=["globex/*"], namespace="globex/web")
    ns = fresh("acme")
    exact = await add(bob, ns, "We never deploy on Fridays after 3pm")
    own = await add(bob, ns, "Releases usually go out on Tuesday mornings")
    await add(bob, ns, "The team lunch is on Thursdays")
    rule = await add(
        boss,
        "acme/_system",
        "Production deployments are frozen on Fridays, no deploy on Fridays ever",
        kind="business_rule",
    )
    assert (await boss("memory_get", id=rule, namespace="acme/_system"))["verification"] == "verified"
    # an unverified memory in _system (no agent may write there through a gateway: straight to the log)
    w = await world.stack.gateway.commands.create(
        CreateMemory(namespace="acme/_system", content="Deploy on Fridays only with two approvals"),
        actor=Actor(agent_id="importer", role="agent"),
        request_id=str(uuid.uuid4()),
    )
    unverified = w.memory.id  # type: ignore[union-attr]
    got = await boss("memory_get", id=unverified, namespace="acme/_system")
    assert got["verification"] == "unverified"
    query = "deploy on Fridays"
    for mode in MODES:
        got = (await bob.search(mode, query=query, namespace=ns, threshold=0.0, detail="full"))["results"]
        ids = [r["id"] for r in got]
        # both contain the query: the caller's exact match and the rule come first, in the order of their scores
        assert set(ids[:2]) == {exact, rule}, (mode, got)
        assert got[ids.index(exact)]["match"] == "exact", (mode, got)
        assert unverified not in ids, (mode, got)
        r = got[ids.index(rule)]
        assert r["match"] == "rules" and r["namespace"] == "acme/_system" and r["verification"] == "verified"
        assert all(x["namespace"] == ns for x in got if x["match"] != "rules")
        # by relevance: the rule (about deploying on Fridays) before the caller's own Tuesday releases
        assert [x["score"] for x in got] == sorted((x["score"] for x in got), reverse=True), (mode, got)
        if mode != "keyword":
            assert own in ids and ids.index(rule) < ids.index(own), (mode, got)
        # the tier order, for a contract that promises it (an option of the projector's query): the caller's
        # exact matches, the rest of the caller's namespace, then the rules
        q = SearchMemories(
            namespace=ns,
            now=datetime.now(UTC),
            mode=mode,
            query=query,
            threshold=0.0,
            rule_namespaces=("acme/_system",),
            order="tiers",
        )
        tiered = world.stack.projector.searcher.search(q).hits  # type: ignore[union-attr]
        assert {h.memory.id for h in tiered} == set(ids), mode
        groups = [h.group for h in tiered]
        assert groups == sorted(groups, key=["exact", "scope", "rules"].index) and groups[-1] == "rules", (mode, groups)
        # include_rules=False: the caller's namespace only
        assert rule not in await bob.ids(mode, query=query, namespace=ns, threshold=0.0, include_rules=False)
        # another organization never sees acme's rules
        assert rule not in await dave.ids(mode, query=query, threshold=0.0)
        # nor does a principal in no organization
        assert rule not in await world.alice.ids(mode, query=query, namespace=ns, threshold=0.0)


async def test_a_matching_organization_rule_comes_before_unrelated_memories_of_ones_own(world: World) -> None:
    """Issue 9: the rule "All APIs must require auth" came third for "do APIs need authentication?", behind the
    caller's own memories that had nothing to do with it (rules were a tier after the caller's namespace)."""
    org = f"org{uuid.uuid4().hex[:6]}"
    boss = await world.caller(
        f"boss-{org}", role="admin", organization=org, namespaces=[f"{org}/*"], namespace=f"{org}/web"
    )
    bob = await world.caller(f"bob-{org}", organization=org, namespaces=[f"{org}/*"], namespace=f"{org}/web")
    ns = f"{org}/web"
    for content in CORPUS.values():
        await add(bob, ns, content)
    rule = await add(boss, f"{org}/_system", "All APIs must require auth", kind="business_rule")
    for mode in ("hybrid", "semantic"):
        got = (await bob.search(mode, query="do APIs need authentication?", namespace=ns, detail="full"))["results"]
        assert got[0]["id"] == rule and got[0]["match"] == "rules", (mode, [(r["content"], r["score"]) for r in got])
        # and the default threshold leaves out what is unrelated: fewer than `limit`
        assert len(got) < 10, (mode, [(r["content"], r["score"]) for r in got])


# -- 8. duplicates -------------------------------------------------------------------------------------------------


async def test_identical_content_stored_twice_comes_back_once(world: World) -> None:
    ns, other = fresh(), fresh()
    text = "The staging database password rotates every 30 days"
    first = await add(world.alice, ns, text)
    second = await add(world.alice, ns, text)
    assert first != second
    await add(world.alice, ns, "Staging is reset every Sunday")
    elsewhere = await add(world.alice, other, text)
    for mode in MODES:
        for query in ("how often does the staging password change", "password rotates", text):
            got = await world.alice.ids(mode, query=query, namespace=ns, threshold=0.0)
            assert len([i for i in got if i in (first, second)]) == 1, (mode, query, got)
            assert elsewhere not in got
        assert await world.alice.ids(mode, query=text, namespace=other, threshold=0.0) == [elsewhere]


# -- 9. replay -----------------------------------------------------------------------------------------------------


async def test_replaying_the_log_reproduces_identical_results(world: World) -> None:
    ns = fresh()
    ids = [await add(world.alice, ns, c, importance=0.1 + 0.04 * i) for i, c in enumerate(CORPUS.values())]
    await world.alice("memory_update", id=ids[0], namespace=ns, content="Emma cannot digest milk or cheese")
    await world.alice("memory_update", id=ids[1], namespace=ns, tags=["testing"])
    await world.alice("memory_retire", id=ids[2], namespace=ns, mode="deprecate", reason="migrated")
    await world.alice("memory_retire", id=ids[3], namespace=ns, mode="archive")
    await world.alice("memory_retire", id=ids[4], namespace=ns, mode="delete")
    await add(world.alice, ns, CORPUS["cat"])  # a duplicate
    head = await world.stack.last_seq()
    assert await world.stack.projector.vector_follower.wait_for(head, 10, committed=True)  # type: ignore[union-attr]

    # a second projection of the same log, into another directory, with a cache of its own
    d = world.base / f"replay-{uuid.uuid4().hex[:6]}"
    d.mkdir()
    model = shared_model()
    vv = VectorView(EdgeIndex(d / "vectors", model.dim), model, EmbeddingCache(d / "embeddings.sqlite"))
    view = MemoriesView(str(d / "projector.duckdb"))
    replay = compose.projector(world.stack.nc, view, vectors=vv)
    try:
        await replay.start(serve_queries=False)
        assert await replay.vector_follower.wait_for(head, 30, committed=True)  # type: ignore[union-attr]
        live_searcher = world.stack.projector.searcher
        assert live_searcher is not None and replay.searcher is not None
        now = datetime.now(UTC)
        queries = (
            "dietary restrictions",
            "which test framework",
            "deploys to staging",
            "Sarah cat Miso",
            "database",
            "who is on call",
        )
        compared = 0
        for query in queries:
            for mode in MODES:
                extras: tuple[dict[str, Any], ...] = (
                    {},
                    {"status": "any"},
                    {"fusion": "zscore", "semantic_weight": 0.3},
                )
                for extra in extras:
                    if "fusion" in extra and mode != "hybrid":
                        continue
                    q = SearchMemories(namespace=ns, now=now, mode=mode, query=query, limit=50, threshold=0.0, **extra)
                    a = [(h.memory.id, h.memory.version, round(h.score, 5)) for h in live_searcher.search(q).hits]
                    b = [(h.memory.id, h.memory.version, round(h.score, 5)) for h in replay.searcher.search(q).hits]
                    assert a == b, (query, mode, extra)
                    compared += bool(a)
        assert compared > 20
        # and through the tool, the live answer is what the replayed index answers (the tool rounds scores to
        # 4 places)
        for mode in MODES:
            got = await world.alice.search(mode, query="dietary restrictions", namespace=ns, threshold=0.0)
            q = SearchMemories(namespace=ns, now=now, mode=mode, query="dietary restrictions", threshold=0.0)
            assert [(r["id"], round(r["score"], 4)) for r in got["results"]] == [
                (h.memory.id, round(h.score, 4)) for h in replay.searcher.search(q).hits
            ]
    finally:
        await replay.stop()
        vv.close()
        view.close()


async def test_query_texts_are_cached_in_memory_not_on_disk(world: World) -> None:
    """Distinct query texts came and went into the on-disk cache for ever (4.0 -> 16.3 MB in a reads soak):
    they are kept in the in-memory LRU only; memory contents stay on disk for replays."""
    ns = fresh()
    await add(world.alice, ns, "the cache keeps what a replay needs")
    p = world.stack.projector
    head = await world.stack.last_seq()
    assert p.vector_follower is not None and p.vectors is not None
    assert await p.vector_follower.wait_for(head, 30, committed=True)
    await asyncio.to_thread(p.vectors.fill_pending)  # the memory's own vector is written (to disk) by now
    searcher = p.searcher
    assert searcher is not None
    cache, model_id = searcher.cache, searcher.model.get().model_id
    on_disk = cache.size(model_id)
    texts = [f"a query nobody asked before {uuid.uuid4().hex}" for _ in range(20)]
    for text in texts:
        await world.alice("memory_search", namespace=ns, query=text, mode="semantic", threshold=0.0)
    assert cache.size(model_id) == on_disk  # not one of them written to the file
    hits = cache.hits
    again = searcher.query_vector(texts[0])  # asked again: from memory, the same vector
    assert cache.hits == hits + 1
    assert again == searcher.model.get().embed([texts[0]])[0].tolist()


async def test_refolding_from_an_older_position_after_a_restart_changes_nothing(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    """The vector projection's position may lag its points (it is saved after them): folding again from an
    older position must leave exactly the same points and answers, and take every vector from the cache."""
    data = tmp_path / "data"
    stack = await start_stack(data, nats_server, vectors=True)
    queries = ("dietary restrictions", "which test framework", "who is on call", "cat")
    try:
        ids = [await stack.call("memory_add", content=c, tags=["t"]) for c in list(CORPUS.values())[:8]]
        await stack.call("memory_update", id=ids[0]["id"], content="Emma cannot digest milk")
        await stack.call("memory_update", id=ids[1]["id"], tags=["testing"], importance=0.9)
        await stack.call("memory_retire", id=ids[2]["id"], mode="deprecate", reason="old")
        await stack.call("memory_retire", id=ids[3]["id"], mode="archive")
        await stack.call("memory_retire", id=ids[4]["id"], mode="delete")
        before = {
            (mode, q): [
                (r["id"], r["version"], round(r["score"], 5))
                for r in (
                    await stack.call("memory_search", mode=mode, query=q, status="any", threshold=0.0, detail="full")
                )["results"]
            ]
            for mode in MODES
            for q in queries
        }
        assert stack.projector.vectors is not None
        points = stack.projector.vectors.index.count(Where())
        ckpt = stack.projector.vectors.index.checkpoint_file  # type: ignore[attr-defined]
        head = await stack.last_seq()
    finally:
        await stack.close()
    assert points == 8 + 5 - 1  # one point per version; the permanently deleted memory's point is closed
    assert json.loads(ckpt.read_text())["seq"] == head
    ckpt.write_text(json.dumps({"seq": 3}))  # as if the process died before saving its latest position
    stack = await start_stack(data, nats_server, vectors=True)
    try:
        vv = stack.projector.vectors
        assert vv is not None
        after = {
            (mode, q): [
                (r["id"], r["version"], round(r["score"], 5))
                for r in (
                    await stack.call("memory_search", mode=mode, query=q, status="any", threshold=0.0, detail="full")
                )["results"]
            ]
            for mode in MODES
            for q in queries
        }
        assert after == before
        assert vv.index.count(Where()) == points
        assert vv.embedded == 0, "re-folding ran the model instead of the cache"
        assert vv.checkpoint == head
    finally:
        await stack.close()


# -- 10. scores mean the same in every query: absolute, and default thresholds that drop the unrelated ----------

OFF_TOPIC = (
    "volcanic eruptions in Iceland",
    "how tall is the Eiffel tower",
    "who won the world cup",
    "quantum entanglement explained",
)


async def test_scores_are_absolute_and_the_default_thresholds_leave_unrelated_memories_out(world: World) -> None:
    """Issue 9: with threshold 0 by default a hybrid search always filled `limit`, and its score was relative to
    the candidates (z-scores through a logistic): "Bob is allergic to peanuts" scored 0.604 for "linting tool for
    python" with a cosine of 0.127 and no word in common."""
    ns, small = fresh(), fresh()
    ids = {key: await add(world.alice, ns, content) for key, content in CORPUS.items()}
    bob = await add(world.alice, ns, "Bob is allergic to peanuts")
    for mode in ("hybrid", "semantic"):
        got = await world.alice.search(mode, query="linting tool for python", namespace=ns)
        assert bob not in [r["id"] for r in got["results"]], (mode, got["results"])
        assert len(got["results"]) < 10, (mode, [(r["content"], r["score"]) for r in got["results"]])
        loose = {
            r["id"]: r
            for r in (
                await world.alice.search(
                    mode, query="linting tool for python", namespace=ns, threshold=0.0, limit=100, detail="full"
                )
            )["results"]
        }
        assert loose[bob]["semantic_score"] < 0.2, loose[bob]
        if mode == "hybrid":  # no word in common and the cosine of unrelated text: nothing
            assert loose[bob]["keyword_score"] == 0.0 and loose[bob]["score"] < 0.02, loose[bob]
        # nothing in the corpus is about these: the defaults return nothing at all
        for query in OFF_TOPIC:
            got = await world.alice.search(mode, query=query, namespace=ns)
            assert got["results"] == [], (mode, query, [(r["content"], r["score"]) for r in got["results"]])
    # a memory's score does not depend on what else the namespace holds (IDF is the collection's)
    other = await add(world.alice, small, "Bob is allergic to peanuts")
    await add(world.alice, small, "The office is closed on public holidays in Germany")
    for mode in MODES:
        compared = 0
        for query in ("food allergies", "is Bob allergic to anything", "peanuts"):
            a = {
                r["id"]: r["score"]
                for r in (await world.alice.search(mode, query=query, namespace=ns, threshold=0.0, limit=100))[
                    "results"
                ]
            }
            b = {
                r["id"]: r["score"]
                for r in (await world.alice.search(mode, query=query, namespace=small, threshold=0.0, limit=100))[
                    "results"
                ]
            }
            assert (bob in a) == (other in b), (mode, query)
            if bob in a:
                assert a[bob] == pytest.approx(b[other], abs=1e-4), (mode, query, a[bob], b[other])
                compared += 1
        assert compared >= 2, mode
    # and a relevant memory clears the default threshold of every mode
    for mode in MODES:
        got = await world.alice.search(mode, query="how does Mark take his coffee", namespace=ns)
        assert got["results"][0]["id"] == ids["coffee"] and got["results"][0]["score"] >= 0.3, (mode, got["results"])


# -- 11. text beyond ASCII: accents, CJK, emoji, right-to-left -----------------------------------------------------

INTL = {
    "zurich": "Jürgen lives in Zürich",
    "cafe": "The café on the corner opens at 7",
    "tokyo": "東京の会議は月曜日",  # the Tokyo meeting is on Monday
    "launch": "🚀 launch on Friday",
    "dubai": "الاجتماع في دبي يوم الأحد",  # the meeting in Dubai is on Sunday
    "strasse": "Die Hauptstraße ist gesperrt",
}


def test_bm25_folds_accents_case_and_width_and_splits_cjk_for_documents_and_queries() -> None:
    from services.projector.vector_view import fold

    assert fold("Jürgen lives in Zürich") == "jurgen lives in zurich"
    assert fold("CAFÉ naïve Straße ﬁle Ｆｉｌｅ") == "cafe naive strasse file file"  # noqa: RUF001 - fullwidth on purpose
    assert fold("Ελλάδα") == fold("ελλαδα") and fold("مُحَمَّد") == fold("محمد")
    assert fold("plain ASCII stays as it is") == "plain ASCII stays as it is"
    assert fold("हिंदी") == "हिंदी" and fold("がっこう") != fold("かっこう")  # vowel signs and voicing marks stay
    assert fold("東京") == " 東京 東 京 " and fold("🚀 go").split() == ["u1f680", "go"]
    bm25 = BM25()
    for a, b in (
        ("Zurich", "Zürich"),
        ("cafe", "CAFÉ"),
        ("jurgen", "Jürgen"),
        ("Hauptstrasse", "Hauptstraße"),
        ("Ærø", "aero"),
        ("Łódź", "lodz"),
    ):
        assert bm25.query(a) == bm25.query(b), (a, b)
    # a CJK word is a token of the sentence that holds it
    words = set(bm25.document(INTL["tokyo"])[0])
    for word in ("東京", "会議", "月曜日"):
        assert set(bm25.query(word)[0]) <= words, word
    assert set(bm25.query("🚀")[0]) <= set(bm25.document(INTL["launch"])[0]) and bm25.query("🚀")[0]


async def test_search_keyword_search_and_recall_work_on_accented_cjk_emoji_and_arabic_text(world: World) -> None:
    ns = fresh()
    ids = {key: await add(world.alice, ns, content) for key, content in INTL.items()}
    for content in list(CORPUS.values())[:8]:
        await add(world.alice, ns, content)
    back = {v: k for k, v in ids.items()}
    # the content comes back as it was written
    got = await world.alice.search("keyword", query="Zürich", namespace=ns)
    assert got["results"][0]["content"] == INTL["zurich"]
    keyword = {
        "Zurich": "zurich",
        "zurich": "zurich",
        "ZÜRICH": "zurich",
        "jurgen": "zurich",
        "cafe": "cafe",
        "Café": "cafe",
        "hauptstrasse": "strasse",
        "東京": "tokyo",
        "月曜日": "tokyo",
        "会議": "tokyo",
        "🚀": "launch",
        "دبي": "dubai",
        "الاجتماع": "dubai",
    }
    for query, want in keyword.items():
        got = (await world.alice.search("keyword", query=query, namespace=ns))["results"]
        assert [back.get(r["id"]) for r in got][:1] == [want], (query, [(r["content"], r["score"]) for r in got])
        assert got[0]["score"] >= 0.9, (query, got[0])
    both = {
        "where does Jürgen live": "zurich",
        "Zurich": "zurich",
        "東京の会議": "tokyo",
        "月曜日": "tokyo",
        "🚀": "launch",
        "when is the launch": "launch",
        "أين الاجتماع": "dubai",
    }
    for mode in ("semantic", "hybrid"):
        for query, want in both.items():
            got = (await world.alice.search(mode, query=query, namespace=ns))["results"]
            seen = [(r["content"], r["score"]) for r in got]
            assert [back.get(r["id"]) for r in got][:1] == [want], (mode, query, seen)


# -- 12. bad input -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"query": ""}, "query"),
        ({"query": "x" * 4097}, "query"),
        ({"query": "ok", "threshold": 1.5}, "threshold"),
        ({"query": "ok", "threshold": -0.1}, "threshold"),
        ({"query": "ok", "limit": 0}, "limit"),
        ({"query": "ok", "limit": 101}, "limit"),
        ({"query": "ok", "status": "archived"}, "status"),
        ({"query": "ok", "importance_min": 2}, "importance_min"),
        ({"query": "ok", "tags": [""]}, "tags.0"),
        ({"query": "ok", "kind": "Not A Kind"}, "kind"),
        ({"query": "ok", "querry": "typo"}, "querry"),
        ({"limit": 3}, "query"),
    ],
)
async def test_bad_input_is_a_structured_error_naming_the_field(
    world: World, mode: str, args: dict[str, Any], field: str
) -> None:
    seq = await world.stack.last_seq()
    with pytest.raises(ToolFailure) as err:
        await world.alice.search(mode, **args)
    assert err.value.code == "INVALID_INPUT", err.value.error
    assert err.value.field == field, err.value.error
    assert err.value.error["message"].startswith(field), err.value.error
    assert await world.stack.last_seq() == seq


@pytest.mark.parametrize("mode", MODES)
async def test_blank_query_and_hybrid_only_arguments(world: World, mode: str) -> None:
    with pytest.raises(ToolFailure) as err:
        await world.alice.search(mode, query="   \n\t ")
    assert (err.value.code, err.value.field) == ("INVALID_INPUT", "query"), err.value.error
    if mode == "hybrid":
        for args, field in (({"semantic_weight": 1.5}, "semantic_weight"), ({"fusion": "max"}, "fusion")):
            with pytest.raises(ToolFailure) as err:
                await world.alice.search(mode, query="ok", **args)
            assert (err.value.code, err.value.field) == ("INVALID_INPUT", field), err.value.error
    else:  # fusion belongs to the hybrid mode only
        with pytest.raises(ToolFailure) as err:
            await world.alice.search(mode, query="ok", fusion="rrf")
        assert (err.value.code, err.value.field) == ("INVALID_INPUT", "fusion"), err.value.error
