"""Publishing access records (reads, denied attempts) without holding up the call.

Each record goes to the MNEME_ACCESS stream with `Nats-Msg-Id` = its record id (derived
from the request id and the tool), so a retried call leaves one record. Publishing runs
in the background; `flush` waits for what is in flight (at shutdown, and in tests).
"""

from __future__ import annotations

import asyncio
import logging

from nats.js import JetStreamContext

from schemas import subjects as S
from schemas.access import AccessDenied, AccessRecord, encode_access

log = logging.getLogger("mneme.gateway")


class AccessLog:
    def __init__(self, js: JetStreamContext, *, max_in_flight: int = 10_000):
        self.js = js
        self.max_in_flight = max_in_flight
        self._in_flight: set[asyncio.Task[None]] = set()

    async def record(self, rec: AccessRecord) -> None:
        kind = "denied" if isinstance(rec, AccessDenied) else "read"
        if len(self._in_flight) >= self.max_in_flight:  # back-pressure instead of unbounded memory
            await asyncio.wait(set(self._in_flight), return_when=asyncio.FIRST_COMPLETED)
        task = asyncio.create_task(self._publish(S.access_subject(kind, rec.namespace), rec))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _publish(self, subject: str, rec: AccessRecord) -> None:
        try:
            await self.js.publish(subject, encode_access(rec), timeout=10, headers={S.HDR_MSG_ID: rec.record_id})
        except Exception as exc:  # noqa: BLE001 - the call already answered; say loudly that the trail lost it
            log.error("access record %s (%s by %s) not recorded: %s", rec.record_id, rec.operation, rec.agent_id, exc)

    async def flush(self) -> None:
        if self._in_flight:
            await asyncio.wait(set(self._in_flight))
