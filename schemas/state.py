"""A memory's state as every read model and answer holds it (folded by mneme.domain.state.evolve)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from msgspec import Struct

ACTIVE = "active"
ARCHIVED = "archived"
DEPRECATED = "deprecated"
UNVERIFIED = "unverified"
VERIFIED = "verified"


class MemoryState(Struct, frozen=True, kw_only=True):
    id: str
    namespace: str
    store: str | None
    path: str | None
    content: str
    kind: str
    category: str | None
    subject: str | None
    tags: tuple[str, ...]
    importance: float
    confidence: float
    citations: tuple[str, ...]
    metadata: dict[str, Any]
    status: str
    version: int
    created_at: datetime
    updated_at: datetime
    created_by: str
    updated_by: str
    expires_at: datetime | None = None
    valid_from: datetime | None = None
    valid_until: datetime | None = None
    last_seq: int = 0
    verification: str = UNVERIFIED
    locked: bool = False
    status_reason: str | None = None  # why it was deprecated or archived
    lock_reason: str | None = None
    invalid_reason: str | None = None  # why its valid time was ended (invalidate / mark outdated)
    superseded_by: str | None = None

    def is_expired(self, now: datetime) -> bool:
        return self.expires_at is not None and self.expires_at <= now
