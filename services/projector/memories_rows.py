"""The memories' row tuples and the conversions between them: a state as a `memories` row (STATE_COLUMNS order)
and back, a state with its event as a `memory_versions` row (VERSION_COLUMNS order), and a version row as the
`memories` row, or the state, it recorded. The fold writes them (services/projector/memories_view.py), the
queries read them (memories_queries.py and the modules beside it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from mneme.domain.state import MemoryState

_json = msgspec.json.Encoder(order="sorted")


def state_row(s: MemoryState) -> tuple[Any, ...]:
    return (
        s.id,
        s.namespace,
        s.store,
        s.path,
        s.content,
        s.kind,
        s.category,
        s.subject,
        list(s.tags),
        s.importance,
        s.confidence,
        list(s.citations),
        _json.encode(s.metadata).decode(),
        s.status,
        s.version,
        s.created_at,
        s.updated_at,
        s.created_by,
        s.updated_by,
        s.expires_at,
        s.valid_from,
        s.valid_until,
        s.last_seq,
        s.verification,
        s.locked,
        s.status_reason,
        s.lock_reason,
        s.invalid_reason,
        s.superseded_by,
    )


def row_state(r: tuple[Any, ...]) -> MemoryState:
    return MemoryState(
        id=r[0],
        namespace=r[1],
        store=r[2],
        path=r[3],
        content=r[4],
        kind=r[5],
        category=r[6],
        subject=r[7],
        tags=tuple(r[8]),
        importance=r[9],
        confidence=r[10],
        citations=tuple(r[11]),
        metadata=msgspec.json.decode(r[12]),
        status=r[13],
        version=r[14],
        created_at=r[15],
        updated_at=r[16],
        created_by=r[17],
        updated_by=r[18],
        expires_at=r[19],
        valid_from=r[20],
        valid_until=r[21],
        last_seq=r[22],
        verification=r[23],
        locked=r[24],
        status_reason=r[25],
        lock_reason=r[26],
        invalid_reason=r[27],
        superseded_by=r[28],
    )


def version_row(
    state_row: tuple[Any, ...],
    version: int,
    seq: int,
    recorded_at: datetime,
    event_type: str,
    request_id: str,
    agent_id: str,
    deleted: bool,
) -> tuple[Any, ...]:
    """The `memory_versions` row of a version: its event (id, version, seq, recorded_at, event_type, request_id,
    agent_id, deleted), then the state's columns from `state_row` but id, version and last_seq, then seq_to
    (None: still current)."""
    r = state_row
    return (r[0], version, seq, recorded_at, event_type, request_id, agent_id, deleted,
            *r[1:14], *r[15:22], *r[23:29], None)  # fmt: skip


def memory_row(v: tuple[Any, ...], last_seq: int) -> tuple[Any, ...]:
    """The `memories` row a `memory_versions` row recorded, with `last_seq`. The version row: id, version, seq,
    recorded_at, event_type, request_id, agent_id, deleted, then the state's columns namespace..status (8:21),
    created_at..valid_until (21:28), verification..superseded_by (28:34)."""
    return (v[0], *v[8:21], v[1], *v[21:28], last_seq, *v[28:34])


def version_state(v: tuple[Any, ...]) -> MemoryState:
    """A memory_versions row (VERSION_COLUMNS order) as the state it recorded."""
    return row_state(memory_row(v, v[2]))
