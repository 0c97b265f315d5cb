"""Namespace isolation of the search tools, as a property: no search ever returns a memory the
principal may not read, and none leaks a memory id or marker of such a namespace.

The approach of tests/test_isolation_property.py, for memory_search in each of its modes (semantic,
keyword, hybrid): random principals (organization, role, namespace patterns, read-only patterns) over
two organizations × two repositories plus each organization's `_system`; each writes memories with
distinctive marker words, then searches every namespace (directly and through the context object)
with a query every memory matches, and with a query made of the markers of every memory it may NOT
read (a targeted probe: any leak would be the best match).

The oracle, written independently of mneme.principals: a principal reads a namespace its patterns
(or read-only patterns) match, or its organization's `_system`. A search of a readable namespace
returns exactly the memories of that namespace plus the *verified* memories of the principal's own
organization's `_system` (as match="rules"); a search of any other namespace is SCOPE_VIOLATION and
its error names nothing of it. Each `_system` also holds an unverified memory (written straight to
the log: no gateway lets an agent write there), which must never appear as a rule.

One stack (nats-server, projector with the real model and a Qdrant Edge shard, auditor) serves the
module; each principal gets its own gateway (linearizable reads, the native `context` argument offered:
`context="optional"`) on the same NATS connection.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mcp import Client

from mneme.app import compose
from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from schemas.commands import CreateMemory
from schemas.events import Actor
from services.gateway.server import build_server
from tests.harness import Stack, ToolFailure, result_of, start_stack

pytestmark = pytest.mark.anyio

ORGS = ("acme", "globex")
REPOS = ("web", "api")
REPO_NS = tuple(f"{o}/{r}" for o in ORGS for r in REPOS)
SYSTEM_NS = tuple(f"{o}/_system" for o in ORGS)
WRITE_NS = REPO_NS + SYSTEM_NS
READ_NS = WRITE_NS + ORGS + ("default", "initech/web")  # also names nobody writes
PATTERNS = ("acme/web", "acme/api", "globex/web", "globex/api", "acme/*", "globex/*", "*")
MODES = ("semantic", "keyword", "hybrid")  # memory_search's modes
MARK_LETTERS = "ghijklmnopqrstuvwxy"  # no hex digits, no "z": a marker never occurs inside an id or a time
LIMIT = 100


def matches(pattern: str, ns: str) -> bool:
    if pattern == "*":
        return True
    if pattern.endswith("/*"):
        return ns == pattern[:-2] or ns.startswith(pattern[:-2] + "/")
    return ns == pattern


@dataclass(frozen=True)
class Spec:
    org: str | None
    role: str
    namespaces: tuple[str, ...]
    read_only: tuple[str, ...]
    writes: tuple[tuple[str, str], ...]  # (namespace, marker word)

    @property
    def system(self) -> str | None:
        return f"{self.org}/_system" if self.org else None

    def may_read(self, ns: str) -> bool:
        if ns == self.system:
            return True
        return any(matches(p, ns) for p in (*self.namespaces, *self.read_only))

    def may_write(self, ns: str) -> bool:
        if ns.split("/")[-1] == "_system":
            return self.role == "admin" and ns == self.system
        return any(matches(p, ns) for p in self.namespaces)


@dataclass(frozen=True)
class Written:
    id: str
    namespace: str
    marker: str
    verified: bool


@dataclass
class World:
    stack: Stack
    ledger: list[Written] = field(default_factory=list)
    counter: itertools.count = field(default_factory=itertools.count)

    def marker(self, word: str) -> str:
        return f"zz{next(self.counter):06d}{word}zz"

    def of(self, ns: str) -> list[Written]:
        return [w for w in self.ledger if w.namespace == ns]


class Caller:
    def __init__(self, client: Client):
        self.client = client

    async def __call__(self, tool: str, **args: Any) -> dict[str, Any]:
        return result_of(await self.client.call_tool(tool, args))


async def caller_for(stack: Stack, es: AsyncExitStack, agent_id: str, spec: Spec) -> Caller:
    gs = GatewaySettings(
        agent_id=agent_id,
        role=spec.role,
        organization=spec.org,
        namespaces=list(spec.namespaces),
        read_only=list(spec.read_only),
        consistency="linearizable",
        context="optional",
    )
    gw = compose.gateway(stack.nc, gs)
    es.push_async_callback(gw.access.flush)
    return Caller(await es.enter_async_context(Client(build_server(gw))))


async def write(w: World, caller: Caller, ns: str, marker: str, verified: bool) -> None:
    added = await caller(
        "memory_add", namespace=ns, content=f"the secret word is {marker}", tags=[marker], request_id=str(uuid.uuid4())
    )
    assert added["namespace"] == ns and added["duplicate"] is False
    w.ledger.append(Written(added["id"], ns, marker, verified))


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    base: Path = tmp_path_factory.mktemp("search-isolation")
    server = EmbeddedNats(base / "nats")
    await server.start()
    stack = None
    try:
        stack = await start_stack(base / "data", server, vectors=True)
        w = World(stack)
        async with AsyncExitStack() as es:  # each organization's admin seeds every namespace of it
            for org in ORGS:
                admin = await caller_for(stack, es, f"{org}-admin", Spec(org, "admin", (f"{org}/*",), (), ()))
                for ns in WRITE_NS:
                    if ns.startswith(org + "/"):
                        await write(w, admin, ns, w.marker("seed"), verified=True)
        for ns in SYSTEM_NS:  # an unverified memory in each _system, straight to the log
            marker = w.marker("unverified")
            got = await stack.gateway.commands.create(
                CreateMemory(namespace=ns, content=f"the secret word is {marker}", tags=(marker,)),
                actor=Actor(agent_id="importer", role="agent"),
                request_id=str(uuid.uuid4()),
            )
            assert got.memory is not None and got.memory.verification == "unverified"
            w.ledger.append(Written(got.memory.id, ns, marker, verified=False))
        yield w
    finally:
        if stack is not None:
            await stack.close()
        await server.stop()


# -- the checks ---------------------------------------------------------------------------------------


def text_of(x: Any) -> str:
    return json.dumps(x, default=str, sort_keys=True)


def assert_hidden(spec: Spec, w: World, text: str, what: str) -> None:
    for m in w.ledger:
        if not spec.may_read(m.namespace):
            assert m.id not in text, f"{what} reveals id {m.id} of {m.namespace}: {text[:500]}"
            assert m.marker not in text, f"{what} reveals marker of {m.namespace}: {text[:500]}"


def visible(spec: Spec, w: World, target: str) -> dict[str, Written]:
    """What a search of `target` may return: its memories, and the verified rules of the principal's own
    organization (unless it searches that _system itself, where everything of it is its own)."""
    out = {m.id: m for m in w.of(target)}
    if spec.system is not None and target != spec.system:
        out |= {m.id: m for m in w.of(spec.system) if m.verified}
    return out


async def outcome(caller: Caller, tool: str, **args: Any) -> tuple[str, dict[str, Any]]:
    try:
        return "ok", await caller(tool, **args)
    except ToolFailure as exc:
        return exc.code, exc.error


async def check_search(
    spec: Spec,
    w: World,
    who: Caller,
    mode: str,
    target: str | None,
    where: dict[str, Any],
    query: str,
    *,
    complete: bool,
) -> None:
    label = f"{mode} {where} {query[:40]!r}"
    code, got = await outcome(
        who,
        "memory_search",
        mode=mode,
        query=query,
        threshold=0.0,
        limit=LIMIT,
        status="any",
        include_expired=True,
        detail="full",
        **where,
    )
    # nothing in the result or error may carry an id or marker the principal may not read (the native result
    # does not echo the query, which for the probe is made of markers)
    assert "query" not in got, (label, sorted(got))
    assert_hidden(spec, w, text_of(got), label)
    if target is None or not spec.may_read(target):
        assert code == "SCOPE_VIOLATION", (label, code, got)
        return
    assert code == "ok", (label, got)
    allowed = visible(spec, w, target)
    ids = [r["id"] for r in got["results"]]
    assert set(ids) <= set(allowed), (label, [i for i in ids if i not in allowed])
    for r in got["results"]:
        m = allowed[r["id"]]
        assert r["namespace"] == m.namespace, label
        assert r["match"] == ("rules" if m.namespace != target else r["match"]), (label, r)
        assert (r["match"] == "rules") == (m.namespace != target), (label, r)
    if complete and len(allowed) <= LIMIT:
        assert set(ids) == set(allowed), (label, sorted(set(allowed) - set(ids)))


async def check_principal(spec: Spec, w: World, who: Caller) -> None:
    probe = " ".join(m.marker for m in w.ledger if not spec.may_read(m.namespace))
    for i, ns in enumerate(READ_NS):
        for mode in MODES:
            await check_search(spec, w, who, mode, ns, {"namespace": ns}, "the secret word is", complete=True)
        # a targeted probe: the markers of everything it may not read (rotating over the modes)
        if probe and spec.may_read(ns):
            mode = ("keyword", "hybrid")[i % 2]
            await check_search(spec, w, who, mode, ns, {"namespace": ns}, probe[:4096], complete=False)
    for n, (org, repo) in enumerate(itertools.product((*ORGS, None), REPOS)):
        ctx = {"repository_id": repo} | ({"organization_id": org} if org else {})
        if spec.org is not None and org not in (None, spec.org):
            target = None  # another organization's context: refused whatever the repository
        else:
            o = org or spec.org
            target = f"{o}/{repo}" if o else repo
        await check_search(spec, w, who, MODES[n % 3], target, {"context": ctx}, "the secret word is", complete=True)
    # the caller's own organization rules, searched from its default namespace
    await check_search(spec, w, who, "hybrid", "default", {}, "secret word", complete=True)


words = st.text(alphabet=MARK_LETTERS, min_size=3, max_size=10)
specs = st.builds(
    Spec,
    org=st.sampled_from(["acme", "globex", None]),
    role=st.sampled_from(["agent", "agent", "admin"]),
    namespaces=st.lists(st.sampled_from(PATTERNS[:-1]), max_size=3, unique=True).map(tuple) | st.just(("*",)),
    read_only=st.lists(st.sampled_from(PATTERNS[:-1]), max_size=2, unique=True).map(tuple),
    writes=st.lists(st.tuples(st.sampled_from(WRITE_NS), words), min_size=1, max_size=3).map(tuple),
)


# No shrinking: the stack is shared and keeps every example's memories (see test_isolation_property.py).
@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(principals=st.lists(specs, min_size=1, max_size=3))
async def test_no_search_returns_what_the_principal_may_not_read(world: World, principals: list[Spec]) -> None:
    w = world
    async with AsyncExitStack() as es:
        callers = [
            await caller_for(w.stack, es, f"agent-{next(w.counter)}-{i}", spec) for i, spec in enumerate(principals)
        ]
        for spec, who in zip(principals, callers, strict=True):
            for ns, word in spec.writes:
                if spec.may_write(ns):
                    await write(w, who, ns, w.marker(word), verified=spec.role == "admin")
        for spec, who in zip(principals, callers, strict=True):
            await check_principal(spec, w, who)
