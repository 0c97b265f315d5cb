"""Commands: what a caller asks for. Inbound, so unknown fields are rejected."""

from __future__ import annotations

from typing import Any

from msgspec import UNSET, Struct, UnsetType

from schemas.events import UtcTime


class Command(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag_field="command"):
    namespace: str


class CreateMemory(Command, frozen=True, kw_only=True, forbid_unknown_fields=True, tag="create_memory"):
    store: str | None = None
    path: str | None = None
    content: str
    kind: str = "note"
    category: str | None = None
    subject: str | None = None
    tags: tuple[str, ...] = ()
    importance: float = 0.5
    confidence: float = 1.0
    citations: tuple[str, ...] = ()
    metadata: dict[str, Any] = {}
    expires_at: UtcTime | None = None
    valid_from: UtcTime | None = None
    valid_until: UtcTime | None = None
    entities: tuple[str, ...] = ()  # knowledge-graph entities it is about, by name


class UpdateMemory(Command, frozen=True, kw_only=True, forbid_unknown_fields=True, tag="update_memory"):
    memory_id: str
    content: str | UnsetType = UNSET
    kind: str | UnsetType = UNSET
    category: str | None | UnsetType = UNSET
    subject: str | None | UnsetType = UNSET
    tags: tuple[str, ...] | UnsetType = UNSET
    importance: float | UnsetType = UNSET
    confidence: float | UnsetType = UNSET
    citations: tuple[str, ...] | UnsetType = UNSET
    metadata: dict[str, Any] | UnsetType = UNSET
    expires_at: UtcTime | None | UnsetType = UNSET
    valid_from: UtcTime | None | UnsetType = UNSET
    valid_until: UtcTime | None | UnsetType = UNSET


class MoveMemory(Command, frozen=True, kw_only=True, forbid_unknown_fields=True, tag="move_memory"):
    memory_id: str
    to_path: str


class DeleteMemory(Command, frozen=True, kw_only=True, forbid_unknown_fields=True, tag="delete_memory"):
    memory_id: str
    permanent: bool = False
    reason: str | None = None


class RestoreMemory(Command, frozen=True, kw_only=True, forbid_unknown_fields=True, tag="restore_memory"):
    memory_id: str


class VerifyMemory(Command, frozen=True, kw_only=True, forbid_unknown_fields=True, tag="verify_memory"):
    memory_id: str


class LockMemory(Command, frozen=True, kw_only=True, forbid_unknown_fields=True, tag="lock_memory"):
    memory_id: str
    reason: str | None = None


class UnlockMemory(Command, frozen=True, kw_only=True, forbid_unknown_fields=True, tag="unlock_memory"):
    memory_id: str


class DeprecateMemory(Command, frozen=True, kw_only=True, forbid_unknown_fields=True, tag="deprecate_memory"):
    memory_id: str
    reason: str


class InvalidateMemory(Command, frozen=True, kw_only=True, forbid_unknown_fields=True, tag="invalidate_memory"):
    memory_id: str
    at: UtcTime  # the gateway's now: valid_until
    reason: str | None = None
    superseded_by: str | None = None
    outdated: bool = False


AnyCommand = (
    CreateMemory
    | UpdateMemory
    | MoveMemory
    | DeleteMemory
    | RestoreMemory
    | VerifyMemory
    | LockMemory
    | UnlockMemory
    | DeprecateMemory
    | InvalidateMemory
)
