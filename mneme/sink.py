"""What a read model is to the follower that feeds it: the Sink contract, the positions a sink keeps with the
log's word for them (marks), and FanOut, several sinks behind one follower.

A sink may also record the messages its follower skipped, in log order (the audit trail does):
    def dead_letter(self, letter: DeadLetter) -> None
and hand back messages that decoded but that its fold refused (a create of an id the log already has, a change
published under another store than its memory's): the follower dead-letters each of them:
    def take_refused(self) -> list[tuple[Positioned, str]]  # (the message, why), emptied by the call

And keep the log's word for where it stands (no read model ahead of the log, DESIGN.md invariant 1):
    def mark(self, seq: int, mark: str) -> None  # the identity of the message at `seq` (the last one staged)
    def positions(self) -> list[tuple[str, int, str | None]]  # (what, committed seq, the mark saved with it)
A sink writes the mark of its checkpoint in the transaction that writes the checkpoint; its follower compares it
with the log when it starts and when its connection comes back (`ahead_of_log`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from schemas.dead_letter import DeadLetter


@dataclass(frozen=True, slots=True)
class Positioned:
    """A decoded message with where and when its stream recorded it (an Envelope for the event log)."""

    seq: int
    recorded_at: datetime
    envelope: Any
    subject: str = ""  # where the stream holds it ("" when a fold is fed by hand: taken as placed)


def mark_of(data: bytes | None) -> str:
    """A message's identity for a checkpoint: 8 bytes of BLAKE2b of its data (an event's data holds its id)."""
    return hashlib.blake2b(data or b"", digest_size=8).hexdigest()


class Marks:
    """The marks of the last positions a sink staged (seq -> mark, oldest first), for its commits to write beside
    the checkpoint they save. A sink whose saved position lags what it staged (the vectors: the dense filler)
    saves the latest marked position at or below it."""

    def __init__(self, keep: int = 4096):
        self._at: dict[int, str] = {}
        self.keep = keep
        self.fed = False  # marks arrive (a follower feeds the sink; a fold fed by hand has none)

    def add(self, seq: int, mark: str) -> None:
        self.fed = True
        self._at[seq] = mark
        if len(self._at) > self.keep:
            del self._at[next(iter(self._at))]

    def at(self, seq: int) -> str | None:
        return self._at.get(seq)

    def upto(self, seq: int) -> tuple[int, str] | None:
        """The latest marked position at or below `seq` (and forget those before it)."""
        best = None
        for s in list(self._at):
            if s > seq:
                break
            if best is not None:
                del self._at[best[0]]
            best = (s, self._at[s])
        return best


def positions_of(sink: Any, name: str) -> list[tuple[str, int, str | None]]:
    if (own := getattr(sink, "positions", None)) is not None:
        return list(own())
    return [(name, sink.checkpoint, None)]


class LogAhead(Exception):
    """A read model's committed state is not a prefix of the log: it holds a position past the log's last
    sequence, or the event at its checkpoint is not the one it applied (the log lost events in a power cut and
    took new ones under the same sequences, or an older copy of the log's store was put back)."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


class Sink(Protocol):
    @property
    def checkpoint(self) -> int: ...  # the committed position, read once at start (a sink may compute it)

    def stage(self, batch: list[Positioned], upto: int) -> None: ...  # fold in memory; `upto` >= last seq

    def stage_reads_disk(self, batch: list[Positioned]) -> bool: ...  # False: cheap enough for the event loop

    def commit(self) -> int: ...  # write what is staged with the checkpoint; returns the checkpoint


async def ahead_of_log(js: JetStreamContext, stream: str, positions: list[tuple[str, int, str | None]]) -> str | None:
    """Why these committed positions are not a prefix of `stream`, or None: each must be at or below the stream's
    last sequence, and the message at it must be the one the sink applied there (its mark). A position saved
    without a mark (before marks existed) is checked against the length only; one whose message the stream no
    longer holds (deleted) cannot be compared and passes."""
    last = (await js.stream_info(stream)).state.last_seq
    for what, seq, mark in positions:
        if seq > last:
            return f"{what}: checkpoint at {stream} #{seq}, past the log's last sequence #{last}"
        if seq == 0 or mark is None:
            continue
        try:
            msg = await js.get_msg(stream, seq=seq)
        except NotFoundError:
            continue
        if mark_of(msg.data) != mark:
            return f"{what}: applied another event at {stream} #{seq} than the log holds there now"
    return None


class FanOut:
    """Several sinks behind one follower (one delivery, one decode): what `mneme serve` runs.

    It starts from the lowest checkpoint; each sink skips positions it already has, so
    sinks that committed at different points converge after a crash.
    """

    def __init__(self, *sinks: Sink):
        self.sinks = sinks
        self.checkpoint = min(s.checkpoint for s in sinks)

    def stage_reads_disk(self, batch: list[Positioned]) -> bool:
        return any(s.stage_reads_disk(batch) for s in self.sinks)

    def stage(self, batch: list[Positioned], upto: int) -> None:
        for s in self.sinks:
            s.stage(batch, upto)

    def commit(self) -> int:
        self.checkpoint = min(s.commit() for s in self.sinks)
        return self.checkpoint

    def mark(self, seq: int, mark: str) -> None:
        for s in self.sinks:
            if (own := getattr(s, "mark", None)) is not None:
                own(seq, mark)

    def positions(self) -> list[tuple[str, int, str | None]]:
        return [p for s in self.sinks for p in positions_of(s, type(s).__name__)]

    def dead_letter(self, letter: DeadLetter) -> None:
        for s in self.sinks:
            if (record := getattr(s, "dead_letter", None)) is not None:
                record(letter)

    def take_refused(self) -> list[tuple[Positioned, str]]:
        refused: dict[int, tuple[Positioned, str]] = {}  # (two sinks refusing one message: one dead letter)
        for s in self.sinks:
            if (take := getattr(s, "take_refused", None)) is not None:
                for p, why in take():
                    refused.setdefault(p.seq, (p, why))
        return [refused[k] for k in sorted(refused)]

    def remove(self, sink: Sink) -> None:
        """Stop feeding `sink` (a projection swapped out); the others go on. Takes effect at the next stage."""
        self.sinks = tuple(s for s in self.sinks if s is not sink)
