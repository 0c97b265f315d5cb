"""Streamable HTTP, the parts the SDK leaves to the server: resumable POST streams, and a plain answer to an
`MCP-Protocol-Version` header this server does not speak.

Resumability (MCP 2025-11-25, "Resumability and Redelivery"; SEP-1699). Given an EventStore, the SDK's
transport (mcp 2.3.0) starts every SSE stream answering a POST with a priming event (an id, empty data) and
the `retry` field, stores what it sends, and replays what a client missed when it comes back with
`Last-Event-ID`; without one it sends neither. Its session manager shares one store among all sessions, and
a stream's id is the client's request id: two sessions' request 1 would be one stream, and a resuming client
could be replayed another client's answer. So `resumable` gives each session a store of its own
(`RecentEvents`, in memory, the last `EVENTS_KEPT` events), dropped with the session. Only clients of
2025-11-25 and later get the priming event (the SDK's rule: older ones cannot parse an event without data).

Protocol version. The SDK passes a request whose `MCP-Protocol-Version` header is not a handshake version to
its 2026-07-28 entry, which complains that `params._meta` lacks the 2026 envelope keys. The MCP spec wants
400 Bad Request for an unsupported version; `protocol_version_guard` answers it first, with the 2026 error
for it (-32022, data `{"supported": [...], "requested": ...}`, which auto-negotiating clients act on) and a
message naming the versions this server speaks.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any, Final

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types import (
    UNSUPPORTED_PROTOCOL_VERSION,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    UnsupportedProtocolVersionErrorData,
)
from mcp_types.version import SUPPORTED_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Receive, Scope, Send

from services.gateway.limits import shown

SSE_RETRY_MS: Final = 1000  # how long a client waits before reconnecting a broken stream (the `retry` field)
EVENTS_KEPT: Final = 32  # per session: a priming event and an answer per request, so the last ~16 requests
_ID_SCAN_BYTES = 1 << 16  # how much of a refused body is read to find the request's id


class RecentEvents(EventStore):
    """One session's last `keep` SSE events, for a client that reconnects with `Last-Event-ID`."""

    def __init__(self, keep: int = EVENTS_KEPT):
        self._keep = keep
        self._events: OrderedDict[EventId, tuple[StreamId, JSONRPCMessage | None]] = OrderedDict()
        self._count = 0

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        self._count += 1
        event_id = str(self._count)
        self._events[event_id] = (stream_id, message)
        if len(self._events) > self._keep:
            self._events.popitem(last=False)
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        if last_event_id not in self._events:
            return None  # never sent here, or long gone: nothing to replay
        stream, _ = self._events[last_event_id]
        later = False
        for event_id, (stream_id, message) in list(self._events.items()):
            if later and stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
            later = later or event_id == last_event_id
        return stream


def resumable(manager: StreamableHTTPSessionManager) -> None:
    """Give each session `manager` opens an event store of its own (see the module's docstring)."""
    admit = manager._admit_session

    def admit_with_events(requestor: Any) -> Any:
        transport = admit(requestor)
        if transport is not None:
            transport._event_store = RecentEvents()
        return transport

    # mcp 2.3.0 (pinned) creates each session's transport in this one method, from the manager's one store.
    manager._admit_session = admit_with_events  # type: ignore[method-assign]


def protocol_version_guard(app: ASGIApp) -> ASGIApp:
    """Answer a request whose `MCP-Protocol-Version` header names a version this server does not speak with
    400 and what it does speak; pass everything else (no header included) on to `app`."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            requested = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"mcp-protocol-version"), None)
            if requested is not None and requested not in SUPPORTED_PROTOCOL_VERSIONS:
                await _refuse(shown(requested, 100), receive, send)
                return
        await app(scope, receive, send)

    return guarded


async def _refuse(requested: str, receive: Receive, send: Send) -> None:
    supported = list(SUPPORTED_PROTOCOL_VERSIONS)
    error = ErrorData(
        code=UNSUPPORTED_PROTOCOL_VERSION,
        message=f"Unsupported protocol version {requested!r} (the MCP-Protocol-Version header); "
        f"this server speaks {', '.join(supported)}",
        data=UnsupportedProtocolVersionErrorData(supported=supported, requested=requested).model_dump(mode="json"),
    )
    reply = JSONRPCError(jsonrpc="2.0", id=await _request_id(receive), error=error)
    body = reply.model_dump_json(by_alias=True, exclude_unset=True).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _request_id(receive: Receive) -> str | int | None:
    """The id of the JSON-RPC request in the body, when there is one to read (a GET has none)."""
    body = b""
    while len(body) <= _ID_SCAN_BYTES:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    try:
        rid = json.loads(body).get("id")
    except (ValueError, AttributeError, RecursionError):
        return None
    if isinstance(rid, bool) or not isinstance(rid, int | str):
        return None
    return rid if isinstance(rid, int) or shown(rid, 200) == rid else None  # never echo an id broken
