"""What the gateway beside a projector paces its writes against (services/gateway/pacing.py): the live vector
index's backlog, and a nudge that hands it the next texts at once."""

from __future__ import annotations

import asyncio
from typing import Protocol

from services.projector.generation import Generation, embedding_in_background


class Paced(Protocol):
    """What the pace needs of its projector."""

    gen: Generation
    serving: asyncio.Event
    start_target: int


class IndexPace:
    def __init__(self, projector: Paced):
        self.p = projector

    def index_backlog(self) -> int:
        """Texts the live vector index has yet to start embedding, which the gateway in this process paces
        its writes against (services/gateway/pacing.py): events the vector follower has received but not
        committed (each may bring a text; a commit is what hands them to the filler) plus committed texts
        the filler has not started on. The chunk being embedded is not counted, so writes fill the next
        chunk meanwhile and the model never waits for them. Counting only committed texts let ~100 writes
        through during one commit linger (then the index was seconds behind).
        0 when there is nothing to pace against: no background index, the model not ready, the log found at
        start still being embedded (a cold start answers INDEXING rather than slow the writes), or a filler
        whose last model call failed (it retries; writes go on)."""
        vectors = embedding_in_background(self.p.gen)
        follower = self.p.gen.vector_follower
        if vectors is None or follower is None or not self.p.serving.is_set():
            return 0
        if vectors.dense_applied < self.p.start_target or vectors.fill_failing:
            return 0
        uncommitted = follower.received - max(follower.committed, vectors.committed)  # (the view's is set first)
        return vectors.queued_dense + max(0, uncommitted)

    def index_nudge(self) -> None:
        """A write waits for the index backlog: commit what the vector follower holds now, not after its
        linger, so an idle filler can start on it."""
        follower = self.p.gen.vector_follower
        if follower is not None and follower.received > follower.committed:
            follower.request_commit()
