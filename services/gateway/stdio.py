"""The gateway's stdio transport: every line gets an answer, and no line can end the server.

The SDK's `stdio_server` (mcp 2.3.0) parses each line with jiter and, when that fails, puts the exception
on the read stream, where the dispatcher debug-logs and drops it: a line that is not JSON, JSON nested
past 200 levels, or a string holding a lone surrogate (`"\\ud800"`) got no reply at all, and the client
waited for its own timeout. Its writer task serializes each outgoing message with pydantic; one that cannot
be encoded (a lone surrogate, nesting past pydantic's serialization limit) raises out of the task group
that holds the transport and ends the server.

This transport reads bytes and answers what it cannot pass on, as JSON-RPC requires: -32700 for a line
that is not UTF-8 JSON, -32600 for JSON that is not a JSON-RPC message (a batch included; MCP has none),
with the request's id whenever it can be read (a reply with a null id unblocks no client). A tools/call
that only Python's `json` can read (a lone surrogate, or deep nesting, inside its arguments) is passed on,
and the tool answers INVALID_INPUT naming the argument (`limits.argument_problem`). A line longer than
`MAX_MESSAGE_BYTES` is skipped and answered. A reply that cannot be encoded becomes a -32603 error for its
id. The file descriptors are claimed as the SDK does (fd 0 reads /dev/null and fd 1 goes to stderr while
serving), so stray prints never corrupt the wire.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import re
import select
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, BinaryIO

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.stdio import _claim_fd, _open_stdin_diversion, _open_stdout_diversion  # mcp is pinned (2.3.0)
from mcp.shared.message import SessionMessage
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
    jsonrpc_message_adapter,
)
from pydantic import ValidationError

from services.gateway.limits import MAX_DEPTH, MAX_MESSAGE_BYTES, first_problem, shown

log = logging.getLogger("mneme.stdio")

_SKIP_CHUNK = 1 << 16


class _TooLong:
    """A line over the size limit: its head (to read an id from) and its length."""

    def __init__(self, head: bytes, size: int):
        self.head, self.size = head, size


def read_line(stream: BinaryIO, limit: int = MAX_MESSAGE_BYTES) -> bytes | _TooLong | None:
    """One line (None at end of input); a line longer than `limit` is read through and discarded."""
    line = stream.readline(limit + 1)
    if not line:
        return None
    if len(line) <= limit or line.endswith(b"\n"):
        return line
    size = len(line)
    while True:
        chunk = stream.readline(_SKIP_CHUNK)
        size += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return _TooLong(line[:4096], size)


# -- reading an id out of a message that does not parse ---------------------------------------------------

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s{}\[\]:,"]+', re.S)
_INT = re.compile(r"-?(?:0|[1-9][0-9]{0,18})")


def _as_id(token: str) -> RequestId | None:
    if token.startswith('"'):
        try:
            value = json.loads(token)
        except ValueError:
            return None
        return value if isinstance(value, str) and shown(value, len(value)) == value else None
    return int(token) if _INT.fullmatch(token) else None


def scan_id(text: str) -> RequestId | None:
    """The top-level `"id"` of a JSON object, read token by token so it is found even when the rest of the
    line does not parse (a truncated tail, nesting no parser takes, a bad escape further on)."""
    if not text.lstrip().startswith("{"):
        return None
    depth, key, last, expect = 0, None, None, False
    for m in _TOKEN.finditer(text):
        tok = m.group()
        if tok in ("{", "["):
            if depth == 1 and expect and key == "id":
                return None
            depth += 1
            expect = False
        elif tok in ("}", "]"):
            depth -= 1
            if depth <= 0:
                return None
        elif tok == ":":
            key, expect = (last, True) if depth == 1 else (key, False)
        elif tok == ",":
            key, last, expect = None, None, False
        elif depth == 1:
            if expect and key == "id":
                return _as_id(tok)
            last = tok[1:-1] if tok.startswith('"') else None
            expect = False
    return None


def _valid_id(value: Any) -> RequestId | None:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    if isinstance(value, str) and shown(value, len(value)) != value:
        return None
    return value


def _error(rid: RequestId | None, code: int, message: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=rid, error=ErrorData(code=code, message=message))


def _invalid_request(obj: dict[str, Any]) -> str:
    if obj.get("jsonrpc") != "2.0":
        return 'Invalid Request: "jsonrpc" must be "2.0"'
    if "method" in obj and not isinstance(obj["method"], str):
        return 'Invalid Request: "method" must be a string'
    if "id" in obj and _valid_id(obj["id"]) is None:
        return 'Invalid Request: "id" must be a string or an integer'
    if "params" in obj and not isinstance(obj["params"], dict):
        return 'Invalid Request: "params" must be an object'
    return "Invalid Request: not a JSON-RPC 2.0 request, notification or response"


def decode_fast(line: bytes) -> SessionMessage | JSONRPCError | None:
    """The SDK parser's reading of a well-formed line (None: it fails; `decode` works out why)."""
    try:
        fast = jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError:
        return None
    # The notification model ignores unknown members, so a request whose id is malformed (null, true,
    # 1.5, an object) parses as a notification, which is never answered: it is owed an error.
    if not (isinstance(fast, JSONRPCNotification) and b'"id"' in line and "id" in json.loads(line)):
        return SessionMessage(fast)
    return _error(None, INVALID_REQUEST, 'Invalid Request: "id" must be a string or an integer')


def decode(line: bytes) -> SessionMessage | JSONRPCError | None:
    """What one line is: a message to pass on, an error to answer with, or nothing (a blank line, or a
    notification or response that cannot be used: those are never answered)."""
    fast = decode_fast(line)
    if fast is not None:
        return fast
    if not line.strip():
        return None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _error(
            scan_id(line.decode("utf-8", "replace")), PARSE_ERROR, f"Parse error: not valid UTF-8 (byte {exc.start})"
        )
    try:
        obj = json.loads(text)
    except RecursionError:
        return _error(
            scan_id(text), PARSE_ERROR, f"Parse error: nested too deeply (an argument may nest {MAX_DEPTH} levels)"
        )
    except ValueError as exc:
        return _error(scan_id(text), PARSE_ERROR, f"Parse error: not JSON ({shown(str(exc), 120)})")
    if not isinstance(obj, dict):
        what = "a batch (array) is not supported" if isinstance(obj, list) else "a message must be a JSON object"
        return _error(None, INVALID_REQUEST, f"Invalid Request: {what}")
    rid = _valid_id(obj.get("id"))
    try:
        msg = jsonrpc_message_adapter.validate_python(obj, by_name=False)
    except (ValidationError, RecursionError):
        if "method" not in obj and ("result" in obj or "error" in obj):
            # a broken response to a request of ours: its id is from our id space, so an error carrying it
            # would fail whichever request of the client's happens to share the number; nothing to answer
            log.info("dropped a malformed response (id %r)", rid)
            return None
        return _error(rid, INVALID_REQUEST, _invalid_request(obj))
    # Only Python's json reads it: a lone surrogate, or nesting past the SDK parser's 200 levels. Inside a
    # tool's arguments the tool answers, naming the argument; anywhere else the message cannot be served.
    envelope = obj
    params = obj.get("params")
    if isinstance(msg, JSONRPCRequest) and msg.method == "tools/call" and isinstance(params, dict):
        envelope = {**obj, "params": {k: v for k, v in params.items() if k != "arguments"}}
    problem = first_problem(envelope)
    if problem is None:
        return SessionMessage(msg)
    if isinstance(msg, JSONRPCRequest):
        return _error(rid, PARSE_ERROR, f"Parse error: {problem.text()}")  # (rid: an id is never echoed broken)
    log.info("dropped a %s that cannot be served: %s", type(msg).__name__, problem.text())
    return None


# -- writing ----------------------------------------------------------------------------------------------


def encode(message: Any) -> bytes | None:
    """One line of JSON; a reply that cannot be encoded becomes an error for its id (never a dead writer)."""
    try:
        text: str = message.model_dump_json(by_alias=True, exclude_unset=True)
        return text.encode("utf-8") + b"\n"
    except Exception as exc:  # noqa: BLE001 - whatever it is, the wire must stay up
        log.error("could not encode a %s as JSON: %s", type(message).__name__, exc)
        if isinstance(message, JSONRPCResponse | JSONRPCError):
            err = _error(message.id, INTERNAL_ERROR, "Internal error: the reply could not be encoded as JSON")
            return err.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8") + b"\n"
        return None


def _write(stream: BinaryIO, data: bytes) -> None:
    stream.write(data)
    stream.flush()


class _Room:
    """Whether a write of at most PIPE_BUF bytes cannot block now: the pipe has a free buffer (or the output
    is a file, or a socket with room). Such a reply is written on the event loop; the others, and any
    output that cannot be polled, on a worker thread (a thread hop costs ~0.1-0.3 ms a reply on busy cores)."""

    def __init__(self, stream: BinaryIO):
        self._poll: select.poll | None = None
        try:
            fd = stream.fileno()
        except (OSError, ValueError):  # an in-memory stream (tests): the thread it is
            return
        self._poll = select.poll()
        self._poll.register(fd, select.POLLOUT)

    def now(self, size: int) -> bool:
        if self._poll is None or size > select.PIPE_BUF:
            return False
        return any(ev & select.POLLOUT for _, ev in self._poll.poll(0))


async def _writer(stdout: BinaryIO, outbound: MemoryObjectReceiveStream[SessionMessage]) -> None:
    broken = False
    room = _Room(stdout)
    async with outbound:
        async for sm in outbound:
            data = encode(sm.message)
            if data is None or broken:
                continue
            try:
                if room.now(len(data)):
                    _write(stdout, data)
                else:
                    await anyio.to_thread.run_sync(_write, stdout, data)
            except OSError as exc:  # the client stopped reading: keep draining so no sender blocks
                log.warning("stdout closed (%s): replies are dropped until stdin closes", exc)
                broken = True


class _EndOfInput:
    pass


END = _EndOfInput()


def next_item(stdin: BinaryIO) -> SessionMessage | JSONRPCError | _EndOfInput | None:
    """Read and decode the next line, on a worker thread: a big message is parsed off the event loop, and
    Python's json gets the thread's whole recursion budget (about 990 levels)."""
    line = read_line(stdin)
    if line is None:
        return END
    return item_of(line)


def item_of(line: bytes | _TooLong) -> SessionMessage | JSONRPCError | None:
    try:
        if isinstance(line, _TooLong):
            return _error(
                scan_id(line.head.decode("utf-8", "replace")),
                INVALID_REQUEST,
                f"Invalid Request: the message is {line.size} bytes; the limit is {MAX_MESSAGE_BYTES}",
            )
        return decode(line)
    except Exception:  # a line must never end the server
        log.exception("could not decode a line")
        return _error(None, INTERNAL_ERROR, "Internal error: the message could not be decoded")


ON_LOOP_BYTES = 1 << 16  # a line up to this long whose fast parse succeeds is decoded on the event loop


class LoopLines:
    """Lines of a pollable input (a pipe, a socket, a terminal), read by the event loop when it is readable:
    no worker thread per message. The same lines `read_line` gives, a line over `limit` included."""

    def __init__(self, fd: int, limit: int = MAX_MESSAGE_BYTES):
        self.fd, self.limit = fd, limit
        self._buf = bytearray()
        self._eof = False
        self._skipped: tuple[bytes, int] | None = None  # a line over the limit: its head, its size so far
        self._head = min(limit + 1, 4096)  # what read_line keeps of such a line (an id is read from it)

    @classmethod
    def open(cls, stream: BinaryIO) -> LoopLines | None:
        """None when the loop cannot poll it (a regular file, an in-memory stream, another event loop)."""
        try:
            fd = stream.fileno()
            loop = asyncio.get_running_loop()
            loop.add_reader(fd, lambda: None)
            loop.remove_reader(fd)
        except (OSError, ValueError, RuntimeError, NotImplementedError, io.UnsupportedOperation):
            return None
        return cls(fd)

    def _take(self) -> bytes | _TooLong | None:
        buf = self._buf
        end = buf.find(b"\n")
        if self._skipped is not None:
            head, size = self._skipped
            if end < 0:
                self._skipped = (head, size + len(buf))
                buf.clear()
                return None
            self._skipped = None
            del buf[: end + 1]
            return _TooLong(head, size + end + 1)
        if end < 0:
            if len(buf) > self.limit + 1:  # no end in sight: read it through, keep its head
                self._skipped = (bytes(buf[: self._head]), len(buf))
                buf.clear()
            return None
        line = bytes(buf[: end + 1])
        del buf[: end + 1]
        return line if len(line) <= self.limit + 1 else _TooLong(line[: self._head], len(line))

    async def next(self) -> bytes | _TooLong | None:
        """The next line (None at the end of input)."""
        while True:
            line = self._take()
            if line is not None:
                return line
            if self._eof:
                if self._skipped is not None:
                    head, size = self._skipped
                    self._skipped = None
                    return _TooLong(head, size)
                rest, self._buf = bytes(self._buf), bytearray()
                if len(rest) > self.limit:  # (unterminated, a line is at most `limit` bytes)
                    return _TooLong(rest[: self._head], len(rest))
                return rest or None
            data = await self.read()
            if data:
                self._buf += data
            else:
                self._eof = True

    async def read(self) -> bytes:
        """What has arrived, once there is something (b"": the end of input)."""
        await _readable(asyncio.get_running_loop(), self.fd)
        return os.read(self.fd, 1 << 16)  # readable: it returns what is there without waiting


async def _readable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


async def _next_on_loop(lines: LoopLines) -> SessionMessage | JSONRPCError | _EndOfInput | None:
    line = await lines.next()
    if line is None:
        return END
    if isinstance(line, bytes) and len(line) <= ON_LOOP_BYTES:
        fast = decode_fast(line)
        if fast is not None:
            return fast
    return await anyio.to_thread.run_sync(item_of, line)  # a big or broken line: off the loop


async def _reader(
    stdin: BinaryIO, inbound: MemoryObjectSendStream[SessionMessage], replies: MemoryObjectSendStream[SessionMessage]
) -> None:
    lines = LoopLines.open(stdin)
    async with inbound, replies:
        while True:
            if lines is not None:
                item = await _next_on_loop(lines)
            else:
                item = await anyio.to_thread.run_sync(next_item, stdin, abandon_on_cancel=True)
            if item is END:
                break
            try:
                if isinstance(item, SessionMessage):
                    await inbound.send(item)
                elif isinstance(item, JSONRPCError):
                    log.info("answered a malformed line: %s (id %r)", item.error.message, item.id)
                    await replies.send(SessionMessage(item))
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                return  # the server is done with this connection


@asynccontextmanager
async def stdio_transport(
    stdin: BinaryIO | None = None,
    stdout: BinaryIO | None = None,
) -> AsyncIterator[tuple[MemoryObjectReceiveStream[SessionMessage], MemoryObjectSendStream[SessionMessage]]]:
    """The (read, write) stream pair `Server.run` serves, over the process's stdin/stdout or the binary
    streams given."""
    releases: list[Callable[[], None] | None] = []
    try:
        if stdin is None:
            stdin, release = _claim_fd(0, sys.stdin, "rb", _open_stdin_diversion)
            releases.append(release)
        if stdout is None:
            stdout, release = _claim_fd(1, sys.stdout, "wb", _open_stdout_diversion)
            releases.append(release)
        in_send, in_recv = anyio.create_memory_object_stream[SessionMessage](0)
        out_send, out_recv = anyio.create_memory_object_stream[SessionMessage](0)
        reading = anyio.CancelScope()

        async def read() -> None:
            with reading:
                await _reader(stdin, in_send, out_send.clone())

        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            tg.start_soon(_writer, stdout, out_recv)
            try:
                yield in_recv, out_send
            finally:
                # The server is done: stop reading (a blocked read is abandoned), let the writer drain.
                reading.cancel()
                out_send.close()
    finally:
        for release in reversed(releases):
            if release is not None:
                release()
