"""The gateway's stdio transport, line by line: every malformed line is answered, nothing ends the server.

A small `MnemeMCPServer` (no NATS) is served over two OS pipes through `stdio_transport`, exactly as
`mneme serve` runs it, and driven with raw bytes. The end-to-end run against `mneme serve` itself is in
test_e2e_stdio.py.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.gateway.limits import MAX_MESSAGE_BYTES
from services.gateway.server import MnemeMCPServer
from services.gateway.stdio import LoopLines, stdio_transport
from services.gateway.stdio_codec import _TooLong, read_line, scan_id

pytestmark = pytest.mark.anyio

PARSE, INVALID = -32700, -32600


def toy() -> MnemeMCPServer:
    server = MnemeMCPServer(name="toy")

    @server.tool()
    async def echo(text: str, metadata: dict[str, Any] | None = None) -> str:
        return text

    @server.tool()
    async def unencodable() -> str:
        return "half a pair: \ud800"  # pydantic cannot encode this reply as JSON

    return server


class Wire:
    def __init__(self, tx: Any, rx: Any):
        self.tx, self.rx = tx, rx

    async def send(self, line: bytes | str) -> None:
        data = line.encode("utf-8", "surrogatepass") if isinstance(line, str) else line
        await anyio.to_thread.run_sync(self._write, data + b"\n")

    def _write(self, data: bytes) -> None:
        self.tx.write(data)
        self.tx.flush()

    async def reply(self, timeout: float = 10) -> dict[str, Any]:
        with anyio.fail_after(timeout):
            line = await anyio.to_thread.run_sync(self.rx.readline, abandon_on_cancel=True)
        assert line, "the server closed stdout"
        return json.loads(line)

    async def call(self, rid: int, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        await self.send(
            json.dumps(
                {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": tool, "arguments": args}}
            )
        )
        return await self.reply()


@asynccontextmanager
async def served(server: MnemeMCPServer | None = None) -> AsyncIterator[Wire]:
    server = server or toy()
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    stdin, stdout = os.fdopen(in_r, "rb"), os.fdopen(out_w, "wb")
    tx, rx = os.fdopen(in_w, "wb"), os.fdopen(out_r, "rb")
    low = server._lowlevel_server

    async def serve() -> None:
        async with stdio_transport(stdin, stdout) as (read, write):
            await low.run(read, write, low.create_initialization_options())

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve)
            wire = Wire(tx, rx)
            init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
            await wire.send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}))
            assert (await wire.reply())["id"] == 0
            await wire.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            yield wire
            tx.close()  # end of input: the server stops
    finally:  # writers first: a reader blocked in a thread then sees end of input and lets go of its file
        for f in (tx, stdout, rx, stdin):
            f.close()


def deep(n: int) -> str:
    return '{"a":' * n + "1" + "}" * n


def call_line(rid: Any, args: str, name: str = "echo") -> str:
    return f'{{"jsonrpc":"2.0","id":{rid},"method":"tools/call","params":{{"name":"{name}","arguments":{args}}}}}'


MALFORMED = [
    pytest.param("not json at all", None, PARSE, id="not-json"),
    pytest.param('{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"echo"', 41, PARSE, id="truncated"),
    pytest.param(b'{"jsonrpc":"2.0","id":42,"method":"tools/list","x":"\xff\xfe"}', 42, PARSE, id="not-utf8"),
    pytest.param('{"jsonrpc":"2.0","id":43,"method":"tools/list"} trailing', 43, PARSE, id="trailing-garbage"),
    pytest.param("[" * 100_000, None, PARSE, id="100k-brackets"),
    pytest.param(call_line(44, '{"text":"x","metadata":%s}' % deep(5000)), 44, PARSE, id="5000-deep"),
    pytest.param('{"jsonrpc":"2.0","id":45,"method":"tools/call","params":{"name":"\\ud800","arguments":{}}}', 45,
                 PARSE, id="surrogate-in-tool-name"),
    pytest.param('[{"jsonrpc":"2.0","id":46,"method":"tools/list"}]', None, INVALID, id="batch"),
    pytest.param("42", None, INVALID, id="scalar"),
    pytest.param('{"jsonrpc":"1.0","id":47,"method":"tools/list"}', 47, INVALID, id="jsonrpc-1.0"),
    pytest.param('{"jsonrpc":"2.0","id":48,"method":5}', 48, INVALID, id="method-not-a-string"),
    pytest.param('{"jsonrpc":"2.0","id":49,"method":"tools/list","params":[1]}', 49, INVALID, id="params-a-list"),
    # a request whose id is malformed must not pass for a notification (those are never answered)
    pytest.param('{"jsonrpc":"2.0","id":null,"method":"tools/list"}', None, INVALID, id="id-null"),
    pytest.param('{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}', None, INVALID, id="id-fraction"),
    pytest.param('{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}', None, INVALID, id="id-object"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "rid", "code"), MALFORMED)
async def test_a_malformed_line_gets_a_json_rpc_error(line: str | bytes, rid: Any, code: int) -> None:
    async with served() as wire:
        await wire.send(line)
        reply = await wire.reply()
        assert reply["id"] == rid and reply["error"]["code"] == code, reply
        assert reply["error"]["message"], reply
        # and the server still serves
        ok = await wire.call(1, "echo", {"text": "still here"})
        assert ok["result"]["content"][0]["text"] == "still here", ok


@pytest.mark.parametrize(
    ("args", "field", "says"),
    [
        pytest.param('{"text":"\\ud800"}', "text", "lone UTF-16 surrogate", id="surrogate"),
        pytest.param('{"text":"x","metadata":{"k":["\\udfff"]}}', "metadata", "surrogate", id="surrogate-nested"),
        pytest.param('{"text":"x","metadata":{"\\ud800":1}}', "metadata", "key that contains", id="surrogate-key"),
        pytest.param('{"text":"x","metadata":%s}' % deep(200), "metadata", "nested deeper than 32", id="200-deep"),
        pytest.param('{"text":"x","metadata":%s}' % deep(980), "metadata", "nested deeper than 32", id="980-deep"),
        pytest.param('{"text":"x","metadata":{"n":NaN}}', "metadata", "finite", id="nan"),
        pytest.param('{"text":"x","metadata":{"n":1e400}}', "metadata", "finite", id="1e400"),
    ],
)
async def test_what_only_pythons_json_reads_reaches_the_tool_and_is_invalid_input(
    args: str, field: str, says: str
) -> None:
    """The SDK's parser refuses a lone surrogate and nesting past 200 levels; inside a tool's arguments the
    tool answers, naming the argument."""
    async with served() as wire:
        await wire.send(call_line(7, args))
        reply = await wire.reply()
        assert reply["id"] == 7 and reply.get("result", {}).get("isError") is True, reply
        err = json.loads(reply["result"]["content"][0]["text"])["error"]
        assert err["code"] == "INVALID_INPUT" and err["field"] == field and says in err["message"], err


async def test_a_burst_of_mixed_malformed_lines_then_a_valid_request() -> None:
    lines: list[Any] = (
        [p.values[0] for p in MALFORMED]
        + [
            call_line(60, '{"text":"\\ud800"}'),
            call_line(61, '{"text":"x","metadata":%s}' % deep(200)),
            "",
            "   ",
            '{"jsonrpc":"2.0","id":62,"result":{}}',  # blank lines and a stray response: no reply
            '{"jsonrpc":"2.0","id":63,"error":{"code":"x"}}',  # a malformed response: no reply either
            '{"jsonrpc":"2.0","method":"notifications/whatever","params":{"s":"\\ud800"}}',  # nor a notification
        ]
    ) * 3
    async with served() as wire:
        for line in lines:
            await wire.send(line)
        await wire.send(call_line(99, '{"text":"after the burst"}'))
        expected = 3 * (len(MALFORMED) + 2) + 1
        replies = [await wire.reply() for _ in range(expected)]  # (tool calls answer in any order)
        ids = [r["id"] for r in replies]
        assert sorted(i for i in ids if i is not None) == sorted([41, 42, 43, 44, 45, 47, 48, 49, 60, 61] * 3 + [99])
        assert ids.count(None) == 3 * 7
        last = next(r for r in replies if r["id"] == 99)
        assert last["result"]["content"][0]["text"] == "after the burst"
        assert (await wire.call(100, "echo", {"text": "and after"}))["id"] == 100  # nothing else was queued


async def test_a_reply_that_cannot_be_encoded_becomes_an_error_and_the_server_stays_up() -> None:
    """With the SDK's transport this ended the process: the writer task raised out of its task group."""
    async with served() as wire:
        reply = await wire.call(5, "unencodable", {})
        assert reply["id"] == 5 and reply["error"]["code"] == -32603, reply
        ok = await wire.call(6, "echo", {"text": "alive"})
        assert ok["result"]["content"][0]["text"] == "alive"


async def test_a_line_over_the_limit_is_skipped_and_answered_with_its_id() -> None:
    async with served() as wire:
        huge = call_line(8, '{"text":"%s"}' % ("x" * MAX_MESSAGE_BYTES))
        await wire.send(huge)
        reply = await wire.reply()
        assert reply["id"] == 8 and reply["error"]["code"] == INVALID, reply
        assert str(MAX_MESSAGE_BYTES) in reply["error"]["message"]
        big = "y" * (MAX_MESSAGE_BYTES - 200)  # just under the limit is served
        assert (await wire.call(9, "echo", {"text": big}))["result"]["content"][0]["text"] == big


def test_scan_id_reads_the_top_level_id_of_a_broken_object() -> None:
    assert scan_id('{"jsonrpc":"2.0","id":12,"params":{"x":') == 12
    assert scan_id('{"a":{"id":3},"b":[{"id":4}],"id":"req-1","c":[[[') == "req-1"
    assert scan_id('{"s":"a \\"id\\": 5 inside a string","id":-7') == -7
    assert scan_id('{"id":{"nested":1}}') is None
    assert scan_id('{"id":"\\ud800"}') is None  # an id never comes back broken
    assert scan_id('{"id":1.5}') is None
    assert scan_id('[{"id":1}]') is None and scan_id("no json") is None


class _Chunks(LoopLines):
    """LoopLines fed the given chunks, as os.read would return them."""

    def __init__(self, chunks: list[bytes], limit: int):
        super().__init__(-1, limit)
        self._chunks = list(chunks)

    async def read(self) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""


@settings(max_examples=500, deadline=None)
@given(
    lines=st.lists(
        st.one_of(st.binary(max_size=40), st.binary(min_size=45, max_size=140)).map(lambda b: b.replace(b"\n", b"")),
        max_size=12,
    ),
    last_ends=st.booleans(),
    cuts=st.lists(st.integers(1, 60), max_size=40),
)
def test_the_event_loop_reads_the_same_lines_as_the_thread(
    lines: list[bytes], last_ends: bool, cuts: list[int]
) -> None:
    """Whatever chunks a pipe delivers, the loop's reader gives exactly what `read_line` gives on a file:
    the same lines, a line over the limit as the same head and size, the unterminated last line."""
    limit = 50
    data = b"\n".join(lines) + (b"\n" if lines and last_ends else b"")
    expected = []
    stream = io.BytesIO(data)
    while (line := read_line(stream, limit)) is not None:
        expected.append((line.head, line.size) if isinstance(line, _TooLong) else line)
    chunks, at = [], 0
    for n in cuts:
        chunks.append(data[at : at + n])
        at += n
    chunks = [c for c in chunks if c] + ([data[at:]] if data[at:] else [])

    async def read_all() -> list[Any]:
        reader, got = _Chunks(chunks, limit), []
        while (line := await reader.next()) is not None:
            got.append((line.head, line.size) if isinstance(line, _TooLong) else line)
        return got

    assert asyncio.run(read_all()) == expected
