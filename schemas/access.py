"""Access records: who read what, and which attempts were denied. Not events about memories (they
change no memory, so they never touch a memory's subject: reads stay reads), but facts the
auditor keeps and the projector folds into access statistics. Their own stream, MNEME_ACCESS.
"""

from __future__ import annotations

import msgspec
from msgspec import Struct

from schemas.events import UtcTime


class AccessRecord(Struct, frozen=True, kw_only=True, tag_field="type"):
    SCHEMA_VERSION = 1
    record_id: str
    at: UtcTime
    agent_id: str
    role: str
    request_id: str
    namespace: str
    operation: str  # the tool: memory_get, memory_list, …


class ReadRecorded(AccessRecord, frozen=True, kw_only=True, tag="read"):
    memory_ids: tuple[str, ...] = ()


class AccessDenied(AccessRecord, frozen=True, kw_only=True, tag="denied"):
    code: str
    message: str
    memory_id: str | None = None


AnyAccess = ReadRecorded | AccessDenied

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[AnyAccess] = msgspec.json.Decoder(AnyAccess)


def encode_access(record: AccessRecord) -> bytes:
    return _encoder.encode(record)


def decode_access(data: bytes) -> AnyAccess:
    return _decoder.decode(data)
