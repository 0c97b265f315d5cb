"""The control plane: operator requests to the processes of one data directory (subjects
`mneme.ctl.<target>.<verb>`), JSON.

`mneme replay` (and `mneme rebuild` beside a running server) asks the projector serving a data directory to
swap to the generation it built; `mneme snapshot` asks it for a snapshot of its read models; `mneme audit
verify|export` ask the auditor that holds the directory's trail for its records, page by page (the trail's
DuckDB file is that process's alone). Each answers once, `ok` or an `error`.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import Struct

from schemas.events import UtcTime


class SwapRequest(Struct, frozen=True, kw_only=True):
    path: str  # the generation directory to open, catch up and serve


class SwapReply(Struct, frozen=True, kw_only=True, omit_defaults=True):
    ok: bool
    seq: int | None = None  # the sequence the new generation serves from
    path: str | None = None  # its DuckDB file
    error: str | None = None


class SnapshotRequest(Struct, frozen=True, kw_only=True):
    pass


class SnapshotReply(Struct, frozen=True, kw_only=True):
    """`ok` with the snapshot's summary (services/projector/snapshot.py: its manifest without the per-file
    hashes, plus where it is and its size as read and on disk), or `ok: false` with the `error`."""

    ok: bool
    error: str | None = None
    seq: int | None = None  # the sequence the rows cover
    projection_version: int | None = None
    db: str | None = None  # the DuckDB file's name
    created_at: str | None = None  # ISO 8601
    model: str | None = None  # the embedding model of the vector shard it holds (None: no vectors)
    vector_seq: int | None = None
    vectors: str | None = None  # the vector shard's directory name
    path: str | None = None  # the snapshot's directory
    files: int | None = None
    bytes: int | None = None
    disk_bytes: int | None = None
    manifest: str | None = None  # its manifest.json (every file's SHA-256)


class TrailRequest(Struct, frozen=True, kw_only=True):
    """A page of the audit trail, oldest first: the records after trail sequence `after` up to `upto` (0: the
    trail's last committed record), at most `limit` (fewer when they would not fit one NATS message), those
    that match the filters (as `mneme audit export`'s: agent, memory, action prefix, time window)."""

    after: int = 0
    upto: int = 0
    limit: int = 1000
    agent_id: str | None = None
    memory_id: str | None = None
    action: str | None = None
    since: UtcTime | None = None
    until: UtcTime | None = None


class TrailRecord(Struct, frozen=True, kw_only=True):
    """One record of the trail as it is stored, with its hashes (services/auditor/trail.py)."""

    trail_seq: int
    source: str
    source_seq: int
    recorded_at: UtcTime
    record_id: str
    action: str
    outcome: str
    namespace: str
    agent_id: str
    role: str
    request_id: str
    memory_ids: list[str]
    code: str | None
    occurred_at: UtcTime
    prev_hash: str
    hash: str


class TrailReply(Struct, frozen=True, kw_only=True, omit_defaults=True):
    ok: bool
    error: str | None = None
    head: int = 0  # the trail's last committed record when asked
    records: list[TrailRecord] = []


CONTROL_VERBS: dict[str, tuple[type[Struct], type[Struct]]] = {
    "swap": (SwapRequest, SwapReply),
    "snapshot": (SnapshotRequest, SnapshotReply),
    "trail": (TrailRequest, TrailReply),
}

_encoder = msgspec.json.Encoder()


def encode(msg: Struct) -> bytes:
    return _encoder.encode(msg)


def decode_as(data: bytes, kind: type[Any]) -> Any:
    return msgspec.json.decode(data, type=kind)
