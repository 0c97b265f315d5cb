"""Path uniqueness inside a store (invariant 4 for paths): a create or a move that claims a path appends with
the expected last sequence of the whole store's subjects, so two gateways claiming one path cannot both land.

Every write in the store moves that sequence, so a claim can lose to events that do not matter to it: when the
events in the lost window neither touch this memory nor put another memory at the path, the claim is appended
again at the new sequence without asking a projector (bounded). `claim_expects` is the sequence a claim starts
from.
"""

from __future__ import annotations

import msgspec

from mneme.eventlog import EventLogInterface, WrongLastSequence
from schemas import subjects as S
from schemas.events import MemoryCreated, MemoryMoved, decode_envelope


class PathClaims:
    def __init__(self, log: EventLogInterface) -> None:
        self.log = log

    async def append(
        self,
        subject: str,
        data: bytes,
        *,
        msg_id: str,
        expected: int,
        expected_subject: str | None,
        memory_id: str,
        path: str | None,
        digest: str,
    ) -> tuple[int, bool]:
        """Append; when a path claim loses only to events that cannot matter to it, retry at once.

        A claim checks the whole store's last sequence, which every write in the store moves. If
        the events in the lost window neither touch this memory nor put another memory at `path`
        (a create there, a move there), the decision made at `expected` still holds at the new
        last sequence: append again with it, without asking a projector (bounded).
        """
        for _ in range(8):
            try:
                return await self.log.append(
                    subject,
                    data,
                    msg_id=msg_id,
                    expected_seq=expected,
                    expected_subject=expected_subject,
                    digest=digest,
                )
            except WrongLastSequence as lost:
                if expected_subject is None or path is None or lost.last_seq <= expected:
                    raise
                if not await self._window_clear(expected_subject, expected, lost.last_seq, memory_id, path, msg_id):
                    raise
                expected = lost.last_seq
        raise WrongLastSequence(expected)

    async def _window_clear(
        self, store_filter: str, after: int, upto: int, memory_id: str, path: str, msg_id: str
    ) -> bool:
        if upto - after > 32:
            return False
        async for msg in self.log.after(store_filter, after, limit=upto - after):
            if msg.seq > upto:
                break
            if (msg.headers or {}).get(S.HDR_MSG_ID) == msg_id:
                return False  # our own write landed: the caller's conflict handling answers it as a retry
            try:
                env = decode_envelope(msg.data or b"")
            except msgspec.DecodeError:
                return False
            ev = env.event
            if env.aggregate_id == memory_id:
                return False
            if isinstance(ev, MemoryCreated) and ev.path == path:
                return False
            if isinstance(ev, MemoryMoved) and ev.to_path == path:
                return False
        return True


def claim_expects(store_seq: int, store_last: int, min_seq: int) -> int:
    """The store's last sequence a path claim appends against.

    Normally the projection's `store_seq`. A claim that lost learned the store's real last sequence from the
    log (`store_last`); once the projection that answered the path question has applied at least that far
    (`min_seq`, which the retry raised to it), its answer holds there, even if its own `store_seq` lags: a
    message on the store's subjects that no fold can attribute (a change to a deleted memory, a forged or
    replayed one) moves the log's figure and not the projection's, and every claim in the store would
    otherwise lose forever."""
    if store_last > store_seq and min_seq >= store_last:
        return store_last
    return store_seq
