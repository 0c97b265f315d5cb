"""What the memory queries share (services/projector/memories_queries.py and the modules beside it): the
memories table now or as it stood after a sequence (an `as_of` resolved to one), the select of a memory with
its access statistics, and such a row as a `MemoryRow`.
"""

from __future__ import annotations

from typing import Any

from mneme.duck import first_row
from schemas.queries import AsOf, AsOfResolved, MemoryRow
from services.projector.duck_sql import one_row
from services.projector.memories_rows import row_state
from services.projector.memories_schema import N_STATE, STATE_COLUMNS, VERSION_STATE_COLUMNS
from services.projector.memories_view import MemoriesView

_COLS = ", ".join("m." + c.strip() for c in STATE_COLUMNS.split(","))


def source(as_of: AsOfResolved | None) -> str:
    """The memories table now, or as it stood right after sequence `as_of.seq`: the versions whose record
    interval [seq, seq_to) contains it, deletions excluded. An indexed-and-zonemapped scan, not a log read."""
    if as_of is None:
        return "memories"
    x = int(as_of.seq)
    return (
        f"(SELECT {VERSION_STATE_COLUMNS} FROM memory_versions WHERE seq <= {x} "
        f"AND (seq_to IS NULL OR seq_to > {x}) AND NOT deleted)"
    )


def select(as_of: AsOfResolved | None) -> str:
    return (
        f"SELECT {_COLS}, a.accessed_at, coalesce(a.access_count, 0) FROM {source(as_of)} m "
        "LEFT JOIN access_stats a ON a.id = m.id"
    )


SELECT = select(None)


def resolve_as_of(view: MemoriesView, as_of: AsOf | None) -> AsOfResolved | None:
    """A sequence, or a time -> the newest sequence recorded at or before it (0: before the first event). Both
    (an audited read asked again): that sequence, with expiry judged at that time, as the read judged it."""
    if as_of is None:
        return None
    if as_of.seq is not None and as_of.time is not None:
        return AsOfResolved(seq=as_of.seq, time=as_of.time)
    cur = view.reader()
    if as_of.seq is not None:
        r = first_row(cur.execute("SELECT max(recorded_at) FROM memory_versions WHERE seq <= ?", [as_of.seq]))
        return AsOfResolved(seq=as_of.seq, time=r[0] if r else None)
    r = one_row(
        cur,
        "SELECT coalesce(max(seq), 0) FROM (SELECT seq, recorded_at FROM memory_versions "
        "UNION ALL SELECT seq, recorded_at FROM graph_entities UNION ALL SELECT seq, recorded_at FROM graph_relations) "
        "WHERE recorded_at <= ?",
        [as_of.time],
    )
    return AsOfResolved(seq=int(r[0]), time=as_of.time)


def to_memory_row(r: tuple[Any, ...], past: bool = False) -> MemoryRow:
    """A row as a memory with its access statistics; a past read (as_of) carries none: statistics are folded
    from read records as they are now, and today's count is no answer to 'what did it look like then'."""
    if past:
        return MemoryRow(memory=row_state(r[:N_STATE]), accessed_at=None, access_count=None)
    return MemoryRow(memory=row_state(r[:N_STATE]), accessed_at=r[N_STATE], access_count=r[N_STATE + 1])
