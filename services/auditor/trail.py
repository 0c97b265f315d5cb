"""The compliance trail: one record per logged event, hash-chained, in its own DuckDB file.

Each record holds the SHA-256 of the previous record, so changing or removing one
breaks the chain at that point. Records are chained in memory (`stage`) and written
with the checkpoint in one transaction (`commit`): no gap, no duplicate across
restarts. Nobody reads the trail for read-your-writes, so the auditor lingers longer
before committing than the projector does.
"""

from __future__ import annotations

import hashlib
from typing import Any

import duckdb

from mneme.follow import Positioned

CHECKPOINT = "trail"
GENESIS = "0" * 64

SCHEMA = """
SET TimeZone = 'UTC';
CREATE TABLE IF NOT EXISTS audit_trail (
    seq BIGINT PRIMARY KEY, recorded_at TIMESTAMPTZ NOT NULL, event_id VARCHAR NOT NULL, action VARCHAR NOT NULL,
    namespace VARCHAR NOT NULL, memory_id VARCHAR NOT NULL, agent_id VARCHAR NOT NULL, role VARCHAR NOT NULL,
    request_id VARCHAR NOT NULL, occurred_at TIMESTAMPTZ NOT NULL, prev_hash VARCHAR NOT NULL, hash VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS checkpoints (name VARCHAR PRIMARY KEY, seq BIGINT NOT NULL);
"""


def record_hash(prev_hash: str, fields: tuple[Any, ...]) -> str:
    body = "\x1f".join("" if f is None else (f.isoformat() if hasattr(f, "isoformat") else str(f)) for f in fields)
    return hashlib.sha256(f"{prev_hash}\x1e{body}".encode()).hexdigest()


class Trail:
    def __init__(self, path: str):
        self.con = duckdb.connect(path)
        self.con.execute(SCHEMA)
        row = self.con.execute("SELECT seq FROM checkpoints WHERE name = ?", [CHECKPOINT]).fetchone()
        self.checkpoint: int = row[0] if row else 0
        last = self.con.execute("SELECT hash FROM audit_trail ORDER BY seq DESC LIMIT 1").fetchone()
        self.last_hash: str = last[0] if last else GENESIS
        self.staged, self._staged_hash = self.checkpoint, self.last_hash
        self._rows: list[tuple[Any, ...]] = []

    def close(self) -> None:
        self.con.close()

    def stage_reads_disk(self, batch: list[Positioned]) -> bool:
        return False

    def stage(self, batch: list[Positioned], upto: int | None = None) -> None:
        """Chain the records in memory; `commit` writes them."""
        prev = self._staged_hash
        for p in batch:
            if p.seq <= self.staged:
                continue
            e = p.envelope
            fields = (p.seq, p.recorded_at, e.event_id, type(e.event).__struct_config__.tag, e.namespace,
                      e.aggregate_id, e.actor.agent_id, e.actor.role, e.request_id, e.occurred_at)  # fmt: skip
            h = record_hash(prev, fields)
            self._rows.append((*fields, prev, h))
            prev = h
            self.staged = p.seq
        self._staged_hash = prev
        self.staged = max(self.staged, upto or 0)

    def commit(self) -> int:
        if self.staged == self.checkpoint:
            return self.checkpoint
        c = self.con
        c.execute("BEGIN TRANSACTION")
        try:
            if self._rows:
                ap = c.appender("audit_trail")
                ap.append_rows(self._rows)
                ap.flush()
            c.execute(
                "INSERT INTO checkpoints VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET seq = excluded.seq",
                [CHECKPOINT, self.staged],
            )
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        self.checkpoint, self.last_hash, self._rows = self.staged, self._staged_hash, []
        return self.checkpoint

    def verify(self) -> tuple[int, int | None]:
        """Walk the chain. Returns (records checked, sequence of the first broken record or None)."""
        prev, n = GENESIS, 0
        for row in self.con.execute("SELECT * FROM audit_trail ORDER BY seq").fetchall():
            fields, stored_prev, stored = row[:10], row[10], row[11]
            if stored_prev != prev or record_hash(prev, fields) != stored:
                return n, row[0]
            prev, n = stored, n + 1
        return n, None
