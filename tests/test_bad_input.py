"""Bad input, tool by tool: a structured error naming the field, nothing written, the server still serving.

Every case runs against one real stack (nats-server + projector + auditor + gateway) shared by the
module, so the ~100 cases stay fast. After each bad call the test checks that the stream's last
sequence did not move (no half-written change) and that a valid call still succeeds.

Unknown argument names are rejected (a typo fails loudly). Not asserted: pydantic's lax mode
coerces a few values (importance=True -> 1.0, expires_at=12345 -> a Unix time); a flag that destroys data
(memory_reset's confirm) takes a JSON true only.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, ClientSession
from mcp.client.stdio import stdio_client

from mneme.app import compose
from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from services.gateway.profiles import native
from services.gateway.server import build_server
from tests.harness import Stack, ToolFailure, serve_params, start_stack

pytestmark = pytest.mark.anyio

SEED = "<seed-id>"  # replaced by the id of the memory the module seeds
UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"  # well formed, never written
LIMIT = 65_536

BAD = "INVALID_INPUT"
NOT_FOUND = "MEMORY_NOT_FOUND"


def nested(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


NEST_32, NEST_33, NEST_200 = nested(32), nested(33), nested(200)  # 32 levels is the limit (README: Errors)


@pytest.fixture(scope="module")
def anyio_backend() -> str:  # module scope, so the shared stack below can be module scoped
    return "asyncio"


@pytest.fixture(scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[Stack, str]]:
    base = tmp_path_factory.mktemp("bad-input")
    server = EmbeddedNats(base / "nats")
    await server.start()
    stack = None
    try:
        stack = await start_stack(base / "data", server)
        seed = await stack.call("memory_add", content="seed memory", store="s", path="seed/one", tags=["t"])
        await stack.call("memory_add", content="second memory", store="s", path="seed/two")
        yield stack, seed["id"]
    finally:
        if stack is not None:
            await stack.close()
        await server.stop()


def case(tool: str, args: dict[str, Any], code: str, field: str | tuple[str, ...] | None, label: str) -> Any:
    return pytest.param(tool, args, code, field, id=f"{tool}-{label}")


CASES = [
    # -- memory_add ------------------------------------------------------------------------------
    case("memory_add", {"content": 123}, BAD, "content", "content-int"),
    case("memory_add", {"content": None}, BAD, "content", "content-null"),
    case("memory_add", {}, BAD, "content", "content-missing"),
    case("memory_add", {"content": ""}, BAD, "content", "content-empty"),
    case("memory_add", {"content": "   "}, BAD, "content", "content-blank"),
    case("memory_add", {"content": "x" * (LIMIT + 1)}, BAD, "content", "content-over-limit"),
    case("memory_add", {"content": "x", "tags": "x"}, BAD, "tags", "tags-str"),
    case("memory_add", {"content": "x", "tags": ["t" * 65]}, BAD, "tags", "tag-65"),
    case("memory_add", {"content": "x", "tags": ["   "]}, BAD, "tags", "tag-blank"),
    case("memory_add", {"content": "x", "tags": [f"t{i}" for i in range(51)]}, BAD, "tags", "tags-51"),
    case("memory_add", {"content": "x", "importance": "high"}, BAD, "importance", "importance-str"),
    case("memory_add", {"content": "x", "importance": 1.5}, BAD, "importance", "importance-1.5"),
    case("memory_add", {"content": "x", "importance": -0.5}, BAD, "importance", "importance-neg"),
    case("memory_add", {"content": "x", "confidence": 2}, BAD, "confidence", "confidence-2"),
    case("memory_add", {"content": "x", "store": "s", "path": "a/../b"}, BAD, "path", "path-dotdot"),
    case("memory_add", {"content": "x", "store": "s", "path": ".."}, BAD, "path", "path-only-dotdot"),
    case("memory_add", {"content": "x", "store": "s", "path": "a//b"}, BAD, "path", "path-empty-segment"),
    case("memory_add", {"content": "x", "store": "s", "path": "/a"}, BAD, "path", "path-leading-slash"),
    case("memory_add", {"content": "x", "store": "s", "path": "a/"}, BAD, "path", "path-trailing-slash"),
    case("memory_add", {"content": "x", "store": "s", "path": ""}, BAD, "path", "path-empty"),
    case("memory_add", {"content": "x", "store": "s", "path": "a/b*c"}, BAD, "path", "path-bad-char"),
    case("memory_add", {"content": "x", "store": "s", "path": "/".join("p" * 17)}, BAD, "path", "path-17-deep"),
    case("memory_add", {"content": "x", "store": "s", "path": "p" * 513}, BAD, "path", "path-513"),
    case("memory_add", {"content": "x", "store": "", "path": "a"}, BAD, "store", "store-empty"),
    case("memory_add", {"content": "x", "store": "s" * 65, "path": "a"}, BAD, "store", "store-65"),
    case("memory_add", {"content": "x", "store": "a b", "path": "a"}, BAD, "store", "store-space"),
    case("memory_add", {"content": "x", "store": "a..b", "path": "a"}, BAD, "store", "store-dotdot"),
    case("memory_add", {"content": "x", "store": "s"}, BAD, "path", "store-without-path"),
    case("memory_add", {"content": "x", "path": "a"}, BAD, "store", "path-without-store"),
    case("memory_add", {"content": "x", "namespace": "bad ns!"}, BAD, "namespace", "namespace-chars"),
    case("memory_add", {"content": "x", "namespace": ""}, BAD, "namespace", "namespace-empty"),
    case("memory_add", {"content": "x", "namespace": "a//b"}, BAD, "namespace", "namespace-empty-segment"),
    case("memory_add", {"content": "x", "namespace": "../x"}, BAD, "namespace", "namespace-dotdot"),
    case("memory_add", {"content": "x", "namespace": "a/b/c/d/e"}, BAD, "namespace", "namespace-5-segments"),
    case("memory_add", {"content": "x", "namespace": "n" * 256}, BAD, "namespace", "namespace-256"),
    case("memory_add", {"content": "x", "kind": "Not A Kind"}, BAD, "kind", "kind-pattern"),
    case("memory_add", {"content": "x", "category": "   "}, BAD, "category", "category-blank"),
    case("memory_add", {"content": "x", "subject": "s" * 129}, BAD, "subject", "subject-129"),
    case("memory_add", {"content": "x", "citations": [""]}, BAD, "citations", "citation-empty"),
    case("memory_add", {"content": "x", "metadata": "m"}, BAD, "metadata", "metadata-str"),
    case("memory_add", {"content": "x", "metadata": {"k": "v" * 20_000}}, BAD, "metadata", "metadata-too-big"),
    case("memory_add", {"content": "x", "expires_at": "not-a-date"}, BAD, "expires_at", "expires-not-a-date"),
    case(
        "memory_add",
        {"content": "x", "valid_from": "2024-01-02T00:00:00Z", "valid_until": "2024-01-01T00:00:00Z"},
        BAD,
        "valid_until",
        "validity-reversed",
    ),
    case("memory_add", {"content": "x", "request_id": ""}, BAD, "request_id", "request-id-empty"),
    case("memory_add", {"content": "x", "importance": "NaN"}, BAD, "importance", "importance-nan"),
    case("memory_add", {"content": "x", "importance": "Infinity"}, BAD, "importance", "importance-inf"),
    case("memory_add", {"content": "x", "confidence": "-Infinity"}, BAD, "confidence", "confidence-minus-inf-str"),
    case("memory_add", {"content": "\ud800"}, BAD, "content", "content-lone-surrogate"),
    case("memory_add", {"content": "x", "tags": ["ok", "\udc00"]}, BAD, "tags", "tag-lone-surrogate"),
    case("memory_add", {"content": "x", "metadata": {"k": "a\ud800"}}, BAD, "metadata", "metadata-lone-surrogate"),
    case("memory_add", {"content": "x", "metadata": NEST_33}, BAD, "metadata", "metadata-33-deep"),
    case("memory_add", {"content": "x", "metadata": NEST_200}, BAD, "metadata", "metadata-200-deep"),
    case("memory_add", {"content": "x", "citations": [NEST_200]}, BAD, "citations", "citations-200-deep"),
    # -- memory_get ------------------------------------------------------------------------------
    case("memory_get", {}, BAD, "id", "no-id-no-path"),
    case("memory_get", {"id": "s:"}, BAD, "id", "store-without-path"),
    case("memory_get", {"id": "not-a-uuid"}, BAD, "id", "id-malformed"),
    case("memory_get", {"id": 123}, BAD, "id", "id-int"),
    case("memory_get", {"id": "x" * 65}, BAD, "id", "id-65"),
    case("memory_get", {"id": "s:../etc/passwd"}, BAD, "id", "path-dotdot"),
    case("memory_get", {"id": "s:/seed/one"}, BAD, "id", "path-leading-slash"),
    case("memory_get", {"id": "s:seed//one"}, BAD, "id", "path-empty-segment"),
    case("memory_get", {"id": ":seed/one"}, BAD, "id", "store-empty"),
    case("memory_get", {"id": "s" * 65 + ":seed/one"}, BAD, "id", "store-65"),
    case("memory_get", {"id": SEED, "namespace": "bad ns"}, BAD, "namespace", "namespace-chars"),
    case("memory_get", {"id": SEED, "include_expired": "maybe"}, BAD, "include_expired", "include-expired-str"),
    case("memory_get", {"id": UNKNOWN_ID}, NOT_FOUND, None, "unknown-id"),
    case("memory_get", {"id": "s:seed/none"}, NOT_FOUND, None, "unknown-path"),
    case("memory_get", {"id": SEED, "as_of": 1.5}, BAD, "as_of", "as-of-fraction"),
    case("memory_get", {"id": SEED, "as_of": [1]}, BAD, "as_of", "as-of-list"),
    # -- memory_update ---------------------------------------------------------------------------
    case("memory_update", {"content": "y"}, BAD, "id", "no-target"),
    case("memory_update", {"id": "nope", "content": "y"}, BAD, "id", "id-malformed"),
    case("memory_update", {"id": UNKNOWN_ID, "content": "y"}, NOT_FOUND, None, "unknown-id"),
    case("memory_update", {"id": SEED, "content": 123}, BAD, "content", "content-int"),
    case("memory_update", {"id": SEED, "content": ""}, BAD, "content", "content-empty"),
    case("memory_update", {"id": SEED, "content": "   "}, BAD, "content", "content-blank"),
    case("memory_update", {"id": SEED, "content": "x" * (LIMIT + 1)}, BAD, "content", "content-over-limit"),
    case("memory_update", {"id": SEED, "tags": "x"}, BAD, "tags", "tags-str"),
    case("memory_update", {"id": SEED, "tags": ["t" * 65]}, BAD, "tags", "tag-65"),
    case("memory_update", {"id": SEED, "importance": "high"}, BAD, "importance", "importance-str"),
    case("memory_update", {"id": SEED, "importance": 1.5}, BAD, "importance", "importance-1.5"),
    case("memory_update", {"id": SEED, "confidence": -0.1}, BAD, "confidence", "confidence-neg"),
    case("memory_update", {"id": SEED, "kind": "BAD"}, BAD, "kind", "kind-pattern"),
    case("memory_update", {"id": SEED, "expires_at": "not-a-date"}, BAD, "expires_at", "expires-not-a-date"),
    case(
        "memory_update",
        {"id": SEED, "expires_at": "2099-01-01T00:00:00Z", "clear_expiry": True},
        BAD,
        "clear_expiry",
        "expiry-and-clear",
    ),
    case(
        "memory_update",
        {"id": SEED, "valid_from": "2024-01-02T00:00:00Z", "valid_until": "2024-01-01T00:00:00Z"},
        BAD,
        "valid_until",
        "validity-reversed",
    ),
    case("memory_update", {"id": SEED, "metadata": {"k": "v" * 20_000}}, BAD, "metadata", "metadata-too-big"),
    case("memory_update", {"id": SEED, "metadata": NEST_33}, BAD, "metadata", "metadata-33-deep"),
    case("memory_update", {"id": SEED, "importance": "-inf"}, BAD, "importance", "importance-minus-inf"),
    case("memory_update", {"id": "s:seed/../one", "content": "y"}, BAD, "id", "path-dotdot"),
    case("memory_update", {"id": ":seed/one", "content": "y"}, BAD, "id", "store-empty"),
    # -- memory_move -----------------------------------------------------------------------------
    case("memory_move", {"id": SEED}, BAD, "to_path", "to-path-missing"),
    case("memory_move", {"id": SEED, "to_path": 5}, BAD, "to_path", "to-path-int"),
    case("memory_move", {"id": SEED, "to_path": ""}, BAD, "to_path", "to-path-empty"),
    case("memory_move", {"id": SEED, "to_path": "a/../x"}, BAD, "to_path", "to-path-dotdot"),
    case("memory_move", {"id": SEED, "to_path": "/x"}, BAD, "to_path", "to-path-leading-slash"),
    case("memory_move", {"id": SEED, "to_path": "a//x"}, BAD, "to_path", "to-path-empty-segment"),
    case("memory_move", {"id": SEED, "to_path": "a/b "}, BAD, "to_path", "to-path-edge-space"),
    case("memory_move", {"id": SEED, "to_path": "p" * 513}, BAD, "to_path", "to-path-513"),
    case("memory_move", {"id": "nope", "to_path": "x"}, BAD, "id", "id-malformed"),
    case("memory_move", {"to_path": "x"}, BAD, "id", "no-target"),
    case("memory_move", {"id": UNKNOWN_ID, "to_path": "x"}, NOT_FOUND, None, "unknown-id"),
    case(
        "memory_move",
        {"id": "s:seed/one", "to_path": "seed/two"},
        "ALREADY_EXISTS",
        "to_path",
        "to-path-occupied",
    ),
    # -- memory_retire (was memory_delete; its `permanent` flag is now mode="delete") ---------------
    case("memory_retire", {}, BAD, "id", "no-target"),
    case("memory_retire", {"id": "bad"}, BAD, "id", "id-malformed"),
    case("memory_retire", {"id": UNKNOWN_ID}, NOT_FOUND, None, "unknown-id"),
    case("memory_retire", {"id": SEED, "mode": "maybe"}, BAD, "mode", "mode-unknown"),
    case("memory_retire", {"id": SEED, "reason": "r" * 129}, BAD, "reason", "reason-129"),
    case("memory_retire", {"id": "s:"}, BAD, "id", "path-empty"),
    case("memory_retire", {"id": "s:../seed/one"}, BAD, "id", "path-dotdot"),
    case("memory_retire", {"id": SEED, "request_id": "r" * 129}, BAD, "request_id", "request-id-129"),
    # -- memory_restore --------------------------------------------------------------------------
    case("memory_restore", {}, BAD, "id", "no-target"),
    case("memory_restore", {"id": "zzz"}, BAD, "id", "id-malformed"),
    case("memory_restore", {"id": 42}, BAD, "id", "id-int"),
    case("memory_restore", {"id": UNKNOWN_ID}, NOT_FOUND, None, "unknown-id"),
    case("memory_restore", {"id": "s" * 65 + ":seed/one"}, BAD, "id", "store-65"),
    case("memory_restore", {"id": "s:/seed/one"}, BAD, "id", "path-leading-slash"),
    # -- memory_list -----------------------------------------------------------------------------
    case("memory_list", {"limit": "ten"}, BAD, "limit", "limit-str"),
    case("memory_list", {"limit": -1}, BAD, "limit", "limit-neg"),
    case("memory_list", {"limit": 0}, BAD, "limit", "limit-0"),
    case("memory_list", {"limit": 501}, BAD, "limit", "limit-501"),
    case("memory_list", {"limit": 1.5}, BAD, "limit", "limit-fraction"),
    case("memory_list", {"offset": -1}, BAD, "offset", "offset-neg"),
    case("memory_list", {"offset": "x"}, BAD, "offset", "offset-str"),
    case("memory_add", {"content": "x", "tgas": ["a"]}, BAD, "tgas", "add-misspelt-argument"),
    case("memory_list", {"sortby": "importance"}, BAD, "sortby", "list-misspelt-argument"),
    case("memory_get", {"id": "s:"}, BAD, "id", "get-store-without-path"),
    case("memory_get", {"id": ":seed/one"}, BAD, "id", "get-path-without-store"),
    case("memory_list", {"sort_by": "size"}, BAD, "sort_by", "sort-by-unknown"),
    case("memory_list", {"status": "deleted"}, BAD, "status", "status-unknown"),
    case("memory_list", {"sort_order": "up"}, BAD, "sort_order", "sort-order-unknown"),
    case("memory_list", {"store": ""}, BAD, "store", "store-empty"),
    case("memory_list", {"store": "s" * 65}, BAD, "store", "store-65"),
    case("memory_list", {"store": "s", "category_path": "../x"}, BAD, "category_path", "category-dotdot"),
    case("memory_list", {"store": "s", "category_path": "/seed"}, BAD, "category_path", "category-leading-slash"),
    case("memory_list", {"store": "s", "category_path": ""}, BAD, "category_path", "category-empty"),
    case("memory_list", {"namespace": "a b"}, BAD, "namespace", "namespace-chars"),
    case("memory_list", {"tags": ["t" * 65]}, BAD, "tags", "tag-65"),
    case("memory_list", {"tags": "t"}, BAD, "tags", "tags-str"),
    case("memory_list", {"importance_min": 1.5}, BAD, "importance_min", "importance-min-1.5"),
    case("memory_list", {"importance_max": "high"}, BAD, "importance_max", "importance-max-str"),
    case("memory_list", {"importance_min": "nan"}, BAD, "importance_min", "importance-min-nan"),
    case("memory_list", {"kind": "Bad Kind"}, BAD, "kind", "kind-pattern"),
    case("memory_list", {"recursive": "x"}, BAD, "recursive", "recursive-str"),
    # -- the most recent: memory_list sorted by updated_at (was memory_recent, whose limit was 1..100) ---
    case("memory_list", {"sort_by": "updated_at", "limit": "ten"}, BAD, "limit", "recent-limit-str"),
    case("memory_list", {"sort_by": "updated_at", "limit": -3}, BAD, "limit", "recent-limit-neg"),
    case("memory_list", {"sort_by": "updated_at", "limit": 0}, BAD, "limit", "recent-limit-0"),
    case("memory_list", {"sort_by": "updated_at", "limit": 501}, BAD, "limit", "recent-limit-over-max"),
    case("memory_list", {"sort_by": "updated_at", "store": ""}, BAD, "store", "recent-store-empty"),
    case("memory_list", {"sort_by": "updated_at", "store": "s" * 65}, BAD, "store", "recent-store-65"),
    case("memory_list", {"sort_by": "updated_at", "category_path": "a//b"}, BAD, "category_path",
         "recent-category-empty-segment"),
    case("memory_list", {"sort_by": "updated_at", "category_path": "a/.."}, BAD, "category_path",
         "recent-category-dotdot"),
    case("memory_list", {"sort_by": "updated_at", "namespace": "bad/ns!"}, BAD, "namespace", "recent-namespace-chars"),
    # -- memory_prune_expired --------------------------------------------------------------------
    case("memory_prune_expired", {"store": ""}, BAD, "store", "store-empty"),
    case("memory_prune_expired", {"store": "s" * 65}, BAD, "store", "store-65"),
    case("memory_prune_expired", {"store": "bad store"}, BAD, "store", "store-space"),
    case("memory_prune_expired", {"store": 7}, BAD, "store", "store-int"),
    case("memory_prune_expired", {"namespace": "../x"}, BAD, "namespace", "namespace-dotdot"),
    case("memory_prune_expired", {"namespace": ""}, BAD, "namespace", "namespace-empty"),
    case("memory_prune_expired", {"request_id": ""}, BAD, "request_id", "request-id-empty"),
    # -- memory_stats ----------------------------------------------------------------------------
    case("memory_stats", {"top_tags": 0}, BAD, "top_tags", "top-tags-0"),
    case("memory_stats", {"top_tags": -5}, BAD, "top_tags", "top-tags-neg"),
    case("memory_stats", {"top_tags": 101}, BAD, "top_tags", "top-tags-101"),
    case("memory_stats", {"top_tags": "x"}, BAD, "top_tags", "top-tags-str"),
    case("memory_stats", {"store": ""}, BAD, "store", "store-empty"),
    case("memory_stats", {"store": "s" * 65}, BAD, "store", "store-65"),
    case("memory_stats", {"namespace": "a/b/c/d/e"}, BAD, "namespace", "namespace-5-segments"),
]  # fmt: skip


def _fill(args: dict[str, Any], seed: str) -> dict[str, Any]:
    return {k: (seed if v == SEED else v) for k, v in args.items()}


def _field_ok(got: str | None, want: str | tuple[str, ...] | None) -> bool:
    if want is None:
        return True  # MEMORY_NOT_FOUND names the memory, not a field
    wanted = want if isinstance(want, tuple) else (want,)
    # list items are named with their index ("tags.0"): the field is the part before the dot
    return got is not None and got.split(".")[0] in wanted


@pytest.mark.parametrize(("tool", "args", "code", "field"), CASES)
async def test_bad_input_is_a_structured_error(
    shared: tuple[Stack, str], tool: str, args: dict[str, Any], code: str, field: str | tuple[str, ...] | None
) -> None:
    stack, seed = shared
    before = await stack.last_seq()
    with anyio.fail_after(15):
        with pytest.raises(ToolFailure) as err:
            await stack.call(tool, **_fill(args, seed))
    e = err.value
    assert e.code == code, e.error
    assert _field_ok(e.field, field), f"field {e.field!r}, expected {field!r}: {e.error}"
    message = e.error.get("message")
    assert isinstance(message, str) and message.strip(), e.error
    if code == BAD:
        assert e.field is not None and e.field.split(".")[0] in message, f"message does not name the field: {e.error}"
    if code == NOT_FOUND:
        assert "not found" in message.lower(), e.error
    # nothing was written ...
    assert await stack.last_seq() == before, f"{tool} wrote an event for bad input {args!r}"
    # ... and the server still serves: a valid read succeeds and sees the seed unchanged
    got = await stack.call("memory_get", id=seed)
    assert got["id"] == seed and got["content"] == "seed memory" and got["path"] == "seed/one"
    assert got["version"] == 1


async def test_content_at_the_limit_is_accepted_and_one_over_is_not(shared: tuple[Stack, str]) -> None:
    """The boundary itself: 65,536 characters is fine (the rejections above are not a blanket refusal)."""
    stack, _ = shared
    before = await stack.last_seq()
    with pytest.raises(ToolFailure) as err:
        await stack.call("memory_add", content="y" * (LIMIT + 1))
    assert err.value.code == BAD and err.value.field == "content"
    assert str(LIMIT) in err.value.error["message"]
    assert await stack.last_seq() == before
    added = await stack.call("memory_add", content="y" * LIMIT)
    assert added["seq"] == before + 1 == await stack.last_seq()
    got = await stack.call("memory_get", id=added["id"])
    assert len(got["content"]) == LIMIT


async def test_a_batch_of_bad_calls_then_a_good_write_works(shared: tuple[Stack, str]) -> None:
    """Many bad calls in a row (all tools) do not wedge the gateway: the next write and read succeed."""
    stack, seed = shared
    before = await stack.last_seq()
    for p in CASES:
        tool, args, _, _ = p.values
        with pytest.raises(ToolFailure):
            await stack.call(tool, **_fill(args, seed))
    assert await stack.last_seq() == before
    added = await stack.call("memory_add", content="after the storm", store="s", path="after/storm")
    assert added["seq"] == before + 1
    got = await stack.call("memory_get", id="s:after/storm")
    assert got["content"] == "after the storm"


async def test_metadata_may_nest_32_levels_and_not_33(shared: tuple[Stack, str]) -> None:
    stack, _ = shared
    before = await stack.last_seq()
    with pytest.raises(ToolFailure) as err:
        await stack.call("memory_add", content="too deep", metadata=NEST_33)
    assert err.value.error == {"code": BAD, "field": "metadata", "message": "metadata: nested deeper than 32 levels"}
    assert await stack.last_seq() == before
    added = await stack.call("memory_add", content="deep enough", metadata=NEST_32)
    assert (await stack.call("memory_get", id=added["id"]))["metadata"] == NEST_32


def _is_number(prop: dict[str, Any]) -> bool:
    return prop.get("type") == "number" or any(m.get("type") == "number" for m in prop.get("anyOf", ()))


REQUIRED = {
    "content": "x",
    "query": "x",
    "id": SEED,
    "source": "a",
    "target": "b",
    "type": "t",
}  # what the tools with a float parameter require besides it


async def test_every_float_parameter_refuses_nan_and_infinity(shared: tuple[Stack, str]) -> None:
    """Found through the tools' own schemas, so a float parameter added later is covered too. In process the
    client sends a float NaN as null, so the spellings pydantic reads as floats are sent; the JSON literals
    (`NaN`, `Infinity`, `1e400`) go over the wire in test_e2e_stdio.py."""
    stack, seed = shared
    before = await stack.last_seq()
    checked = []
    for tool in (await stack.client.list_tools()).tools:
        props = tool.input_schema.get("properties", {})
        for name in (n for n, p in props.items() if _is_number(p)):
            args = _fill({k: REQUIRED[k] for k in tool.input_schema.get("required", [])}, seed)
            for bad in ("NaN", "nan", "Infinity", "-inf", "+inf"):
                with pytest.raises(ToolFailure) as err:
                    await stack.call(tool.name, **args, **{name: bad})
                assert err.value.error["code"] == BAD and err.value.field == name, (tool.name, bad, err.value.error)
                assert err.value.error["message"] == f"{name}: must be a finite number", (tool.name, bad)
            checked.append(f"{tool.name}.{name}")
    # 10 on the native surface: add and update (importance, confidence), list (importance_min/max), search
    # (threshold, importance_min/max, semantic_weight: one tool where three searches were)
    assert len(checked) >= 10 and "memory_search.semantic_weight" in checked, checked
    assert await stack.last_seq() == before


async def test_a_union_argument_is_named_by_itself_with_what_it_accepts(shared: tuple[Stack, str]) -> None:
    """`as_of` is a sequence or a time: a value that is neither fails once, on `as_of` (not `as_of.int`)."""
    stack, seed = shared
    for tool, args in (
        ("memory_get", {"id": seed}),
        ("memory_list", {}),
        ("memory_search", {"query": "x", "mode": "keyword"}),
    ):
        for bad in (1.5, [1], {"seq": 1}, 2.25):
            with pytest.raises(ToolFailure) as err:
                await stack.call(tool, as_of=bad, **args)
            e = err.value.error
            assert e["code"] == BAD and e["field"] == "as_of", (tool, bad, e)
            assert e["message"].startswith(
                "as_of: must be a log sequence number (an integer) or an ISO 8601 time (a string); got "
            ), e
            assert [x["field"] for x in e["errors"]] == ["as_of"], e


async def test_an_unknown_tool_is_a_structured_error(shared: tuple[Stack, str]) -> None:
    stack, _ = shared
    with pytest.raises(ToolFailure) as err:
        await stack.call("memory_nuke")
    assert err.value.code == "UNKNOWN_TOOL" and err.value.field == "name", err.value.error
    assert "'memory_nuke'" in err.value.error["message"] and "memory_add" in err.value.error["message"]


# -- over stdio, against the real `mneme serve` process ---------------------------------------------


def _stdio_error(res: Any) -> dict[str, Any]:
    assert res.is_error, f"expected a tool error, got {res}"
    return json.loads(res.content[0].text)["error"]


async def test_bad_calls_over_stdio_do_not_kill_mneme_serve(tmp_path: Path) -> None:
    data = tmp_path / "data"
    errlog = (tmp_path / "serve.stderr").open("w")
    bad: list[tuple[str, dict[str, Any], str | None]] = [
        ("memory_add", {"content": 123}, "content"),
        ("memory_add", {}, "content"),
        ("memory_add", {"content": "x" * (LIMIT + 1)}, "content"),
        ("memory_add", {"content": "x", "store": "s", "path": "../escape"}, "path"),
        ("memory_get", {}, "id"),
        ("memory_get", {"id": "not-a-uuid"}, "id"),
        ("memory_move", {"id": UNKNOWN_ID}, "to_path"),
        ("memory_list", {"sort_by": "size", "limit": "ten"}, None),  # two problems: either may be named first
        ("memory_stats", {"top_tags": -1}, "top_tags"),
    ]
    try:
        with anyio.fail_after(60):
            async with (
                stdio_client(serve_params(data), errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                for tool, args, field in bad:
                    err = _stdio_error(await session.call_tool(tool, args))
                    assert err["code"] == BAD, (tool, args, err)
                    if field is None:
                        assert err["field"] in ("sort_by", "limit"), err
                    else:
                        assert err["field"] == field, (tool, args, err)
                # the process survived all of that: a write and a read-back work
                res = await session.call_tool("memory_add", {"content": "still here", "store": "s", "path": "ok"})
                assert not res.is_error, res.content
                mem = res.structured_content
                assert mem["seq"] == 1, "the bad calls must not have written anything"
                res = await session.call_tool("memory_get", {"id": "s:ok"})
                assert not res.is_error, res.content
                assert res.structured_content["id"] == mem["id"]
                assert res.structured_content["content"] == "still here"
    finally:
        errlog.close()
    stderr = (tmp_path / "serve.stderr").read_text()
    assert "Traceback" not in stderr, stderr[-3000:]


async def test_a_reset_confirmed_with_anything_but_a_json_true_is_refused(shared: tuple[Stack, str]) -> None:
    """memory_reset deletes a namespace: pydantic's lax mode read confirm="yes" (or 1) as true, and an admin's
    call with it wiped the namespace. A flag that destroys data takes a JSON true only."""
    stack, seed = shared
    admin = GatewaySettings(role="admin", tools=list(native.GROUPS))
    async with Client(build_server(compose.gateway(stack.nc, admin))) as client:
        for confirm in ("yes", "true", 1):
            before = await stack.last_seq()
            res = await client.call_tool("memory_reset", {"confirm": confirm})
            assert res.is_error, res
            err = json.loads(res.content[0].text)["error"]  # type: ignore[union-attr]
            assert err["code"] == BAD and err["field"] == "confirm", err
            assert await stack.last_seq() == before
    assert (await stack.call("memory_get", id=seed))["content"] == "seed memory"
