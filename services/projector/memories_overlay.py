"""The memories view's overlay (services/projector/memories_view.py): what its fold has staged since the last
commit (`Staged`: the memories' states, their version rows, the stores', the categories', and how a commit
writes them in its transaction), the recent version summaries it keeps per memory (`RecentVersions`), and the
view's read side (`OverlayReads`): a cursor per reader thread, and point reads (read-your-writes) of what is
staged or known, with their history, that need no DuckDB statement.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import duckdb

from mneme.domain.state import MemoryState
from mneme.sink import Positioned
from services.projector.duck_sql import close_versions, columns, insert_rows, thread_cursor
from services.projector.known_states import KnownStates
from services.projector.memories_rows import memory_row, state_row
from services.projector.memories_schema import MEMORY_COLUMNS, VERSION_COLUMN_LIST

RECENT = 10  # versions kept per memory in the recent-history cache


@dataclass
class Staged:
    """What the commit will write: everything folded since the last one."""

    states: dict[str, MemoryState | None] = field(default_factory=dict)  # None: deleted
    in_db: set[str] = field(default_factory=set)  # ids that have a committed row to replace
    paths: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (ns, store, path) -> id, staged
    versions: list[tuple[Any, ...]] = field(default_factory=list)
    versions_of: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)  # id -> its staged versions
    last_ix: dict[str, int] = field(default_factory=dict)  # id -> where its newest staged version is in `versions`
    store_seq: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # first, last
    closed: dict[tuple[str, int], int] = field(default_factory=dict)  # (id, version) -> seq_to
    categories: dict[tuple[str, str, str], int] = field(default_factory=dict)
    batches: list[tuple[list[Positioned], int | None]] = field(default_factory=list)  # to stage them again
    refused: set[int] = field(default_factory=set)  # sequences the fold refused (each reported once)

    def store_changed(self, namespace: str, store: str, seq: int) -> None:
        """A memory of the store changed at `seq`: its last sequence moves there (its first staged one stays)."""
        key = (namespace, store)
        self.store_seq[key] = (self.store_seq.get(key, (seq, seq))[0], seq)

    def add_version(self, mid: str, vrow: tuple[Any, ...], replaces: int | None, seq: int) -> None:
        """Stage a version row of memory `mid`, at `seq`; the version it `replaces` (if any) ends there:
        [seq, seq_to)."""
        if replaces is not None:
            ix = self.last_ix.get(mid)
            if ix is not None and self.versions[ix][1] == replaces:  # staged too: its row says so
                closed_row = (*self.versions[ix][:-1], seq)
                self.versions[ix] = self.versions_of[mid][-1] = closed_row
            else:  # committed: the commit updates its row
                self.closed[(mid, replaces)] = seq
        self.last_ix[mid] = len(self.versions)
        self.versions.append(vrow)
        self.versions_of.setdefault(mid, []).append(vrow)

    def memory_row(self, mid: str, state: MemoryState) -> tuple[Any, ...]:
        """The `memories` row of a staged state: taken from its version's row when this batch staged that
        version (the same values, converted once), else converted."""
        ix = self.last_ix.get(mid)
        if ix is None:
            return state_row(state)
        v = self.versions[ix]
        if v[1] != state.version or v[7]:
            return state_row(state)
        return memory_row(v, state.last_seq)

    def write(self, w: duckdb.DuckDBPyConnection) -> None:
        """Inside the commit's transaction: the memories' rows (replaced whole), their versions (closing those
        committed earlier that this batch replaced), the stores' last sequences and the new categories."""
        replace = [i for i in self.states if i in self.in_db]
        if replace:
            w.execute("DELETE FROM memories WHERE id IN (SELECT unnest(?))", [replace])
        live = [self.memory_row(mid, s) for mid, s in self.states.items() if s is not None]
        if live:
            insert_rows(w, "memories", MEMORY_COLUMNS, live)
        if self.versions:  # (a version replaced in this batch already carries its seq_to)
            insert_rows(w, "memory_versions", VERSION_COLUMN_LIST, self.versions)
        close_versions(w, "memory_versions", self.closed)
        if self.store_seq:
            w.execute(
                "INSERT INTO stores SELECT unnest(?), unnest(?), unnest(?), unnest(?) "
                "ON CONFLICT (namespace, name) "
                "DO UPDATE SET last_seq = greatest(stores.last_seq, excluded.last_seq)",
                columns((*k, *v) for k, v in self.store_seq.items()),
            )
        if self.categories:
            w.execute(
                "INSERT INTO categories SELECT unnest(?), unnest(?), unnest(?), unnest(?) ON CONFLICT DO NOTHING",
                columns((*k, v) for k, v in self.categories.items()),
            )


class RecentVersions:
    """The newest RECENT version summaries of recently changed or read memories (id, version, seq, recorded_at,
    event_type, request_id, agent_id, deleted; oldest first), for at most `limit` memories (the least recently
    used leave first): a point read's history without a DuckDB statement. Not thread-safe: the view's lock."""

    def __init__(self, limit: int = 50_000):
        self._by_id: OrderedDict[str, list[tuple[Any, ...]]] = OrderedDict()
        self.limit = limit

    def newest(self, memory_id: str, n: int) -> list[tuple[Any, ...]] | None:
        """Its `n` newest summaries, newest first (None: not cached)."""
        cached = self._by_id.get(memory_id)
        if cached is None:
            return None
        self._by_id.move_to_end(memory_id)
        return list(reversed(cached))[:n]

    def put(self, memory_id: str, summaries: list[tuple[Any, ...]]) -> None:
        """Its summaries, oldest first (a new memory's first version, or its history as read)."""
        self._by_id[memory_id] = summaries
        if len(self._by_id) > self.limit:
            self._by_id.popitem(last=False)

    def add(self, memory_id: str, summary: tuple[Any, ...]) -> None:
        """A new version of a memory: its summary joins the cached ones (a memory not cached stays so)."""
        cached = self._by_id.get(memory_id)
        if cached is not None:
            cached.append(summary)
            del cached[:-RECENT]

    def forget(self, memory_id: str) -> None:
        self._by_id.pop(memory_id, None)


class OverlayReads:
    """The read side of MemoriesView, which keeps what these read (under its lock)."""

    con: duckdb.DuckDBPyConnection
    checkpoint: int
    known: KnownStates  # committed states of recently changed or read memories
    _local: threading.local
    _lock: threading.Lock
    _st: Staged
    _recent: RecentVersions

    def reader(self) -> duckdb.DuckDBPyConnection:
        """A cursor for the calling thread: readers run beside the writer (MVCC)."""
        return thread_cursor(self.con, self._local)

    def staged_state(self, memory_id: str) -> tuple[bool, MemoryState | None]:
        """(True, state or None if deleted) when the memory changed since the last commit."""
        with self._lock:
            if memory_id in self._st.states:
                return True, self._st.states[memory_id]
        return False, None

    def known_now(self, memory_id: str, history: int) -> tuple[MemoryState | None, list[tuple[Any, ...]]] | None:
        """Without waiting and without DuckDB, for a point read on the event loop: (the memory's state, staged
        or known (None: deleted), its `history` newest version summaries from the cache), or None when that
        takes a statement or a fold holds the lock (the read then runs on a worker thread)."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if memory_id in self._st.states:
                state = self._st.states[memory_id]
            elif (state := self.known.lookup(memory_id)[0]) is None:
                return None
            if not history or state is None:
                return state, []
            recent = self._recent.newest(memory_id, min(history, RECENT))
            return None if recent is None else (state, recent)
        finally:
            self._lock.release()

    def staged_path(self, namespace: str, store: str, path: str) -> str | None:
        with self._lock:
            return self._st.paths.get((namespace, store, path))

    def staged_versions(self, memory_id: str) -> list[tuple[Any, ...]]:
        with self._lock:
            return list(self._st.versions_of.get(memory_id, ()))

    def recent_versions(self, memory_id: str, newest: int) -> list[tuple[Any, ...]]:
        """(id, version, seq, recorded_at, event_type, request_id, agent_id, deleted), newest first:
        from the cache, else committed and staged versions (cached only when no commit ran meanwhile)."""
        newest = min(newest, RECENT)
        with self._lock:
            cached = self._recent.newest(memory_id, newest)
            if cached is not None:
                return cached
            before = self.checkpoint
        rows = (
            self.reader()
            .execute(
                "SELECT id, version, seq, recorded_at, event_type, request_id, agent_id, deleted FROM memory_versions "
                "WHERE id = ? ORDER BY version DESC LIMIT ?",
                [memory_id, RECENT],
            )
            .fetchall()
        )
        with self._lock:
            by_version = {r[1]: r for r in rows}
            by_version.update({r[1]: r[:8] for r in self._st.versions_of.get(memory_id, ())})
            merged = [by_version[k] for k in sorted(by_version)][-RECENT:]
            if self.checkpoint == before:
                self._recent.put(memory_id, merged)
        return list(reversed(merged))[:newest]

    def staged_store_seq(self, namespace: str, store: str) -> int:
        with self._lock:
            return self._st.store_seq.get((namespace, store), (0, 0))[1]
