"""While catching up (commits of CATCH_UP_EVENTS or more) the memories view lets DuckDB's WAL grow to
CATCH_UP_WAL before a checkpoint; the first small commit sets the usual threshold back and checkpoints.
Nothing committed is lost either way, a process killed mid catch-up included (services/projector/
memories_view.py: MemoriesView._pace_checkpoints)."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

from services.projector import memories_view
from services.projector.memories_view import MemoriesView, one_row
from tests.test_batch_fold import history


def threshold(view: MemoriesView) -> str:
    return str(one_row(view.con, "SELECT current_setting('checkpoint_threshold')")[0])


def test_a_catch_up_defers_checkpoints_and_a_live_commit_restores_them(tmp_path: Path) -> None:
    events = history(21, memories_view.CATCH_UP_EVENTS + 200)
    head, tail = events[:-1], events[-1:]
    view = MemoriesView(str(tmp_path / "m.duckdb"))
    live = threshold(view)
    view.stage(head, head[-1].seq)
    view.commit()
    assert threshold(view) == "256.0 MiB" != live  # a catch-up: the WAL may grow
    wal = tmp_path / "m.duckdb.wal"
    assert wal.exists() and wal.stat().st_size > 0  # the catch-up's rows wait in the WAL
    view.stage(tail, tail[-1].seq)
    view.commit()
    assert threshold(view) == live  # a live commit: the usual threshold, and the catch-up checkpointed
    assert not wal.exists() or wal.stat().st_size < 1_000_000
    digest = view.canonical_digest()
    view.close()
    again = MemoriesView(str(tmp_path / "m.duckdb"))
    try:
        assert again.checkpoint == events[-1].seq and again.canonical_digest() == digest
    finally:
        again.close()


def fold_and_die(path: str, n: int) -> None:
    """In a child process: two catch-up commits, then exit without closing (as SIGKILL would)."""
    events = history(22, n)
    view = MemoriesView(path)
    half = n // 2
    for part in (events[:half], events[half:]):
        view.stage(part, part[-1].seq)
        view.commit()
    os._exit(0)


def test_a_process_killed_while_catching_up_loses_nothing_it_committed(tmp_path: Path) -> None:
    n = 2 * memories_view.CATCH_UP_EVENTS + 100
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(target=fold_and_die, args=(str(tmp_path / "killed.duckdb"), n))
    child.start()
    child.join(120)
    assert child.exitcode == 0
    clean = MemoriesView(str(tmp_path / "clean.duckdb"))
    events = history(22, n)
    clean.stage(events, events[-1].seq)
    clean.commit()
    want = clean.canonical_digest()
    clean.close()
    killed = MemoriesView(str(tmp_path / "killed.duckdb"))  # the WAL is replayed on open
    try:
        assert killed.checkpoint == events[-1].seq
        assert killed.canonical_digest() == want
    finally:
        killed.close()
