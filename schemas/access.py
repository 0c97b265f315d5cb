"""Access records: who read what, and which attempts were denied. Not events about memories (they
change no memory, so they never touch a memory's subject: reads stay reads), but facts the
auditor keeps and the projector folds into access statistics. Their own stream, MNEME_ACCESS.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import Struct

from schemas import wide_ints
from schemas.events import UtcTime
from schemas.wide_ints import Int64


class AccessRecord(Struct, frozen=True, kw_only=True, tag_field="type"):
    SCHEMA_VERSION = 1
    record_id: str
    at: UtcTime
    agent_id: str
    role: str
    request_id: str
    namespace: str
    operation: str  # the tool: memory_get, memory_list, …


class AskedQuery(Struct, frozen=True, kw_only=True):
    """The projector query a read asked (a schemas/queries.py query, as plain JSON): enough to ask it again."""

    operation: str  # memory.get, memory.list, memory.search
    arguments: dict[str, Any]


class ReadRecorded(AccessRecord, frozen=True, kw_only=True, tag="read"):
    memory_ids: tuple[str, ...] = ()
    # (added later; records without them still decode)
    seq: Int64 | None = None  # the log position the answer reflects (a past read: the position it asked for)
    # each returned memory's version, as memory_ids (0: not known); a memory's history: each version it listed
    versions: tuple[Int64, ...] = ()
    scores: tuple[float, ...] = ()  # a search's score of each result, as memory_ids
    # the query whose answer was exactly memory_ids (for a stats read: whose figures `digest` fingerprints);
    # None: no such query (an answer the tool built from several, a status): `audit_reread` asks it again as of
    # `seq`
    query: AskedQuery | None = None
    digest: str | None = None  # a stats read: SHA-256 of the figures the log fixes (services/gateway/access_log.py)


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
    record = _decoder.decode(data)
    query = getattr(record, "query", None)
    if query is not None and query.arguments:  # (one past 64 bits would break re-asking it, and audit queries)
        wide_ints.check_json(query.arguments, "query.arguments")
    return record
