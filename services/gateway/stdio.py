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
import logging
import os
import select
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import BinaryIO

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.stdio import _claim_fd, _open_stdin_diversion, _open_stdout_diversion  # mcp is pinned (2.3.0)
from mcp.shared.message import SessionMessage
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    JSONRPCError,
)

from services.gateway.limits import MAX_MESSAGE_BYTES
from services.gateway.stdio_codec import (
    _error,
    _TooLong,
    decode,
    decode_fast,
    encode,
    read_line,
    scan_id,
)

log = logging.getLogger("mneme.stdio")


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
