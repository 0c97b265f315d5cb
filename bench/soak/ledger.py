"""The soak's bookkeeping: the ledger of acknowledged writes (Version, Mem), the tally of calls, latencies,
errors and failed checks, and one MCP session over streamable HTTP that retries retryable codes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

RETRYABLE = frozenset({"CONFLICT", "PROJECTION_LAG", "UNAVAILABLE", "INDEXING", "EMBEDDING_MODEL_LOADING"})
RETRIES = 3
CALL_TIMEOUT = 60.0


@dataclass
class Version:
    seq: int
    version: int
    content: str | None  # None: the delete
    request_id: str = ""


@dataclass
class Mem:
    id: str
    owner: int
    token: str
    versions: list[Version]
    in_doubt: bool = False  # a write to it failed: its outcome is unknown, so it is not checked exactly

    @property
    def deleted(self) -> bool:
        return self.versions[-1].content is None

    @property
    def last(self) -> Version:
        return self.versions[-1]


@dataclass
class Tally:
    """Every call's (start, kind, seconds), errors by (kind, code, class), failed checks by name (with samples)."""

    t0: float = field(default_factory=time.perf_counter)
    calls: list[tuple[float, str, float]] = field(default_factory=list)
    errors: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    samples: list[str] = field(default_factory=list)
    dead_letters: int = 0

    def error(self, kind: str, code: str, cls: str, text: str = "") -> None:
        self.errors[(kind, code, cls)] += 1
        if cls == "unexpected" and len(self.samples) < 40:
            self.samples.append(f"{kind} {code}: {text[:300]}")

    def fail(self, check: str, detail: str) -> None:
        self.failures[check] += 1
        if len(self.samples) < 40:
            self.samples.append(f"{check}: {detail[:300]}")

    def unexpected(self) -> int:
        return sum(n for (_, _, cls), n in self.errors.items() if cls == "unexpected")


@dataclass
class Err:
    code: str
    text: str


class Session:
    """One MCP ClientSession over streamable HTTP, reopened after a transport failure; `call` retries
    retryable codes (and a broken transport) with the same arguments, timing every attempt."""

    def __init__(self, url: str, tally: Tally):
        self.url = url
        self.tally = tally
        self._stack: AsyncExitStack | None = None
        self.cs: ClientSession | None = None

    async def open(self) -> None:
        stack = AsyncExitStack()
        streams = await stack.enter_async_context(streamable_http_client(self.url))
        cs = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
        await cs.initialize()
        self._stack, self.cs = stack, cs

    async def close(self) -> None:
        if self._stack is not None:
            with contextlib.suppress(Exception):
                await self._stack.aclose()
        self._stack = self.cs = None

    async def call(self, kind: str, tool: str, args: dict[str, Any], expect: tuple[str, ...] = ()) -> Any:
        """The structured result, or Err (an expected code, or an unexpected one already counted)."""
        for attempt in range(RETRIES + 1):
            last = attempt == RETRIES
            t = time.perf_counter()
            try:
                if self.cs is None:
                    await self.open()
                assert self.cs is not None
                res = await self.cs.call_tool(tool, args, read_timeout_seconds=CALL_TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - a transport failure or a timeout: counted, session reopened
                self.tally.calls.append((t - self.tally.t0, kind, time.perf_counter() - t))
                code = f"transport:{type(exc).__name__}"
                self.tally.error(kind, code, "unexpected", repr(exc))
                await self.close()
                if last:
                    return Err(code, repr(exc))
                await asyncio.sleep(0.2 * 2**attempt)
                continue
            self.tally.calls.append((t - self.tally.t0, kind, time.perf_counter() - t))
            if not isinstance(res, CallToolResult):
                self.tally.error(kind, "UNEXPECTED_RESULT", "unexpected", type(res).__name__)
                return Err("UNEXPECTED_RESULT", type(res).__name__)
            if not res.is_error:
                return res.structured_content or {}
            text = res.content[0].text if res.content and isinstance(res.content[0], TextContent) else "?"
            try:
                code = json.loads(text)["error"]["code"]
            except (ValueError, KeyError, TypeError):
                code = "UNSTRUCTURED"
            if code in expect:
                self.tally.error(kind, code, "expected")
                return Err(code, text)
            if code in RETRYABLE and not last:
                self.tally.error(kind, code, "retried", text)
                await asyncio.sleep(0.05 * 2**attempt)
                continue
            self.tally.error(kind, code, "unexpected", text)
            return Err(code, text)
        raise AssertionError("unreachable")
