"""The memories read model in DuckDB: current rows, every version, stores and categories.

Two steps (see mneme/follow.py). `stage` folds events into an overlay: the states of
the memories touched since the last commit, indexed by id and by path, so point
reads (read-your-writes) never wait for DuckDB. `commit` writes the overlay, the
versions and the checkpoint in ONE transaction (invariant 5): a crash anywhere
leaves either the whole batch with its checkpoint, or neither, and the overlay is
re-staged from the log. Rows are written in bulk, as columns DuckDB scans in one
statement (row-by-row inserts cost ~1 ms each; the appender ~15 us a row; columns
~8 us). The states of recently committed memories stay in memory (bounded), so a
batch of changes to them needs no read of its own.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import duckdb
import msgspec
import numpy as np
from msgspec import UNSET

from mneme.domain.state import MemoryState, evolve, stale
from mneme.domain.validation import categories_of
from mneme.duck import first_row, rollback
from mneme.sink import Marks, Positioned
from schemas.events import Event, MemoryCreated, event_name
from schemas.placement import on_memory_subject
from services.projector.graph_fold import GRAPH_CANONICAL, GRAPH_SCHEMA, GRAPH_TABLES, GraphFold
from services.projector.known_states import KnownAccess, KnownStates

CHECKPOINT = "memories"
RECENT = 10  # versions kept per memory in the recent-history cache
log = logging.getLogger("mneme.projector")

SCHEMA = (
    """
SET TimeZone = 'UTC';
CREATE TABLE IF NOT EXISTS memories (
    id VARCHAR PRIMARY KEY, namespace VARCHAR NOT NULL, store VARCHAR, path VARCHAR,
    content VARCHAR NOT NULL, kind VARCHAR NOT NULL, category VARCHAR, subject VARCHAR,
    tags VARCHAR[] NOT NULL, importance DOUBLE NOT NULL, confidence DOUBLE NOT NULL,
    citations VARCHAR[] NOT NULL, metadata VARCHAR NOT NULL, status VARCHAR NOT NULL,
    version INTEGER NOT NULL, created_at TIMESTAMPTZ NOT NULL, updated_at TIMESTAMPTZ NOT NULL,
    created_by VARCHAR NOT NULL, updated_by VARCHAR NOT NULL, expires_at TIMESTAMPTZ,
    valid_from TIMESTAMPTZ, valid_until TIMESTAMPTZ, last_seq BIGINT NOT NULL,
    verification VARCHAR NOT NULL, locked BOOLEAN NOT NULL, status_reason VARCHAR, lock_reason VARCHAR,
    invalid_reason VARCHAR, superseded_by VARCHAR
);
CREATE TABLE IF NOT EXISTS memory_versions (
    id VARCHAR NOT NULL, version INTEGER NOT NULL, seq BIGINT NOT NULL, recorded_at TIMESTAMPTZ NOT NULL,
    event_type VARCHAR NOT NULL, request_id VARCHAR NOT NULL, agent_id VARCHAR NOT NULL, deleted BOOLEAN NOT NULL,
    namespace VARCHAR NOT NULL, store VARCHAR, path VARCHAR, content VARCHAR NOT NULL, kind VARCHAR NOT NULL,
    category VARCHAR, subject VARCHAR, tags VARCHAR[] NOT NULL, importance DOUBLE NOT NULL,
    confidence DOUBLE NOT NULL, citations VARCHAR[] NOT NULL, metadata VARCHAR NOT NULL, status VARCHAR NOT NULL,
    created_at TIMESTAMPTZ NOT NULL, updated_at TIMESTAMPTZ NOT NULL, created_by VARCHAR NOT NULL,
    updated_by VARCHAR NOT NULL, expires_at TIMESTAMPTZ, valid_from TIMESTAMPTZ, valid_until TIMESTAMPTZ,
    verification VARCHAR NOT NULL, locked BOOLEAN NOT NULL, status_reason VARCHAR, lock_reason VARCHAR,
    invalid_reason VARCHAR, superseded_by VARCHAR,
    seq_to BIGINT,  -- the sequence that replaced this version (NULL: still current);
                    -- its record interval is [seq, seq_to)
    PRIMARY KEY (id, version)
);
CREATE TABLE IF NOT EXISTS stores (
    namespace VARCHAR NOT NULL, name VARCHAR NOT NULL, created_seq BIGINT NOT NULL, last_seq BIGINT NOT NULL,
    PRIMARY KEY (namespace, name)
);
CREATE TABLE IF NOT EXISTS categories (
    namespace VARCHAR NOT NULL, store VARCHAR NOT NULL, path VARCHAR NOT NULL, created_seq BIGINT NOT NULL,
    PRIMARY KEY (namespace, store, path)
);
CREATE TABLE IF NOT EXISTS access_stats (
    id VARCHAR PRIMARY KEY, accessed_at TIMESTAMPTZ, access_count BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS checkpoints (name VARCHAR PRIMARY KEY, seq BIGINT NOT NULL, mark VARCHAR);
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR NOT NULL);
CREATE INDEX IF NOT EXISTS memories_ns_path ON memories (namespace, store, path);
CREATE INDEX IF NOT EXISTS memory_versions_id ON memory_versions (id);
"""
    + GRAPH_SCHEMA
)

STATE_COLUMNS = (
    "id, namespace, store, path, content, kind, category, subject, tags, importance, confidence, citations, "
    "metadata, status, version, created_at, updated_at, created_by, updated_by, expires_at, valid_from, "
    "valid_until, last_seq, verification, locked, status_reason, lock_reason, invalid_reason, superseded_by"
)
N_STATE = 29
# the same columns read from memory_versions: a memory as it stood at one version
VERSION_STATE_COLUMNS = STATE_COLUMNS.replace("last_seq", "seq AS last_seq")

# The shape of the tables. A file written under another version is dropped and folded again
# from the log when opened: a projection is always rebuildable (invariant 1).
PROJECTION_VERSION = 6
TABLES = ("memories", "memory_versions", "stores", "categories", "access_stats", "checkpoints", "meta", *GRAPH_TABLES)

# Canonical dump: every table, every column, in a fixed order (the rebuild-equals-live proof).
VERSION_COLUMNS = (
    "id, version, seq, recorded_at, event_type, request_id, agent_id, deleted, namespace, store, path, content, "
    "kind, category, subject, tags, importance, confidence, citations, metadata, status, created_at, updated_at, "
    "created_by, updated_by, expires_at, valid_from, valid_until, verification, locked, status_reason, lock_reason, "
    "invalid_reason, superseded_by, seq_to"
)

CANONICAL_TABLES = {  # table -> (order, rows): what a rebuild from the event log must reproduce
    "memories": ("id", "TRUE"),
    "memory_versions": ("id, version", "TRUE"),
    "stores": ("namespace, name", "TRUE"),
    "categories": ("namespace, store, path", "TRUE"),
    "checkpoints": ("name", f"name = '{CHECKPOINT}'"),  # (name and seq: the mark is the log's, not a fold's)
    **GRAPH_CANONICAL,
}

CANONICAL_SOURCE = {"checkpoints": "(SELECT name, seq FROM checkpoints)"}

_json = msgspec.json.Encoder(order="sorted")
MEMORY_COLUMNS = [c.strip() for c in STATE_COLUMNS.split(",")]
VERSION_COLUMN_LIST = [c.strip() for c in VERSION_COLUMNS.split(",")]


def one_row(cur: duckdb.DuckDBPyConnection, sql: str, args: object = None) -> tuple[Any, ...]:
    """The row of a query that always answers one: an aggregate without GROUP BY, scalar subqueries."""
    row = first_row(cur.execute(sql, args))
    assert row is not None  # such a query answers one row
    return row


SMALL_BATCH = 64  # rows below which insert_rows appends instead of scanning columns
CATCH_UP_EVENTS = 1000  # a commit of this many events or more: catching up (see MemoriesView._pace_checkpoints)
CATCH_UP_WAL = "256MiB"  # the WAL DuckDB lets grow before a checkpoint while catching up


def insert_rows(cur: duckdb.DuckDBPyConnection, table: str, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    """Insert rows as columns in one statement: DuckDB scans a registered dict of NumPy object arrays
    (`np.fromiter` keeps a list-valued cell one cell). A small batch (a live projector's commit of a few
    writes) goes through the appender instead: registering the columns costs ~1 ms a statement, more than
    the appender spends on a few rows. `columns` are in the table's order."""
    n = len(rows)
    if n < SMALL_BATCH:
        ap = cur.appender(table)
        ap.append_rows(rows)
        ap.flush()
        return
    cur.register(
        f"_{table}_batch",
        {c: np.fromiter(col, dtype=object, count=n) for c, col in zip(columns, zip(*rows, strict=True), strict=True)},
    )
    try:
        cols = ", ".join(columns)
        cur.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _{table}_batch")
    finally:
        cur.unregister(f"_{table}_batch")


def state_row(s: MemoryState) -> tuple[Any, ...]:
    return (
        s.id,
        s.namespace,
        s.store,
        s.path,
        s.content,
        s.kind,
        s.category,
        s.subject,
        list(s.tags),
        s.importance,
        s.confidence,
        list(s.citations),
        _json.encode(s.metadata).decode(),
        s.status,
        s.version,
        s.created_at,
        s.updated_at,
        s.created_by,
        s.updated_by,
        s.expires_at,
        s.valid_from,
        s.valid_until,
        s.last_seq,
        s.verification,
        s.locked,
        s.status_reason,
        s.lock_reason,
        s.invalid_reason,
        s.superseded_by,
    )


def row_state(r: tuple[Any, ...]) -> MemoryState:
    return MemoryState(
        id=r[0],
        namespace=r[1],
        store=r[2],
        path=r[3],
        content=r[4],
        kind=r[5],
        category=r[6],
        subject=r[7],
        tags=tuple(r[8]),
        importance=r[9],
        confidence=r[10],
        citations=tuple(r[11]),
        metadata=msgspec.json.decode(r[12]),
        status=r[13],
        version=r[14],
        created_at=r[15],
        updated_at=r[16],
        created_by=r[17],
        updated_by=r[18],
        expires_at=r[19],
        valid_from=r[20],
        valid_until=r[21],
        last_seq=r[22],
        verification=r[23],
        locked=r[24],
        status_reason=r[25],
        lock_reason=r[26],
        invalid_reason=r[27],
        superseded_by=r[28],
    )


@dataclass
class _Staged:
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


class MemoriesView:
    def __init__(self, path: str):
        self.path = path
        self.con = duckdb.connect(path)
        self._migrate()
        self.con.execute(SCHEMA)
        self.con.execute("ALTER TABLE checkpoints ADD COLUMN IF NOT EXISTS mark VARCHAR")  # (files before marks)
        self.con.execute(
            "INSERT INTO meta VALUES ('projection_version', ?) ON CONFLICT (key) DO NOTHING", [str(PROJECTION_VERSION)]
        )
        self._write = self.con.cursor()
        self._write.execute("SET TimeZone = 'UTC'")
        self._live_threshold = one_row(self.con, "SELECT current_setting('checkpoint_threshold')")[0]
        self._catching_up = False
        self._local = threading.local()
        self._lock = threading.Lock()
        row = first_row(self.con.execute("SELECT seq, mark FROM checkpoints WHERE name = ?", [CHECKPOINT]))
        if row is None:
            self.con.execute("INSERT INTO checkpoints VALUES (?, 0, NULL)", [CHECKPOINT])
        self.checkpoint: int = row[0] if row else 0
        self.checkpoint_mark: str | None = row[1] if row else None  # the identity of the log's event there
        self.marks = Marks()
        self.staged: int = self.checkpoint
        self._st = _Staged()
        # recent version summaries per memory (a point read's history without another DuckDB statement)
        self._recent: OrderedDict[str, list[tuple[Any, ...]]] = OrderedDict()
        self.recent_max = 50_000
        # committed states of recently changed or read memories (a batch that changes them again reads
        # nothing; a point read by id runs no statement), and access statistics (kept by the AccessView)
        self.known = KnownStates()
        self.known_access = KnownAccess()
        stats = self.con.execute(f"SELECT * FROM access_stats LIMIT {self.known_access.limit + 1}").fetchall()
        self.known_access.load(stats)
        self.graph = GraphFold()  # the knowledge graph's events: staged and committed with the memories'
        # ids a commit found already in the log's history while staging took them for new (a create of an id
        # that exists, or existed and was deleted): their creates are refused when the batch is staged again
        self._had: set[str] = set()
        self._refused_out: list[tuple[Positioned, str]] = []  # refusals the follower has not taken yet

    def _migrate(self) -> None:
        """Drop tables written under another projection version; they refold from the log."""
        have = {r[0] for r in self.con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        if not have & set(TABLES):
            return
        version = None
        if "meta" in have:
            row = first_row(self.con.execute("SELECT value FROM meta WHERE key = 'projection_version'"))
            version = int(row[0]) if row else None
        if version != PROJECTION_VERSION:
            log.warning(
                "projection %s is version %s, not %s: rebuilding it from the log",
                self.path,
                version,
                PROJECTION_VERSION,
            )
            for t in TABLES:
                self.con.execute(f"DROP TABLE IF EXISTS {t}")

    def reader(self) -> duckdb.DuckDBPyConnection:
        """A cursor for the calling thread: readers run beside the writer (MVCC)."""
        cur = getattr(self._local, "cur", None)
        if cur is None:
            cur = self.con.cursor()
            cur.execute("SET TimeZone = 'UTC'")
            self._local.cur = cur
        return cur

    def close(self) -> None:
        self.con.close()

    # -- staged state, for point reads -------------------------------------------------
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
            recent = self._recent.get(memory_id)
            if recent is None:
                return None
            self._recent.move_to_end(memory_id)
            return state, list(reversed(recent))[: min(history, RECENT)]
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
            if memory_id in self._recent:
                self._recent.move_to_end(memory_id)
                return list(reversed(self._recent[memory_id]))[:newest]
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
                self._recent[memory_id] = merged
                if len(self._recent) > self.recent_max:
                    self._recent.popitem(last=False)
        return list(reversed(merged))[:newest]

    def staged_store_seq(self, namespace: str, store: str) -> int:
        with self._lock:
            return self._st.store_seq.get((namespace, store), (0, 0))[1]

    # -- folding ------------------------------------------------------------------------
    def _load(self, ids: set[str]) -> dict[str, MemoryState]:
        if not ids:
            return {}
        out = {i: s for i in ids if (s := self.known.get(i)) is not None}
        rest = [i for i in ids if i not in out]
        if rest:
            rows = self._write.execute(
                f"SELECT {STATE_COLUMNS} FROM memories WHERE id IN (SELECT unnest(?))", [rest]
            ).fetchall()
            out.update((r[0], row_state(r)) for r in rows)
        return out

    def _to_load(self, batch: list[Positioned]) -> set[str]:
        # a create names a new id (appended with expected subject sequence 0): nothing to load, unless a commit
        # found that the log had the id before (see commit)
        ids = {
            p.envelope.aggregate_id
            for p in batch
            if isinstance(p.envelope.event, Event)
            and (not isinstance(p.envelope.event, MemoryCreated) or p.envelope.aggregate_id in self._had)
        }
        return ids - self._st.states.keys()

    def stage_reads_disk(self, batch: list[Positioned]) -> bool:
        return bool(self._to_load(batch)) or self.graph.reads_disk(batch)

    def stage(self, batch: list[Positioned], upto: int | None = None) -> None:
        """Fold a batch (in log order) into the overlay. Positions already staged are skipped."""
        batch = [p for p in batch if p.seq > self.staged]
        st = self._st
        st.batches.append((batch, upto))
        loaded = self._load(self._to_load(batch))
        with self._lock:
            st.in_db.update(loaded)
            self.graph.prepare(self._write, batch)
            for p in batch:
                env = p.envelope
                if not isinstance(env.event, Event):
                    if GraphFold.is_graph(env):
                        self.graph.stage_one(self._write, p, self._memories_holding)
                    continue  # (code-index events are the code view's)
                mid = env.aggregate_id
                prev = st.states[mid] if mid in st.states else loaded.get(mid)
                if prev is not None and not on_memory_subject(p.subject, prev.namespace, prev.store, mid):
                    self._refuse(p, f"misplaced: a change to memory {mid} of store {prev.store!r} on {p.subject}")
                    continue  # (on no subject of its memory or its store: nothing there expects it)
                if isinstance(env.event, MemoryCreated) and (prev is not None or mid in st.states or mid in self._had):
                    self._refuse(p, f"a second create of memory {mid}: the log created it before")
                    if prev is None:
                        continue  # (deleted since: nothing can change it again)
                if stale(prev, env):  # not folded; but it is on the memory's subject, and on its store's, whose
                    assert prev is not None  # last sequences a gateway's next write there expects: both move
                    st.states[mid] = msgspec.structs.replace(prev, last_seq=p.seq)
                    if prev.store is not None:
                        sk = (prev.namespace, prev.store)
                        st.store_seq[sk] = (st.store_seq.get(sk, (p.seq, p.seq))[0], p.seq)
                    continue
                new = evolve(prev, env, p.seq)
                shown = new or prev
                if shown is None:
                    continue  # an event about a memory this log never created: nothing to fold
                if prev is not None and prev.store is not None and prev.path is not None:
                    key = (prev.namespace, prev.store, prev.path)
                    if st.paths.get(key) == mid:  # it leaves its staged path (a committed one is
                        del st.paths[key]  # recognised by readers: its id is in `states`)
                st.states[mid] = new
                if prev is None or new is None or prev.content != new.content:  # what it mentions may change
                    ev = env.event
                    given = ev.entities if isinstance(ev, MemoryCreated) and ev.entities is not UNSET else None
                    self.graph.memory_folded(
                        self._write, mid, env.namespace, new.content if new else None, p.seq, given
                    )
                if new is not None and new.store is not None and new.path is not None:
                    st.paths[(new.namespace, new.store, new.path)] = mid
                r = state_row(shown)
                vrow = (
                    shown.id,
                    env.event.version,
                    p.seq,
                    p.recorded_at,
                    event_name(env.event),
                    env.request_id,
                    env.actor.agent_id,
                    new is None,
                    *r[1:14],
                    *r[15:22],
                    *r[23:29],
                    None,
                )
                if prev is not None:  # the version it replaces ends here: [seq, seq_to)
                    ix = st.last_ix.get(mid)
                    if ix is not None and st.versions[ix][1] == prev.version:  # staged too: its row says so
                        closed_row = (*st.versions[ix][:-1], p.seq)
                        st.versions[ix] = st.versions_of[mid][-1] = closed_row
                    else:  # committed: the commit updates its row
                        st.closed[(mid, prev.version)] = p.seq
                st.last_ix[mid] = len(st.versions)
                st.versions.append(vrow)
                st.versions_of.setdefault(mid, []).append(vrow)
                if env.event.version == 1:  # a new memory: its whole history is this version
                    self._recent[mid] = [vrow[:8]]
                    if len(self._recent) > self.recent_max:
                        self._recent.popitem(last=False)
                elif mid in self._recent:
                    cached = self._recent[mid]
                    cached.append(vrow[:8])
                    del cached[:-RECENT]
                if shown.store is not None:
                    key2 = (shown.namespace, shown.store)
                    st.store_seq[key2] = (st.store_seq.get(key2, (p.seq, p.seq))[0], p.seq)
                    # a path's categories are recorded at the first sequence that put a memory there: only
                    # a create or a move can (an unchanged path recorded them before)
                    if (
                        new is not None
                        and new.path
                        and (prev is None or prev.path != new.path or prev.store != new.store)
                    ):
                        for c in categories_of(new.path):
                            st.categories.setdefault((new.namespace, new.store, c), p.seq)  # type: ignore[arg-type]
            self.staged = max(self.staged, batch[-1].seq if batch else 0, upto or 0)

    def _refuse(self, p: Positioned, why: str) -> None:
        """A message the fold will not take (called while staging): its follower dead-letters it, once."""
        if p.seq not in self._st.refused:
            self._st.refused.add(p.seq)
            self._refused_out.append((p, why))

    def take_refused(self) -> list[tuple[Positioned, str]]:
        out, self._refused_out = self._refused_out, []
        return out

    def _creates_the_log_had(self) -> set[str]:
        """Ids whose staged create the committed history already holds (what a commit's duplicate key means)."""
        created = list({r[0] for r in self._st.versions if r[4] == "memory_created"})
        if not created:
            return set()
        rows = self._write.execute(
            "SELECT DISTINCT id FROM memory_versions WHERE id IN (SELECT unnest(?))", [created]
        ).fetchall()
        return {r[0] for r in rows}

    def _stage_again(self) -> None:
        """Fold what is staged once more from the committed state, now that `_had` names the creates to
        refuse (a rare path: only a message no gateway writes gets here)."""
        old = self._st
        with self._lock:
            for batch, _ in old.batches:
                for p in batch:
                    self._recent.pop(p.envelope.aggregate_id, None)
            self._st = _Staged(refused=set(old.refused))  # (what was refused before is not reported twice)
            self.graph.forget_staged()
            self.staged = self.checkpoint
        for batch, upto in old.batches:
            self.stage(batch, upto)

    def _memories_holding(self, namespace: str, word: str) -> list[tuple[str, str]]:
        """(id, content) of the namespace's memories whose content holds `word` (case aside): committed rows,
        overlaid with what is staged (called while staging, under the lock)."""
        rows = self._write.execute(
            "SELECT id, content FROM memories WHERE namespace = ? AND contains(lower(content), ?)", [namespace, word]
        ).fetchall()
        found = {r[0]: r[1] for r in rows}
        for mid, state in self._st.states.items():
            if state is None:
                found.pop(mid, None)
            elif state.namespace == namespace and word in state.content.casefold():
                found[mid] = state.content
            elif mid in found and state.namespace == namespace:
                del found[mid]  # staged content no longer holds it
        return sorted(found.items())

    def _pace_checkpoints(self, events: int) -> None:
        """A commit of CATCH_UP_EVENTS or more is a catch-up (a replay, a new replica, a restart behind the
        log): DuckDB then checkpoints its WAL into the file at 256 MiB instead of every 16 MiB, since every
        automatic checkpoint rewrites the tables' indexes whole (a 100,000-event fold: COMMIT 16.8 -> 7.6 us
        an event, 1.4 -> 3.5 us for the checkpoint at the end). The first small commit after it sets the
        usual threshold back, and DuckDB checkpoints the catch-up's WAL at that commit."""
        catching_up = events >= CATCH_UP_EVENTS
        if catching_up != self._catching_up:
            self._catching_up = catching_up
            limit = CATCH_UP_WAL if catching_up else self._live_threshold
            self._write.execute(f"SET checkpoint_threshold = '{limit}'")

    def commit(self) -> int:
        """Write everything staged and the checkpoint in one transaction. Returns the checkpoint.

        Staging takes a create for new without asking DuckDB (a gateway's create expects its subject empty).
        A create of an id the log already had (a message that bypassed the gateway) then fails the commit on
        a duplicate key: the ids are looked up, the batch is staged again with their creates refused (its
        follower dead-letters them), and the commit is tried once more."""
        try:
            return self._commit()
        except duckdb.ConstraintException:
            had = self._creates_the_log_had()
            if not had - self._had:
                raise
            log.warning("refusing %d create(s) of ids the log already had: %s", len(had), sorted(had)[:5])
            self._had |= had
            self._stage_again()
            return self._commit()

    def _memory_row(self, mid: str, state: MemoryState) -> tuple[Any, ...]:
        """The `memories` row of a staged state: taken from its version's row when this batch staged that
        version (the same values, converted once), else converted."""
        ix = self._st.last_ix.get(mid)
        if ix is None:
            return state_row(state)
        v = self._st.versions[ix]
        if v[1] != state.version or v[7]:
            return state_row(state)
        # vrow: id, version, seq, recorded_at, event_type, request_id, agent_id, deleted, then the state's
        # columns namespace..status (8:21), created_at..valid_until (21:28), verification..superseded_by (28:34)
        return (v[0], *v[8:21], v[1], *v[21:28], state.last_seq, *v[28:34])

    def _commit(self) -> int:
        st, last = self._st, self.staged
        if last == self.checkpoint:
            return last
        w = self._write
        self._pace_checkpoints(len(st.versions))
        w.execute("BEGIN TRANSACTION")
        try:
            replace = [i for i in st.states if i in st.in_db]
            if replace:
                w.execute("DELETE FROM memories WHERE id IN (SELECT unnest(?))", [replace])
            live = [self._memory_row(mid, s) for mid, s in st.states.items() if s is not None]
            if live:
                insert_rows(w, "memories", MEMORY_COLUMNS, live)
            if st.versions:  # (a version replaced in this batch already carries its seq_to)
                insert_rows(w, "memory_versions", VERSION_COLUMN_LIST, st.versions)
            closed = st.closed
            if closed:  # versions committed earlier that this batch replaced
                ks4 = list(closed)
                w.execute(
                    "UPDATE memory_versions SET seq_to = c.s "
                    "FROM (SELECT unnest(?) AS i, unnest(?) AS v, unnest(?) AS s) c "
                    "WHERE memory_versions.id = c.i AND memory_versions.version = c.v",
                    [[k[0] for k in ks4], [k[1] for k in ks4], [closed[k] for k in ks4]],
                )
            if st.store_seq:
                ks = list(st.store_seq)
                w.execute(
                    "INSERT INTO stores SELECT unnest(?), unnest(?), unnest(?), unnest(?) "
                    "ON CONFLICT (namespace, name) "
                    "DO UPDATE SET last_seq = greatest(stores.last_seq, excluded.last_seq)",
                    [
                        [k[0] for k in ks],
                        [k[1] for k in ks],
                        [st.store_seq[k][0] for k in ks],
                        [st.store_seq[k][1] for k in ks],
                    ],
                )
            if st.categories:
                ks3 = list(st.categories)
                w.execute(
                    "INSERT INTO categories SELECT unnest(?), unnest(?), unnest(?), unnest(?) ON CONFLICT DO NOTHING",
                    [[k[0] for k in ks3], [k[1] for k in ks3], [k[2] for k in ks3], [st.categories[k] for k in ks3]],
                )
            self.graph.write(w)
            mark = self.marks.at(last)
            w.execute("UPDATE checkpoints SET seq = ?, mark = ? WHERE name = ?", [last, mark, CHECKPOINT])
            w.execute("COMMIT")
        except BaseException:
            rollback(w)
            raise
        with self._lock:  # readers now find these rows in DuckDB, and these states known (the same step:
            self.known.record(st.states)  # a state leaves the overlay where a point read finds it next)
            self._st = _Staged()
            self.graph.committed(last)
            self.graph.reset()
            self.checkpoint, self.checkpoint_mark = last, mark
        return last

    def mark(self, seq: int, mark: str) -> None:
        self.marks.add(seq, mark)

    def positions(self) -> list[tuple[str, int, str | None]]:
        return [("the rows", self.checkpoint, self.checkpoint_mark)]

    def canonical_digest(self) -> dict[str, str]:
        """Per table, the SHA-256 of its rows' MD5s (each row as JSON, every column) in key order: equal digests,
        equal tables. Computed inside DuckDB (0.6 s at 100,000 versions; hashing Python reprs took 2.8 s)."""
        out = {}
        cur = self.reader()
        for table, (key, rows) in CANONICAL_TABLES.items():
            order = ", ".join(f"t.{k.strip()}" for k in key.split(","))
            out[table] = one_row(
                cur,
                f"SELECT sha256(coalesce(string_agg(md5(CAST(to_json(t) AS VARCHAR)), '' ORDER BY {order}), '')) "
                f"FROM {CANONICAL_SOURCE.get(table, table)} t WHERE {rows}",
            )[0]
        return out
