"""Events about a whole namespace, in the same log as memories, the graph and code.

`namespace_reset` (`mneme.evt.<ns>.ns.reset`) records a reset: who asked, why, what it deleted and where in
the log the namespace stood before it. The deletes themselves are ordinary events, one per memory, entity,
relation and code project, written before it: each projection folds them as any delete, so nothing folds
this event, and `as_of` at `before_seq` reads the namespace as it was. The auditor records it as one entry.

The same rules as schemas/events.py: a tag is never reused, a field never retyped, new fields get defaults.
"""

from __future__ import annotations

from typing import ClassVar

from msgspec import Struct

from schemas.wide_ints import Int64


class NamespaceEvent(Struct, frozen=True, kw_only=True, tag_field="type"):
    SCHEMA_VERSION: ClassVar[int] = 1


class NamespaceReset(NamespaceEvent, frozen=True, kw_only=True, tag="namespace_reset"):
    """A namespace reset, recorded once its deletes are in the log."""

    reason: str
    before_seq: Int64  # the log's last position before the reset's first delete: `as_of` there reads it all
    memories: Int64  # deleted, each by its own event
    entities: Int64
    relations: Int64
    code_chunks: Int64
    kept: Int64 = 0  # memories the caller could not delete (locked, protected), still there


AnyNamespaceEvent = NamespaceReset
