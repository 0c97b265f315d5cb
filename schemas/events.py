"""Events: immutable, versioned facts in the log (invariant 7).

Rules: a tag is never reused; a field is never retyped; new fields get defaults
(old events still decode). A breaking change is a new tag plus an upcaster in
`schemas.upcast`. Events never forbid unknown fields, so old readers skip new ones.
Content lives in events; embeddings never do.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from schemas import wide_ints
from schemas.code_events import AnyCodeEvent
from schemas.graph_events import AnyGraphEvent
from schemas.namespace_events import AnyNamespaceEvent
from schemas.wide_ints import Int32, Int64

UtcTime = Annotated[datetime, Meta(tz=True)]


class Actor(Struct, frozen=True, kw_only=True):
    agent_id: str
    role: str = "agent"


class Event(Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event payload; `type` is the tag, `SCHEMA_VERSION` its version."""

    SCHEMA_VERSION: ClassVar[int] = 1
    memory_id: str
    version: Int32


class MemoryCreated(Event, frozen=True, kw_only=True, tag="memory_created"):
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
    status: str = "active"
    verification: str = "unverified"  # an admin's writes start "verified"
    # knowledge-graph entities it is about, by name: explicit mentions (added later; UNSET, and not written, when
    # none are given, so an event without them encodes as it always did)
    entities: tuple[str, ...] | UnsetType = UNSET


class MemoryUpdated(Event, frozen=True, kw_only=True, tag="memory_updated"):
    """A partial change: a field left UNSET is unchanged; None clears an optional field."""

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
    # set by the domain, not by callers: an agent's change to a verified memory's content or kind
    # makes it "unverified" again (added after v1; absent in older events)
    verification: str | UnsetType = UNSET
    # the entities it is about, by name: replaces the explicit mentions (added later; absent in older events)
    entities: tuple[str, ...] | UnsetType = UNSET


class MemoryMoved(Event, frozen=True, kw_only=True, tag="memory_moved_v2"):
    """Schema 2 names the store it lands in (`to_store`, required), so a move across stores can be said.
    Schema 1 (tag "memory_moved", without to_store) is upcast on read: see schemas/upcast.py."""

    SCHEMA_VERSION: ClassVar[int] = 2
    from_path: str
    to_path: str
    to_store: str | None


class MemoryArchived(Event, frozen=True, kw_only=True, tag="memory_archived"):
    reason: str | None = None


class MemoryRestored(Event, frozen=True, kw_only=True, tag="memory_restored"):
    pass


class MemoryDeleted(Event, frozen=True, kw_only=True, tag="memory_deleted"):
    """Permanent removal from the read models; history stays in the log."""

    reason: str | None = None


class MemoryVerified(Event, frozen=True, kw_only=True, tag="memory_verified"):
    pass


class MemoryLocked(Event, frozen=True, kw_only=True, tag="memory_locked"):
    """Immutable to agents until an admin unlocks it."""

    reason: str | None = None


class MemoryUnlocked(Event, frozen=True, kw_only=True, tag="memory_unlocked"):
    pass


class MemoryDeprecated(Event, frozen=True, kw_only=True, tag="memory_deprecated"):
    """Obsolete: still readable, marked, ranked below live memories."""

    reason: str


class MemoryInvalidated(Event, frozen=True, kw_only=True, tag="memory_invalidated"):
    """Its valid time ends (valid_until), softly: it stays readable, with its history. `outdated`: marked
    outdated by its writer rather than superseded."""

    valid_until: UtcTime
    reason: str | None = None
    superseded_by: str | None = None
    outdated: bool = False


AnyEvent = (
    MemoryCreated
    | MemoryUpdated
    | MemoryMoved
    | MemoryArchived
    | MemoryRestored
    | MemoryDeleted
    | MemoryVerified
    | MemoryLocked
    | MemoryUnlocked
    | MemoryDeprecated
    | MemoryInvalidated
)

# everything the log holds: memories' events, the knowledge graph's (schemas/graph_events.py) and the code
# index's (schemas/code_events.py)
LogEvent = AnyEvent | AnyGraphEvent | AnyCodeEvent | AnyNamespaceEvent

UPDATABLE_FIELDS: tuple[str, ...] = tuple(  # what a caller may change in the memory's state (verification is the
    # domain's; entities are the knowledge graph's mentions, folded beside the state)
    f
    for f in MemoryUpdated.__struct_fields__
    if f not in ("memory_id", "version", "verification", "entities")
)


class Envelope(Struct, frozen=True, kw_only=True):
    """What one log message holds: who, when, why, and the event itself."""

    event_id: str
    schema_version: Int64
    namespace: str
    aggregate_id: str
    occurred_at: UtcTime
    actor: Actor
    request_id: str
    correlation_id: str | None = None
    event: LogEvent


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Envelope)
_NAMES: dict[type, str] = {}


def event_name(event: Struct) -> str:
    """What happened, the same across schema versions: the tag without its `_v<n>` suffix ("memory_moved")."""
    cls = type(event)
    name = _NAMES.get(cls)
    if name is None:
        tag = str(cls.__struct_config__.tag)
        name = _NAMES[cls] = tag.rsplit("_v", 1)[0] if tag.rsplit("_v", 1)[-1].isdigit() else tag
    return name


def encode_envelope(env: Envelope) -> bytes:
    return _encoder.encode(env)


def decode_envelope(data: bytes) -> Envelope:
    """Today's events decode directly; an event written under an older schema (a tag that no longer
    decodes) is upcast on the raw JSON first (schemas/upcast.py)."""
    try:
        env = _decoder.decode(data)
    except msgspec.ValidationError:
        from schemas.upcast import upcast

        raw = upcast(msgspec.json.decode(data))
        if raw is None:
            raise
        env = msgspec.convert(raw, Envelope)
    if metadata := getattr(env.event, "metadata", None):
        wide_ints.check_json(metadata, "event.metadata")
    return env
