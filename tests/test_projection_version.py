"""A projection written under another schema version is dropped on open and refolds from the log."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb

from services.projector.memories_view import PROJECTION_VERSION, MemoriesView
from services.projector.vector_index import INDEX_VERSION, OPEN, ClientIndex, EdgeIndex, Search, VPoint, Where, point_id
from services.projector.vector_view import BM25


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
        again.con.execute("INSERT INTO checkpoints (name, seq) VALUES ('other', 7)")
    finally:
        again.close()
    kept = MemoriesView(path)
    try:
        assert kept.con.execute("SELECT seq FROM checkpoints WHERE name = 'other'").fetchone() == (7,)
    finally:
        kept.close()


def _point(i: int, text: str) -> VPoint:
    payload = {"mid": f"m{i}", "namespace": "a", "seq_from": i + 1, "seq_to": OPEN}
    return VPoint(point_id(f"m{i}", 1), payload, [1.0, float(i), 0.5, 0.0], BM25().document(text))


def test_a_vector_index_of_another_version_is_dropped_and_refolds_from_sequence_zero(tmp_path: Path) -> None:
    """What the points hold is versioned (INDEX_VERSION): BM25 over folded text (accents, case, CJK, emoji)
    indexes other tokens than before, so a shard written before would silently miss ("Zürich" indexed as
    "zürich" never matches the query "Zurich"): it is deleted on open and folded again from the log."""
    path = tmp_path / "vectors-m"
    old = EdgeIndex(path, 4, version=INDEX_VERSION - 1)
    old.upsert([_point(0, "Jürgen lives in Zürich"), _point(1, "the café")])
    old.save_checkpoint(42)
    old.close()
    assert json.loads(old.checkpoint_file.read_text()) == {"seq": 42, "version": INDEX_VERSION - 1}
    new = EdgeIndex(path, 4)
    try:
        assert new.load_checkpoint() == 0 and new.count(Where()) == 0
        assert json.loads(new.checkpoint_file.read_text()) == {"seq": 0, "version": INDEX_VERSION}
        new.upsert([_point(0, "Jürgen lives in Zürich")])
        new.save_checkpoint(7)
    finally:
        new.close()
    kept = EdgeIndex(path, 4)  # the current version is kept as it is
    try:
        assert kept.load_checkpoint() == 7 and kept.count(Where()) == 1
        (res,) = kept.search([Search("bm25", BM25().query("Zurich"), Where(), 10)])
        assert [h.payload["mid"] for h in res] == ["m0"]
    finally:
        kept.close()


def test_a_vector_index_written_before_versioning_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "vectors-m"
    old = EdgeIndex(path, 4)
    old.upsert([_point(0, "Zürich")])
    old.close()
    old.checkpoint_file.write_text(json.dumps({"seq": 42}))  # the position file as it was written before
    again = EdgeIndex(path, 4)
    try:
        assert again.load_checkpoint() == 0 and again.count(Where()) == 0
    finally:
        again.close()
    # a shard without its position file (it records the version from creation on) is dropped as well
    again.checkpoint_file.unlink()
    last = EdgeIndex(path, 4)
    try:
        assert last.load_checkpoint() == 0 and last.count(Where()) == 0
    finally:
        last.close()


def test_a_qdrant_server_collection_carries_the_version_in_its_name() -> None:
    """Replicas share a collection on a server: a version in the name keeps two versions (a rolling upgrade)
    from folding into one collection or dropping each other's."""
    ix = ClientIndex("mneme-m", 4, location=":memory:")
    try:
        assert ix.collection == f"mneme-m-v{INDEX_VERSION}"
        assert ix.client.collection_exists(f"mneme-m-v{INDEX_VERSION}")
    finally:
        ix.close()
