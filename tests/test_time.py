"""Time, end to end: record time (`as_of` on every read and search tool, memory_history, memory_diff) and
valid time (memory_list and memory_search's valid_at, memory_retire's invalidate and outdated modes).

Everything is real: a nats-server child, DuckDB, a Qdrant Edge shard and the embedding model. One stack
serves the module; its gateway runs as the admin `ada` (an admin may lock), bound to every namespace.
The gateway's clock is a `Clock` the tests move: it decides `now` (expiry, the default valid-time moment,
the end an invalidation sets, what counts as "the future" for as_of). Record times are the log's own
(the NATS stream's timestamps), so past states are addressed by the sequence each step left at the head
of the log, and by the times the answers report.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from tests.harness import Stack, ToolFailure, start_stack

pytestmark = pytest.mark.anyio

AGENT = "ada"
MODES = ("semantic", "keyword", "hybrid")  # memory_search's modes
VOLATILE = ("accessed_at", "access_count", "as_of")  # access statistics are today's, whatever as_of says


class Clock:
    """The gateway's clock, moved by hand."""

    def __init__(self, t: datetime):
        self.t = t

    def __call__(self) -> datetime:
        return self.t

    def set(self, t: datetime) -> datetime:
        self.t = t
        return t


@dataclass
class World:
    stack: Stack
    clock: Clock

    async def __call__(self, tool: str, **args: Any) -> dict[str, Any]:
        return await self.stack.call(tool, **args)

    async def fails(self, tool: str, **args: Any) -> ToolFailure:
        with pytest.raises(ToolFailure) as exc:
            await self.stack.call(tool, **args)
        return exc.value

    async def head(self) -> int:
        return await self.stack.last_seq()


@pytest.fixture(scope="module")
def anyio_backend() -> str:  # module scope, so the shared stack below can be module scoped
    return "asyncio"


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    base: Path = tmp_path_factory.mktemp("time")
    server = EmbeddedNats(base / "nats")
    await server.start()
    stack = None
    try:
        gs = GatewaySettings(agent_id=AGENT, role="admin", namespaces=["*"], namespace="time/default")
        stack = await start_stack(base / "data", server, gs, vectors=True)
        # ahead of the wall clock, so every time the log records is in the past of `now`
        clock = Clock(datetime.now(UTC) + timedelta(hours=1))
        stack.gateway.clock = clock
        try:
            yield World(stack, clock)
        finally:
            await stack.gateway.access.flush()
    finally:
        if stack is not None:
            await stack.close()
        await server.stop()


def fresh(prefix: str = "time") -> str:
    return f"{prefix}/{uuid.uuid4().hex[:10]}"


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value)


def plain(m: dict[str, Any]) -> dict[str, Any]:
    """A memory without today's access statistics and the as_of marker."""
    return {k: v for k, v in m.items() if k not in VOLATILE}


def page(p: dict[str, Any]) -> dict[str, Any]:
    rest = {k: v for k, v in p.items() if k not in ("results", "as_of")}
    return {**rest, "results": [plain(m) for m in p["results"]]}


def stats(s: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in s.items() if k not in ("most_accessed", "as_of")}


def hits(r: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """A search answer as {id: (content, version, status, locked, demoted)} (scores move with BM25's IDF)."""
    return {h["id"]: (h["content"], h["version"], h["status"], h["locked"], h["demoted"]) for h in r["results"]}


# -- 1. a scripted history, read back at every step ------------------------------------------------------

STORE = "kb"
P1, P2 = "team/db", "team/database"  # A is created at P1, moved to P2; B is created at P2 once A is gone
BYSTANDER = "The office coffee machine is on the second floor"
C = {  # A's content by version; every version has a word of its own, and all share "quokka"
    1: "quokka alpha: the team database is PostgreSQL 14",
    2: "quokka bravo: the team database is PostgreSQL 15",
    3: "quokka charlie: the team database is PostgreSQL 16",
    4: "quokka delta: the team database is PostgreSQL 17 with two replicas",
}
C_B = "quokka echo: the team database moved to CockroachDB"
UNIQUE = {"alpha": 1, "bravo": 2, "charlie": 3, "delta": 4, "echo": None}


@dataclass
class Expect:
    """What one step left: A's state (None: not there), whether B is there."""

    name: str
    a: dict[str, Any] | None
    b: bool


@dataclass
class Step:
    name: str
    seq: int
    expect: Expect
    # the current answers right after the step (what as_of that step must reproduce)
    get_a: dict[str, Any] | None = None
    get_b: dict[str, Any] | None = None
    listed: dict[str, Any] = field(default_factory=dict)
    live: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class Script:
    ns: str
    a: str
    b: str
    bystander: str
    steps: list[Step]


async def snapshot(w: World, ns: str, name: str, expect: Expect, ids: dict[str, str]) -> Step:
    """The head of the log after a step, and the current answers there."""
    step = Step(name, await w.head(), expect)
    for key, attr in (("a", "get_a"), ("b", "get_b")):
        if key in ids:
            try:
                setattr(step, attr, await w("memory_get", id=ids[key], namespace=ns))
            except ToolFailure as exc:
                assert exc.code == "MEMORY_NOT_FOUND", exc.error
    step.listed = await w("memory_list", namespace=ns, status="any", detail="full")
    step.live = await w("memory_list", namespace=ns, detail="full")
    step.stats = await w("memory_stats", namespace=ns)
    return step


@pytest.fixture(scope="module")
async def script(world: World) -> Script:
    w, ns = world, fresh("script")
    w.clock.set(datetime.now(UTC) + timedelta(hours=1))
    ids: dict[str, str] = {}
    steps = [await snapshot(w, ns, "start", Expect("start", None, False), ids)]

    async def step(name: str, a: dict[str, Any] | None, b: bool = False, seq: int | None = None) -> None:
        s = await snapshot(w, ns, name, Expect(name, a, b), ids)
        if seq is not None:
            assert s.seq == seq, (name, s.seq, seq)
        steps.append(s)

    by = await w("memory_add", namespace=ns, content=BYSTANDER, request_id=f"{ns}-by")
    ids["by"] = by["id"]
    await step("bystander", None, seq=by["seq"])
    base = {
        "store": STORE,
        "path": P1,
        "content": C[1],
        "version": 1,
        "status": "active",
        "locked": False,
        "tags": ["db"],
        "importance": 0.5,
    }
    add = await w(
        "memory_add", namespace=ns, content=C[1], store=STORE, path=P1, kind="fact", tags=["db"], request_id=f"{ns}-1"
    )
    ids["a"] = add["id"]
    await step("create", base, seq=add["seq"])
    up = await w("memory_update", id=ids["a"], namespace=ns, content=C[2], request_id=f"{ns}-2")
    assert up["updated_fields"] == ["content"]
    await step("update 1", {**base, "content": C[2], "version": 2}, seq=up["seq"])
    up = await w("memory_update", id=ids["a"], namespace=ns, content=C[3], importance=0.9, request_id=f"{ns}-3")
    a3 = {**base, "content": C[3], "version": 3, "importance": 0.9}
    await step("update 2", a3, seq=up["seq"])
    up = await w(
        "memory_update", id=f"{STORE}:{P1}", namespace=ns, content=C[4], tags=["db", "prod"], request_id=f"{ns}-4"
    )
    a4 = {**a3, "content": C[4], "version": 4, "tags": ["db", "prod"]}
    await step("update 3", a4, seq=up["seq"])
    mv = await w("memory_move", id=ids["a"], namespace=ns, to_path=P2, request_id=f"{ns}-5")
    a5 = {**a4, "path": P2, "version": 5}
    await step("move", a5, seq=mv["seq"])
    lk = await w("memory_lock", id=ids["a"], namespace=ns, reason="source of truth", request_id=f"{ns}-6")
    assert lk["changed"] and lk["locked"] and lk["version"] == 6
    a6 = {**a5, "version": 6, "locked": True}
    await step("lock", a6)
    dp = await w(
        "memory_retire", id=f"{STORE}:{P2}", mode="deprecate", namespace=ns, reason="migrating", request_id=f"{ns}-7"
    )
    assert dp["changed"] and dp["status"] == "deprecated" and dp["version"] == 7
    await step("deprecate", {**a6, "version": 7, "status": "deprecated"})
    dl = await w("memory_retire", id=ids["a"], namespace=ns, mode="delete", reason="gone", request_id=f"{ns}-8")
    assert dl == {
        "id": ids["a"],
        "status": "deleted",
        "version": 8,
        "seq": await w.head(),
        "changed": True,
        "store": STORE,
        "path": P2,
    }
    await step("delete", None)
    re = await w("memory_add", namespace=ns, content=C_B, store=STORE, path=P2, kind="fact", request_id=f"{ns}-9")
    ids["b"] = re["id"]
    assert re["id"] != ids["a"] and re["path"] == P2
    await step("recreate", None, b=True, seq=re["seq"])
    seqs = [s.seq for s in steps]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs  # one event per step: seq - 1 is the step before
    return Script(ns, ids["a"], ids["b"], ids["by"], steps)


def check_a(got: dict[str, Any], want: dict[str, Any], where: str) -> None:
    assert {k: got[k] for k in want} == want, where


async def read_all(w: World, sc: Script, step: Step, as_of: int | str) -> dict[str, Any]:
    """Every read tool's answer as of `as_of`, normalised for comparison."""
    ns, out = sc.ns, {}

    async def get(**args: Any) -> dict[str, Any] | str:
        try:
            return plain(await w("memory_get", namespace=ns, as_of=as_of, **args))
        except ToolFailure as exc:
            return exc.code

    out["get a"] = await get(id=sc.a)
    out["get b"] = await get(id=sc.b)
    out["get by"] = await get(id=sc.bystander)
    out["get p1"] = await get(id=f"{STORE}:{P1}")
    out["get p2"] = await get(id=f"{STORE}:{P2}")
    out["list any"] = page(await w("memory_list", namespace=ns, status="any", as_of=as_of, detail="full"))
    out["list live"] = page(await w("memory_list", namespace=ns, as_of=as_of, detail="full"))
    out["list active"] = page(await w("memory_list", namespace=ns, status="active", as_of=as_of, detail="full"))
    out["list store"] = page(
        await w("memory_list", namespace=ns, store=STORE, category_path="team", as_of=as_of, detail="full")
    )
    out["stats"] = stats(await w("memory_stats", namespace=ns, as_of=as_of))
    out["kw quokka"] = hits(
        await w("memory_search", mode="keyword", namespace=ns, query="quokka", as_of=as_of, detail="full")
    )
    for word in UNIQUE:
        out[f"kw {word}"] = hits(
            await w("memory_search", mode="keyword", namespace=ns, query=word, as_of=as_of, detail="full")
        )
    out["semantic"] = hits(
        await w(
            "memory_search",
            mode="semantic",
            namespace=ns,
            query="which database does the team use",
            threshold=0.0,
            as_of=as_of,
            detail="full",
        )
    )
    out["hybrid"] = hits(
        await w("memory_search", namespace=ns, query="quokka team database", threshold=0.0, as_of=as_of, detail="full")
    )
    return out


async def test_as_of_returns_each_steps_state_by_sequence_and_by_time(world: World, script: Script) -> None:
    w, sc = world, script
    for step in sc.steps:
        e, where = step.expect, step.name
        got = await read_all(w, sc, step, step.seq)

        # memory_get, by id and by store + path: exactly the state the step left (as read right after it)
        if e.a is None:
            assert got["get a"] == "MEMORY_NOT_FOUND", where
        else:
            check_a(got["get a"], e.a, where)
            assert got["get a"] == plain(step.get_a or {}), where
            assert [h["version"] for h in got["get a"]["history"]] == list(range(e.a["version"], 0, -1))[:5], where
        if e.b:
            assert got["get b"] == plain(step.get_b or {}) and got["get b"]["content"] == C_B, where
        else:
            assert got["get b"] == "MEMORY_NOT_FOUND", where
        assert got["get by"] == (
            "MEMORY_NOT_FOUND"
            if step.name == "start"
            else plain(await w("memory_get", id=sc.bystander, namespace=sc.ns))
        ), where
        at_p1 = e.a is not None and e.a["path"] == P1
        at_p2 = e.a is not None and e.a["path"] == P2
        assert got["get p1"] == (got["get a"] if at_p1 else "MEMORY_NOT_FOUND"), where
        # P2: A once it moved there, free after the delete, B once recreated
        assert got["get p2"] == (got["get a"] if at_p2 else got["get b"] if e.b else "MEMORY_NOT_FOUND"), where

        # memory_list: the same page the step's current list gave
        assert got["list any"] == page(step.listed), where
        assert got["list live"] == page(step.live), where
        want_ids = (
            ({sc.bystander} if step.name != "start" else set())
            | ({sc.a} if e.a else set())
            | ({sc.b} if e.b else set())
        )
        assert {m["id"] for m in got["list any"]["results"]} == want_ids, where
        assert got["list any"]["total"] == len(want_ids), where
        active = want_ids - ({sc.a} if e.a and e.a["status"] != "active" else set())
        assert {m["id"] for m in got["list active"]["results"]} == active, where
        in_store = {m["id"] for m in got["list store"]["results"]}
        assert in_store == want_ids - {sc.bystander}, where
        if e.a:
            (item,) = [m for m in got["list any"]["results"] if m["id"] == sc.a]
            check_a(item, e.a, where)

        # memory_stats: totals and lifecycle counts
        assert got["stats"] == stats(step.stats), where
        s = got["stats"]
        deprecated = int(bool(e.a and e.a["status"] == "deprecated"))
        assert (s["total"], s["active"], s["deprecated"], s["archived"]) == (
            len(want_ids),
            len(want_ids) - deprecated,
            deprecated,
            0,
        ), where

        # search, in every mode: the memories there then, as they were then
        def shape(state: dict[str, Any]) -> tuple[Any, ...]:
            return (state["content"], state["version"], state["status"], state["locked"], state["status"] != "active")

        a_hit = {sc.a: shape(e.a)} if e.a else {}
        b_hit = {sc.b: (C_B, 1, "active", False, False)} if e.b else {}
        by_hit = {sc.bystander: (BYSTANDER, 1, "active", False, False)} if step.name != "start" else {}
        assert got["kw quokka"] == {**a_hit, **b_hit}, where
        for word, version in UNIQUE.items():
            if word == "echo":
                assert got[f"kw {word}"] == b_hit, (where, word)
            else:
                present = e.a is not None and e.a["content"] == C[version]  # type: ignore[index]
                assert got[f"kw {word}"] == (a_hit if present else {}), (where, word)
        assert got["semantic"] == {**a_hit, **b_hit, **by_hit}, where
        assert got["hybrid"] == {**a_hit, **b_hit, **by_hit}, where

        # as_of by time: the time the answer reports for the sequence gives the same answers
        reported = (await w("memory_list", namespace=sc.ns, as_of=step.seq))["as_of"]
        assert reported["seq"] == step.seq, where
        if reported.get("time") is None:  # (nothing recorded yet at that sequence)
            continue
        t = reported["time"]
        assert ts(t) <= w.clock(), where
        again = await w("memory_list", namespace=sc.ns, status="any", as_of=t, detail="full")
        assert again["as_of"]["seq"] == step.seq and ts(again["as_of"]["time"]) == ts(t), (where, again["as_of"])
        by_time = await read_all(w, sc, step, t)
        assert by_time == got, where
        # the same instant written with another offset
        for offset in (2, -5):
            variant = ts(t).astimezone(timezone(timedelta(hours=offset))).isoformat()
            assert (
                page(await w("memory_list", namespace=sc.ns, status="any", as_of=variant, detail="full"))
                == got["list any"]
            )

    # the current answers are the last step's
    last = sc.steps[-1]
    assert page(await w("memory_list", namespace=sc.ns, status="any", detail="full")) == page(last.listed)
    with pytest.raises(ToolFailure) as gone:
        await w("memory_get", id=sc.a, namespace=sc.ns)
    assert gone.value.code == "MEMORY_NOT_FOUND"


async def test_as_of_a_sequence_as_a_string_and_memory_recent(world: World, script: Script) -> None:
    """A sequence may come as a digit string; the recent list (memory_list, newest first) honours as_of too."""
    w, sc = world, script
    by_name = {s.name: s for s in sc.steps}
    move = by_name["move"]
    assert plain(await w("memory_get", id=sc.a, namespace=sc.ns, as_of=str(move.seq))) == plain(move.get_a or {})
    recent = await w("memory_list", namespace=sc.ns, as_of=move.seq, limit=10)
    assert [(m["id"], m.get("path"), m["content"]) for m in recent["results"]] == [
        (sc.a, P2, C[4]),
        (sc.bystander, None, BYSTANDER),
    ]
    assert recent["as_of"]["seq"] == move.seq
    recent = await w("memory_list", namespace=sc.ns, as_of=by_name["delete"].seq, limit=10)
    assert [m["id"] for m in recent["results"]] == [sc.bystander]
    # a version and as_of at once is refused
    err = await w.fails("memory_get", id=sc.b, namespace=sc.ns, as_of=move.seq, version=1)
    assert (err.code, err.field) == ("INVALID_INPUT", "as_of")


async def test_expiry_is_judged_at_the_as_of_moment(world: World) -> None:
    w, ns = world, fresh("expiry")
    real = datetime.now(UTC)
    w.clock.set(real + timedelta(minutes=1))
    expires = real + timedelta(minutes=10)  # in the future of the clock
    x = await w(
        "memory_add", namespace=ns, content="quokka ephemeral fact that expires soon", expires_at=expires.isoformat()
    )
    keep = await w("memory_add", namespace=ns, content="quokka durable fact without expiry")
    seq_x = x["seq"]
    got = await w("memory_get", id=x["id"], namespace=ns)
    assert got["expired"] is False and ts(got["expires_at"]) == expires

    w.clock.set(expires + timedelta(minutes=5))  # now it has expired
    assert (await w.fails("memory_get", id=x["id"], namespace=ns)).code == "MEMORY_NOT_FOUND"
    assert (await w("memory_get", id=x["id"], namespace=ns, include_expired=True))["expired"] is True
    assert [m["id"] for m in (await w("memory_list", namespace=ns))["results"]] == [keep["id"]]

    # as of a sequence recorded before it expired: visible, not expired
    then = await w("memory_get", id=x["id"], namespace=ns, as_of=seq_x)
    assert then["expired"] is False and ts(then["as_of"]["time"]) < expires
    listed = await w("memory_list", namespace=ns, as_of=keep["seq"])
    assert {m["id"] for m in listed["results"]} == {x["id"], keep["id"]}
    assert set(
        hits(await w("memory_search", mode="keyword", namespace=ns, query="quokka", as_of=keep["seq"], detail="full"))
    ) == {x["id"], keep["id"]}
    assert (await w("memory_stats", namespace=ns, as_of=keep["seq"]))["expired"] == 0
    # ... also by the time the log recorded it
    recorded = then["as_of"]["time"]
    assert (await w("memory_get", id=x["id"], namespace=ns, as_of=recorded))["expired"] is False

    # as of a later time, after it expired: hidden unless include_expired
    after = (expires + timedelta(minutes=1)).isoformat()
    assert (await w.fails("memory_get", id=x["id"], namespace=ns, as_of=after)).code == "MEMORY_NOT_FOUND"
    old = await w("memory_get", id=x["id"], namespace=ns, as_of=after, include_expired=True)
    assert old["expired"] is True and old["as_of"]["seq"] == keep["seq"] and ts(old["as_of"]["time"]) == ts(after)
    assert [m["id"] for m in (await w("memory_list", namespace=ns, as_of=after))["results"]] == [keep["id"]]
    every = await w("memory_list", namespace=ns, as_of=after, include_expired=True, detail="full")
    assert {m["id"]: m["expired"] for m in every["results"]} == {x["id"]: True, keep["id"]: False}
    for mode in MODES:
        args: dict[str, Any] = {
            "namespace": ns,
            "query": "quokka fact",
            "threshold": 0.0,
            "as_of": after,
            "mode": mode,
            "detail": "full",
        }
        assert set(hits(await w("memory_search", **args))) == {keep["id"]}, mode
        assert set(hits(await w("memory_search", **args, include_expired=True))) == {x["id"], keep["id"]}, mode
    s = await w("memory_stats", namespace=ns, as_of=after)
    assert (s["total"], s["expired"]) == (2, 1)
    # a time between creation and expiry still sees it
    before = (expires - timedelta(seconds=1)).isoformat()
    assert (await w("memory_get", id=x["id"], namespace=ns, as_of=before))["expired"] is False


# -- 2. valid time at its boundaries, time zones, malformed times -------------------------------------------

T1 = datetime(2030, 3, 1, tzinfo=UTC)
T2 = datetime(2030, 6, 1, tzinfo=UTC)
US = timedelta(microseconds=1)


async def test_valid_time_boundaries_open_ends_and_time_zones(world: World) -> None:
    w, ns = world, fresh("valid")
    ids = {}
    # the window is written with a +02:00 offset: stored, and answered, in UTC
    ids["window"] = (
        await w(
            "memory_add",
            namespace=ns,
            content="window",
            valid_from="2030-03-01T02:00:00+02:00",
            valid_until="2030-05-31T19:00:00-05:00",
        )
    )["id"]
    ids["from"] = (await w("memory_add", namespace=ns, content="from only", valid_from=T1.isoformat()))["id"]
    ids["until"] = (await w("memory_add", namespace=ns, content="until only", valid_until="2030-06-01T00:00:00Z"))["id"]
    ids["open"] = (await w("memory_add", namespace=ns, content="open"))["id"]
    got = await w("memory_get", id=ids["window"], namespace=ns)
    assert (ts(got["valid_from"]), ts(got["valid_until"])) == (T1, T2)
    assert ts(got["valid_from"]).utcoffset() == timedelta(0)

    async def valid(at: Any) -> set[str]:
        at = w.clock() if at is None else at  # without a time: valid now, by the gateway's clock
        r = await w("memory_list", namespace=ns, valid_at=at if isinstance(at, str) else at.isoformat())
        back = {v: k for k, v in ids.items()}
        assert r["total"] == len(r["results"])
        return {back[m["id"]] for m in r["results"]}

    everything = {"window", "from", "until", "open"}
    cases: list[tuple[Any, set[str]]] = [
        (T1 - US, {"until", "open"}),  # just before valid_from
        (T1, everything),  # valid_from is inclusive
        ("2030-03-01T02:00:00+02:00", everything),  # the same instant, another offset
        ("2030-02-28T19:00:00-05:00", everything),
        ("2030-03-01T00:00:00", everything),  # naive: UTC
        ("2030-03-01T00:00:00Z", everything),
        ("2030-02-28T23:59:59.999999Z", {"until", "open"}),
        ("2030-03-01T01:59:59.999999+02:00", {"until", "open"}),
        (T2 - US, everything),  # just before valid_until
        (T2, {"from", "open"}),  # valid_until is exclusive
        ("2030-06-01T02:00:00+02:00", {"from", "open"}),
        ("2030-05-31T23:59:59.999999", everything),  # naive, one microsecond before
        (datetime(1970, 1, 1, tzinfo=UTC), {"until", "open"}),  # open start
        (datetime(2999, 1, 1, tzinfo=UTC), {"from", "open"}),  # open end
    ]
    for at, want in cases:
        assert await valid(at) == want, at
    # without `at`: the gateway's clock
    w.clock.set(T1 + timedelta(days=1))
    assert await valid(None) == everything
    w.clock.set(T2)
    assert await valid(None) == {"from", "open"}
    w.clock.set(datetime.now(UTC) + timedelta(hours=1))
    assert await valid(None) == {"until", "open"}
    # filters and paging
    r = await w("memory_list", namespace=ns, valid_at=T1.isoformat(), limit=2)
    assert (r["total"], len(r["results"]), r["has_more"]) == (4, 2, True)
    r2 = await w("memory_list", namespace=ns, valid_at=T1.isoformat(), limit=2, offset=2)
    assert {m["id"] for m in r["results"]} | {m["id"] for m in r2["results"]} == set(ids.values())
    assert r2["has_more"] is False
    assert {
        m["id"] for m in (await w("memory_list", namespace=ns, valid_at=T1.isoformat(), created_by=AGENT))["results"]
    } == set(ids.values())
    assert (await w("memory_list", namespace=ns, valid_at=T1.isoformat(), created_by="nobody"))["results"] == []


async def test_malformed_or_impossible_times_are_refused_naming_the_field(world: World) -> None:
    w, ns = world, fresh("badtime")
    mid = (await w("memory_add", namespace=ns, content="quokka something"))["id"]
    head = await w.head()
    future = (w.clock() + timedelta(minutes=5)).isoformat()
    reads: list[tuple[str, dict[str, Any]]] = [
        ("memory_get", {"id": mid}),
        ("memory_list", {}),
        ("memory_stats", {}),
        *(("memory_search", {"query": "quokka", "mode": mode}) for mode in MODES),
    ]
    for tool, args in reads:
        for bad, says in (
            ("yesterday", "neither an ISO 8601 time"),
            ("2026-13-45T99:00:00Z", "neither"),
            (head + 1000, "beyond the head"),
            (str(head + 1), "beyond the head"),
            (future, "in the future"),
        ):
            err = await w.fails(tool, namespace=ns, as_of=bad, **args)
            assert (err.code, err.field) == ("INVALID_INPUT", "as_of"), (tool, bad, err.error)
            assert says in err.error["message"], (tool, bad, err.error)
    # the head itself and the clock's own now are fine
    assert (await w("memory_get", id=mid, namespace=ns, as_of=head))["as_of"]["seq"] == head
    assert (await w("memory_list", namespace=ns, as_of=w.clock().isoformat()))["total"] == 1

    # a bad datetime argument fails in the argument validation layer, with the field named
    for tool, args in (
        ("memory_list", {"valid_at": "not a time"}),
        ("memory_list", {"valid_at": "2030-02-30T00:00:00Z"}),
        ("memory_add", {"content": "x", "valid_from": "soon"}),
        ("memory_add", {"content": "x", "expires_at": "tomorrow"}),
        ("memory_update", {"id": mid, "valid_until": "later"}),
    ):
        err = await w.fails(tool, namespace=ns, **args)
        bad_field = next(k for k in args if k not in ("id", "content"))
        assert (err.code, err.field) == ("INVALID_INPUT", bad_field), (tool, err.error)
        assert err.error["message"].startswith(f"{bad_field}: "), err.error


async def test_a_negative_sequence_is_refused(world: World) -> None:
    w, ns = world, fresh("negative")
    await w("memory_add", namespace=ns, content="quokka present")
    assert (await w.fails("memory_list", namespace=ns, as_of="-1")).field == "as_of"  # the string form is refused
    err = await w.fails("memory_list", namespace=ns, as_of=-1)  # the integer answers an empty past instead
    assert (err.code, err.field) == ("INVALID_INPUT", "as_of")


# -- 3. invalidate and mark outdated ------------------------------------------------------------------------


async def test_invalidate_and_mark_outdated(world: World) -> None:
    w, ns = world, fresh("invalid")
    now = w.clock.set(datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1))
    old = (await w("memory_add", namespace=ns, content="Deploys to production happen on Fridays"))["id"]
    new = (await w("memory_add", namespace=ns, content="Deploys to production happen on Thursdays"))["id"]
    elsewhere = (await w("memory_add", namespace=fresh("invalid-other"), content="another namespace"))["id"]
    before = await w.head()

    # superseded_by must name an existing memory of this namespace (and not the memory itself)
    for bad in (str(uuid.uuid4()), elsewhere, old):
        err = await w.fails("memory_retire", id=old, mode="invalidate", namespace=ns, superseded_by=bad)
        assert (err.code, err.field) == ("INVALID_INPUT", "superseded_by"), (bad, err.error)
    assert await w.head() == before  # nothing was written

    inv = await w(
        "memory_retire",
        id=old,
        mode="invalidate",
        namespace=ns,
        reason="moved to Thursdays",
        superseded_by=new,
        request_id=f"{ns}-inv",
    )
    assert inv["changed"] is True and inv["version"] == 2 and ts(inv["valid_until"]) == now
    after = await w.head()
    assert after == before + 1
    got = await w("memory_get", id=old, namespace=ns)
    assert (ts(got["valid_until"]), got["superseded_by"], got["invalid_reason"], got["status"]) == (
        now,
        new,
        "moved to Thursdays",
        "active",
    )

    # valid time: gone now, valid a moment before the end
    assert {m["id"] for m in (await w("memory_list", namespace=ns, valid_at=w.clock().isoformat()))["results"]} == {new}
    assert {m["id"] for m in (await w("memory_list", namespace=ns, valid_at=(now - US).isoformat()))["results"]} == {
        old,
        new,
    }
    # record time: as of before the invalidation it had no end
    then = await w("memory_get", id=old, namespace=ns, as_of=before)
    assert (then.get("valid_until"), then.get("superseded_by"), then.get("invalid_reason")) == (None, None, None)
    assert then["version"] == 1
    listed = await w("memory_list", namespace=ns, as_of=before)
    assert {m["id"]: m.get("valid_until") for m in listed["results"]} == {old: None, new: None}
    # still readable and listed (soft)
    assert {m["id"] for m in (await w("memory_list", namespace=ns))["results"]} == {old, new}

    # search: still found, demoted below the valid one; as of before, not demoted
    for mode in MODES:
        r = await w(
            "memory_search",
            mode=mode,
            namespace=ns,
            query="which day do production deploys happen",
            threshold=0.0,
            detail="full",
        )
        assert [(h["id"], h["demoted"]) for h in r["results"]] == [(new, False), (old, True)], mode
        r = await w(
            "memory_search",
            mode=mode,
            namespace=ns,
            query="which day do production deploys happen",
            threshold=0.0,
            as_of=before,
            detail="full",
        )
        assert {h["id"]: h["demoted"] for h in r["results"]} == {new: False, old: False}, mode

    # the history shows it
    hist = await w("memory_history", id=old, namespace=ns)
    last = hist["results"][-1]
    assert (last["event"], last["version"], last["seq"], last["request_id"], last["agent_id"]) == (
        "memory_invalidated",
        2,
        after,
        f"{ns}-inv",
        AGENT,
    )
    assert last["changed"] == ["valid_until", "invalid_reason", "superseded_by"]

    # idempotent: again (even later) changes nothing
    w.clock.set(now + timedelta(minutes=5))
    again = await w("memory_retire", id=old, mode="invalidate", namespace=ns, reason="again")
    assert again["changed"] is False and again["version"] == 2 and ts(again["valid_until"]) == now
    assert await w.head() == after

    # mark outdated: a reason is required
    for args in ({}, {"reason": ""}):
        err = await w.fails("memory_retire", id=new, mode="outdated", namespace=ns, **args)
        assert (err.code, err.field) == ("INVALID_INPUT", "reason"), err.error
    later = w.clock()
    out = await w("memory_retire", id=new, mode="outdated", namespace=ns, reason="we deploy continuously now")
    assert out["changed"] is True and ts(out["valid_until"]) == later
    got = await w("memory_get", id=new, namespace=ns)
    assert (got["invalid_reason"], got.get("superseded_by")) == ("we deploy continuously now", None)
    assert (await w("memory_list", namespace=ns, valid_at=w.clock().isoformat()))["results"] == []
    assert {m["id"] for m in (await w("memory_list", namespace=ns, valid_at=(later - US).isoformat()))["results"]} == {
        new
    }
    hist = await w("memory_history", id=new, namespace=ns)
    assert [v["event"] for v in hist["results"]] == ["memory_created", "memory_invalidated"]
    assert (await w("memory_retire", id=new, mode="outdated", namespace=ns, reason="again"))["changed"] is False

    # a memory cannot end before it begins; an unknown memory is not found
    future = (
        await w(
            "memory_add", namespace=ns, content="valid next year", valid_from=(later + timedelta(days=365)).isoformat()
        )
    )["id"]
    assert (await w.fails("memory_retire", id=future, mode="invalidate", namespace=ns)).code == "INVALID_STATE"
    assert (
        await w.fails("memory_retire", id=str(uuid.uuid4()), mode="invalidate", namespace=ns)
    ).code == "MEMORY_NOT_FOUND"


async def test_superseded_by_that_is_not_an_id_names_superseded_by(world: World) -> None:
    w, ns = world, fresh("invalid-id")
    mid = (await w("memory_add", namespace=ns, content="something"))["id"]
    err = await w.fails("memory_retire", id=mid, mode="invalidate", namespace=ns, superseded_by="not-a-uuid")
    assert (err.code, err.field) == ("INVALID_INPUT", "superseded_by"), err.error


# -- 4. history and diff -------------------------------------------------------------------------------------

EVENTS = [
    "memory_created",
    "memory_updated",
    "memory_updated",
    "memory_updated",
    "memory_moved",
    "memory_locked",
    "memory_deprecated",
    "memory_deleted",
]
CHANGED = [
    ["created"],
    ["content"],
    ["content", "importance"],
    ["content", "tags"],
    ["path"],
    ["locked", "lock_reason"],
    ["status", "status_reason"],
    ["deleted"],
]


async def test_history_lists_every_version_of_a_deleted_memory(world: World, script: Script) -> None:
    w, sc = world, script
    writes = [s for s in sc.steps if s.name not in ("start", "bystander", "recreate")]
    h = await w("memory_history", id=sc.a, namespace=sc.ns)
    assert (h["id"], h["total"], h["has_more"]) == (sc.a, 8, False)
    vs = h["results"]
    assert [v["version"] for v in vs] == list(range(1, 9))
    assert [v["event"] for v in vs] == EVENTS
    assert [v["changed"] for v in vs] == CHANGED
    assert [v["seq"] for v in vs] == [s.seq for s in writes]
    # each interval ends where the next begins
    assert [v.get("seq_to") for v in vs] == [v["seq"] for v in vs[1:]] + [None]
    assert [v["request_id"] for v in vs] == [f"{sc.ns}-{i}" for i in range(1, 9)]
    assert {v["agent_id"] for v in vs} == {AGENT}
    assert [v["deleted"] for v in vs] == [False] * 7 + [True]
    times = [ts(v["recorded_at"]) for v in vs]
    assert times == sorted(times)
    assert all(v.get("memory") is None for v in vs)
    # with content: each version's memory as it left it
    full = (await w("memory_history", id=sc.a, namespace=sc.ns, include_content=True))["results"]
    by_step = {s.name: s for s in sc.steps}
    for v, s in zip(full[:7], writes[:7], strict=True):
        want = plain(s.get_a or {})
        got = plain(v["memory"])
        assert {k: got[k] for k in ("content", "path", "version", "status", "locked", "tags", "importance", "seq")} == {
            k: want[k] for k in ("content", "path", "version", "status", "locked", "tags", "importance", "seq")
        }
    assert full[7]["deleted"] and full[7]["memory"]["content"] == C[4]
    assert by_step["delete"].seq == vs[7]["seq"]

    # paging: the first version on a page still says what it changed from the one before
    p = await w("memory_history", id=sc.a, namespace=sc.ns, limit=3, offset=2)
    assert [v["version"] for v in p["results"]] == [3, 4, 5] and p["has_more"] is True and p["total"] == 8
    assert [v["changed"] for v in p["results"]] == CHANGED[2:5]
    p = await w("memory_history", id=sc.a, namespace=sc.ns, limit=5, offset=6)
    assert [v["version"] for v in p["results"]] == [7, 8] and p["has_more"] is False
    assert [v["changed"] for v in p["results"]] == CHANGED[6:]
    p = await w("memory_history", id=sc.a, namespace=sc.ns, limit=2, offset=8)
    assert p["results"] == [] and p["has_more"] is False
    # the recreated memory at the same path has a history of its own
    hb = await w("memory_history", id=sc.b, namespace=sc.ns)
    assert [(v["version"], v["event"], v["seq"], v.get("seq_to")) for v in hb["results"]] == [
        (1, "memory_created", by_step["recreate"].seq, None)
    ]
    # unknown memory, other namespace
    assert (await w.fails("memory_history", id=str(uuid.uuid4()), namespace=sc.ns)).code == "MEMORY_NOT_FOUND"
    assert (await w.fails("memory_history", id=sc.a, namespace=fresh())).code == "MEMORY_NOT_FOUND"


async def test_diff_between_versions(world: World, script: Script) -> None:
    w, sc = world, script
    d = await w("memory_diff", id=sc.a, namespace=sc.ns, from_version=1)  # to: the latest (the state before deletion)
    assert (d["from_version"], d["to_version"]) == (1, 7)
    changes = {c["field"]: (c.get("before"), c.get("after")) for c in d["changes"]}
    assert changes == {
        "content": (C[1], C[4]),
        "path": (P1, P2),
        "tags": (["db"], ["db", "prod"]),
        "importance": (0.5, 0.9),
        "status": ("active", "deprecated"),
        "status_reason": (None, "migrating"),
        "locked": (False, True),
        "lock_reason": (None, "source of truth"),
    }
    text = d["content_diff"]
    assert "--- version 1" in text and "+++ version 7" in text
    assert f"-{C[1]}" in text and f"+{C[4]}" in text

    d = await w("memory_diff", id=sc.a, namespace=sc.ns, from_version=2, to_version=3)
    assert [(c["field"], c["before"], c["after"]) for c in d["changes"]] == [
        ("content", C[2], C[3]),
        ("importance", 0.5, 0.9),
    ]
    d = await w("memory_diff", id=sc.a, namespace=sc.ns, from_version=5, to_version=6)  # a lock: no content change
    assert [c["field"] for c in d["changes"]] == ["locked", "lock_reason"] and d.get("content_diff") is None
    d = await w("memory_diff", id=sc.a, namespace=sc.ns, from_version=4, to_version=2)  # backwards works too
    assert [(c["field"], c["before"], c["after"]) for c in d["changes"]] == [
        ("content", C[4], C[2]),
        ("tags", ["db", "prod"], ["db"]),
        ("importance", 0.9, 0.5),
    ]
    d = await w("memory_diff", id=sc.b, namespace=sc.ns, from_version=1)
    assert (d["to_version"], d["changes"], d.get("content_diff")) == (1, [], None)

    for args, fld in (
        ({"from_version": 99}, "from_version"),
        ({"from_version": 1, "to_version": 8}, "to_version"),
        ({"from_version": 1, "to_version": 42}, "to_version"),
        ({"from_version": 0}, "from_version"),
        ({"from_version": 1, "to_version": 0}, "to_version"),
    ):
        err = await w.fails("memory_diff", id=sc.a, namespace=sc.ns, **args)
        assert (err.code, err.field) == ("INVALID_INPUT", fld), (args, err.error)
    assert (
        await w.fails("memory_diff", id=str(uuid.uuid4()), namespace=sc.ns, from_version=1)
    ).code == "MEMORY_NOT_FOUND"


async def test_history_and_diff_take_store_path_as_every_one_memory_tool_does(world: World) -> None:
    """Issue 28, item 2: memory_history and memory_diff refused `store:path` ("id: must be a UUID")."""
    w, ns = world, fresh("ref")
    made = await w("memory_add", namespace=ns, content="v1 of the runbook", store="ops", path="runbooks/db")
    await w("memory_update", id="ops:runbooks/db", namespace=ns, content="v2 of the runbook")
    by_path = await w("memory_history", id="ops:runbooks/db", namespace=ns)
    by_id = await w("memory_history", id=made["id"], namespace=ns)
    assert by_path == by_id and by_path["id"] == made["id"] and by_path["total"] == 2
    d = await w("memory_diff", id="ops:runbooks/db", namespace=ns, from_version=1)
    assert (d["id"], d["to_version"]) == (made["id"], 2)
    assert [c["field"] for c in d["changes"]] == ["content"]
    for tool, extra in (("memory_history", {}), ("memory_diff", {"from_version": 1})):
        err = await w.fails(tool, id="ops:runbooks/none", namespace=ns, **extra)
        assert err.code == "MEMORY_NOT_FOUND" and "ops:runbooks/none" in err.error["message"], err.error
        err = await w.fails(tool, id="not-a-uuid", namespace=ns, **extra)
        assert (err.code, err.field) == ("INVALID_INPUT", "id"), err.error
    described = {t.name: t for t in (await w.stack.client.list_tools()).tools}
    for tool in ("memory_history", "memory_diff"):
        assert "store:path" in described[tool].input_schema["properties"]["id"]["description"]
