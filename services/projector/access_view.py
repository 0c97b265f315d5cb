"""Access statistics (accessed_at, access_count), folded from read records on the access stream.

Reads never append to a memory's own subject: a get stays a read. This sink shares the
projection's DuckDB file (its own cursor, its own checkpoint row, committed with its rows).
"""

from __future__ import annotations

import threading
from datetime import datetime

from mneme.duck import rollback
from mneme.sink import Marks, Positioned
from schemas.access import ReadRecorded
from services.projector.memories_view import MemoriesView

CHECKPOINT = "access"


class AccessView:
    def __init__(self, view: MemoriesView):
        self._cur = view.con.cursor()
        self._cur.execute("SET TimeZone = 'UTC'")
        # the row exists from the start: a commit updates it (an upsert costs DuckDB about 2 ms more)
        self._cur.execute("INSERT INTO checkpoints VALUES (?, 0, NULL) ON CONFLICT DO NOTHING", [CHECKPOINT])
        # (fetchall: a result left open keeps this cursor's transaction, which then blocks a CHECKPOINT)
        rows = self._cur.execute("SELECT seq, mark FROM checkpoints WHERE name = ?", [CHECKPOINT]).fetchall()
        self.checkpoint: int = rows[0][0] if rows else 0
        self.checkpoint_mark: str | None = rows[0][1] if rows else None  # the access record's identity there
        self.marks = Marks()
        self.staged = self.checkpoint
        self._lock = threading.Lock()
        self._acc: dict[str, tuple[datetime, int]] = {}
        self._known = view.known_access  # point reads' cache of these statistics: updated with each commit

    def stage_reads_disk(self, batch: list[Positioned]) -> bool:
        return False

    def stage(self, batch: list[Positioned], upto: int | None = None) -> None:
        with self._lock:
            for p in batch:
                if p.seq <= self.staged or not isinstance(p.envelope, ReadRecorded):
                    continue
                for mid in p.envelope.memory_ids:
                    at, n = self._acc.get(mid, (p.envelope.at, 0))
                    self._acc[mid] = (max(at, p.envelope.at), n + 1)
            self.staged = max(self.staged, batch[-1].seq if batch else 0, upto or 0)

    def commit(self) -> int:
        with self._lock:
            if self.staged == self.checkpoint:
                return self.checkpoint
            acc, staged, self._acc = self._acc, self.staged, {}
        c = self._cur
        self._known.begin()
        c.execute("BEGIN TRANSACTION")
        try:
            if acc:
                ids = list(acc)
                c.execute(
                    "INSERT INTO access_stats SELECT unnest(?), unnest(?), unnest(?) ON CONFLICT (id) DO UPDATE SET "
                    "accessed_at = greatest(access_stats.accessed_at, excluded.accessed_at), "
                    "access_count = access_stats.access_count + excluded.access_count",
                    [ids, [acc[i][0] for i in ids], [acc[i][1] for i in ids]],
                )
            mark = self.marks.at(staged)
            c.execute("UPDATE checkpoints SET seq = ?, mark = ? WHERE name = ?", [staged, mark, CHECKPOINT])
            c.execute("COMMIT")
        except BaseException:
            rollback(c)
            self._known.end(None)
            with self._lock:  # keep the counts for the next attempt
                for mid, (at, n) in acc.items():
                    at2, n2 = self._acc.get(mid, (at, 0))
                    self._acc[mid] = (max(at, at2), n + n2)
            raise
        self._known.end(acc)
        self.checkpoint, self.checkpoint_mark = staged, mark
        return staged

    def mark(self, seq: int, mark: str) -> None:
        self.marks.add(seq, mark)

    def positions(self) -> list[tuple[str, int, str | None]]:
        return [("the access statistics", self.checkpoint, self.checkpoint_mark)]
