"""The MCP logging capability: what a client hears in `notifications/message`, and from which level up.

On the handshake protocol versions (2024-11-05 to 2025-11-25) a client sends `logging/setLevel` with an RFC
5424 level (debug, info, notice, warning, error, critical, alert, emergency); from then on this server sends
that client log notifications at that level and above, on that connection only (another client's level, and
mneme's own stderr log, are untouched). Until a client sets one, it gets `DEFAULT_LEVEL` and above. A level
that is not one of the eight is -32602 naming `params.level` (see protocol.py). On 2026-07-28 there is no
`logging/setLevel` (the SDK answers -32601): a request opts in with its `_meta` log level, which the SDK
reads.

Everything mneme sends a client as a log notification goes through `log_to_client`, which applies the level
when it sends: nothing is done per request, and nothing at all until something is logged.
"""

from __future__ import annotations

from typing import Any, Final, get_args

from mcp.server.connection import Connection, allowed_log_levels
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp_types import (
    EmptyResult,
    LoggingLevel,
    LoggingMessageNotification,
    LoggingMessageNotificationParams,
    SetLevelRequestParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

LEVELS: Final[tuple[LoggingLevel, ...]] = get_args(LoggingLevel)  # least severe first (RFC 5424's order)
DEFAULT_LEVEL: Final[LoggingLevel] = "warning"  # as mneme's own log (MNEME_LOG_LEVEL) defaults to
_STATE_KEY = "mneme.log_level"


def serve_set_level(low: Server[Any]) -> None:
    """Serve `logging/setLevel` (which also makes the server advertise the `logging` capability)."""
    low.add_request_handler("logging/setLevel", SetLevelRequestParams, _set_level)


async def _set_level(ctx: ServerRequestContext[Any, Any], params: SetLevelRequestParams) -> EmptyResult:
    _connection(ctx).state[_STATE_KEY] = params.level
    return EmptyResult()


def client_level(ctx: ServerRequestContext[Any, Any]) -> LoggingLevel:
    """The least severe level the client on this request's connection wants to hear."""
    level: LoggingLevel = _connection(ctx).state.get(_STATE_KEY, DEFAULT_LEVEL)
    return level


def wants(ctx: ServerRequestContext[Any, Any], level: LoggingLevel) -> bool:
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:  # a per-request opt-in, read by the SDK
        return level in allowed_log_levels(ctx.protocol_version, ctx.meta)
    return LEVELS.index(level) >= LEVELS.index(client_level(ctx))


async def log_to_client(
    ctx: ServerRequestContext[Any, Any], level: LoggingLevel, data: Any, *, logger: str | None = None
) -> bool:
    """Send the client one `notifications/message` on this request's stream if it wants `level`; True if sent."""
    if not wants(ctx, level):
        return False
    note = LoggingMessageNotification(params=LoggingMessageNotificationParams(level=level, data=data, logger=logger))
    await ctx.session.send_notification(note, related_request_id=ctx.request_id)
    return True


def _connection(ctx: ServerRequestContext[Any, Any]) -> Connection:
    # The request's ServerSession holds its connection privately in mcp 2.3.0 (pinned); `Connection.state`
    # is the SDK's per-connection scratch space, kept across requests and dropped with the connection.
    connection: Connection = ctx.session._connection
    return connection
