"""The messages a follower cannot fold: counted, logged, and (a named consumer) published on the dead-letter
stream, once per (consumer, stream, sequence) within its duplicate window."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from schemas import subjects as S
from schemas.dead_letter import DeadLetter, encode_dead_letter

log = logging.getLogger("mneme.follow")


class DeadLetters:
    def __init__(self, js: JetStreamContext, stream: str, consumer: str | None):
        """`consumer`: the name a letter is published under (`mneme.dlq.<consumer>`); None: counted and logged."""
        self.js, self.stream, self.consumer = js, stream, consumer
        self.count = 0  # messages skipped since start (the MNEME_DLQ stream keeps every one)
        self.last: DeadLetter | None = None
        self._publishing: set[asyncio.Task[None]] = set()

    def of(self, m: Msg, reason: str) -> DeadLetter:
        """Count, log and (a named consumer) publish a message that cannot be folded; the caller skips it."""
        md = m.metadata
        return self.at(md.sequence.stream, m.subject, m.data or b"", md.timestamp, reason)

    def at(self, seq: int, subject: str, data: bytes, recorded_at: datetime, reason: str) -> DeadLetter:
        letter = DeadLetter(
            consumer=self.consumer or "unnamed",
            stream=self.stream,
            seq=seq,
            subject=subject,
            reason=reason[:500],
            size=len(data),
            head_b64=DeadLetter.head(data),
            recorded_at=recorded_at,
            skipped_at=datetime.now(UTC),
        )
        self.count += 1
        self.last = letter
        log.error("%s: dead-lettered %s sequence %d (%s)", letter.consumer, self.stream, letter.seq, letter.reason)
        if self.consumer is not None:
            task = asyncio.create_task(self._publish(letter))
            self._publishing.add(task)
            task.add_done_callback(self._publishing.discard)
        return letter

    async def drain(self, timeout: float = 5.0) -> None:
        """Wait for the letters on their way out."""
        if self._publishing:
            await asyncio.wait(set(self._publishing), timeout=timeout)

    async def _publish(self, letter: DeadLetter) -> None:
        """On `mneme.dlq.<consumer>`, once per (consumer, stream, sequence) within the stream's duplicate
        window: a restart that meets the same message again within it does not count it twice."""
        msg_id = f"{letter.consumer}:{letter.stream}:{letter.seq}"
        try:
            await self.js.publish(
                S.dead_letter_subject(letter.consumer),
                encode_dead_letter(letter),
                stream=S.DEAD_LETTER_STREAM,
                timeout=5.0,
                headers={S.HDR_MSG_ID: msg_id},
            )
        except Exception as exc:  # noqa: BLE001 - still counted and logged; the stream keeps the message
            log.warning("could not publish the dead letter for %s sequence %d: %s", letter.stream, letter.seq, exc)
