"""The code index's read model: projects, files and chunks in DuckDB, each chunk with its embedding.

A sink of the projector's event follower (one delivery, one decode): it folds the code-index events
(schemas/code_events.py) into its own DuckDB file with its own checkpoint, in one transaction per commit
(invariant 5). Chunks are written without a vector; a filler thread embeds them in batches (the embedding
cache first, the model for the rest) and stores each vector beside its chunk, so code never holds the
memories' fold back. A project reads as `indexing` until every chunk of its last run has its vector, with
progress and an ETA from a smoothed embedding rate; searching is one matrix product over the namespace's
normalized vectors, kept in memory until chunks or vectors change.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb
import numpy as np

from mneme.duck import first_row, rollback
from mneme.embed_cache import EmbeddingCache, text_key
from mneme.embedding import ModelHandle, background_priority
from mneme.sink import Marks, Positioned
from schemas.code_events import (
    CodeEvent,
    CodeFileIndexed,
    CodeFileRemoved,
    CodeIndexFinished,
    CodeIndexStarted,
    CodeProjectDeleted,
)
from services.projector.duck_sql import SMALL_BATCH, insert_rows, one_row, thread_cursor

log = logging.getLogger("mneme.projector.code")

CHECKPOINT = "code"
VERSION = 2  # 2: chunk ids by position in the file (1 merged chunks of one line)
BATCH = 64  # chunks embedded per model call
FILL = 4 * BATCH  # chunks taken per fill: the model sorts them by length first, so a wider window pads less
PERSIST_EVERY = 10_000  # events without code: the checkpoint is saved at most this far behind
SCHEMA = """
SET TimeZone = 'UTC';
CREATE TABLE IF NOT EXISTS code_projects (
    namespace VARCHAR NOT NULL, project_id VARCHAR NOT NULL, root VARCHAR NOT NULL, run_id VARCHAR NOT NULL,
    status VARCHAR NOT NULL, error VARCHAR, total_files BIGINT NOT NULL, total_bytes BIGINT NOT NULL,
    files_done BIGINT NOT NULL, unchanged BIGINT NOT NULL, started_at TIMESTAMPTZ NOT NULL, finished_at TIMESTAMPTZ,
    seq BIGINT NOT NULL, PRIMARY KEY (namespace, project_id)
);
CREATE TABLE IF NOT EXISTS code_files (
    namespace VARCHAR NOT NULL, project_id VARCHAR NOT NULL, path VARCHAR NOT NULL, language VARCHAR NOT NULL,
    sha256 VARCHAR NOT NULL, size BIGINT NOT NULL, chunks BIGINT NOT NULL, seq BIGINT NOT NULL,
    PRIMARY KEY (namespace, project_id, path)
);
CREATE TABLE IF NOT EXISTS code_chunks (
    id VARCHAR PRIMARY KEY, namespace VARCHAR NOT NULL, project_id VARCHAR NOT NULL, path VARCHAR NOT NULL,
    language VARCHAR NOT NULL, start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, chunk_type VARCHAR NOT NULL,
    name VARCHAR, header VARCHAR NOT NULL, code VARCHAR NOT NULL, seq BIGINT NOT NULL, embedding FLOAT[]
);
CREATE TABLE IF NOT EXISTS code_checkpoints (name VARCHAR PRIMARY KEY, seq BIGINT NOT NULL, mark VARCHAR);
CREATE TABLE IF NOT EXISTS code_meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL);
CREATE INDEX IF NOT EXISTS code_chunks_project ON code_chunks (namespace, project_id, path);
"""
CHUNK_COLUMNS = [
    "id", "namespace", "project_id", "path", "language", "start_line", "end_line", "chunk_type", "name", "header",
    "code", "seq",
]  # fmt: skip


@dataclass(frozen=True)
class Matrix:
    ids: list[str]
    projects: np.ndarray
    languages: np.ndarray
    vectors: np.ndarray  # one normalized row per chunk


def chunk_id(ns: str, project: str, path: str, ordinal: int) -> str:
    """A chunk is the `ordinal`-th of its file (line ranges are not unique: pieces of one long line share one)."""
    return hashlib.sha256(f"{ns}\n{project}\n{path}\n{ordinal}".encode()).hexdigest()[:32]


def chunk_text(header: str, code: str) -> str:
    """What is embedded: the `path > Class > function` header line, then the code."""
    return f"{header}\n{code}"


class CodeView:
    def __init__(self, path: str, model: ModelHandle, cache: EmbeddingCache, *, background: bool = True):
        self.path = path
        self.con = duckdb.connect(path)
        version = None
        have = {r[0] for r in self.con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        if "code_meta" in have:
            row = first_row(self.con.execute("SELECT value FROM code_meta WHERE key = 'version'"))
            version = int(row[0]) if row else None
            if version != VERSION:  # a read model of another shape: folded again from the log
                for t in ("code_projects", "code_files", "code_chunks", "code_checkpoints", "code_meta"):
                    self.con.execute(f"DROP TABLE IF EXISTS {t}")
        self.con.execute(SCHEMA)
        self.con.execute("ALTER TABLE code_checkpoints ADD COLUMN IF NOT EXISTS mark VARCHAR")  # (before marks)
        self.con.execute("INSERT INTO code_meta VALUES ('version', ?) ON CONFLICT DO NOTHING", [str(VERSION)])
        row = first_row(self.con.execute("SELECT seq, mark FROM code_checkpoints WHERE name = ?", [CHECKPOINT]))
        if row is None:
            self.con.execute("INSERT INTO code_checkpoints VALUES (?, 0, NULL)", [CHECKPOINT])
        self._checkpoint: int = row[0] if row else 0  # covered: every event up to here is folded
        self._persisted = self._checkpoint  # saved in code_checkpoints
        self._persisted_mark: str | None = row[1] if row else None  # the identity of the log's event there
        self.marks = Marks()
        self.staged = self._checkpoint
        self._write = self.con.cursor()
        self._write.execute("SET TimeZone = 'UTC'")
        self._ops: list[tuple[Any, ...]] = []
        self._local = threading.local()
        self._db = threading.Lock()  # the filler's writes and the commits take turns on the file
        self.model, self.cache, self.background = model, cache, background
        self._wake = threading.Event()
        self._closed = False
        self.rate = 0.0  # chunks embedded per second (smoothed)
        self.version = 0  # bumped whenever chunks or their vectors change (what the search matrices are keyed by)
        self._matrices: dict[str, tuple[int, Any]] = {}  # namespace -> (version, Matrix)
        self._pending: dict[tuple[str | None, str | None], tuple[int, int]] = {}  # -> (version, chunks)
        self._filler: threading.Thread | None = None

    # -- Sink
    @property
    def checkpoint(self) -> int:
        return self._checkpoint

    def stage_reads_disk(self, batch: list[Positioned]) -> bool:
        return any(isinstance(p.envelope.event, CodeEvent) for p in batch)

    def mark(self, seq: int, mark: str) -> None:
        self.marks.add(seq, mark)

    def positions(self) -> list[tuple[str, int, str | None]]:
        # (what it covers: close() saves that position, with its mark)
        at = self._checkpoint
        return [("the code index", at, self._persisted_mark if at == self._persisted else self.marks.at(at))]

    def stage(self, batch: list[Positioned], upto: int | None = None) -> None:
        for p in batch:
            if p.seq <= self.staged or not isinstance(p.envelope.event, CodeEvent):
                continue
            self._ops.append((p.envelope.namespace, p.envelope.event, p.seq, p.envelope.occurred_at))
        self.staged = max(self.staged, batch[-1].seq if batch else 0, upto or 0)

    def commit(self) -> int:
        last = self.staged
        if last == self._checkpoint:
            return last
        if not self._ops and last - self._persisted < PERSIST_EVERY:
            # nothing of the code index in these events: they are covered without a transaction (most commits
            # of a busy log). After a restart the follower refolds from the saved position; code events are
            # folded at most once, since only a commit with code events (or every PERSIST_EVERY) moves it.
            self._checkpoint = last
            return last
        ops, self._ops = self._ops, []
        with self._db:
            w = self._write
            w.execute("BEGIN TRANSACTION")
            try:
                for ns, ev, seq, at in ops:
                    self._apply(w, ns, ev, seq, at)
                mark = self.marks.at(last)
                w.execute("UPDATE code_checkpoints SET seq = ?, mark = ? WHERE name = ?", [last, mark, CHECKPOINT])
                w.execute("COMMIT")
            except BaseException:
                rollback(w)
                self._ops = ops + self._ops
                raise
        self._checkpoint = self._persisted = last
        self._persisted_mark = mark
        if ops:
            self.version += 1
            self._wake.set()
        return last

    def _apply(self, w: duckdb.DuckDBPyConnection, ns: str, ev: CodeEvent, seq: int, at: datetime) -> None:
        key = [ns, ev.project_id]
        if isinstance(ev, CodeIndexStarted):
            w.execute(
                "INSERT OR REPLACE INTO code_projects VALUES (?, ?, ?, ?, 'indexing', NULL, ?, ?, 0, ?, ?, NULL, ?)",
                [*key, ev.root, ev.run_id, ev.total_files, ev.total_bytes, ev.unchanged, at, seq],
            )
        elif isinstance(ev, CodeFileIndexed):
            self._drop_file(w, ns, ev.project_id, ev.path)
            w.execute("INSERT INTO code_files VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                      [*key, ev.path, ev.language, ev.sha256, ev.size, len(ev.chunks), seq])  # fmt: skip
            rows = [
                (chunk_id(ns, ev.project_id, ev.path, i), ns, ev.project_id, ev.path,
                 ev.language, c.start_line, c.end_line, c.chunk_type, c.name, c.header, c.code, seq)
                for i, c in enumerate(ev.chunks)
            ]  # fmt: skip
            if len(rows) >= SMALL_BATCH:
                insert_rows(w, "code_chunks", CHUNK_COLUMNS, rows)
            elif rows:  # (the appender would want a value for every column, the vector too)
                w.executemany(
                    f"INSERT INTO code_chunks ({', '.join(CHUNK_COLUMNS)}) VALUES ({', '.join('?' * len(rows[0]))})",
                    rows,
                )
            w.execute(
                "UPDATE code_projects SET files_done = files_done + 1, seq = ? WHERE namespace = ? AND project_id = ? "
                "AND run_id = ?",
                [seq, *key, ev.run_id],
            )
        elif isinstance(ev, CodeFileRemoved):
            self._drop_file(w, ns, ev.project_id, ev.path)
        elif isinstance(ev, CodeIndexFinished):
            w.execute(
                "UPDATE code_projects SET status = ?, error = ?, finished_at = ?, seq = ? WHERE namespace = ? "
                "AND project_id = ? AND run_id = ?",
                [ev.status, ev.error, at, seq, *key, ev.run_id],
            )
        elif isinstance(ev, CodeProjectDeleted):
            for t in ("code_chunks", "code_files", "code_projects"):
                w.execute(f"DELETE FROM {t} WHERE namespace = ? AND project_id = ?", key)

    @staticmethod
    def _drop_file(w: duckdb.DuckDBPyConnection, ns: str, project: str, path: str) -> None:
        for t in ("code_chunks", "code_files"):
            w.execute(f"DELETE FROM {t} WHERE namespace = ? AND project_id = ? AND path = ?", [ns, project, path])

    # -- embedding
    def start_filler(self) -> None:
        if self.background and self._filler is None:
            self._filler = threading.Thread(target=self._fill_loop, name="mneme-code-embedder", daemon=True)
            self._filler.start()
            self._wake.set()

    def _fill_loop(self) -> None:
        background_priority(self.model.nice)  # MNEME_PROJECTOR_EMBEDDING_NICE: see ModelHandle
        while not self._closed:
            self._wake.wait(2.0)
            self._wake.clear()
            try:
                while not self._closed and self.fill_once():
                    pass
            except Exception:
                log.warning("embedding code chunks failed; will retry", exc_info=True)
                time.sleep(1.0)

    def fill_once(self, limit: int = FILL) -> int:
        """Embed up to `limit` chunks that have no vector yet; returns how many."""
        if not self.model.ready and not self.model.wait(5):
            return 0
        embedder = self.model.get()
        with self._db:
            rows = self._write.execute(
                "SELECT id, header, code FROM code_chunks WHERE embedding IS NULL ORDER BY seq, id LIMIT ?", [limit]
            ).fetchall()
        if not rows:
            return 0
        t0 = time.monotonic()
        texts = [chunk_text(h, c) for _, h, c in rows]
        keys = [text_key(t) for t in texts]
        found = self.cache.get_many(embedder.model_id, keys)
        todo = [i for i, k in enumerate(keys) if k not in found]
        if todo:
            vecs = embedder.embed([texts[i] for i in todo])
            fresh = {keys[i]: vecs[j] for j, i in enumerate(todo)}
            self.cache.put_many(embedder.model_id, fresh)
            found.update(fresh)
        ids = [r[0] for r in rows]
        emb = [np.asarray(found[k], dtype=np.float32).tolist() for k in keys]
        with self._db:
            self._write.execute(
                "UPDATE code_chunks SET embedding = c.e FROM (SELECT unnest(?) AS i, unnest(?) AS e) c "
                "WHERE code_chunks.id = c.i",
                [ids, emb],
            )
        self.version += 1
        secs = max(time.monotonic() - t0, 1e-6)
        self.rate = len(rows) / secs if self.rate == 0 else 0.8 * self.rate + 0.2 * len(rows) / secs
        return len(rows)

    # -- reads
    def reader(self) -> duckdb.DuckDBPyConnection:
        return thread_cursor(self.con, self._local)

    def matrix(self, ns: str) -> Matrix:
        """The namespace's embedded chunks as one normalized float32 matrix (with each row's id, project and
        language), kept until chunks or vectors change: a search is one matrix product, not a scan in SQL."""
        got = self._matrices.get(ns)
        if got is not None and got[0] == self.version:
            return got[1]  # type: ignore[no-any-return]
        version = self.version
        rows = (
            self.reader()
            .execute(
                "SELECT id, project_id, language, embedding FROM code_chunks "
                "WHERE namespace = ? AND embedding IS NOT NULL ORDER BY id",
                [ns],
            )
            .fetchall()
        )
        vecs = np.asarray([r[3] for r in rows], dtype=np.float32) if rows else np.zeros((0, 1), dtype=np.float32)
        if len(rows):
            vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        m = Matrix([r[0] for r in rows], np.asarray([r[1] for r in rows]), np.asarray([r[2] for r in rows]), vecs)
        self._matrices[ns] = (version, m)
        return m

    def pending(self, ns: str | None = None, project: str | None = None) -> int:
        """Chunks still without a vector; counted once per version of the chunks (a scan of every chunk)."""
        key = (ns, project)
        got = self._pending.get(key)
        version = self.version
        if got is not None and got[0] == version:
            return got[1]
        n = self._count_pending(ns, project)
        if len(self._pending) > 64:
            self._pending.clear()
        self._pending[key] = (version, n)
        return n

    def _count_pending(self, ns: str | None, project: str | None) -> int:
        sql, args = "SELECT count(*) FROM code_chunks WHERE embedding IS NULL", []
        if ns is not None:
            sql += " AND namespace = ?"
            args.append(ns)
        if project is not None:
            sql += " AND project_id = ?"
            args.append(project)
        return int(one_row(self.reader(), sql, args)[0])

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._filler is not None:
            self._filler.join(timeout=5)
        if self._checkpoint > self._persisted and not self._ops:
            with self._db:
                self._write.execute(
                    "UPDATE code_checkpoints SET seq = ?, mark = ? WHERE name = ?",
                    [self._checkpoint, self.marks.at(self._checkpoint), CHECKPOINT],
                )
        self.con.close()
