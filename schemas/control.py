"""The control plane: operator requests to one projector (subjects `mneme.ctl.<target>.<verb>`), JSON.

`mneme replay` asks the projector serving a data directory to swap to the generation it built;
`mneme snapshot` asks it for a snapshot of its read models. Each answers once, `ok` or an `error`.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import Struct


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


CONTROL_VERBS: dict[str, tuple[type[Struct], type[Struct]]] = {
    "swap": (SwapRequest, SwapReply),
    "snapshot": (SnapshotRequest, SnapshotReply),
}

_encoder = msgspec.json.Encoder()


def encode(msg: Struct) -> bytes:
    return _encoder.encode(msg)


def decode_as(data: bytes, kind: type[Any]) -> Any:
    return msgspec.json.decode(data, type=kind)
