"""The vector index's saved position survives a power cut (issue 29): its rename is made durable by an fsync
of the directory. Without it, a cut under the strict (posix) name model brought back no position at all,
and `mneme serve` rebuilt the whole index from the log on its next start."""

from __future__ import annotations

from services.projector.vector_index import EdgeIndex
from tests.powercut.control import PowerCutFS


def test_the_saved_position_survives_a_cut(powercut_fs_posix: PowerCutFS) -> None:
    fs = powercut_fs_posix
    (fs.path / "data").mkdir()
    fs.sync()  # the directory itself exists on disk, as the data directory would
    index = EdgeIndex(fs.path / "data" / "vectors", 8)
    index.save_checkpoint(7)
    index.close()
    fs.cut()
    reopened = EdgeIndex(fs.path / "data" / "vectors", 8)
    try:
        assert reopened.load_checkpoint() == 7
    finally:
        reopened.close()
