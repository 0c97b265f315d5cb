"""The compliance trail: one record per action, hash-chained, in the auditor's own DuckDB file.

Two sources feed it: the event log (every change: who, which memory, which request) and the
access stream (every read with the ids it returned, every denied attempt). Each record gets
the next trail sequence and holds the SHA-256 of the previous record and of its own fields,
so changing or removing a record breaks the chain there (`verify` names it).

Records are chained as they are staged; one `commit` writes everything staged from both
sources with both checkpoints in one transaction, so what is committed is always a prefix
of one chain: no gap, no duplicate across restarts or crashes. Nobody reads the trail for
read-your-writes, so the auditor lingers before committing.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb

from mneme.duck import first_row, rollback
from mneme.sink import Marks, Positioned
from schemas.access import AccessDenied, AnyAccess
from schemas.dead_letter import DeadLetter
from schemas.events import Envelope, event_name

log = logging.getLogger("mneme.auditor")
GENESIS = "0" * 64
EVENTS, ACCESS = "events", "access"
LOST = "log_lost"  # the action of the record that declares earlier records' events gone from the log

SCHEMA = """
SET TimeZone = 'UTC';
CREATE TABLE IF NOT EXISTS audit_trail (
    trail_seq BIGINT PRIMARY KEY, source VARCHAR NOT NULL, source_seq BIGINT NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL, record_id VARCHAR NOT NULL, action VARCHAR NOT NULL, outcome VARCHAR NOT NULL,
    namespace VARCHAR NOT NULL, agent_id VARCHAR NOT NULL, role VARCHAR NOT NULL, request_id VARCHAR NOT NULL,
    memory_ids VARCHAR[] NOT NULL, code VARCHAR, occurred_at TIMESTAMPTZ NOT NULL,
    prev_hash VARCHAR NOT NULL, hash VARCHAR NOT NULL
);
CREATE TABLE IF NOT EXISTS checkpoints (name VARCHAR PRIMARY KEY, seq BIGINT NOT NULL, mark VARCHAR);
"""
COLUMNS = (
    "trail_seq",
    "source",
    "source_seq",
    "recorded_at",
    "record_id",
    "action",
    "outcome",
    "namespace",
    "agent_id",
    "role",
    "request_id",
    "memory_ids",
    "code",
    "occurred_at",
)


def record_hash(prev_hash: str, fields: tuple[Any, ...]) -> str:
    def text(f: Any) -> str:
        if f is None:
            return ""
        if isinstance(f, (list, tuple)):
            return ",".join(map(str, f))
        return f.isoformat() if hasattr(f, "isoformat") else str(f)

    body = "\x1f".join(text(f) for f in fields)
    return hashlib.sha256(f"{prev_hash}\x1e{body}".encode()).hexdigest()


def _event_fields(p: Positioned) -> tuple[Any, ...]:
    e: Envelope = p.envelope
    return (
        EVENTS,
        p.seq,
        p.recorded_at,
        e.event_id,
        event_name(e.event),
        "ok",
        e.namespace,
        e.actor.agent_id,
        e.actor.role,
        e.request_id,
        [e.aggregate_id],
        None,
        e.occurred_at,
    )


def _access_fields(p: Positioned) -> tuple[Any, ...]:
    r: AnyAccess = p.envelope
    if isinstance(r, AccessDenied):
        return (
            ACCESS,
            p.seq,
            p.recorded_at,
            r.record_id,
            f"denied:{r.operation}",
            "denied",
            r.namespace,
            r.agent_id,
            r.role,
            r.request_id,
            [r.memory_id] if r.memory_id else [],
            r.code,
            r.at,
        )
    return (
        ACCESS,
        p.seq,
        p.recorded_at,
        r.record_id,
        f"read:{r.operation}",
        "ok",
        r.namespace,
        r.agent_id,
        r.role,
        r.request_id,
        list(r.memory_ids),
        None,
        r.at,
    )


class Trail:
    def __init__(self, path: str):
        self.path = path
        self.con = duckdb.connect(path)
        self._migrate()
        self.con.execute(SCHEMA)
        self.con.execute("ALTER TABLE checkpoints ADD COLUMN IF NOT EXISTS mark VARCHAR")  # (trails before marks)
        self._lock = threading.Lock()
        self._commit_lock = threading.Lock()
        # both rows exist from the start: a commit updates them (an upsert costs DuckDB about 2 ms more)
        self.con.execute(
            "INSERT INTO checkpoints VALUES (?, 0, NULL), (?, 0, NULL) ON CONFLICT DO NOTHING", [EVENTS, ACCESS]
        )
        cps = {r[0]: (r[1], r[2]) for r in self.con.execute("SELECT name, seq, mark FROM checkpoints").fetchall()}
        self.checkpoints: dict[str, int] = {n: cps.get(n, (0, None))[0] for n in (EVENTS, ACCESS)}
        # the identity of the log's message at each checkpoint (mneme.follow: no read model ahead of the log)
        self.checkpoint_marks: dict[str, str | None] = {n: cps.get(n, (0, None))[1] for n in (EVENTS, ACCESS)}
        self.marks = {EVENTS: Marks(), ACCESS: Marks()}
        last = first_row(self.con.execute("SELECT trail_seq, hash FROM audit_trail ORDER BY trail_seq DESC LIMIT 1"))
        self.last_seq: int
        self.last_hash: str
        self.last_seq, self.last_hash = (last[0], last[1]) if last else (0, GENESIS)
        self.staged = dict(self.checkpoints)
        self._staged_seq, self._staged_hash = self.last_seq, self.last_hash
        self._rows: list[tuple[Any, ...]] = []

    def _migrate(self) -> None:
        cols = {
            r[0]
            for r in self.con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'audit_trail'"
            ).fetchall()
        }
        if cols and "trail_seq" not in cols:  # the spine's one-source trail: kept aside, verifiable as it was
            log.warning("audit trail %s has the old shape: kept as audit_trail_v1, a new chain starts", self.path)
            self.con.execute("ALTER TABLE audit_trail RENAME TO audit_trail_v1")
            self.con.execute("DROP TABLE IF EXISTS checkpoints")

    def close(self) -> None:
        self.con.close()

    def source(self, name: str) -> TrailSource:
        return TrailSource(self, name)

    def stage(self, source: str, batch: list[Positioned], upto: int | None) -> None:
        fields_of = _event_fields if source == EVENTS else _access_fields
        with self._lock:
            prev, seq = self._staged_hash, self._staged_seq
            for p in batch:
                if p.seq <= self.staged[source]:
                    continue
                seq += 1
                fields = (seq, *fields_of(p))
                h = record_hash(prev, fields)
                self._rows.append((*fields, prev, h))
                prev = h
                self.staged[source] = p.seq
            self._staged_hash, self._staged_seq = prev, seq
            self.staged[source] = max(self.staged[source], upto or 0)

    def dead_letter(self, source: str, letter: DeadLetter) -> None:
        """A message of `source` that could not be decoded: one record (action `dead_letter`, the reason as its
        code), chained in log order like any other, so the trail says that it happened and where."""
        with self._lock:
            if letter.seq <= self.staged[source]:
                return
            at = letter.recorded_at or letter.skipped_at
            seq = self._staged_seq + 1
            fields: tuple[Any, ...] = (seq, source, letter.seq, at, f"dlq:{letter.stream}:{letter.seq}", "dead_letter",
                      "dead_letter", "", "", "", "", [], letter.reason[:200], at)  # fmt: skip
            h = record_hash(self._staged_hash, fields)
            self._rows.append((*fields, self._staged_hash, h))
            self._staged_hash, self._staged_seq = h, seq
            self.staged[source] = letter.seq

    def commit(self) -> None:
        """Write every staged record (both sources) and both checkpoints in one transaction.

        The staged rows are taken under a short lock (staging runs on the event loop and must
        not wait for DuckDB); commits themselves are serialized. If the write fails, the rows go
        back in front of whatever was staged meanwhile, so the chain never skips a record.
        """
        with self._commit_lock:
            with self._lock:
                if self.staged == self.checkpoints:
                    return
                rows, staged = self._rows, dict(self.staged)
                last_seq, last_hash = self._staged_seq, self._staged_hash
                self._rows = []
            c = self.con
            try:
                c.execute("BEGIN TRANSACTION")
                if rows:
                    ap = c.appender("audit_trail")
                    ap.append_rows(rows)
                    ap.flush()
                marks = dict(self.checkpoint_marks)
                for name, seq in staged.items():
                    if seq != self.checkpoints[name]:
                        marks[name] = self.marks[name].at(seq)
                        c.execute("UPDATE checkpoints SET seq = ?, mark = ? WHERE name = ?", [seq, marks[name], name])
                c.execute("COMMIT")
            except BaseException:
                rollback(c)
                with self._lock:
                    self._rows = rows + self._rows
                raise
            self.checkpoints, self.checkpoint_marks = staged, marks
            self.last_seq, self.last_hash = last_seq, last_hash

    def recorded_back(self, source: str, at_most: int) -> list[tuple[int, int, str]]:
        """`source`'s records at or below its sequence `at_most`, latest first, as (trail_seq, source_seq,
        record_id): those a log's record can be compared with (no dead letter, no record already declared lost)."""
        cur = self.con.cursor()
        rows = cur.execute(
            "SELECT trail_seq, source_seq, record_id FROM audit_trail WHERE source = ? AND source_seq <= ? "
            "AND action NOT IN ('dead_letter', ?) ORDER BY trail_seq DESC", [source, at_most, LOST]
        ).fetchall()  # fmt: skip
        gone = lost_ranges(cur, source)
        return [r for r in rows if not any(a <= r[0] <= b for a, b in gone)]

    def record_lost(
        self, source: str, agreed: int, agreed_mark: str | None, after_trail_seq: int, why: str
    ) -> dict[str, Any]:
        """The log no longer holds `source`'s events past `agreed` that this trail recorded (after trail record
        `after_trail_seq`): keep those records as evidence, append one record that says so (action LOST, its
        record_id `lost:<source>:<first>:<last>` naming the trail records), and move the source's checkpoint
        back to `agreed`, so what the log holds there now is recorded next. Returns what was declared lost."""
        with self._commit_lock:
            cur = self.con.cursor()
            gone = lost_ranges(cur, source)
            rows = [r for r in cur.execute(
                "SELECT trail_seq, source_seq FROM audit_trail WHERE source = ? AND trail_seq > ? AND action <> ? "
                "ORDER BY trail_seq", [source, after_trail_seq, LOST]
            ).fetchall() if not any(a <= r[0] <= b for a, b in gone)]  # fmt: skip
        with self._lock:
            if rows:
                first, last = rows[0][0], rows[-1][0]
                at = datetime.now(UTC)
                seq = self._staged_seq + 1
                span = f"{source} #{rows[0][1]}..#{rows[-1][1]}"
                code = f"{len(rows)} record(s) from trail #{first} to #{last} ({span}) hold events the log lost"
                code = f"{code}: {why}"[:1000]
                fields: tuple[Any, ...] = (seq, source, agreed, at, f"lost:{source}:{first}:{last}", LOST, "lost",
                                           "", "", "", "", [], code, at)  # fmt: skip
                h = record_hash(self._staged_hash, fields)
                self._rows.append((*fields, self._staged_hash, h))
                self._staged_hash, self._staged_seq = h, seq
            self.staged[source] = agreed
            if agreed_mark is not None:
                self.marks[source].add(agreed, agreed_mark)
        self.commit()
        if not rows:
            return {"source": source, "rewound_to": agreed, "records": 0}
        return {"source": source, "rewound_to": agreed, "records": len(rows), "first_record": rows[0][0],
                "last_record": rows[-1][0], "first_source_seq": rows[0][1]}  # fmt: skip

    def verify(self) -> tuple[int, int | None]:
        """Walk the chain. Returns (records checked, trail sequence of the first broken record or None)."""
        return verify_chain(self.con)


def lost_ranges(con: duckdb.DuckDBPyConnection, source: str | None = None) -> list[tuple[int, int]]:
    """The trail records declared lost (their events gone from the log), as (first, last) trail sequences."""
    sql = "SELECT record_id FROM audit_trail WHERE action = ?" + (" AND source = ?" if source else "")
    out = []
    for (rid,) in con.execute(sql, [LOST, source] if source else [LOST]).fetchall():
        _, _, first, last = rid.split(":")
        out.append((int(first), int(last)))
    return out


def lost_from_log(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """What `mneme audit verify` names: each time records were found to hold events the log no longer has."""
    rows = con.execute(
        "SELECT trail_seq, source, source_seq, record_id, code, recorded_at FROM audit_trail WHERE action = ? "
        "ORDER BY trail_seq", [LOST]
    ).fetchall()  # fmt: skip
    out = []
    for trail_seq, source, agreed, rid, code, at in rows:
        _, _, first, last = rid.split(":")
        out.append({"first_record": int(first), "last_record": int(last), "source": source, "log_agrees_upto": agreed,
                    "noted_in_record": trail_seq, "noted_at": at.isoformat(), "why": code})  # fmt: skip
    return out


def verify_chain(con: duckdb.DuckDBPyConnection) -> tuple[int, int | None]:
    """Walk the chain in a trail file (open read-only or not): (records checked, first broken trail sequence)."""
    prev, n, expected = GENESIS, 0, 1
    cur = con.cursor()
    for row in cur.execute(
        f"SELECT {', '.join(COLUMNS)}, prev_hash, hash FROM audit_trail ORDER BY trail_seq"
    ).fetchall():
        fields, stored_prev, stored = row[:14], row[14], row[15]
        if row[0] != expected or stored_prev != prev or record_hash(prev, fields) != stored:
            return n, row[0]
        prev, n, expected = stored, n + 1, expected + 1
    return n, None


@dataclass
class TrailSource:
    """One source's view of the trail, as a follower's sink."""

    trail: Trail
    name: str

    @property
    def checkpoint(self) -> int:
        return self.trail.checkpoints[self.name]

    def stage_reads_disk(self, batch: list[Positioned]) -> bool:
        return False

    def stage(self, batch: list[Positioned], upto: int) -> None:
        self.trail.stage(self.name, batch, upto)

    def dead_letter(self, letter: DeadLetter) -> None:
        self.trail.dead_letter(self.name, letter)

    def mark(self, seq: int, mark: str) -> None:
        self.trail.marks[self.name].add(seq, mark)

    def positions(self) -> list[tuple[str, int, str | None]]:
        return [(f"the audit trail ({self.name})", self.checkpoint, self.trail.checkpoint_marks[self.name])]

    def commit(self) -> int:
        self.trail.commit()
        return self.trail.checkpoints[self.name]
