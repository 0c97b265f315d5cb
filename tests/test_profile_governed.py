"""The `governed` profile (../shared/seeds/memory-tool-governance-spec.md) end to end: `mneme serve` with
MNEME_GATEWAY_PROFILE=governed, driven by the mcp package's ClientSession over stdio, one test per scenario of
the contract (test_scenario_*), named after the section it comes from.

One `mneme serve` is shared by the module (the AI agent `agent-7`, bound to a few repositories of one
organization); beside it, over stdio against the same embedded NATS, `mneme gateway` runs as the human
admin `dana` (governed), as `dana` on the native surface (audit_query, cross-profile reads), and as
`agent-7` on the native surface (cross-profile writes). Each test works in its own repository.

The golden snapshot of tools/list is tests/golden/governed.tools.json. After a deliberate change of the
surface, regenerate it with

    MNEME_UPDATE_GOLDEN=1 PYTHONPATH=. .venv/bin/python -m pytest tests/test_profile_governed.py -k golden

and review the diff.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client

from services.gateway.profiles.governed_shapes import ERRORS
from tests.harness import ToolFailure, gateway_params, result_of, serve_params

pytestmark = pytest.mark.anyio

GOLDEN = Path(__file__).parent / "golden" / "governed.tools.json"
TOOLS = ["memory-write", "memory-search", "memory.read", "memory.lock", "memory.deprecate"]
ORG = str(uuid.uuid4())
REPOS = [str(uuid.uuid4()) for _ in range(40)]  # the agent's repositories, one per test that writes
FOREIGN = str(uuid.uuid4())  # a repository of the organization the agent is not bound to
AGENT, ADMIN = "agent-7", "dana"
_next_repo = iter(REPOS)


def repo() -> str:
    return next(_next_repo)


def ctx(repository: str, intent: str = "read", agent: str = AGENT, **over: Any) -> dict[str, Any]:
    """The contract's context object, complete, with a fresh request_id."""
    c = {
        "agent_id": agent,
        "organization_id": ORG,
        "repository_id": repository,
        "intent": intent,
        "request_id": f"req-{uuid.uuid4().hex[:12]}",
    }
    c.update(over)
    return c


class Session:
    def __init__(self, s: ClientSession, agent: str = AGENT):
        self.s, self.agent = s, agent

    async def __call__(self, tool: str, **args: Any) -> dict[str, Any]:
        return result_of(await self.s.call_tool(tool, args))

    async def fails(self, tool: str, code: str, field: str | None = None, **args: Any) -> dict[str, Any]:
        """The call fails with the contract's error object: {"error": {"code", "message"[, "field"]}}."""
        with pytest.raises(ToolFailure) as err:
            await self(tool, **args)
        e = err.value.error
        assert e["code"] == code, (tool, args, e)
        assert set(e) <= {"code", "message", "field"} and e["message"], e
        if field is not None:
            assert e.get("field") == field, e
        return e

    # the governed tools, with the context of this session's principal
    async def write(self, repository: str, content: str, type: str = "fact", **args: Any) -> dict[str, Any]:
        return await self(
            "memory-write", content=content, type=type, context=ctx(repository, "write", self.agent), **args
        )

    async def search(self, repository: str, query: str, **args: Any) -> dict[str, Any]:
        return await self("memory-search", query=query, context=ctx(repository, "read", self.agent), **args)

    async def read(self, repository: str, memory_id: str) -> dict[str, Any]:
        return await self("memory.read", memory_id=memory_id, context=ctx(repository, "read", self.agent))


@dataclass
class World:
    agent: Session  # governed, the AI agent (mneme serve)
    admin: Session  # governed, the human admin (mneme gateway)
    native: Session  # native surface, the human admin
    native_agent: Session  # native surface, the AI agent
    tools: list[Any]

    async def trail(
        self, memory_id: str | None, expect: int, *, request_id: str | None = None, **filters: Any
    ) -> list[dict[str, Any]]:
        """Audit records (native audit_query as the admin) of a memory, or by other filters, once `expect` of
        them are there and one of them has `request_id` (reads and refusals reach the trail a moment after
        the call answers)."""
        args: dict[str, Any] = {"all_readable": True, **filters}
        if memory_id is not None:
            args["memory_id"] = memory_id
        for _ in range(100):
            page = await self.native("audit_query", **args)
            if len(page["results"]) >= expect and (
                request_id is None or any(x["request_id"] == request_id for x in page["results"])
            ):
                return page["results"]
            await asyncio.sleep(0.1)
        raise AssertionError(f"the trail for {args} has {page['results']}, expected {expect} records")


def _env(**settings: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
    base["MNEME_GATEWAY_CONSISTENCY"] = "linearizable"  # four gateways, one memory: read the head of the log
    return base | {f"MNEME_GATEWAY_{k.upper()}": v for k, v in settings.items()}


AGENT_ENV = {
    "agent_id": AGENT,
    "role": "agent",
    "organization": ORG,
    "namespaces": json.dumps([f"{ORG}/{r}" for r in REPOS]),
    "namespace": f"{ORG}/{REPOS[0]}",
}
ADMIN_ENV = {
    "agent_id": ADMIN,
    "role": "admin",
    "organization": ORG,
    "namespaces": json.dumps([f"{ORG}/*"]),
    "namespace": f"{ORG}/{REPOS[0]}",
}


@pytest.fixture(scope="module")
def anyio_backend() -> str:  # module scope, so the shared servers below can be module scoped
    return "asyncio"


@pytest.fixture(scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    data = tmp_path_factory.mktemp("governed") / "d"
    async with AsyncExitStack() as es:
        r, w = await es.enter_async_context(stdio_client(serve_params(data, env=_env(profile="governed", **AGENT_ENV))))
        agent = await es.enter_async_context(ClientSession(r, w))
        await agent.initialize()
        url = (data / "nats" / "client-url").read_text().split()[1]
        sessions = []
        for env in (
            _env(profile="governed", **ADMIN_ENV),
            _env(profile="native", **ADMIN_ENV),
            _env(profile="native", **AGENT_ENV),
        ):
            r, w = await es.enter_async_context(stdio_client(gateway_params(url, env=env)))
            sessions.append(await es.enter_async_context(ClientSession(r, w)))
        await asyncio.gather(*(s.initialize() for s in sessions))
        world = World(
            Session(agent),
            Session(sessions[0], ADMIN),
            Session(sessions[1], ADMIN),
            Session(sessions[2]),
            (await agent.list_tools()).tools,
        )
        for _ in range(300):  # the embedding model loads in the background at start
            try:
                await world.agent.search(REPOS[0], "warm up")
                break
            except ToolFailure as exc:
                assert exc.code == "EMBEDDING_MODEL_LOADING", exc.error
                await asyncio.sleep(0.1)
        yield world


# -- the surface -----------------------------------------------------------------------------------------------


def surface(tools: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "name": t.name,
            "description": t.description,
            "inputSchema": t.input_schema,
            "outputSchema": t.output_schema,
            "annotations": t.annotations.model_dump(mode="json", by_alias=True, exclude_none=True),
        }
        for t in tools
    ]


async def test_tools_list_matches_the_golden_snapshot(world: World) -> None:
    """tools/list (names, descriptions, input and output schemas, annotations) is what the snapshot says.
    MNEME_UPDATE_GOLDEN=1 rewrites the snapshot instead (review the diff)."""
    now = surface(world.tools)
    if os.environ.get("MNEME_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(now, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    assert GOLDEN.exists(), f"no snapshot: run with MNEME_UPDATE_GOLDEN=1 to write {GOLDEN}"
    assert json.loads(GOLDEN.read_text()) == json.loads(json.dumps(now)), (
        "the governed surface changed: if that is intended, rerun with MNEME_UPDATE_GOLDEN=1 and review the diff"
    )


async def test_tool_names_are_the_contracts_dots_and_dashes_included(world: World) -> None:
    assert [t.name for t in world.tools] == TOOLS
    for t in world.tools:
        assert "context" in t.input_schema["required"], t.name
        assert t.output_schema and t.output_schema["type"] == "object", t.name
    hints = {t.name: t.annotations for t in world.tools}
    assert hints["memory-search"].read_only_hint and hints["memory.read"].read_only_hint
    assert not hints["memory-write"].read_only_hint and not hints["memory.lock"].destructive_hint


async def test_the_contracts_examples_fit_its_schemas_and_its_invalid_inputs_are_refused(world: World) -> None:
    schema = {t.name: t.input_schema for t in world.tools}
    repository = REPOS[0]
    examples = {  # each tool with its required fields (section 2) and the common context (section 1)
        "memory-write": {
            "content": "Payments are retried three times",
            "type": "decision",
            "context": ctx(repository, "write"),
        },
        "memory-search": {
            "query": "payment retries",
            "limit": 10,
            "type_filter": "decision",
            "context": ctx(repository),
        },
        "memory.read": {"memory_id": str(uuid.uuid4()), "context": ctx(repository)},
        "memory.lock": {"memory_id": str(uuid.uuid4()), "context": ctx(repository, "admin", ADMIN)},
        "memory.deprecate": {
            "memory_id": str(uuid.uuid4()),
            "reason": "replaced by the new policy",
            "context": ctx(repository, "write"),
        },
    }
    for name, args in examples.items():
        jsonschema.validate(args, schema[name])
    invalid: list[tuple[str, dict[str, Any], str, str]] = [  # the contract's limits and enums, its required fields
        ("memory-search", {"query": "x", "limit": 11, "context": ctx(repository)}, "INVALID_INPUT", "limit"),
        ("memory-search", {"query": "x", "limit": 0, "context": ctx(repository)}, "INVALID_INPUT", "limit"),
        ("memory-search", {"context": ctx(repository)}, "INVALID_INPUT", "query"),
        ("memory-search", {"query": "x", "context": ctx(repository, "delete")}, "INVALID_CONTEXT", "context.intent"),
        ("memory-search", {"query": "x"}, "INVALID_CONTEXT", "context"),
        ("memory-write", {"type": "fact", "context": ctx(repository, "write")}, "INVALID_INPUT", "content"),
        ("memory-write", {"content": "x", "context": ctx(repository, "write")}, "INVALID_INPUT", "type"),
        (
            "memory-write",
            {"content": "", "type": "fact", "context": ctx(repository, "write")},
            "INVALID_INPUT",
            "content",
        ),
        ("memory.read", {"context": ctx(repository)}, "INVALID_INPUT", "memory_id"),
        (
            "memory.deprecate",
            {"memory_id": str(uuid.uuid4()), "context": ctx(repository, "write")},
            "INVALID_INPUT",
            "reason",
        ),
    ]
    for name, args, code, field in invalid:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(args, schema[name])
        await world.agent.fails(name, code, field, **args)
    # the context's fields are all required (section 1): the schema is the mechanism's, the server checks
    for missing in ("agent_id", "organization_id", "repository_id", "intent", "request_id"):
        partial = {k: v for k, v in ctx(repository).items() if k != missing}
        await world.agent.fails("memory-search", "INVALID_CONTEXT", f"context.{missing}", query="x", context=partial)
    for empty in ("agent_id", "organization_id", "repository_id"):  # an empty one is missing, not another agent's
        blank = ctx(repository, **{empty: " "})
        await world.agent.fails("memory-search", "INVALID_CONTEXT", f"context.{empty}", query="x", context=blank)


def test_every_domain_refusal_renders_as_one_of_the_five_codes() -> None:
    shown = {
        code: json.loads(ERRORS.render(code, "m", "id"))["error"]
        for code in (
            "INVALID_CONTEXT",
            "SCOPE_VIOLATION",
            "WRITE_NOT_ALLOWED",
            "MEMORY_LOCKED",
            "MEMORY_NOT_FOUND",
            "PERMISSION_ERROR",
            "IDEMPOTENCY_KEY_REUSED",
        )
    }
    assert {c: e["code"] for c, e in shown.items()} == {
        "INVALID_CONTEXT": "INVALID_CONTEXT",
        "SCOPE_VIOLATION": "SCOPE_VIOLATION",
        "WRITE_NOT_ALLOWED": "WRITE_NOT_ALLOWED",
        "MEMORY_LOCKED": "MEMORY_LOCKED",
        "MEMORY_NOT_FOUND": "MEMORY_NOT_FOUND",
        "PERMISSION_ERROR": "WRITE_NOT_ALLOWED",
        "IDEMPOTENCY_KEY_REUSED": "INVALID_CONTEXT",
    }
    assert shown["MEMORY_LOCKED"]["field"] == "memory_id"  # the domain's `id` as the contract names it
    assert json.loads(ERRORS.render("INVALID_INPUT", "m", "context.intent"))["error"]["code"] == "INVALID_CONTEXT"
    assert "details" not in json.loads(ERRORS.render("IDEMPOTENCY_KEY_REUSED", "m", "request_id", {"seq": 7}))["error"]


# -- 1. Common Request Context ------------------------------------------------------------------------------------


async def test_scenario_common_request_context_is_mandatory_on_every_call(world: World) -> None:
    r = repo()
    mid = (await world.agent.write(r, "The API gateway is Kong"))["memory_id"]
    calls = {
        "memory-write": {"content": "x", "type": "fact"},
        "memory-search": {"query": "gateway"},
        "memory.read": {"memory_id": mid},
        "memory.lock": {"memory_id": mid},
        "memory.deprecate": {"memory_id": mid, "reason": "obsolete"},
    }
    for tool, args in calls.items():
        await world.agent.fails(tool, "INVALID_CONTEXT", "context", **args)
        without_agent = {k: v for k, v in ctx(r, "admin").items() if k != "agent_id"}
        await world.agent.fails(tool, "INVALID_CONTEXT", "context.agent_id", context=without_agent, **args)
    # checked against the principal of the session: another agent's id, another organization
    await world.agent.fails(
        "memory-search", "SCOPE_VIOLATION", "context.agent_id", query="gateway", context=ctx(r, agent="someone-else")
    )
    await world.agent.fails(
        "memory-search",
        "SCOPE_VIOLATION",
        "context.organization_id",
        query="gateway",
        context=ctx(r, organization_id=str(uuid.uuid4())),
    )
    # intent classifies the action: read does not allow a write, write not an admin action
    await world.agent.fails(
        "memory-write", "INVALID_CONTEXT", "context.intent", content="x", type="fact", context=ctx(r, "read")
    )
    await world.admin.fails(
        "memory.lock", "INVALID_CONTEXT", "context.intent", memory_id=mid, context=ctx(r, "write", ADMIN)
    )
    # no refused call wrote anything
    listed = await world.native("memory_list", namespace=f"{ORG}/{r}", detail="full")
    assert [(m["id"], m["version"], m["locked"]) for m in listed["results"]] == [(mid, 1, False)]


# -- 2A. memory-write ---------------------------------------------------------------------------------------------


async def test_scenario_memory_write_stores_a_new_fact_unverified_as_v1_with_a_created_audit_record(
    world: World,
) -> None:
    r = repo()
    c = ctx(r, "write")
    got = await world.agent("memory-write", content="Orders ship from the Rotterdam warehouse", type="fact", context=c)
    assert set(got) == {"memory_id", "status", "version"} and (got["status"], got["version"]) == ("unverified", 1)
    assert uuid.UUID(got["memory_id"]).version == 4
    back = await world.agent.read(r, got["memory_id"])
    assert back["history"] == [{"version": 1, "action": "created", "agent_id": AGENT}]
    trail = await world.trail(got["memory_id"], 1, request_id=c["request_id"])
    created = [x for x in trail if x["action"] == "memory_created"]
    assert [(x["agent_id"], x["request_id"], x["outcome"]) for x in created] == [(AGENT, c["request_id"], "ok")]
    # a retry of the same request (same request_id) is applied once
    assert (
        await world.agent("memory-write", content="Orders ship from the Rotterdam warehouse", type="fact", context=c)
        == got
    )
    # the same request_id for another request is an invalid context
    await world.agent.fails(
        "memory-write",
        "INVALID_CONTEXT",
        "context.request_id",
        content="Orders ship from Hamburg",
        type="fact",
        context=c,
    )
    assert (await world.native("memory_list", namespace=f"{ORG}/{r}"))["total"] == 1


async def test_scenario_memory_write_allowed_callers_ai_agent_and_human_admin(world: World) -> None:
    r = repo()
    by_agent = await world.agent.write(r, "Staging runs on Kubernetes")
    by_admin = await world.admin.write(r, "Production runs on Kubernetes", type="decision")
    assert (by_agent["status"], by_agent["version"]) == ("unverified", 1)
    assert (by_admin["status"], by_admin["version"]) == ("verified", 1)  # a human admin's word is verified
    got = await world.agent.read(r, by_admin["memory_id"])
    assert (got["created_by"], got["type"], got["verified"]) == (ADMIN, "decision", True)


async def test_scenario_memory_write_validation_ai_may_not_write_business_rule_or_system_constraint(
    world: World,
) -> None:
    r = repo()
    for protected in ("business_rule", "system_constraint"):
        e = await world.agent.fails(
            "memory-write",
            "WRITE_NOT_ALLOWED",
            "type",
            content="Refunds need approval",
            type=protected,
            context=ctx(r, "write"),
        )
        assert protected in e["message"]
    # nor turn its own memory into one
    mid = (await world.agent.write(r, "Refunds need approval"))["memory_id"]
    await world.agent.fails(
        "memory-write",
        "WRITE_NOT_ALLOWED",
        "type",
        content="Refunds need approval",
        type="business_rule",
        memory_id=mid,
        context=ctx(r, "write"),
    )
    # a human admin may
    rule = await world.admin.write(r, "Refunds above 500 EUR need a manager's approval", type="business_rule")
    assert rule["status"] == "verified"
    listed = await world.native("memory_list", namespace=f"{ORG}/{r}", detail="full")
    assert sorted(m["kind"] for m in listed["results"]) == ["business_rule", "fact"]


async def test_scenario_memory_write_forbidden_editing_a_locked_memory(world: World) -> None:
    r = repo()
    mid = (await world.agent.write(r, "The build uses Gradle 8"))["memory_id"]
    # an edit is memory-write with the memory's id: a new version of it
    edited = await world.agent.write(r, "The build uses Gradle 8.5", memory_id=mid)
    assert (edited["memory_id"], edited["version"], edited["status"]) == (mid, 2, "unverified")
    await world.admin("memory.lock", memory_id=mid, context=ctx(r, "admin", ADMIN))
    await world.agent.fails(
        "memory-write",
        "MEMORY_LOCKED",
        "memory_id",
        content="The build uses Maven",
        type="fact",
        memory_id=mid,
        context=ctx(r, "write"),
    )
    got = await world.agent.read(r, mid)
    assert (got["content"], got["version"], got["status"], got["locked"]) == (
        "The build uses Gradle 8.5",
        3,
        "locked",
        True,
    )
    # locked means frozen for everyone (issue 28, item 3): a human admin's memory-write is refused too, and
    # says how an admin changes it: unlock (native memory_unlock), edit, lock again
    refused = await world.admin.fails(
        "memory-write",
        "MEMORY_LOCKED",
        "memory_id",
        content="The build uses Gradle 9",
        type="fact",
        memory_id=mid,
        context=ctx(r, "write", ADMIN),
    )
    assert "memory_unlock" in refused["message"], refused
    assert (await world.agent.read(r, mid))["version"] == 3
    await world.native("memory_unlock", id=mid, namespace=f"{ORG}/{r}")
    by_admin = await world.admin.write(r, "The build uses Gradle 9", memory_id=mid)
    assert by_admin["version"] == 5
    relocked = await world.admin("memory.lock", memory_id=mid, context=ctx(r, "admin", ADMIN))
    assert (relocked["status"], relocked["version"]) == ("locked", 6)
    got = await world.agent.read(r, mid)
    assert (got["content"], got["locked"]) == ("The build uses Gradle 9", True)


# -- 2B. memory-search --------------------------------------------------------------------------------------------


async def test_scenario_memory_search_returns_relevant_memories_with_content_status_type_scope_origin(
    world: World,
) -> None:
    r = repo()
    db = await world.agent.write(r, "The team prefers PostgreSQL for new services", type="decision")
    lunch = await world.agent.write(r, "Lunch is served at noon on Fridays")
    got = await world.agent.search(r, "which database do we use")
    assert got["count"] == len(got["memories"]) >= 1
    assert got["memories"][0] == {
        "memory_id": db["memory_id"],
        "content": "The team prefers PostgreSQL for new services",
        "type": "decision",
        "status": "unverified",
        "scope_origin": "repository",
    }
    assert lunch["memory_id"] not in [m["memory_id"] for m in got["memories"]]  # not relevant: not returned


async def test_scenario_memory_search_type_filter(world: World) -> None:
    r = repo()
    decision = await world.agent.write(r, "We chose gRPC for internal service calls", type="decision")
    await world.agent.write(r, "gRPC calls time out after 5 seconds", type="fact")
    both = await world.agent.search(r, "gRPC")
    assert both["count"] == 2
    only = await world.agent.search(r, "gRPC", type_filter="decision")
    assert [m["memory_id"] for m in only["memories"]] == [decision["memory_id"]]
    assert (await world.agent.search(r, "gRPC", type_filter="runbook"))["memories"] == []


async def test_scenario_memory_search_limit_defaults_to_5_and_maximum_results_is_10(world: World) -> None:
    r = repo()
    for i in range(12):
        await world.agent.write(r, f"Incident {i}: the cache node restarted")
    assert (await world.agent.search(r, "the cache node restarted"))["count"] == 5
    assert (await world.agent.search(r, "the cache node restarted", limit=10))["count"] == 10
    assert (await world.agent.search(r, "the cache node restarted", limit=1))["count"] == 1
    for too_many in (11, 50):
        await world.agent.fails(
            "memory-search", "INVALID_INPUT", "limit", query="the cache node restarted", limit=too_many, context=ctx(r)
        )


async def test_scenario_memory_search_must_carry_a_valid_repository_id(world: World) -> None:
    r = repo()
    no_repo = {k: v for k, v in ctx(r).items() if k != "repository_id"}
    await world.agent.fails("memory-search", "INVALID_CONTEXT", "context.repository_id", query="x", context=no_repo)
    await world.agent.fails(
        "memory-search", "INVALID_CONTEXT", "context.repository_id", query="x", context=ctx("../" + r)
    )
    await world.agent.fails(
        "memory-search", "SCOPE_VIOLATION", "context.repository_id", query="x", context=ctx(FOREIGN)
    )
    mid = (await world.agent.write(r, "Error budgets are reviewed monthly"))["memory_id"]
    assert (await world.agent.search(r, "error budgets"))["memories"][0]["memory_id"] == mid


async def test_scenario_memory_search_is_audited_as_a_read_action(world: World) -> None:
    r = repo()
    mid = (await world.agent.write(r, "Feature flags live in LaunchDarkly"))["memory_id"]
    c = ctx(r)
    found = await world.agent("memory-search", query="LaunchDarkly", context=c)
    assert found["memories"][0]["memory_id"] == mid
    reads = [x for x in await world.trail(mid, 2, request_id=c["request_id"]) if x["action"] == "read:memory-search"]
    assert [(x["agent_id"], x["request_id"], x["outcome"]) for x in reads] == [(AGENT, c["request_id"], "ok")]
    assert mid in reads[0]["memory_ids"]


# -- 2C. memory.read ----------------------------------------------------------------------------------------------


async def test_scenario_memory_read_returns_the_full_memory_with_its_latest_version_history(world: World) -> None:
    r = repo()
    mid = (await world.agent.write(r, "Invoices go out on the 1st", type="decision"))["memory_id"]
    await world.agent.write(r, "Invoices go out on the 2nd", type="decision", memory_id=mid)
    await world.admin("memory.lock", memory_id=mid, context=ctx(r, "admin", ADMIN))
    await world.admin(
        "memory.deprecate", memory_id=mid, reason="billing moved to Stripe", context=ctx(r, "write", ADMIN)
    )
    got = await world.agent.read(r, mid)
    assert got == {
        "memory_id": mid,
        "content": "Invoices go out on the 2nd",
        "type": "decision",
        "status": "deprecated",
        "scope_origin": "repository",
        "version": 4,
        "verified": False,
        "locked": True,
        "tags": [],
        "deprecated_reason": "billing moved to Stripe",
        "created_by": AGENT,
        "updated_by": ADMIN,
        "history": [
            {"version": 4, "action": "deprecated", "agent_id": ADMIN},
            {"version": 3, "action": "locked", "agent_id": ADMIN},
            {"version": 2, "action": "updated", "agent_id": AGENT},
            {"version": 1, "action": "created", "agent_id": AGENT},
        ],
    }
    await world.native("memory_unlock", id=mid, namespace=f"{ORG}/{r}")  # (a lock binds admins' writes too)
    for i in range(3):  # the latest versions: at most five
        await world.admin.write(r, f"Invoices go out on day {i + 3}", type="decision", memory_id=mid)
    history = (await world.agent.read(r, mid))["history"]
    assert [h["version"] for h in history] == [8, 7, 6, 5, 4]
    await world.agent.fails("memory.read", "MEMORY_NOT_FOUND", None, memory_id=str(uuid.uuid4()), context=ctx(r))


# -- 2D. memory.lock ----------------------------------------------------------------------------------------------


async def test_scenario_memory_lock_by_a_human_admin_confirms_status_locked_and_timestamp(world: World) -> None:
    r = repo()
    mid = (await world.agent.write(r, "The public API is versioned in the URL"))["memory_id"]
    before = datetime.now(UTC)
    got = await world.admin("memory.lock", memory_id=mid, context=ctx(r, "admin", ADMIN))
    assert set(got) == {"memory_id", "status", "locked_at", "version"}
    assert (got["memory_id"], got["status"], got["version"]) == (mid, "locked", 2)
    assert abs(datetime.fromisoformat(got["locked_at"]) - before) < timedelta(seconds=30)
    # locking again changes nothing and confirms the same lock
    assert await world.admin("memory.lock", memory_id=mid, context=ctx(r, "admin", ADMIN)) == got
    assert (await world.agent.read(r, mid))["status"] == "locked"
    native = await world.native("memory_get", id=mid, namespace=f"{ORG}/{r}")
    assert (native["locked"], native["version"]) == (True, 2)


async def test_scenario_memory_lock_forbidden_when_an_ai_agent_calls_it(world: World) -> None:
    r = repo()
    mid = (await world.agent.write(r, "Releases are tagged vX.Y.Z"))["memory_id"]
    as_admin, as_writer = ctx(r, "admin"), ctx(r, "write")
    await world.agent.fails("memory.lock", "WRITE_NOT_ALLOWED", None, memory_id=mid, context=as_admin)
    await world.agent.fails("memory.lock", "INVALID_CONTEXT", "context.intent", memory_id=mid, context=as_writer)
    got = await world.agent.read(r, mid)
    assert (got["locked"], got["version"], got["status"]) == (False, 1, "unverified")
    # both attempts are in the trail; the one refused inside the tool names the memory
    denied = [
        x for x in await world.trail(mid, 2, request_id=as_admin["request_id"]) if x["action"] == "denied:memory.lock"
    ]
    assert [(x["agent_id"], x["request_id"], x["code"]) for x in denied] == [
        (AGENT, as_admin["request_id"], "PERMISSION_ERROR")
    ]
    records = await world.trail(
        None, 1, request_id=as_writer["request_id"], agent_id=AGENT, action="denied:memory.lock", limit=1000
    )
    by_request = {x["request_id"]: x["code"] for x in records}
    assert by_request.get(as_writer["request_id"]) == "INVALID_CONTEXT", records


# -- 2E. memory.deprecate -----------------------------------------------------------------------------------------


async def test_scenario_memory_deprecate_changes_the_status_to_deprecated_with_its_reason(world: World) -> None:
    r = repo()
    old = (await world.agent.write(r, "Deploys go through Jenkins"))["memory_id"]
    new = (await world.agent.write(r, "Deploys go through GitHub Actions"))["memory_id"]
    got = await world.agent(
        "memory.deprecate", memory_id=old, reason=" moved to GitHub Actions ", context=ctx(r, "write")
    )
    assert got == {"memory_id": old, "status": "deprecated", "reason": "moved to GitHub Actions", "version": 2}
    read = await world.agent.read(r, old)
    assert (read["status"], read["deprecated_reason"], read["content"]) == (
        "deprecated",
        "moved to GitHub Actions",
        "Deploys go through Jenkins",
    )
    # still found, marked, and ranked below what still holds
    found = await world.agent.search(r, "Deploys go through")
    assert [(m["memory_id"], m["status"]) for m in found["memories"][:2]] == [(new, "unverified"), (old, "deprecated")]
    # the reason is required
    await world.agent.fails("memory.deprecate", "INVALID_INPUT", "reason", memory_id=new, context=ctx(r, "write"))
    await world.agent.fails(
        "memory.deprecate", "INVALID_INPUT", "reason", memory_id=new, reason="   ", context=ctx(r, "write")
    )
    # a locked memory is not the AI's to deprecate; a human admin may
    await world.admin("memory.lock", memory_id=new, context=ctx(r, "admin", ADMIN))
    await world.agent.fails(
        "memory.deprecate", "MEMORY_LOCKED", "memory_id", memory_id=new, reason="stale", context=ctx(r, "write")
    )
    by_admin = await world.admin(
        "memory.deprecate", memory_id=new, reason="moved to Argo CD", context=ctx(r, "write", ADMIN)
    )
    assert (by_admin["status"], by_admin["version"]) == ("deprecated", 3)


# -- 3. Scope & Type Enforcement ----------------------------------------------------------------------------------


async def test_scenario_scope_validation_repository_id_must_match_the_session(world: World) -> None:
    r = repo()
    mid = (await world.agent.write(r, "Logs are kept 30 days"))["memory_id"]
    for tool, args, intent in (
        ("memory-write", {"content": "x", "type": "fact"}, "write"),
        ("memory-search", {"query": "logs"}, "read"),
        ("memory.read", {"memory_id": mid}, "read"),
        ("memory.deprecate", {"memory_id": mid, "reason": "x"}, "write"),
    ):
        await world.agent.fails(tool, "SCOPE_VIOLATION", "context.repository_id", context=ctx(FOREIGN, intent), **args)
    # the admin's session is bound to the whole organization
    assert (await world.admin.write(FOREIGN, "The foreign repository has its own logs"))["version"] == 1


async def test_scenario_no_cross_repo_reads(world: World) -> None:
    a, b = repo(), repo()
    in_b = (await world.agent.write(b, "The mobile app targets iOS 17"))["memory_id"]
    # repository A may not read repository B's memory, even for an agent bound to both: not in this scope
    await world.agent.fails("memory.read", "MEMORY_NOT_FOUND", None, memory_id=in_b, context=ctx(a))
    assert in_b not in [m["memory_id"] for m in (await world.agent.search(a, "iOS 17"))["memories"]]
    assert [m["memory_id"] for m in (await world.agent.search(b, "iOS 17"))["memories"]] == [in_b]
    await world.agent.fails(
        "memory.deprecate", "MEMORY_NOT_FOUND", None, memory_id=in_b, reason="x", context=ctx(a, "write")
    )
    await world.agent.fails(
        "memory-write", "MEMORY_NOT_FOUND", None, content="hijack", type="fact", memory_id=in_b, context=ctx(a, "write")
    )
    assert (await world.agent.read(b, in_b))["version"] == 1
    # a repository outside the session: refused, and nothing of it leaks
    secret = (await world.admin.write(FOREIGN, "Roadmap: sunset the legacy billing service"))["memory_id"]
    await world.agent.fails(
        "memory.read", "SCOPE_VIOLATION", "context.repository_id", memory_id=secret, context=ctx(FOREIGN)
    )
    e = await world.agent.fails("memory.read", "MEMORY_NOT_FOUND", None, memory_id=secret, context=ctx(a))
    assert "Roadmap" not in e["message"] and FOREIGN not in e["message"]


async def test_scenario_system_scope_is_reachable_only_through_read_and_search(world: World) -> None:
    rule = await world.native(
        "memory_add",
        namespace=f"{ORG}/_system",
        kind="business_rule",
        content="Every production deploy needs two approvals",
    )
    r = repo()
    got = await world.agent.read(r, rule["id"])
    assert (got["scope_origin"], got["status"], got["type"]) == ("organization", "verified", "business_rule")
    found = await world.agent.search(r, "production deploy approvals")
    assert {
        "memory_id": rule["id"],
        "content": "Every production deploy needs two approvals",
        "type": "business_rule",
        "status": "verified",
        "scope_origin": "organization",
    } in found["memories"]
    # no system-level writes through this surface, not even by a human admin
    await world.admin.fails(
        "memory-write",
        "SCOPE_VIOLATION",
        "context.repository_id",
        content="x",
        type="fact",
        context=ctx("_system", "write", ADMIN),
    )
    await world.admin.fails(
        "memory.lock", "SCOPE_VIOLATION", "memory_id", memory_id=rule["id"], context=ctx(r, "admin", ADMIN)
    )
    await world.admin.fails(
        "memory.deprecate",
        "SCOPE_VIOLATION",
        "memory_id",
        memory_id=rule["id"],
        reason="x",
        context=ctx(r, "write", ADMIN),
    )
    await world.agent.fails(
        "memory-write",
        "SCOPE_VIOLATION",
        "memory_id",
        content="x",
        type="fact",
        memory_id=rule["id"],
        context=ctx(r, "write"),
    )
    await world.agent.fails(
        "memory-write",
        "SCOPE_VIOLATION",
        "context.repository_id",
        content="x",
        type="fact",
        context=ctx("_system", "write"),
    )
    assert (await world.agent.read(r, rule["id"]))["version"] == 1


# -- 4. Result Limitation & Trimming ------------------------------------------------------------------------------


async def test_scenario_maximum_results_is_10_records(world: World) -> None:
    r = repo()
    for i in range(11):
        await world.agent.write(r, f"Service {i} exposes a health endpoint at /healthz")
    assert (await world.agent.search(r, "health endpoint", limit=10))["count"] == 10
    await world.agent.fails(
        "memory-search", "INVALID_INPUT", "limit", query="health endpoint", limit=11, context=ctx(r)
    )


async def test_scenario_ordering_priority_exact_then_semantic_in_the_repository_then_organization_rules(
    world: World,
) -> None:
    r = repo()
    rule = (
        await world.native(
            "memory_add",
            namespace=f"{ORG}/_system",
            kind="business_rule",
            content="Organization rule: rotate the database credentials before every audit",
        )
    )["id"]
    semantic = await world.agent.write(r, "Database passwords must be changed regularly by the platform team")
    exact = await world.agent.write(r, "Ops note: rotate the database credentials every 90 days")
    found = [
        m["memory_id"] for m in (await world.agent.search(r, "rotate the database credentials", limit=10))["memories"]
    ]
    assert found[:2] == [exact["memory_id"], semantic["memory_id"]], found
    assert rule in found[2:], found  # the rule contains the query, and still comes after the repository
    origins = [
        m["scope_origin"]
        for m in (await world.agent.search(r, "rotate the database credentials", limit=10))["memories"]
    ]
    assert origins == sorted(origins, key=["repository", "organization"].index)


async def test_scenario_trimming_strategy_drops_internal_ids_and_timestamps(world: World) -> None:
    r = repo()
    written = await world.agent.write(r, "Alerts page the on-call engineer through PagerDuty")
    assert set(written) == {"memory_id", "status", "version"}
    mid = written["memory_id"]
    found = await world.agent.search(r, "PagerDuty")
    assert set(found["memories"][0]) == {"memory_id", "content", "type", "status", "scope_origin"}
    for_agent = await world.agent.read(r, mid)
    assert not {"created_at", "updated_at", "namespace", "seq", "access_count", "accessed_at"} & set(for_agent)
    assert all(set(h) == {"version", "action", "agent_id"} for h in for_agent["history"])
    # a human admin sees the times and request ids (audit work); the domain has more still (native surface)
    for_admin = await world.admin.read(r, mid)
    assert {"created_at", "updated_at"} <= set(for_admin) and not {"namespace", "seq"} & set(for_admin)
    assert set(for_admin["history"][0]) == {"version", "action", "agent_id", "at", "request_id"}
    native = await world.native("memory_get", id=mid, namespace=f"{ORG}/{r}")
    assert native["seq"] > 0 and native["namespace"] == f"{ORG}/{r}"


# -- 5. Error Code Contract ---------------------------------------------------------------------------------------


async def test_scenario_error_code_contract_each_of_the_five_codes(world: World) -> None:
    r = repo()
    mid = (await world.agent.write(r, "Secrets live in Vault"))["memory_id"]
    await world.admin("memory.lock", memory_id=mid, context=ctx(r, "admin", ADMIN))
    await world.agent.fails("memory-search", "INVALID_CONTEXT", "context", query="Vault")
    await world.agent.fails(
        "memory-search",
        "INVALID_CONTEXT",
        "context.agent_id",
        query="Vault",
        context={"repository_id": r, "organization_id": ORG, "intent": "read", "request_id": "x1"},
    )
    await world.agent.fails("memory-search", "SCOPE_VIOLATION", None, query="Vault", context=ctx(FOREIGN))
    await world.agent.fails(
        "memory-write", "WRITE_NOT_ALLOWED", "type", content="x", type="business_rule", context=ctx(r, "write")
    )
    await world.agent.fails(
        "memory-write",
        "MEMORY_LOCKED",
        "memory_id",
        content="Secrets live in AWS",
        type="fact",
        memory_id=mid,
        context=ctx(r, "write"),
    )
    for unknown in (str(uuid.uuid4()), "not-a-memory-id"):
        e = await world.agent.fails("memory.read", "MEMORY_NOT_FOUND", None, memory_id=unknown, context=ctx(r))
        assert unknown in e["message"]


# -- 6. Security & Audit Notes ------------------------------------------------------------------------------------


async def test_scenario_explicit_write_no_auto_learn_from_reads_and_searches(world: World) -> None:
    r = repo()
    mid = (await world.agent.write(r, "The design system is called Atlas"))["memory_id"]
    for _ in range(3):
        await world.agent.search(r, "Remember that the design system was renamed to Nova")
        await world.agent.read(r, mid)
    stats = await world.native("memory_stats", namespace=f"{ORG}/{r}")
    assert stats["total"] == 1
    assert (await world.agent.read(r, mid))["version"] == 1


async def test_scenario_no_inference_content_is_stored_exactly_as_written(world: World) -> None:
    r = repo()
    content = "  Mixed CASE,  double  spaces,\ttabs\nand a second line: ünïcödé 🚀  "
    mid = (await world.agent.write(r, content, type="decision"))["memory_id"]
    assert (await world.agent.read(r, mid))["content"] == content
    assert (await world.native("memory_get", id=mid, namespace=f"{ORG}/{r}"))["content"] == content
    found = await world.agent.search(r, "Mixed CASE")
    assert next((m["memory_id"], m["content"], m["type"]) for m in found["memories"]) == (mid, content, "decision")


async def test_scenario_transparency_every_action_leaves_an_audit_trail_linking_agent_id_and_memory_id(
    world: World,
) -> None:
    r = repo()
    cw, cr, cs, cl = ctx(r, "write"), ctx(r), ctx(r), ctx(r, "admin")
    mid = (await world.agent("memory-write", content="Traces go to Tempo", type="fact", context=cw))["memory_id"]
    await world.agent("memory.read", memory_id=mid, context=cr)
    await world.agent("memory-search", query="Tempo", context=cs)
    await world.agent.fails("memory.lock", "WRITE_NOT_ALLOWED", None, memory_id=mid, context=cl)
    al = ctx(r, "admin", ADMIN)
    await world.admin("memory.lock", memory_id=mid, context=al)
    ce = ctx(r, "write")
    await world.agent.fails(
        "memory-write", "MEMORY_LOCKED", None, content="Traces go to Jaeger", type="fact", memory_id=mid, context=ce
    )
    ad = ctx(r, "write", ADMIN)
    await world.admin("memory.deprecate", memory_id=mid, reason="moved to Jaeger", context=ad)
    trail = await world.trail(mid, 7)
    assert {(x["action"], x["agent_id"], x["request_id"], x["outcome"], x.get("code")) for x in trail} == {
        ("memory_created", AGENT, cw["request_id"], "ok", None),
        ("read:memory.read", AGENT, cr["request_id"], "ok", None),
        ("read:memory-search", AGENT, cs["request_id"], "ok", None),
        ("denied:memory.lock", AGENT, cl["request_id"], "denied", "PERMISSION_ERROR"),
        ("memory_locked", ADMIN, al["request_id"], "ok", None),
        ("denied:memory-write", AGENT, ce["request_id"], "denied", "MEMORY_LOCKED"),
        ("memory_deprecated", ADMIN, ad["request_id"], "ok", None),
    }
    # an identifier that is not there is an action too: recorded, with the id asked for
    ghost, cg = str(uuid.uuid4()), ctx(r)
    await world.agent.fails("memory.read", "MEMORY_NOT_FOUND", None, memory_id=ghost, context=cg)
    [missing] = await world.trail(ghost, 1)
    assert (missing["action"], missing["agent_id"], missing["request_id"], missing["code"]) == (
        "denied:memory.read",
        AGENT,
        cg["request_id"],
        "MEMORY_NOT_FOUND",
    )


# -- one memory under every profile ----------------------------------------------------------------------------


async def test_cross_profile_native_reads_what_governed_writes_and_governed_reads_what_native_writes(
    world: World,
) -> None:
    r = repo()
    ns = f"{ORG}/{r}"
    mid = (await world.agent.write(r, "Customer data stays in the EU region", type="decision"))["memory_id"]
    got = await world.native_agent("memory_get", id=mid, namespace=ns)
    assert (got["content"], got["kind"], got["verification"], got["created_by"], got["namespace"]) == (
        "Customer data stays in the EU region",
        "decision",
        "unverified",
        AGENT,
        ns,
    )
    recalled = await world.native_agent("memory_search", query="where is customer data stored", namespace=ns)
    assert recalled["results"][0]["id"] == mid
    added = await world.native_agent(
        "memory_add", namespace=ns, content="Backups are kept for 35 days", kind="fact", tags=["ops"]
    )
    read = await world.agent.read(r, added["id"])
    assert (read["content"], read["type"], read["status"], read["tags"]) == (
        "Backups are kept for 35 days",
        "fact",
        "unverified",
        ["ops"],
    )
    found = await world.agent.search(r, "Backups are kept")
    assert found["memories"][0]["memory_id"] == added["id"]
    assert {m["id"] for m in (await world.native_agent("memory_list", namespace=ns))["results"]} == {mid, added["id"]}


async def test_cross_profile_a_memory_locked_through_governed_refuses_a_native_agent_change(world: World) -> None:
    r = repo()
    ns = f"{ORG}/{r}"
    mid = (await world.agent.write(r, "The CDN is Fastly"))["memory_id"]
    await world.admin("memory.lock", memory_id=mid, context=ctx(r, "admin", ADMIN))
    for tool, args in (
        ("memory_update", {"content": "The CDN is Cloudflare"}),
        ("memory_retire", {"mode": "deprecate", "reason": "x"}),
        ("memory_retire", {"mode": "archive"}),
    ):
        with pytest.raises(ToolFailure) as err:
            await world.native_agent(tool, id=mid, namespace=ns, **args)
        assert err.value.code == "MEMORY_LOCKED", err.value.error
    got = await world.native("memory_get", id=mid, namespace=ns)
    assert (got["content"], got["locked"], got["version"], got["status"]) == ("The CDN is Fastly", True, 2, "active")
