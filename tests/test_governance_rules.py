"""Governance rules end to end: principals, namespace scopes, the context object, roles and lifecycle.

One real stack (nats-server + projector + auditor) is shared by the module; its own gateway runs as
the admin `alice` of organization `acme`. Further gateways run on the same NATS connection, each as
one principal, driven through an in-process MCP client:

    alice   admin  org acme    acme/*                          (the stack's gateway)
    bob     agent  org acme    acme/*
    carol   agent  org acme    acme/web, read-only acme/docs
    dave    agent  org globex  globex/*
    erin    admin  org globex  globex/*
    strict  bob again, on a gateway with require_context=True

Every rule gets an allowed and a forbidden case; every refused call must leave the event stream's last
sequence where it was (nothing written). Tests write into their own namespace (acme/<fresh repo>) or
their own store, so the shared stack does not couple them.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mneme.app import compose
from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from schemas import subjects as S
from schemas.access import AccessDenied, decode_access
from services.gateway.gateway import DENIALS, Gateway
from services.gateway.server import build_server
from tests.harness import Stack, ToolFailure, result_of, start_stack

pytestmark = pytest.mark.anyio


# -- principals and their gateways --------------------------------------------------------------


@dataclass
class Caller:
    """One principal's in-process MCP client (its own gateway on the shared NATS connection)."""

    name: str
    gateway: Gateway
    client: Client

    async def __call__(self, tool: str, **args: Any) -> dict[str, Any]:
        return result_of(await self.client.call_tool(tool, args))


async def add_caller(stack: Stack, es: AsyncExitStack, name: str, **settings: Any) -> Caller:
    settings.setdefault("context", "optional")  # the native tools offer the context object (checked below)
    gs = GatewaySettings(agent_id=name, consistency="linearizable", **settings)
    gw = compose.gateway(stack.nc, gs)
    es.push_async_callback(gw.access.flush)
    client = await es.enter_async_context(Client(build_server(gw)))
    return Caller(name, gw, client)


@dataclass
class World:
    stack: Stack
    alice: Caller
    bob: Caller
    carol: Caller
    dave: Caller
    erin: Caller
    strict: Caller
    extra: list[Caller] = field(default_factory=list)

    async def last_seq(self) -> int:
        return await self.stack.last_seq()

    async def access_seq(self) -> int:
        return (await self.stack.nc.jetstream().stream_info(S.ACCESS_STREAM)).state.last_seq

    async def flush(self) -> None:
        """Wait for every gateway's background access records (so counting them is exact)."""
        for c in (self.alice, self.bob, self.carol, self.dave, self.erin, self.strict, *self.extra):
            await c.gateway.access.flush()


@pytest.fixture(scope="module")
def anyio_backend() -> str:  # module scope, so the shared stack below can be module scoped
    return "asyncio"


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    base: Path = tmp_path_factory.mktemp("governance")
    server = EmbeddedNats(base / "nats")
    await server.start()
    stack = None
    try:
        admin = GatewaySettings(
            agent_id="alice",
            role="admin",
            organization="acme",
            namespaces=["acme/*"],
            namespace="acme/web",
            consistency="linearizable",
            context="optional",
        )
        stack = await start_stack(base / "data", server, gs=admin)
        async with AsyncExitStack() as es:
            es.push_async_callback(stack.gateway.access.flush)
            alice = Caller("alice", stack.gateway, stack.client)
            bob = await add_caller(stack, es, "bob", organization="acme", namespaces=["acme/*"], namespace="acme/web")
            carol = await add_caller(
                stack,
                es,
                "carol",
                organization="acme",
                namespaces=["acme/web"],
                read_only=["acme/docs"],
                namespace="acme/web",
            )
            dave = await add_caller(
                stack, es, "dave", organization="globex", namespaces=["globex/*"], namespace="globex/web"
            )
            erin = await add_caller(
                stack, es, "erin", role="admin", organization="globex", namespaces=["globex/*"], namespace="globex/web"
            )
            strict = await add_caller(
                stack, es, "bob", organization="acme", namespaces=["acme/*"], namespace="acme/web", require_context=True
            )
            yield World(stack, alice, bob, carol, dave, erin, strict)
    finally:
        if stack is not None:
            await stack.close()
        await server.stop()


def fresh(prefix: str = "r") -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def marker() -> str:
    return f"marker{uuid.uuid4().hex}"


async def refused(w: World, caller: Caller, tool: str, code: str, **args: Any) -> ToolFailure:
    """The call fails with `code` and writes nothing to the event log; a denial leaves one access record
    (AccessDenied, naming the caller and the code), a wrong id or bad input none."""
    await w.flush()
    before, access_before = await w.last_seq(), await w.access_seq()
    with pytest.raises(ToolFailure) as err:
        await caller(tool, **args)
    assert err.value.code == code, (tool, args, err.value.error)
    assert await w.last_seq() == before, f"refused {tool} wrote to the log"
    await w.flush()
    access_after = await w.access_seq()
    if code in DENIALS:
        assert access_after == access_before + 1, f"denied {tool} left {access_after - access_before} access records"
        msg = await w.stack.nc.jetstream().get_msg(S.ACCESS_STREAM, seq=access_after)
        assert msg.data is not None
        rec = decode_access(msg.data)
        assert isinstance(rec, AccessDenied), rec
        assert (rec.agent_id, rec.code, rec.operation) == (caller.gateway.principal.agent_id, code, tool)
    else:
        assert access_after == access_before, f"{tool} failing with {code} left an access record"
    return err.value


def no_leak(err: ToolFailure, *secrets: str) -> None:
    text = repr(err.error)
    for s in secrets:
        assert s not in text, f"error leaks {s!r}: {text}"


# -- verification on create ------------------------------------------------------------------------


async def test_agent_memories_start_unverified_admin_memories_verified(world: World) -> None:
    ns = f"acme/{fresh()}"
    by_agent = await world.bob("memory_add", content="agent wrote this", namespace=ns)
    by_admin = await world.alice("memory_add", content="admin wrote this", namespace=ns)
    got_agent = await world.bob("memory_get", id=by_agent["id"], namespace=ns)
    got_admin = await world.bob("memory_get", id=by_admin["id"], namespace=ns)
    assert got_agent["verification"] == "unverified" and got_agent["created_by"] == "bob"
    assert got_admin["verification"] == "verified" and got_admin["created_by"] == "alice"
    assert got_agent["locked"] is False and got_agent["status"] == "active"


# -- verify / lock / unlock: admins only -------------------------------------------------------------


async def test_verify_lock_unlock_are_for_admins(world: World) -> None:
    ns = f"acme/{fresh()}"
    mid = (await world.bob("memory_add", content="to be governed", namespace=ns))["id"]
    for tool in ("memory_verify", "memory_lock", "memory_unlock"):
        await refused(world, world.bob, tool, "PERMISSION_ERROR", id=mid, namespace=ns)
    got = await world.bob("memory_get", id=mid, namespace=ns)
    assert (got["version"], got["verification"], got["locked"]) == (1, "unverified", False)

    v = await world.alice("memory_verify", id=mid, namespace=ns)
    assert (v["verification"], v["changed"], v["version"]) == ("verified", True, 2)
    before = await world.last_seq()
    again = await world.alice("memory_verify", id=mid, namespace=ns)
    assert (again["changed"], again["version"]) == (False, 2)
    assert await world.last_seq() == before, "a no-op verify wrote an event"

    lk = await world.alice("memory_lock", id=mid, namespace=ns, reason="reviewed")
    assert (lk["locked"], lk["changed"], lk["version"]) == (True, True, 3)
    await refused(world, world.bob, "memory_unlock", "PERMISSION_ERROR", id=mid, namespace=ns)
    await refused(world, world.bob, "memory_verify", "PERMISSION_ERROR", id=mid, namespace=ns)
    un = await world.alice("memory_unlock", id=mid, namespace=ns)
    assert (un["locked"], un["changed"], un["version"]) == (False, True, 4)
    got = await world.bob("memory_get", id=mid, namespace=ns)
    assert (got["version"], got["verification"], got["locked"]) == (4, "verified", False)


# -- locked memories ------------------------------------------------------------------------------


async def test_locked_memory_refuses_agent_changes_and_admin_may_change_it(world: World) -> None:
    ns = f"acme/{fresh()}"
    mid = (await world.bob("memory_add", content="original text", namespace=ns, store="s", path="a/locked"))["id"]
    await world.alice("memory_lock", id=mid, namespace=ns, reason="frozen")

    await refused(world, world.bob, "memory_update", "MEMORY_LOCKED", id=mid, namespace=ns, content="agent edit")
    await refused(world, world.bob, "memory_update", "MEMORY_LOCKED", namespace=ns, id="s:a/locked", tags=["x"])
    await refused(world, world.bob, "memory_move", "MEMORY_LOCKED", id=mid, namespace=ns, to_path="a/moved")
    await refused(world, world.bob, "memory_retire", "MEMORY_LOCKED", id=mid, namespace=ns, mode="archive")
    await refused(world, world.bob, "memory_retire", "MEMORY_LOCKED", id=mid, namespace=ns, mode="delete")
    await refused(
        world, world.bob, "memory_retire", "MEMORY_LOCKED", id=mid, namespace=ns, mode="deprecate", reason="stale"
    )
    got = await world.bob("memory_get", id=mid, namespace=ns)  # still readable, unchanged
    assert (got["content"], got["locked"], got["version"], got["path"]) == ("original text", True, 2, "a/locked")
    assert got["status"] == "active" and got.get("status_reason") is None and got["lock_reason"] == "frozen"

    # an admin may change a locked memory
    up = await world.alice("memory_update", id=mid, namespace=ns, content="admin edit")
    assert up["changed"] is True
    got = await world.alice("memory_get", id=mid, namespace=ns)
    assert got["content"] == "admin edit" and got["locked"] is True
    mv = await world.alice("memory_move", id=mid, namespace=ns, to_path="a/by-admin")
    assert mv["path"] == "a/by-admin"
    await world.alice("memory_unlock", id=mid, namespace=ns)
    # unlocked: the agent may change it again
    up = await world.bob("memory_update", id=mid, namespace=ns, content="agent edit after unlock")
    assert up["version"] == 6 and (await world.bob("memory_get", id=mid, namespace=ns))["updated_by"] == "bob"

    # an admin may delete a locked memory
    other = (await world.bob("memory_add", content="locked, then deleted", namespace=ns))["id"]
    await world.alice("memory_lock", id=other, namespace=ns)
    assert (await world.alice("memory_retire", id=other, namespace=ns, mode="archive"))["status"] == "archived"
    await refused(world, world.bob, "memory_restore", "MEMORY_LOCKED", id=other, namespace=ns)
    assert (await world.alice("memory_retire", id=other, namespace=ns, mode="delete"))["status"] == "deleted"
    await refused(world, world.bob, "memory_get", "MEMORY_NOT_FOUND", id=other, namespace=ns)


# -- protected kinds ---------------------------------------------------------------------------------


async def test_agents_cannot_write_protected_kinds(world: World) -> None:
    ns = f"acme/{fresh()}"
    for kind in ("business_rule", "system_constraint"):
        err = await refused(world, world.bob, "memory_add", "WRITE_NOT_ALLOWED", content="x", namespace=ns, kind=kind)
        assert err.field == "kind"
    note = (await world.bob("memory_add", content="a note", namespace=ns, kind="note"))["id"]
    await refused(world, world.bob, "memory_update", "WRITE_NOT_ALLOWED", id=note, namespace=ns, kind="business_rule")
    assert (await world.bob("memory_get", id=note, namespace=ns))["kind"] == "note"

    # an admin may write them
    rule = await world.alice("memory_add", content="invoices are net 30", namespace=ns, kind="business_rule")
    sysc = await world.alice("memory_add", content="max 5 retries", namespace=ns, kind="system_constraint")
    assert (await world.bob("memory_get", id=sysc["id"], namespace=ns))["kind"] == "system_constraint"
    promoted = await world.alice("memory_update", id=note, namespace=ns, kind="business_rule")
    assert promoted["changed"] is True
    assert (await world.alice("memory_get", id=note, namespace=ns))["kind"] == "business_rule"

    # an agent may not change an admin's business rule (nor delete it); the admin may
    await refused(
        world,
        world.bob,
        "memory_update",
        "WRITE_NOT_ALLOWED",
        id=rule["id"],
        namespace=ns,
        content="invoices are net 90",
    )
    await refused(world, world.bob, "memory_retire", "WRITE_NOT_ALLOWED", id=rule["id"], namespace=ns)
    got = await world.bob("memory_get", id=rule["id"], namespace=ns)
    assert got["content"] == "invoices are net 30" and got["version"] == 1
    changed = await world.alice("memory_update", id=rule["id"], namespace=ns, content="invoices are net 45")
    assert changed["version"] == 2
    assert (await world.bob("memory_get", id=rule["id"], namespace=ns))["content"] == "invoices are net 45"


# -- deprecation -------------------------------------------------------------------------------------


async def test_deprecate_needs_a_reason_and_keeps_the_memory_readable_and_marked(world: World) -> None:
    ns = f"acme/{fresh()}"
    old = (await world.bob("memory_add", content="use python 3.9", namespace=ns, store="s", path="lang/py"))["id"]
    keep = (await world.bob("memory_add", content="use ruff", namespace=ns, store="s", path="lang/lint"))["id"]

    err = await refused(world, world.bob, "memory_retire", "INVALID_INPUT", id=old, namespace=ns, mode="deprecate")
    assert err.field == "reason"
    for blank in ("", "   "):
        err = await refused(
            world, world.bob, "memory_retire", "INVALID_INPUT", id=old, namespace=ns, mode="deprecate", reason=blank
        )
        assert err.field == "reason"
    # anyone with write access may deprecate (an agent here) ...
    d = await world.bob("memory_retire", id=old, namespace=ns, mode="deprecate", reason="  superseded by 3.11 ")
    assert (d["status"], d["changed"], d["version"]) == ("deprecated", True, 2)
    before = await world.last_seq()
    again = await world.bob("memory_retire", id=old, namespace=ns, mode="deprecate", reason="again")
    assert again["changed"] is False
    assert await world.last_seq() == before
    # ... but not without write access to the namespace
    await refused(
        world, world.dave, "memory_retire", "SCOPE_VIOLATION", id=keep, namespace=ns, mode="deprecate", reason="no"
    )
    await refused(
        world, world.carol, "memory_retire", "SCOPE_VIOLATION", id=keep, namespace=ns, mode="deprecate", reason="no"
    )

    got = await world.bob("memory_get", id=old, namespace=ns)
    assert got["content"] == "use python 3.9"
    assert got["status"] == "deprecated" and got["status_reason"] == "superseded by 3.11"
    by_path = await world.alice("memory_get", namespace=ns, id="s:lang/py")
    assert by_path["id"] == old and by_path["status"] == "deprecated"

    live = await world.bob("memory_list", namespace=ns, detail="full")  # default status: live = active + deprecated
    assert {m["id"]: m["status"] for m in live["results"]} == {old: "deprecated", keep: "active"}
    only_dep = await world.bob("memory_list", namespace=ns, status="deprecated")
    assert [m["id"] for m in only_dep["results"]] == [old] and only_dep["total"] == 1
    only_active = await world.bob("memory_list", namespace=ns, status="active")
    assert [m["id"] for m in only_active["results"]] == [keep]
    stats = await world.bob("memory_stats", namespace=ns)
    assert (stats["total"], stats["active"], stats["deprecated"]) == (2, 1, 1)

    # an admin may deprecate too
    d2 = await world.alice("memory_retire", id=keep, namespace=ns, mode="deprecate", reason="use ruff format")
    assert d2["status"] == "deprecated"


async def test_a_deprecated_memory_keeps_its_deprecation_reason_through_lock_and_unlock(world: World) -> None:
    """Deprecated memories are marked with status "deprecated" and the reason; locking (with a reason of its
    own) and unlocking must not replace or blank why the memory was deprecated."""
    ns = f"acme/{fresh()}"
    mid = (await world.bob("memory_add", content="deploy with fabric", namespace=ns))["id"]
    await world.bob("memory_retire", id=mid, namespace=ns, mode="deprecate", reason="replaced by ansible")
    await world.alice("memory_lock", id=mid, namespace=ns, reason="legal hold")
    got = await world.bob("memory_get", id=mid, namespace=ns)
    assert (got["status"], got["locked"]) == ("deprecated", True)
    assert got["status_reason"] == "replaced by ansible", "the lock reason replaced the deprecation reason"
    await world.alice("memory_unlock", id=mid, namespace=ns)
    got = await world.bob("memory_get", id=mid, namespace=ns)
    assert (got["status"], got["locked"], got["status_reason"]) == ("deprecated", False, "replaced by ansible")


# -- versions and history ----------------------------------------------------------------------------


async def test_every_change_is_a_new_version_with_history_newest_first(world: World) -> None:
    ns = f"acme/{fresh()}"
    mid = (await world.bob("memory_add", content="version one", namespace=ns, store="s", path="v/one"))["id"]
    steps = [
        (world.bob, "memory_update", {"content": "version two"}),
        (world.alice, "memory_verify", {}),
        (world.alice, "memory_lock", {"reason": "pin"}),
        (world.alice, "memory_update", {"content": "version five"}),
        (world.alice, "memory_unlock", {}),
        (world.bob, "memory_retire", {"mode": "deprecate", "reason": "obsolete"}),
    ]
    for caller, tool, args in steps:
        await caller(tool, id=mid, namespace=ns, **args)

    got = await world.bob("memory_get", id=mid, namespace=ns)
    assert got["version"] == 7 and got["content"] == "version five" and got["status"] == "deprecated"
    hist = got["history"]
    assert [h["version"] for h in hist] == [7, 6, 5, 4, 3], "history: the recent versions, newest first"
    assert [h["event_type"] for h in hist] == [
        "memory_deprecated",
        "memory_unlocked",
        "memory_updated",
        "memory_locked",
        "memory_verified",
    ]
    assert [h["agent_id"] for h in hist] == ["bob", "alice", "alice", "alice", "alice"]
    seqs = [h["seq"] for h in hist]
    assert seqs == sorted(seqs, reverse=True) and len(set(seqs)) == len(seqs)

    v1 = await world.bob("memory_get", id=mid, namespace=ns, version=1)
    assert (v1["version"], v1["content"], v1["verification"], v1["locked"]) == (1, "version one", "unverified", False)
    assert v1["status"] == "active" and v1["updated_by"] == "bob"
    v2 = await world.alice("memory_get", id=mid, namespace=ns, version=2)
    assert (v2["version"], v2["content"], v2["verification"]) == (2, "version two", "unverified")
    v4 = await world.bob("memory_get", id=mid, namespace=ns, version=4)
    assert (v4["content"], v4["verification"], v4["locked"]) == ("version two", "verified", True)
    v5 = await world.bob("memory_get", namespace=ns, id="s:v/one", version=5)
    assert v5["content"] == "version five" and v5["updated_by"] == "alice"
    await refused(world, world.bob, "memory_get", "MEMORY_NOT_FOUND", id=mid, namespace=ns, version=8)

    # a memory with fewer versions than the history window lists them all, creation included
    short = (await world.bob("memory_add", content="a", namespace=ns))["id"]
    await world.bob("memory_update", id=short, namespace=ns, content="b")
    h = (await world.bob("memory_get", id=short, namespace=ns))["history"]
    assert [(x["version"], x["event_type"], x["agent_id"]) for x in h] == [
        (2, "memory_updated", "bob"),
        (1, "memory_created", "bob"),
    ]


# -- namespace scope -------------------------------------------------------------------------------


async def test_writes_outside_the_principals_patterns_are_scope_violations(world: World) -> None:
    store = fresh("s")
    ok = await world.carol("memory_add", content="carol in web", namespace="acme/web", store=store, path="a")
    assert ok["namespace"] == "acme/web"
    assert (await world.carol("memory_add", content="default ns", store=store, path="b"))["namespace"] == "acme/web"
    for ns in ("acme/api", "acme/web/sub", "globex/web", "acme"):
        await refused(world, world.carol, "memory_add", "SCOPE_VIOLATION", content="x", namespace=ns)
    await refused(world, world.dave, "memory_add", "SCOPE_VIOLATION", content="x", namespace="acme/web")
    # being an admin does not widen the namespace scope
    await refused(world, world.alice, "memory_add", "SCOPE_VIOLATION", content="x", namespace="globex/web")
    await refused(world, world.erin, "memory_list", "SCOPE_VIOLATION", namespace="acme/web")
    # by id from inside its own scope: a write tool aimed at another namespace's memory
    await refused(
        world, world.dave, "memory_update", "SCOPE_VIOLATION", id=ok["id"], namespace="acme/web", content="hijack"
    )
    await refused(world, world.dave, "memory_retire", "SCOPE_VIOLATION", id=ok["id"], namespace="acme/web")
    # and from its own namespace: the memory is not there
    await refused(world, world.dave, "memory_update", "MEMORY_NOT_FOUND", id=ok["id"], content="hijack")
    assert (await world.carol("memory_get", id=ok["id"]))["content"] == "carol in web"


async def test_reads_outside_scope_reveal_nothing(world: World) -> None:
    ns = f"acme/{fresh()}"
    secret = marker()
    mid = (
        await world.alice(
            "memory_add", content=f"secret {secret}", namespace=ns, store="vault", path="k/key", tags=[secret[:20]]
        )
    )["id"]
    for caller in (world.dave, world.carol):
        # the newest first (memory_list sorted by updated_at) was memory_recent
        for tool, args in (("memory_list", {}), ("memory_stats", {}), ("memory_list", {"sort_by": "updated_at"})):
            err = await refused(world, caller, tool, "SCOPE_VIOLATION", namespace=ns, **args)
            no_leak(err, secret, mid)
        err = await refused(world, caller, "memory_get", "SCOPE_VIOLATION", id=mid, namespace=ns)
        no_leak(err, secret, "vault", "k/key")
        err = await refused(world, caller, "memory_get", "SCOPE_VIOLATION", namespace=ns, id="vault:k/key")
        no_leak(err, secret, mid)
        # from its own default namespace the memory simply does not exist
        with pytest.raises(ToolFailure) as e:
            await caller("memory_get", id=mid)
        assert e.value.code == "MEMORY_NOT_FOUND"
        no_leak(e.value, secret, ns, "vault")
        with pytest.raises(ToolFailure) as e:
            await caller("memory_get", id=mid, version=1)
        assert e.value.code == "MEMORY_NOT_FOUND"
        no_leak(e.value, secret, ns)
        # write tools aimed at it from the caller's own namespace: not found either
        for tool, args in (
            ("memory_update", {"content": "x"}),
            ("memory_retire", {"mode": "deprecate", "reason": "x"}),
            ("memory_retire", {}),
            ("memory_move", {"to_path": "z"}),
            ("memory_lock", {}),
        ):
            err = await refused(world, caller, tool, "MEMORY_NOT_FOUND", id=mid, **args)
            no_leak(err, secret, ns)
    # the owner's org admin (allowed) sees it
    assert secret in (await world.bob("memory_get", id=mid, namespace=ns))["content"]


async def test_read_only_patterns_are_readable_not_writable(world: World) -> None:
    store = fresh("docs")
    mid = (await world.alice("memory_add", content="style guide", namespace="acme/docs", store=store, path="g"))["id"]
    assert (await world.carol("memory_get", id=mid, namespace="acme/docs"))["content"] == "style guide"
    listed = await world.carol("memory_list", namespace="acme/docs", store=store)
    assert [m["id"] for m in listed["results"]] == [mid]
    assert (await world.carol("memory_stats", namespace="acme/docs", store=store))["total"] == 1
    recent = await world.carol("memory_list", namespace="acme/docs", store=store, sort_by="updated_at")
    assert len(recent["results"]) == 1

    await refused(world, world.carol, "memory_add", "SCOPE_VIOLATION", content="x", namespace="acme/docs")
    await refused(world, world.carol, "memory_update", "SCOPE_VIOLATION", id=mid, namespace="acme/docs", content="y")
    await refused(world, world.carol, "memory_move", "SCOPE_VIOLATION", id=mid, namespace="acme/docs", to_path="h")
    await refused(world, world.carol, "memory_retire", "SCOPE_VIOLATION", id=mid, namespace="acme/docs")
    await refused(
        world,
        world.carol,
        "memory_retire",
        "SCOPE_VIOLATION",
        id=mid,
        namespace="acme/docs",
        mode="deprecate",
        reason="r",
    )
    await refused(world, world.carol, "memory_prune_expired", "SCOPE_VIOLATION", namespace="acme/docs")
    # bob (acme/*) may write there
    assert (await world.bob("memory_update", id=mid, namespace="acme/docs", tags=["ok"]))["version"] == 2


async def test_system_scope_readable_by_the_org_writable_only_by_its_admins(world: World) -> None:
    store = fresh("rules")
    rule = await world.alice(
        "memory_add",
        content="never push to main",
        namespace="acme/_system",
        store=store,
        path="git",
        kind="business_rule",
    )
    assert rule["namespace"] == "acme/_system"
    # readable by every agent of the organization, including one bound to acme/web only
    for caller in (world.bob, world.carol):
        got = await caller("memory_get", id=rule["id"], namespace="acme/_system")
        assert got["content"] == "never push to main" and got["verification"] == "verified"
        assert [m["id"] for m in (await caller("memory_list", namespace="acme/_system", store=store))["results"]] == [
            rule["id"]
        ]
    # not writable by agents of the organization (even with acme/* or * patterns)
    await refused(world, world.bob, "memory_add", "SCOPE_VIOLATION", content="x", namespace="acme/_system")
    await refused(world, world.carol, "memory_add", "SCOPE_VIOLATION", content="x", namespace="acme/_system")
    await refused(
        world, world.bob, "memory_update", "SCOPE_VIOLATION", id=rule["id"], namespace="acme/_system", tags=["x"]
    )
    await refused(
        world,
        world.bob,
        "memory_retire",
        "SCOPE_VIOLATION",
        id=rule["id"],
        namespace="acme/_system",
        mode="deprecate",
        reason="no",
    )
    async with AsyncExitStack() as es:
        star = await add_caller(world.stack, es, "star-agent", organization="acme", namespaces=["*"])
        world.extra.append(star)
        await refused(world, star, "memory_add", "SCOPE_VIOLATION", content="x", namespace="acme/_system")
        assert (await star("memory_get", id=rule["id"], namespace="acme/_system"))["id"] == rule["id"]
        await star.gateway.access.flush()
        world.extra.remove(star)
    # another organization can neither read nor write it, not even its admin
    err = await refused(world, world.dave, "memory_get", "SCOPE_VIOLATION", id=rule["id"], namespace="acme/_system")
    no_leak(err, "never push to main")
    await refused(world, world.dave, "memory_list", "SCOPE_VIOLATION", namespace="acme/_system")
    await refused(world, world.erin, "memory_add", "SCOPE_VIOLATION", content="x", namespace="acme/_system")
    await refused(world, world.erin, "memory_list", "SCOPE_VIOLATION", namespace="acme/_system")
    # the org's admin writes it; each admin writes only their own organization's
    up = await world.alice("memory_update", id=rule["id"], namespace="acme/_system", content="never force-push")
    assert up["version"] == 2
    g = await world.erin("memory_add", content="globex rule", namespace="globex/_system", store=store, path="r")
    assert g["namespace"] == "globex/_system"
    assert (await world.dave("memory_get", id=g["id"], namespace="globex/_system"))["content"] == "globex rule"
    await refused(world, world.dave, "memory_add", "SCOPE_VIOLATION", content="x", namespace="globex/_system")


# -- the context object ---------------------------------------------------------------------------


async def test_context_object_is_checked_against_the_principal(world: World) -> None:
    store = fresh("ctx")
    # agent_id: must be the authenticated agent
    err = await refused(
        world,
        world.carol,
        "memory_add",
        "SCOPE_VIOLATION",
        content="x",
        store=store,
        path="a",
        context={"agent_id": "alice"},
    )
    assert err.field == "context.agent_id"
    await refused(world, world.carol, "memory_list", "SCOPE_VIOLATION", context={"agent_id": "bob"})
    ok = await world.carol("memory_add", content="as myself", store=store, path="a", context={"agent_id": "carol"})
    assert ok["namespace"] == "acme/web"
    # organization_id: must be the principal's
    err = await refused(
        world,
        world.carol,
        "memory_add",
        "SCOPE_VIOLATION",
        content="x",
        context={"organization_id": "globex", "repository_id": "web"},
    )
    assert err.field == "context.organization_id"
    # repository_id names the namespace <org>/<repo> ...
    r = await world.carol(
        "memory_add",
        content="via repository",
        store=store,
        path="b",
        context={"agent_id": "carol", "organization_id": "acme", "repository_id": "web"},
    )
    assert r["namespace"] == "acme/web"
    got = await world.carol("memory_get", id=r["id"], context={"repository_id": "web", "intent": "read"})
    assert got["content"] == "via repository" and got["namespace"] == "acme/web"
    # ... and a repository the principal is not bound to is a scope violation (read and write)
    await refused(world, world.carol, "memory_add", "SCOPE_VIOLATION", content="x", context={"repository_id": "api"})
    await refused(world, world.carol, "memory_list", "SCOPE_VIOLATION", context={"repository_id": "api"})
    err = await refused(
        world,
        world.dave,
        "memory_get",
        "SCOPE_VIOLATION",
        id=r["id"],
        context={"organization_id": "acme", "repository_id": "web"},
    )
    no_leak(err, "via repository")
    # (dave's own repository "web" is globex/web: the memory is not there)
    await refused(world, world.dave, "memory_get", "MEMORY_NOT_FOUND", id=r["id"], context={"repository_id": "web"})
    # read-only repository: readable through the context, not writable
    docs = await world.carol("memory_list", context={"repository_id": "docs"}, detail="full")
    assert all(m["namespace"] == "acme/docs" for m in docs["results"])
    await refused(world, world.carol, "memory_add", "SCOPE_VIOLATION", content="x", context={"repository_id": "docs"})

    # intent: a read intent does not allow a write tool, a write intent not an admin tool
    err = await refused(
        world,
        world.carol,
        "memory_add",
        "INVALID_CONTEXT",
        content="x",
        store=store,
        path="c",
        context={"intent": "read"},
    )
    assert err.field == "context.intent"
    await refused(
        world, world.carol, "memory_update", "INVALID_CONTEXT", id=r["id"], content="y", context={"intent": "read"}
    )
    await refused(
        world,
        world.alice,
        "memory_lock",
        "INVALID_CONTEXT",
        id=r["id"],
        namespace="acme/web",
        context={"intent": "write"},
    )
    lk = await world.alice("memory_lock", id=r["id"], namespace="acme/web", context={"intent": "admin"})
    assert lk["locked"] is True
    await world.alice("memory_unlock", id=r["id"], namespace="acme/web", context={"intent": "admin"})
    w = await world.carol("memory_add", content="write intent", store=store, path="d", context={"intent": "write"})
    assert w["namespace"] == "acme/web"
    assert (await world.carol("memory_get", id=w["id"], context={"intent": "write"}))["id"] == w["id"]

    # request_id: the context's request id is the call's idempotency key
    rid = fresh("req")
    first = await world.carol("memory_add", content="once", store=store, path="e", context={"request_id": rid})
    before = await world.last_seq()
    second = await world.carol("memory_add", content="once", store=store, path="e", context={"request_id": rid})
    assert second["id"] == first["id"] and second["duplicate"] is True
    assert await world.last_seq() == before


async def test_context_repository_outside_scope_is_refused_even_with_an_allowed_namespace(world: World) -> None:
    """The context says which repository the call is for; a repository the principal is not bound to is
    SCOPE_VIOLATION whatever namespace argument accompanies it."""
    store = fresh("ctx")
    await refused(
        world,
        world.carol,
        "memory_add",
        "SCOPE_VIOLATION",
        content="x",
        namespace="acme/web",
        store=store,
        path="a",
        context={"repository_id": "api"},
    )
    await refused(
        world, world.carol, "memory_list", "SCOPE_VIOLATION", namespace="acme/web", context={"repository_id": "api"}
    )


async def test_require_context_refuses_calls_without_one(world: World) -> None:
    ns = f"acme/{fresh()}"
    repo = ns.split("/")[1]
    for tool, args in (
        ("memory_add", {"content": "x", "namespace": ns}),
        ("memory_list", {"namespace": ns}),
        ("memory_stats", {}),
        ("memory_get", {"id": str(uuid.uuid4()), "namespace": ns}),
    ):
        err = await refused(world, world.strict, tool, "INVALID_CONTEXT", **args)
        assert err.field == "context"
    # a context without a repository is not enough
    err = await refused(
        world,
        world.strict,
        "memory_add",
        "INVALID_CONTEXT",
        content="x",
        namespace=ns,
        context={"agent_id": "bob", "intent": "write"},
    )
    assert err.field == "context.repository_id"
    # the context is still checked for the principal
    await refused(
        world,
        world.strict,
        "memory_add",
        "SCOPE_VIOLATION",
        content="x",
        context={"agent_id": "mallory", "repository_id": repo},
    )
    # a full context works
    ctx = {"agent_id": "bob", "organization_id": "acme", "repository_id": repo, "intent": "write"}
    added = await world.strict("memory_add", content="with context", context=ctx)
    assert added["namespace"] == ns
    got = await world.strict("memory_get", id=added["id"], context={**ctx, "intent": "read"})
    assert got["content"] == "with context" and got["created_by"] == "bob"
    # the same principal on a gateway without require_context needs none
    assert (await world.bob("memory_get", id=added["id"], namespace=ns))["id"] == added["id"]
