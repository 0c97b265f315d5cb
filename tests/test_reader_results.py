"""Reads leave no result open. `fetchone()` keeps a DuckDB result, and with it the cursor's transaction,
until that cursor runs its next statement; a worker thread's reader cursor can then sit idle for good, and
every write committed meanwhile can be neither cleaned up nor checkpointed ("Cannot CHECKPOINT: there
are other write transactions active"): the WAL and DuckDB's native heap grow until that thread reads again.
Each read here runs on a thread that stays alive and idle while the writer commits and checkpoints."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pytest

from mneme.duck import first_row
from schemas.queries import GetMemory, ListMemories, MemoryStats
from services.auditor.trail import Trail
from services.auditor.trail_queries import _count
from services.gateway.commands import utc_now
from services.projector.memories_queries import get, list_, resolve_as_of, stats
from services.projector.memories_view import MemoriesView
from tests.test_batch_fold import history


def on_an_idle_thread(read: Callable[[], Any], then: Callable[[], None]) -> None:
    """Run `read` on a thread, then `then` here while that thread (and its reader cursor) is still alive."""
    done, release, failed = threading.Event(), threading.Event(), []

    def reader() -> None:
        try:
            read()
        except Exception as exc:  # noqa: BLE001 - reported below
            failed.append(exc)
        done.set()
        release.wait(30)

    t = threading.Thread(target=reader)
    t.start()
    try:
        assert done.wait(30)
        assert not failed, failed
        then()
    finally:
        release.set()
        t.join()


def test_fetchone_is_what_blocks_a_checkpoint(tmp_path: Path) -> None:
    """The mechanism, in DuckDB alone: the same read with first_row lets the checkpoint through."""
    for fetch, blocked in ((lambda c: c.fetchone(), True), (first_row, False)):
        con = duckdb.connect(str(tmp_path / f"{blocked}.duckdb"))
        con.execute("CREATE TABLE t (n INT)")
        con.execute("INSERT INTO t VALUES (0)")
        reader, writer = con.cursor(), con.cursor()
        fetch(reader.execute("SELECT count(*) FROM t"))
        writer.execute("UPDATE t SET n = n + 1")
        if blocked:
            with pytest.raises(duckdb.TransactionException, match="CHECKPOINT"):
                writer.execute("CHECKPOINT")
        else:
            writer.execute("CHECKPOINT")
        con.close()


@pytest.mark.parametrize("kind", ["list counted", "get", "get missing", "get as_of", "as_of by sequence", "stats"])
def test_each_read_lets_the_writer_checkpoint(tmp_path: Path, kind: str) -> None:
    view = MemoriesView(str(tmp_path / "m.duckdb"))
    events = history(7, 300)
    view.stage(events[:200], events[199].seq)
    view.commit()
    mid = events[0].envelope.aggregate_id
    now = utc_now()
    reads: dict[str, Callable[[], Any]] = {
        "list counted": lambda: list_(view, ListMemories(namespace="default", now=now, limit=2)),  # total > limit
        "get": lambda: get(view, GetMemory(namespace="default", now=now, memory_id=mid)),
        "get missing": lambda: get(view, GetMemory(namespace="default", now=now, memory_id="0" * 32)),
        "get as_of": lambda: get(view, GetMemory(namespace="default", now=now, memory_id=mid, as_of=_as_of(100))),
        "as_of by sequence": lambda: resolve_as_of(view, _as_of(100)),
        "stats": lambda: stats(view, MemoryStats(namespace="default", now=now)),
    }

    def write_then_checkpoint() -> None:
        view.stage(events[200:], events[-1].seq)
        view.commit()
        view._write.execute("CHECKPOINT")

    try:
        on_an_idle_thread(reads[kind], write_then_checkpoint)
    finally:
        view.close()


def test_the_trails_count_lets_it_checkpoint(tmp_path: Path) -> None:
    trail = Trail(str(tmp_path / "audit.duckdb"))
    cur = trail.con.cursor()

    def write_then_checkpoint() -> None:
        trail.con.execute("UPDATE checkpoints SET seq = seq + 1")
        trail.con.execute("CHECKPOINT")

    try:
        on_an_idle_thread(lambda: _count(cur, "TRUE", []), write_then_checkpoint)
    finally:
        trail.close()


def _as_of(seq: int) -> Any:
    from schemas.queries import AsOf

    return AsOf(seq=seq)
