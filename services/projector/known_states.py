"""The committed states of recently changed memories, kept by a fold so that a batch changing them again
reads nothing back (a row from DuckDB, a point from the vector index). Bounded: the memory changed least
recently is dropped first. Only the fold that writes a read model may record into its cache, after its
commit succeeded, so a cached state is never older than the one stored."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import KeysView, Mapping

from mneme.domain.state import MemoryState


class KnownStates:
    def __init__(self, limit: int = 20_000):
        self.limit = limit
        self._states: OrderedDict[str, MemoryState] = OrderedDict()

    def get(self, memory_id: str) -> MemoryState | None:
        return self._states.get(memory_id)

    def keys(self) -> KeysView[str]:
        return self._states.keys()

    def record(self, committed: Mapping[str, MemoryState | None]) -> None:
        """After a commit: the new states (None: the memory was deleted, so forget it)."""
        states = self._states
        for memory_id, state in committed.items():
            if state is None:
                states.pop(memory_id, None)
            else:
                states[memory_id] = state
                states.move_to_end(memory_id)
        while len(states) > self.limit:
            states.popitem(last=False)
