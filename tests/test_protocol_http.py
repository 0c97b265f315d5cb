"""`mneme serve --transport http` at the protocol level (issue 28): capabilities on every profile's path,
resumable POST streams (a priming event and `retry` first, `Last-Event-ID` replays), the answer to an
unsupported `MCP-Protocol-Version` header, log levels, and tools/call params that fail validation. One
server child for the module, driven with httpx as a client's HTTP layer drives it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp_types.version import SUPPORTED_PROTOCOL_VERSIONS

from services.gateway import profiles
from tests.harness import MNEME, free_port, wait_listening

ACCEPT = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def events(r: httpx.Response) -> list[dict[str, str]]:
    """The SSE events of a response, each its fields (`id`, `event`, `data`, `retry`)."""
    out = []
    for block in r.text.replace("\r\n", "\n").split("\n\n"):
        event: dict[str, str] = {}
        for line in block.split("\n"):
            if line and not line.startswith(":"):
                name, _, value = line.partition(":")
                event[name] = value.removeprefix(" ")
        if event:
            out.append(event)
    return out


def reply(r: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message a POST was answered with (the last event of a stream, or the JSON body)."""
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        return dict(json.loads([e for e in events(r) if e.get("data")][-1]["data"]))
    return dict(r.json())


class Http:
    def __init__(self, base: str):
        self.base = base
        self.client = httpx.Client(timeout=20)

    def post(self, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
        return self.client.post(self.base + path, json=body, headers={**ACCEPT, **headers})

    def session(self, path: str = "/mcp", version: str = "2025-11-25") -> tuple[dict[str, str], httpx.Response]:
        """Headers for a new initialized session on `path`, and the response to its initialize."""
        init = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
        r = self.post(path, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
        assert r.status_code == 200, r.text
        headers = {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": version}
        assert self.post(path, {"jsonrpc": "2.0", "method": "notifications/initialized"}, **headers).status_code == 202
        return headers, r


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Http]:
    tmp = tmp_path_factory.mktemp("http")
    port, errlog = free_port(), tmp / "stderr"
    proc = subprocess.Popen([MNEME, "serve", "--data-dir", str(tmp / "d"), "--transport", "http",
                             "--host", "127.0.0.1", "--port", str(port)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errlog.open("wb"),
                            env={**os.environ, "MNEME_GATEWAY_HTTP_ANONYMOUS": "true"})  # fmt: skip
    try:
        wait_listening(proc, port, errlog=errlog)
        h = Http(f"http://127.0.0.1:{port}")
        yield h
        h.client.close()
        proc.terminate()
        assert proc.wait(20) == 0
        log = errlog.read_text()
        assert "Traceback" not in log and "Error handling POST request" not in log, log[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()


def fields(err: dict[str, Any]) -> dict[str, str]:
    assert isinstance(err.get("data"), dict), err  # (the SDK alone sends data "")
    return {e["field"]: e["problem"] for e in err["data"]["errors"]}


def test_every_profile_advertises_tools_and_logging_and_nothing_it_does_not_serve(http: Http) -> None:
    for name in profiles.names():
        path = profiles.http_path(name)
        headers, r = http.session(path)
        assert set(reply(r)["result"]["capabilities"]) == {"tools", "logging"}, (name, r.text)
        for method in ("prompts/list", "resources/list"):
            err = reply(http.post(path, {"jsonrpc": "2.0", "id": 1, "method": method}, **headers))["error"]
            assert (err["code"], err["data"]) == (-32601, method), (name, err)
        err = reply(http.post(path, {"jsonrpc": "2.0", "id": 2, "method": "prompts/get", "params": {"name": "x"}},
                              **headers))["error"]  # fmt: skip
        assert err["code"] == -32602 and "'x'" in err["message"], (name, err)
    discover = {"jsonrpc": "2.0", "id": 3, "method": "server/discover", "params": {"_meta": MODERN_META}}
    r = http.post("/mcp", discover, **{"mcp-protocol-version": "2026-07-28", "mcp-method": "server/discover"})
    assert set(reply(r)["result"]["capabilities"]) == {"tools"}, r.text  # no logging/setLevel in 2026-07-28


def test_post_streams_open_with_a_priming_event_and_a_retry_field(http: Http) -> None:
    headers, r = http.session()
    first, *rest = events(r)
    assert first["data"] == "" and first["id"] and int(first["retry"]) > 0, events(r)
    assert rest[-1]["event"] == "message" and rest[-1]["id"] and json.loads(rest[-1]["data"])["id"] == 0
    r = http.post("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, **headers)
    first, *rest = events(r)
    assert first["data"] == "" and int(first["retry"]) > 0 and first["id"] != rest[-1]["id"], events(r)
    assert "memory_add" in rest[-1]["data"]
    _, old = http.session(version="2025-06-18")  # an older client cannot read an event without data: none
    assert [e["event"] for e in events(old)] == ["message"], old.text


def resumed(http: Http, headers: dict[str, str], last_event_id: str) -> dict[str, Any]:
    """The first message a GET resuming after `last_event_id` replays."""
    get = {**headers, "accept": "text/event-stream", "last-event-id": last_event_id}
    with http.client.stream("GET", http.base + "/mcp", headers=get, timeout=10) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line[6:]:
                return dict(json.loads(line[6:]))
    raise AssertionError("the resumed stream replayed nothing")


def test_a_client_that_lost_a_stream_resumes_it_with_last_event_id(http: Http) -> None:
    a, _ = http.session()
    b, _ = http.session()
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "memory_stats", "arguments": {}}}
    primed_a = events(http.post("/mcp", call, **a))[0]["id"]
    primed_b = events(http.post("/mcp", {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}, **b))[0]["id"]
    got_a, got_b = resumed(http, a, primed_a), resumed(http, b, primed_b)
    assert got_a["id"] == 7 and "structuredContent" in got_a["result"], got_a  # each session its own answer 7
    assert got_b["id"] == 7 and "tools" in got_b["result"], got_b


@pytest.mark.parametrize("version", ["invalid-protocol-version", "2000-01-01", "2099-01-01"])
def test_an_unsupported_protocol_version_is_400_naming_the_supported_ones(http: Http, version: str) -> None:
    session, _ = http.session()
    probe = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for headers in ({}, session):  # before initialize, and within a session
        r = http.post("/mcp", probe, **{**headers, "mcp-protocol-version": version})
        assert r.status_code == 400, r.text
        msg = r.json()
        assert msg["id"] == 1 and msg["error"]["code"] == -32022, msg
        text = msg["error"]["message"]
        assert "MCP-Protocol-Version" in text and "_meta" not in text and version in text, text
        assert all(v in text for v in SUPPORTED_PROTOCOL_VERSIONS), text
        assert msg["error"]["data"] == {"supported": list(SUPPORTED_PROTOCOL_VERSIONS), "requested": version}
    get = {**session, "accept": "text/event-stream", "mcp-protocol-version": version}
    assert http.client.get(http.base + "/mcp", headers=get).status_code == 400
    assert reply(http.post("/mcp", probe, **session))["result"]["tools"]  # a supported version still works


def test_tools_call_params_that_fail_validation_name_the_field(http: Http) -> None:
    legacy, _ = http.session()
    modern = {"mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call"}
    cases: list[tuple[dict[str, Any], dict[str, str]]] = [
        ({"name": "memory_stats", "arguments": ["x"]}, {"params.arguments": "must be an object"}),
        ({"arguments": {}}, {"params.name": "is required"}),
    ]
    for params, named in cases:
        r = http.post("/mcp", {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params}, **legacy)
        err = reply(r)["error"]
        assert err["code"] == -32602 and fields(err) == named, err
        body = {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {**params, "_meta": MODERN_META}}
        name = {"mcp-name": params["name"]} if "name" in params else {}
        r = http.post("/mcp", body, **modern, **name)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == -32602 and fields(r.json()["error"]) == named, r.text


def test_logging_set_level_over_http(http: Http) -> None:
    legacy, _ = http.session()
    ok = http.post("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "notice"}},
                   **legacy)  # fmt: skip
    assert reply(ok) == {"jsonrpc": "2.0", "id": 1, "result": {}}
    bad = http.post("/mcp", {"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel", "params": {"level": "loud"}},
                    **legacy)  # fmt: skip
    err = reply(bad)["error"]
    assert err["code"] == -32602 and set(fields(err)) == {"params.level"}, err
