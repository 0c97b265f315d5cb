"""Bounded caches of what a read model has committed, kept exact by the one fold that writes it.

`KnownStates`: the committed states of recently changed or read memories. A batch that changes them again
reads nothing back (a row from DuckDB, a point from the vector index), and a point read by id answers
without a DuckDB statement. `KnownAccess`: the committed access statistics of recently read memories.

Only the fold records into a cache, after its commit succeeded, so a cached value is never older than
the stored one. A reader that missed may offer what it read from the store, with the epoch it was given
when it missed: a commit in between moves the epoch, and the offer is refused (it may have read the row
before the commit). The memory changed or read least recently is dropped first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import KeysView, Mapping
from datetime import datetime

from mneme.domain.state import MemoryState

LIMIT = 20_000
Access = tuple[datetime | None, int]  # (accessed_at, access_count)


class KnownStates:
    def __init__(self, limit: int = LIMIT):
        self.limit = limit
        self._states: OrderedDict[str, MemoryState] = OrderedDict()
        self._lock = threading.Lock()
        self._epoch = 0

    def get(self, memory_id: str) -> MemoryState | None:
        return self._states.get(memory_id)

    def keys(self) -> KeysView[str]:
        return self._states.keys()

    def lookup(self, memory_id: str) -> tuple[MemoryState | None, int]:
        """For a reader: the committed state if known (now the most recently used), and the epoch to offer
        what it reads from the store under when it is not."""
        with self._lock:
            state = self._states.get(memory_id)
            if state is not None:
                self._states.move_to_end(memory_id)
            return state, self._epoch

    def offer(self, memory_id: str, state: MemoryState, epoch: int) -> None:
        with self._lock:
            if epoch == self._epoch and memory_id not in self._states:
                self._states[memory_id] = state
                self._trim()

    def record(self, committed: Mapping[str, MemoryState | None]) -> None:
        """After a commit: the new states (None: the memory was deleted, so forget it)."""
        with self._lock:
            states = self._states
            for memory_id, state in committed.items():
                if state is None:
                    states.pop(memory_id, None)
                else:
                    states[memory_id] = state
                    states.move_to_end(memory_id)
            self._epoch += 1
            self._trim()

    def _trim(self) -> None:
        while len(self._states) > self.limit:
            self._states.popitem(last=False)


class KnownAccess:
    """Access statistics add up, so a commit updates the cached entries in place. An offer is refused while a
    commit runs, as well as across one: a reader between the store's COMMIT and the update would otherwise
    cache the new count, and the update would add the same reads again.

    While every committed row fits (`load` found at most `limit`, and no commit has added past it), the cache
    is complete: a memory it does not hold was never read, (None, 0), with no statement to ask."""

    def __init__(self, limit: int = LIMIT):
        self.limit = limit
        self._stats: OrderedDict[str, Access] = OrderedDict()
        self._lock = threading.Lock()
        self._epoch = 0
        self._writing = False
        self._complete = False

    def load(self, rows: list[tuple[str, datetime | None, int]]) -> None:
        """Every committed row, before the fold starts (more than `limit`: nothing is loaded)."""
        with self._lock:
            if len(rows) <= self.limit:
                self._stats = OrderedDict((r[0], (r[1], r[2])) for r in rows)
                self._complete = True

    def lookup(self, memory_id: str) -> tuple[Access | None, int | None]:
        with self._lock:
            hit = self._stats.get(memory_id)
            if hit is not None:
                self._stats.move_to_end(memory_id)
            elif self._complete:
                hit = (None, 0)
            return hit, None if self._writing else self._epoch

    def offer(self, memory_id: str, stats: Access, epoch: int | None) -> None:
        with self._lock:
            if self._complete:  # it answers every memory already
                return
            if epoch is not None and epoch == self._epoch and not self._writing and memory_id not in self._stats:
                self._stats[memory_id] = stats
                self._trim()

    def begin(self) -> None:
        with self._lock:
            self._writing = True
            self._epoch += 1

    def end(self, committed: Mapping[str, Access] | None) -> None:
        """After the commit (None: it failed, nothing changed): add its reads to the cached entries."""
        with self._lock:
            for memory_id, (at, n) in (committed or {}).items():
                had = self._stats.get(memory_id)
                if had is not None:
                    newest = at if had[0] is None or (at is not None and at > had[0]) else had[0]
                    self._stats[memory_id] = (newest, had[1] + n)
                elif self._complete:  # its first row
                    self._stats[memory_id] = (at, n)
            self._trim()
            self._writing = False
            self._epoch += 1

    def _trim(self) -> None:
        if len(self._stats) > self.limit:
            self._complete = False  # a row it drops would read as never read
            while len(self._stats) > self.limit:
                self._stats.popitem(last=False)
