"""A namespace reset's decider: what a reset deletes, what it keeps, and the one event that closes it.

A reset deletes every memory, entity, relation and code project of a namespace, each by its own ordinary
delete (decided by the memory and graph deciders), then records one `namespace_reset` event with who, why and
the counts. A memory the caller may not delete (locked, a protected kind) or that is gone meanwhile is kept
and counted, never a reason to stop; any other refusal stops the reset (what was deleted stays deleted, and
the same request id goes on from there).
"""

from __future__ import annotations

from dataclasses import dataclass

from schemas.namespace_events import NamespaceReset

# refusals of one memory's delete that a reset passes over (the memory is kept, and counted)
KEPT_ON = frozenset({"MEMORY_NOT_FOUND", "MEMORY_LOCKED", "WRITE_NOT_ALLOWED", "PERMISSION_ERROR"})


def keeps(code: str) -> bool:
    """Whether a reset passes over a memory whose delete was refused with `code` (else the refusal stands)."""
    return code in KEPT_ON


@dataclass
class ResetTally:
    """What a reset did so far."""

    memories: int = 0
    kept: int = 0
    entities: int = 0
    relations: int = 0
    code_chunks: int = 0


def decide_reset(reason: str, before_seq: int, tally: ResetTally) -> NamespaceReset:
    """The event that closes a reset whose deletes (all before it in the log, after `before_seq`) did `tally`."""
    return NamespaceReset(reason=reason, before_seq=before_seq, memories=tally.memories, entities=tally.entities,
                          relations=tally.relations, code_chunks=tally.code_chunks, kept=tally.kept)  # fmt: skip
