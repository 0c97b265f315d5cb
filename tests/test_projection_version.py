"""A projection written under another schema version is dropped on open and refolds from the log."""

from __future__ import annotations

from pathlib import Path

import duckdb

from services.projector.memories_view import PROJECTION_VERSION, MemoriesView


def test_an_older_projection_file_is_dropped_and_starts_from_sequence_zero(tmp_path: Path) -> None:
    path = str(tmp_path / "p.duckdb")
    con = duckdb.connect(path)  # the spine's shape: no meta table, no governance columns, a checkpoint
    con.execute("CREATE TABLE memories (id VARCHAR PRIMARY KEY, content VARCHAR)")
    con.execute("INSERT INTO memories VALUES ('x', 'old row')")
    con.execute("CREATE TABLE checkpoints (name VARCHAR PRIMARY KEY, seq BIGINT NOT NULL)")
    con.execute("INSERT INTO checkpoints VALUES ('memories', 42)")
    con.close()
    view = MemoriesView(path)
    try:
        assert view.checkpoint == 0
        cols = {r[0] for r in view.con.execute("DESCRIBE memories").fetchall()}
        assert {"verification", "locked", "status_reason"} <= cols
        assert view.con.execute("SELECT count(*) FROM memories").fetchone() == (0,)
        assert view.con.execute("SELECT value FROM meta").fetchone() == (str(PROJECTION_VERSION),)
    finally:
        view.close()
    again = MemoriesView(path)  # the current version is kept as it is
    try:
        again.con.execute("INSERT INTO checkpoints VALUES ('other', 7)")
    finally:
        again.close()
    kept = MemoriesView(path)
    try:
        assert kept.con.execute("SELECT seq FROM checkpoints WHERE name = 'other'").fetchone() == (7,)
    finally:
        kept.close()
