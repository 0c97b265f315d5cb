"""The compliance trail: one record per logged event, hash-chained, in its own DuckDB file.

Each record holds the SHA-256 of the previous record, so changing or removing one
breaks the chain at that point. The checkpoint is written in the same transaction
as the records (no gap, no duplicate across restarts).
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

    def close(self) -> None:
        self.con.close()

    def apply(self, batch: list[Positioned]) -> int:
        batch = [p for p in batch if p.seq > self.checkpoint]
        if not batch:
            return self.checkpoint
        rows = []
        prev = self.last_hash
        for p in batch:
            e = p.envelope
            fields = (p.seq, p.recorded_at, e.event_id, type(e.event).__struct_config__.tag, e.namespace,
                      e.aggregate_id, e.actor.agent_id, e.actor.role, e.request_id, e.occurred_at)  # fmt: skip
            h = record_hash(prev, fields)
            rows.append((*fields, prev, h))
            prev = h
        c = self.con
        c.execute("BEGIN TRANSACTION")
        try:
            ap = c.appender("audit_trail")
            ap.append_rows(rows)
            ap.flush()
            c.execute(
                "INSERT INTO checkpoints VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET seq = excluded.seq",
                [CHECKPOINT, batch[-1].seq],
            )
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        self.checkpoint, self.last_hash = batch[-1].seq, prev
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
