"""What every query of the query plane shares: the base `Query` (the namespace asked about, the reader's clock
`now`, and `min_seq` for read-your-writes, invariant 3), and the past position a read may ask for (`AsOf`) with
the position it was resolved to (`AsOfResolved`). The families of queries (schemas/queries.py and the modules
beside it) build on these; they stand apart so that each family can import them without importing the rest.
"""

from __future__ import annotations

from typing import ClassVar

from msgspec import Struct

from schemas.events import UtcTime


class Query(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    OPERATION: ClassVar[str] = ""
    namespace: str
    now: UtcTime
    min_seq: int = 0


class AsOf(Struct, frozen=True, kw_only=True):
    """A past position: a stream sequence, or a time (the newest sequence recorded at or before it); both: that
    sequence, with expiry judged at that time (an audited read asked again as it was asked)."""

    seq: int | None = None
    time: UtcTime | None = None


class AsOfResolved(Struct, frozen=True, kw_only=True):
    seq: int  # the answer is the projection right after this sequence
    time: UtcTime | None  # when the log recorded that sequence (what counts as expired then)
