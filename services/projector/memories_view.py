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

The tables are services/projector/memories_schema.py, the row tuples memories_rows.py, the overlay
memories_overlay.py.
"""

from __future__ import annotations

import logging
import threading

import duckdb
import msgspec
from msgspec import UNSET

from mneme.domain.state import MemoryState, evolve, stale
from mneme.domain.validation import categories_of
from mneme.duck import first_row, rollback
from mneme.sink import Marks, Positioned
from schemas.events import Event, MemoryCreated, event_name
from schemas.placement import on_memory_subject
from services.projector.duck_sql import SMALL_BATCH as SMALL_BATCH
from services.projector.duck_sql import insert_rows as insert_rows
from services.projector.duck_sql import one_row as one_row
from services.projector.graph_fold import GraphFold
from services.projector.known_states import KnownAccess, KnownStates
from services.projector.memories_overlay import OverlayReads, RecentVersions, Staged
from services.projector.memories_rows import row_state as row_state
from services.projector.memories_rows import state_row, version_row
from services.projector.memories_schema import (
    CANONICAL_SOURCE,
    CANONICAL_TABLES,
    CHECKPOINT,
    SCHEMA,
    TABLES,
)
from services.projector.memories_schema import N_STATE as N_STATE
from services.projector.memories_schema import PROJECTION_VERSION as PROJECTION_VERSION
from services.projector.memories_schema import STATE_COLUMNS as STATE_COLUMNS
from services.projector.memories_schema import VERSION_COLUMNS as VERSION_COLUMNS
from services.projector.memories_schema import VERSION_STATE_COLUMNS as VERSION_STATE_COLUMNS

log = logging.getLogger("mneme.projector")

CATCH_UP_EVENTS = 1000  # a commit of this many events or more: catching up (see MemoriesView._pace_checkpoints)
CATCH_UP_WAL = "256MiB"  # the WAL DuckDB lets grow before a checkpoint while catching up


class MemoriesView(OverlayReads):
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
        self._st = Staged()
        # recent version summaries per memory (a point read's history without another DuckDB statement)
        self._recent = RecentVersions()
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

    def close(self) -> None:
        self.con.close()

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
                        st.store_changed(prev.namespace, prev.store, p.seq)
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
                vrow = version_row(state_row(shown), env.event.version, p.seq, p.recorded_at, event_name(env.event),
                                   env.request_id, env.actor.agent_id, new is None)  # fmt: skip
                st.add_version(mid, vrow, prev.version if prev is not None else None, p.seq)
                if env.event.version == 1:  # a new memory: its whole history is this version
                    self._recent.put(mid, [vrow[:8]])
                else:
                    self._recent.add(mid, vrow[:8])
                if shown.store is not None:
                    st.store_changed(shown.namespace, shown.store, p.seq)
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
                    self._recent.forget(p.envelope.aggregate_id)
            self._st = Staged(refused=set(old.refused))  # (what was refused before is not reported twice)
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

    def _commit(self) -> int:
        st, last = self._st, self.staged
        if last == self.checkpoint:
            return last
        w = self._write
        self._pace_checkpoints(len(st.versions))
        w.execute("BEGIN TRANSACTION")
        try:
            st.write(w)
            self.graph.write(w)
            mark = self.marks.at(last)
            w.execute("UPDATE checkpoints SET seq = ?, mark = ? WHERE name = ?", [last, mark, CHECKPOINT])
            w.execute("COMMIT")
        except BaseException:
            rollback(w)
            raise
        with self._lock:  # readers now find these rows in DuckDB, and these states known (the same step:
            self.known.record(st.states)  # a state leaves the overlay where a point read finds it next)
            self._st = Staged()
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
