"""What a vector point holds for one memory version: its indexed text (the content, dated by its valid time),
a lean payload (the fields searches filter on, as epoch seconds and normalized values, its record interval
[seq_from, seq_to) and the whole state as JSON), and the state read back from a payload. Shared by the vector
view that writes points (services/projector/vector_view.py) and the searcher that reads hits (search.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from mneme.domain.state import MemoryState
from services.projector.vector_port import OPEN

FAR = 1e15  # an open end of a time interval, in epoch seconds (filters are ranges, never nulls)
_state_enc = msgspec.json.Encoder()
_state_dec = msgspec.json.Decoder(MemoryState)


def normalize_subject(subject: str | None) -> str | None:
    return " ".join(subject.split()).casefold() if subject else None


def index_text(s: MemoryState) -> str:
    """What a memory's vectors are made of: its content, after the date it holds from when it has one
    ("(8 May 2023) ..."), so questions about when something happened can match it."""
    if s.valid_from is None:
        return s.content
    return f"({s.valid_from.day} {s.valid_from:%B %Y}) {s.content}"


def epoch(t: datetime | None, default: float) -> float:
    return t.timestamp() if t is not None else default


def payload_of(s: MemoryState, seq: int) -> dict[str, Any]:
    """What a point carries: the fields searches filter on, its record interval, and the whole state (a hit
    needs no second lookup). Lean: converting a payload into Qdrant costs ~2.5 us a key, so fields no filter
    uses (id, version, store, path, lock, event) live only in `state`, and a field left empty (no category,
    subject or tags) is left out: an `eq` filter on a missing key matches nothing, as on an empty one."""
    p = {
        "namespace": s.namespace,
        "kind": s.kind,
        "status": s.status,
        "verification": s.verification,
        "importance": s.importance,
        "valid_from": epoch(s.valid_from, -FAR),
        "valid_until": epoch(s.valid_until, FAR),
        "expires_at": epoch(s.expires_at, FAR),
        "seq_from": seq,
        "seq_to": OPEN,
        "state": _state_enc.encode(s).decode(),
    }
    if s.category is not None:
        p["category"] = s.category
    if s.subject:
        p["subject"] = normalize_subject(s.subject)
    if s.tags:
        p["tags"] = list(s.tags)
    return p


def state_of(payload: dict[str, Any]) -> MemoryState:
    return _state_dec.decode(payload["state"])
