"""Logging for every mneme process: readable lines, or one JSON object per line (`--log-format json`).

A JSON line carries `ts`, `level`, `logger`, `service`, `msg`, the `request_id` of the tool call it belongs
to (a context variable the gateway sets for the call, the query plane for the query it answers, or the
record's own `request_id`: the follower's line for an event carries the id of the call that wrote it), and
any `fields` the line gives. One request id then joins a call's lines across processes: the gateway's
`call` line (INFO), the projector's `query` lines and the projector's and auditor's `folded` lines (DEBUG).
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

request_id: ContextVar[str | None] = ContextVar("mneme_request_id", default=None)
HEADER = "Mneme-Request-Id"  # carries the call's request id on a query to the projector


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str):
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "service": self.service,
            "msg": record.getMessage(),
        }
        rid = getattr(record, "request_id", None) or request_id.get()
        if rid:
            out["request_id"] = rid
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


def setup(level: str, fmt: str, service: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(service))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
