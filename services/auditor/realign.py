"""When the log no longer holds what the trail recorded (a power cut took events the trail had already written,
or an older copy of the log's store was put back): find where the trail and the log last agree, keep the
records past it as evidence, and record from there what the log holds now (Trail.record_lost).

The trail cannot be rebuilt from the log like a projection: what it witnessed is the point of it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from mneme.sink import mark_of
from schemas import subjects as S
from schemas.access import decode_access
from schemas.events import decode_envelope
from services.auditor.trail import EVENTS, Trail

log = logging.getLogger("mneme.auditor")


def _record_id(source: str) -> Callable[[bytes], str]:
    if source == EVENTS:
        return lambda data: decode_envelope(data).event_id
    return lambda data: decode_access(data).record_id


def stream_of(source: str) -> str:
    return S.EVENTS_STREAM if source == EVENTS else S.ACCESS_STREAM


async def realign(js: JetStreamContext, trail: Trail, source: str, why: str) -> dict[str, Any]:
    """Walk `source`'s records back from its checkpoint to the latest one whose event the log still holds at
    the same sequence (compared by event or record id), declare those after it lost, and move the checkpoint
    back there. One stream read per record walked: a power cut's lost tail is a few records."""
    stream, record_id = stream_of(source), _record_id(source)
    last = (await js.stream_info(stream)).state.last_seq
    agreed, mark, after = 0, None, 0
    candidates = await asyncio.to_thread(trail.recorded_back, source, trail.checkpoints[source])
    for trail_seq, source_seq, rid in candidates:
        if source_seq > last:
            continue
        try:
            msg = await js.get_msg(stream, seq=source_seq)
        except NotFoundError:  # deleted since: neither agrees nor disagrees
            continue
        try:
            same = record_id(msg.data or b"") == rid
        except Exception:  # noqa: BLE001 - undecodable now where an event was recorded: not the same
            same = False
        if same:
            agreed, mark, after = source_seq, mark_of(msg.data), trail_seq
            break
    lost = await asyncio.to_thread(trail.record_lost, source, agreed, mark, after, why)
    log.error(
        "audit trail (%s) was ahead of the log (%s): %d record(s) kept as evidence, recording again from #%d",
        source, why, lost["records"], agreed + 1,
    )  # fmt: skip
    return lost
