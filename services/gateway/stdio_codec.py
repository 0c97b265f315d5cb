"""The stdio transport's codec (services/gateway/stdio.py): reading one line within the size limit, finding a
request's id even in a line that is not JSON, decoding a line into a JSON-RPC message or the error that answers
it (-32700, -32600), and encoding a reply (None when it cannot be encoded: the transport answers -32603)."""

from __future__ import annotations

import json
import logging
import re
from typing import Any, BinaryIO

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
