"""`mneme serve` over stdio, at the protocol level (issue 28): what it advertises, and the JSON-RPC errors it
answers for prompts it does not have, log levels, and tools/call params that fail validation. One server
child for the module, driven with raw JSON-RPC lines as a client writes them."""

from __future__ import annotations

import json
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import pytest
from mcp_types import LoggingLevel

from tests.harness import MNEME

LEVELS = get_args(LoggingLevel)  # the eight RFC 5424 levels, least severe first


class Serve:
    """A `mneme serve` child: requests go in on stdin, replies come back on stdout, its log goes to a file."""

    def __init__(self, data: Path):
        self.log = data.parent / "stderr"
        self.proc = subprocess.Popen(
            [MNEME, "serve", "--data-dir", str(data)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log.open("wb"),
        )
        self._next = 0
        self.capabilities: dict[str, Any] = {}  # what initialize advertised

    def request(self, method: str, params: Any = None, *, timeout: float = 30) -> dict[str, Any]:
        self._next += 1
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next, "method": method}
        if params is not None:
            msg["params"] = params
        self.notify_raw(msg)
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.stdout is not None
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"no reply to {method} within {timeout} s; stderr: {self.log.read_text()[-2000:]}"
            reply = json.loads(self.proc.stdout.readline())
            if reply.get("id") == self._next:
                return dict(reply)

    def notify_raw(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def error(self, method: str, params: Any = None) -> dict[str, Any]:
        reply = self.request(method, params)
        assert "error" in reply, reply
        return dict(reply["error"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    s = Serve(tmp_path_factory.mktemp("stdio") / "d")
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    s.capabilities = s.request("initialize", init)["result"]["capabilities"]
    s.notify_raw({"jsonrpc": "2.0", "method": "notifications/initialized"})
    yield s
    s.close()


def fields(err: dict[str, Any]) -> dict[str, str]:
    """The fields a -32602 names, each with its problem."""
    assert isinstance(err.get("data"), dict), err  # (the SDK alone sends data "")
    return {e["field"]: e["problem"] for e in err["data"]["errors"]}


def test_it_advertises_tools_and_logging_and_nothing_it_does_not_serve(serve: Serve) -> None:
    caps = serve.capabilities
    assert set(caps) == {"tools", "logging"}, caps
    for method in ("prompts/list", "resources/list", "resources/templates/list"):
        err = serve.error(method, {})
        assert (err["code"], err["data"]) == (-32601, method), err
        assert "not advertised" in err["message"]


def test_an_unknown_prompt_is_invalid_params_naming_it_and_logs_no_traceback(serve: Serve) -> None:
    err = serve.error("prompts/get", {"name": "weekly-recap"})
    assert err["code"] == -32602, err
    assert "'weekly-recap'" in err["message"] and "no prompts" in err["message"]
    assert fields(err) == {"params.name": "unknown prompt 'weekly-recap'; this server serves no prompts"}
    assert "result" in serve.request("tools/list", {})  # still serving
    log = serve.log.read_text()
    assert "Traceback" not in log, log
    assert len([line for line in log.splitlines() if "weekly-recap" in line]) <= 1, log


def test_logging_set_level_takes_the_eight_levels_and_names_a_bad_one(serve: Serve) -> None:
    for level in LEVELS:
        assert serve.request("logging/setLevel", {"level": level})["result"] == {}, level
    err = serve.error("logging/setLevel", {"level": "banana"})
    assert err["code"] == -32602 and "params.level" in err["message"] and "banana" not in err["message"], err
    assert set(fields(err)) == {"params.level"} and "debug" in fields(err)["params.level"]
    err = serve.error("logging/setLevel", {})
    assert err["code"] == -32602 and fields(err) == {"params.level": "is required"}, err


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"name": "memory_stats", "arguments": ["x"]}, {"params.arguments": "must be an object"}),
        ({"arguments": {}}, {"params.name": "is required"}),
        ({"name": 5, "arguments": {}}, {"params.name": "must be a string"}),
        ({"name": "memory_stats", "arguments": "{}"}, {"params.arguments": "must be an object"}),
        (None, {"params": "is required"}),
        ({"name": "memory_stats", "_meta": {"progressToken": [1]}},
         {"params._meta.progressToken": "must be a string or an integer"}),
    ],
)  # fmt: skip
def test_tools_call_params_that_fail_validation_name_the_field(
    serve: Serve, params: Any, named: dict[str, str]
) -> None:
    err = serve.error("tools/call", params)
    assert err["code"] == -32602, err
    assert fields(err) == named, err
    for field, problem in named.items():
        assert f"{field}: {problem}" in err["message"], err
    assert not serve.request("tools/call", {"name": "memory_stats", "arguments": {}})["result"]["isError"]
