"""Identifiers. A created memory's id is derived from its request id, so a retried
create names the same memory; it is shaped as a UUID v4 (random-looking, version 4)."""

from __future__ import annotations

import hashlib
import uuid


def memory_id_for(namespace: str, request_id: str) -> str:
    digest = bytearray(hashlib.sha256(f"mneme/memory/{namespace}/{request_id}".encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x40  # version 4
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    return str(uuid.UUID(bytes=bytes(digest)))


def new_id() -> str:
    return str(uuid.uuid4())
