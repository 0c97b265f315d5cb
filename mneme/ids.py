"""Identifiers. A created memory's id is derived from its request id, so a retried
create names the same memory; it is shaped as a UUID v4 (random-looking, version 4)."""

from __future__ import annotations

import hashlib
import os
import random
import uuid
from datetime import datetime
from typing import Any

from schemas.events import Actor, Envelope

# Request ids come from a generator of our own, seeded from the OS: code that seeds the global
# `random` (tests, simulations, hypothesis) must never make two calls share an idempotency key.
_rng = random.Random(os.urandom(32))
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _rng.seed(os.urandom(32)))


def _v4_from(text: str) -> str:
    digest = bytearray(hashlib.sha256(text.encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x40  # version 4
    digest[8] = (digest[8] & 0x3F) | 0x80  # RFC 4122 variant
    return str(uuid.UUID(bytes=bytes(digest)))


def request_key(agent_id: str, operation: str, request_id: str) -> str:
    """An idempotency key is scoped per principal and operation: two agents' "r-1" are two requests, and so
    are one agent's "r-1" for a create and for an update."""
    return f"{agent_id}/{operation}/{request_id}"


def memory_id_for(namespace: str, request_id: str) -> str:
    return _v4_from(f"mneme/memory/{namespace}/{request_id}")


def event_id_for(msg_id: str) -> str:
    """An event's id follows from its message id, so a retried append carries the very same event."""
    return _v4_from(f"mneme/event/{msg_id}")


def new_id() -> str:
    """A fresh request id: random (not secret), without a system call per id."""
    return str(uuid.UUID(int=_rng.getrandbits(128), version=4))


def entity_id_for(namespace: str, name_key: str) -> str:
    """An entity's id follows from its namespace and normalized name: two writers creating it meet on one subject."""
    return _v4_from(f"mneme/entity/{namespace}/{name_key}")


def relation_id_for(namespace: str, from_id: str, relation_type: str, to_id: str) -> str:
    """A relation's id follows from its ends and its type: the same triple is one relation."""
    return _v4_from(f"mneme/relation/{namespace}/{from_id}/{relation_type}/{to_id}")


def envelope(
    key: str,
    namespace: str,
    aggregate_id: str,
    event: Any,
    actor: Actor,
    request_id: str,
    at: datetime,
    correlation_id: str | None = None,
) -> Envelope:
    """The one way a command's event is wrapped for the log: its id follows from `key` (what the append's
    message id is built from), so a retried append carries the very same event; its schema version is its type's."""
    return Envelope(
        event_id=event_id_for(key),
        schema_version=type(event).SCHEMA_VERSION,
        namespace=namespace,
        aggregate_id=aggregate_id,
        occurred_at=at,
        actor=actor,
        request_id=request_id,
        correlation_id=correlation_id,
        event=event,
    )
