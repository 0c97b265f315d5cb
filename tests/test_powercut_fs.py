"""The power-cut filesystem (tests/powercut, issue 29) proves its model with real programs.

Written data stays in memory until fsync/fdatasync; `cut()` drops the rest, as a power cut does. The model's own
rules are checked first without FUSE; then on a mount: plain files, mmap and SQLite's WAL; nats-server with
JetStream's lazy default (acknowledged messages are lost: the control that shows the harness catches loss) and
with `sync_interval: always` (none is lost); DuckDB (a commit survives, an open transaction does not); a Qdrant
Edge shard (it works on the mount). Skipped, with the reason, where FUSE or libfuse 3 is missing.
"""

from __future__ import annotations

import errno
import mmap
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mneme.embedded_nats import EmbeddedNats
from tests.powercut.control import PowerCutFS
from tests.powercut.model import PAGE, Model

pytestmark = pytest.mark.timeout(60)


def write(path: Path, data: bytes, *, sync: bool = False, datasync: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
        if datasync:
            os.fdatasync(fd)
    finally:
        os.close(fd)  # close(2) is FUSE's FLUSH: never a sync


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- the model alone (no FUSE)


def test_model_pages_and_truncation() -> None:
    m = Model()
    f = m.create("/f", 0o644)
    m.write(f, b"a" * (3 * PAGE), 0)
    m.fsync(f)
    m.truncate(f, PAGE + 10)  # shrink into page 1, then grow again: the old tail must read as zeros
    m.write(f, b"z", 3 * PAGE)
    assert m.read(f, 4 * PAGE, 0) == b"a" * (PAGE + 10) + bytes(2 * PAGE - 10) + b"z"
    m.fsync(f)
    m.write(f, b"lost", 0)
    m.truncate(f, 5)
    assert m.cut()["lost_files"] == 1
    f = m.lookup("/f")
    assert m.read(f, 4 * PAGE, 0) == b"a" * (PAGE + 10) + bytes(2 * PAGE - 10) + b"z"


def test_model_names_ext4_and_posix() -> None:
    for names in ("ext4", "posix"):
        m = Model(names)
        m.mkdir("/d", 0o755)
        f = m.create("/d/f", 0o644)
        m.write(f, b"x", 0)
        m.fsync(f)  # ext4: the file's name and its directory's name are durable with it; posix: neither
        m.cut()
        assert ("d" in m.root.entries) == (names == "ext4")
    m = Model("posix")
    m.mkdir("/d", 0o755)
    f = m.create("/d/f", 0o644)
    m.write(f, b"x", 0)
    m.fsync(f)
    m.fsync_dir(m.lookup("/d"))  # /d/f is durable in /d, but /d itself is not in /: both go
    m.cut()
    assert m.root.entries == {}
    m.mkdir("/d", 0o755)
    f = m.create("/d/f", 0o644)
    m.fsync_dir(m.lookup("/d"))
    m.fsync_dir(m.root)
    m.write(f, b"unsynced", 0)
    m.cut()  # the names are durable, the bytes were never synced: an empty file, as on ext4
    assert m.lookup("/d/f").size == 0


def test_model_rename_is_atomic_across_directories() -> None:
    m = Model("posix")
    for d in ("/a", "/b"):
        m.mkdir(d, 0o755)
    f = m.create("/a/f", 0o644)
    m.write(f, b"x", 0)
    m.sync_all()
    m.rename("/a/f", "/b/g")
    m.fsync_dir(m.lookup("/a"))  # only the source directory: the rename is one operation, both sides go
    m.cut()
    assert list(m.lookup("/a").entries) == [] and list(m.lookup("/b").entries) == ["g"]
    m.rename("/b/g", "/a/f")
    m.fsync_dir(m.lookup("/a"))  # only the destination this time
    m.cut()
    assert list(m.lookup("/a").entries) == ["f"] and list(m.lookup("/b").entries) == []


# -- the filesystem, with plain files


def test_unsynced_data_is_dropped_and_synced_data_survives(powercut_fs: PowerCutFS) -> None:
    root = powercut_fs.path
    write(root / "unsynced", b"gone after the cut")
    write(root / "synced", b"v1", sync=True)
    write(root / "datasynced", b"d1", datasync=True)
    stats = powercut_fs.stats()
    assert stats["unsynced_write_bytes"] >= len(b"gone after the cut")  # write(2) reached the filesystem
    assert stats["fsyncs"] == 1 and stats["fdatasyncs"] == 1
    with open(root / "synced", "r+b") as f:  # overwritten and grown, closed, never synced
        f.write(b"v2 and more")
    lost = powercut_fs.cut()
    assert lost["lost_write_bytes"] >= len(b"gone after the cut") + len(b"v2 and more")
    assert sorted(os.listdir(root)) == ["datasynced", "synced"]
    assert (root / "synced").read_bytes() == b"v1"
    assert (root / "datasynced").read_bytes() == b"d1"
    assert powercut_fs.stats()["unsynced_files"] == 0


def test_rename_without_directory_fsync_reverts(powercut_fs: PowerCutFS) -> None:
    """ext4's model: fsync makes a file's name durable as it is then; a later rename needs a directory fsync
    (or an fsync of the renamed file)."""
    root = powercut_fs.path
    (root / "sub").mkdir()
    write(root / "sub" / "state", b"old", sync=True)  # also makes sub/ durable (ext4: the name chain)
    write(root / "sub" / "state.tmp", b"new", sync=True)
    os.replace(root / "sub" / "state.tmp", root / "sub" / "state")
    assert (root / "sub" / "state").read_bytes() == b"new"
    powercut_fs.cut()
    assert (root / "sub" / "state").read_bytes() == b"old"
    assert (root / "sub" / "state.tmp").read_bytes() == b"new"

    os.replace(root / "sub" / "state.tmp", root / "sub" / "state")
    fsync_dir(root / "sub")
    powercut_fs.cut()
    assert (root / "sub" / "state").read_bytes() == b"new"
    assert not (root / "sub" / "state.tmp").exists()


def test_posix_names_need_a_directory_fsync(powercut_fs_posix: PowerCutFS) -> None:
    root = powercut_fs_posix.path
    write(root / "f", b"data", sync=True)
    powercut_fs_posix.cut()
    assert not (root / "f").exists()  # its bytes were durable, its name never was
    write(root / "f", b"data", sync=True)
    fsync_dir(root)
    (root / "d").mkdir()
    write(root / "d" / "g", b"in d", sync=True)
    fsync_dir(root / "d")  # g is in d on disk, but d is not in the root on disk
    powercut_fs_posix.cut()
    assert os.listdir(root) == ["f"] and (root / "f").read_bytes() == b"data"


def test_posix_file_semantics(powercut_fs: PowerCutFS) -> None:
    root = powercut_fs.path
    (root / "d").mkdir()
    with pytest.raises(FileExistsError):
        os.open(root / "d", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    # an open file unlinked (or renamed over) stays usable through its descriptor, fstat included
    fd = os.open(root / "d" / "u", os.O_CREAT | os.O_RDWR)
    os.write(fd, b"abc")
    os.unlink(root / "d" / "u")
    os.write(fd, b"def")
    assert os.fstat(fd).st_size == 6 and os.pread(fd, 10, 0) == b"abcdef"
    assert os.listdir(root / "d") == []
    os.close(fd)
    os.rmdir(root / "d")
    write(root / "a", b"A")
    fd = os.open(root / "a", os.O_RDONLY)
    write(root / "b", b"B")
    os.rename(root / "b", root / "a")
    assert os.pread(fd, 10, 0) == b"A" and (root / "a").read_bytes() == b"B"
    os.close(fd)
    # truncate, holes, append, fallocate, symlinks, chmod, utime, statfs
    fd = os.open(root / "h", os.O_CREAT | os.O_RDWR | os.O_APPEND)
    os.write(fd, b"1234")
    os.write(fd, b"5678")
    os.ftruncate(fd, 6)
    os.pwrite(fd, b"x", 10_000)  # (O_APPEND: Linux appends a pwrite anyway)
    os.posix_fallocate(fd, 0, 3 * PAGE)
    os.close(fd)
    data = (root / "h").read_bytes()
    assert data[:7] == b"123456x" and len(data) == 3 * PAGE
    os.symlink("h", root / "link")
    assert os.readlink(root / "link") == "h" and (root / "link").read_bytes() == data
    os.chmod(root / "h", 0o600)
    os.utime(root / "h", ns=(1_000_000_000, 2_000_000_000))
    st = os.stat(root / "h")
    assert st.st_mode & 0o777 == 0o600 and st.st_mtime_ns == 2_000_000_000
    vfs = os.statvfs(root)
    assert vfs.f_bavail > 0 and vfs.f_namemax == 255
    with pytest.raises(OSError) as exc:
        os.link(root / "h", root / "hard")
    assert exc.value.errno == errno.EPERM  # hard links are not modelled


def test_mmap_and_sqlite_wal(powercut_fs: PowerCutFS) -> None:
    """Shared mmap works (page cache on, no direct_io): msync makes pages durable, the others go. SQLite's WAL
    (its -shm is a shared mmap) works, and a commit under synchronous=FULL survives."""
    root = powercut_fs.path
    fd = os.open(root / "m", os.O_CREAT | os.O_RDWR)
    os.ftruncate(fd, 2 * PAGE)
    os.fsync(fd)
    with mmap.mmap(fd, 2 * PAGE) as m:
        m[0:6] = b"synced"
        m.flush(0, PAGE)  # msync(MS_SYNC): written back and fsynced
        m[PAGE : PAGE + 8] = b"unsynced"
    os.close(fd)
    assert (root / "m").read_bytes()[PAGE : PAGE + 8] == b"unsynced"  # written back on munmap/close...

    db = sqlite3.connect(root / "cache.sqlite")
    assert db.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (x INTEGER)")
    db.commit()
    for i in range(50):
        db.execute("INSERT INTO t VALUES (?)", (i,))
        db.commit()
    db.close()

    powercut_fs.cut()
    data = (root / "m").read_bytes()
    assert data[:6] == b"synced" and data[PAGE : PAGE + 8] == bytes(8)  # ...but never synced: dropped
    db = sqlite3.connect(root / "cache.sqlite")
    assert db.execute("SELECT count(*) FROM t").fetchone() == (50,)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()


def test_embedding_cache_after_sigkill_and_cut(powercut_fs: PowerCutFS) -> None:
    """mneme's embedding cache (SQLite WAL, synchronous=NORMAL: commits are not fsynced, a checkpoint is) on the
    mount, its process SIGKILLed, then the cut: it opens, consistent, with at most what was written."""
    path = powercut_fs.path / "data" / "embeddings.sqlite"
    code = f"""
        import numpy as np, sys
        from mneme.embed_cache import EmbeddingCache, text_key
        cache = EmbeddingCache({str(path)!r})
        for i in range(40):
            cache.put_many("m", {{text_key(f"t{{i}}"): np.full(8, i, dtype=np.float32)}})
        print("ready", cache.size("m"), flush=True)
        sys.stdin.read()
    """
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[1])  # fmt: skip
    assert p.stdout is not None and p.stdout.readline().split() == ["ready", "40"]
    p.kill()
    p.wait()
    powercut_fs.cut()
    from mneme.embed_cache import EmbeddingCache

    # (the files survive: SQLite fdatasyncs them when it creates the database and switches it to WAL; the 40
    # commits since were not synced, so none need be there: seen, none is)
    cache = EmbeddingCache(path)
    assert 0 <= cache.size("m") <= 40
    assert cache._db is not None and cache._db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    cache._db.close()


# -- nats-server


async def _publish(url: str, n: int) -> list[int]:
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        return [(await js.publish("pc.x", f"m{i}".encode())).seq for i in range(n)]
    finally:
        await nc.close()


async def _create_stream(url: str) -> None:
    import nats

    nc = await nats.connect(url)
    try:
        await nc.jetstream().add_stream(name="PC", subjects=["pc.>"])
    finally:
        await nc.close()


async def _stored(url: str) -> dict[int, bytes]:
    import nats
    from nats.js.errors import NotFoundError

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        try:
            state = (await js.stream_info("PC")).state
        except NotFoundError:
            return {}
        out: dict[int, bytes] = {}
        if not state.messages:
            return out
        for seq in range(max(1, state.first_seq), state.last_seq + 1):
            try:
                out[seq] = (await js.get_msg("PC", seq)).data or b""
            except NotFoundError:
                pass
        return out
    finally:
        await nc.close()


async def _acked_then_power_cut(fs: PowerCutFS, sync: str, n: int) -> tuple[list[int], dict[int, bytes], dict]:
    """A stream made durable first (sync(1)); n acknowledged publishes; SIGKILL; the cut; a restart."""
    store = fs.path / "nats"
    server = EmbeddedNats(store, sync=sync)
    try:
        await _create_stream(await server.start())
        fs.sync()  # the stream exists on "disk": what follows is only the publishes
        acked = await _publish(server.url or "", n)
    finally:
        server.stop_now()  # SIGKILL
    lost = fs.cut()
    again = EmbeddedNats(store, sync=sync)
    try:
        stored = await _stored(await again.start())
    finally:
        await again.stop()
    return acked, stored, lost


@pytest.mark.anyio
async def test_nats_lazy_fsync_loses_acknowledged_messages(powercut_fs: PowerCutFS) -> None:
    """The control: JetStream's own default (sync every 2 minutes) acknowledges before the disk has it."""
    n = 200
    t0 = time.monotonic()
    acked, stored, lost = await _acked_then_power_cut(powercut_fs, "2m", n)
    assert acked == list(range(1, n + 1))
    assert lost["lost_write_bytes"] > 0
    missing = set(acked) - set(stored)
    assert missing, f"every acknowledged message survived a cut of unsynced data ({lost}): the harness is blind"
    assert time.monotonic() - t0 < 30


@pytest.mark.anyio
async def test_nats_sync_always_keeps_every_acknowledged_message(powercut_fs: PowerCutFS) -> None:
    n = 200
    t0 = time.monotonic()
    acked, stored, _lost = await _acked_then_power_cut(powercut_fs, "always", n)
    assert acked == list(range(1, n + 1))
    assert sorted(stored) == acked
    assert all(stored[s] == f"m{s - 1}".encode() for s in acked)
    assert time.monotonic() - t0 < 30


@pytest.mark.anyio
async def test_nats_config_file_sync_always(powercut_fs: PowerCutFS) -> None:
    """The same with nats-server started directly from a config file (`jetstream {store_dir, sync_interval}`),
    the stream created after the last sync(1): an fsync of a new file makes its name durable (ext4's model)."""
    from mneme.app.cluster import free_port
    from mneme.embedded_nats import nats_server_binary
    from tests.harness import wait_listening

    store = powercut_fs.path / "js"
    conf = powercut_fs.path.parent / "nats.conf"  # (off the mount: it is not under test)
    port = free_port()
    conf.write_text(f'listen: "127.0.0.1:{port}"\njetstream {{\n  store_dir: "{store}"\n  sync_interval: always\n}}\n')

    async def run(publish: int) -> tuple[list[int], dict[int, bytes]]:
        proc = subprocess.Popen([nats_server_binary(), "-c", str(conf)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
        try:
            wait_listening(proc, port, timeout=15)
            url = f"nats://127.0.0.1:{port}"
            if publish:
                await _create_stream(url)
                return await _publish(url, publish), {}
            return [], await _stored(url)
        finally:
            proc.kill()  # SIGKILL, then reaped: nothing holds the mount at the cut
            proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()

    acked, _ = await run(100)
    powercut_fs.cut()
    _, stored = await run(0)
    assert sorted(stored) == acked == list(range(1, 101))


# -- DuckDB and Qdrant Edge


def test_duckdb_commit_survives_open_transaction_does_not(powercut_fs: PowerCutFS) -> None:
    import duckdb

    db = powercut_fs.path / "data" / "t.duckdb"
    code = f"""
        import duckdb, os, sys
        os.makedirs({str(db.parent)!r}, exist_ok=True)
        con = duckdb.connect({str(db)!r})
        con.execute("CREATE TABLE t (x INTEGER)")
        con.execute("INSERT INTO t VALUES (1)")
        con.execute("BEGIN")
        con.execute("INSERT INTO t VALUES (2)")
        print("ready", flush=True)
        sys.stdin.read()
    """
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    p.kill()
    p.wait()
    assert powercut_fs.stats()["fdatasyncs"] + powercut_fs.stats()["fsyncs"] > 0  # the WAL at each commit
    powercut_fs.cut()
    con = duckdb.connect(str(db))
    try:
        assert con.execute("SELECT x FROM t ORDER BY x").fetchall() == [(1,)]
    finally:
        con.close()


def test_qdrant_edge_shard_works_on_the_mount(powercut_fs: PowerCutFS) -> None:
    from services.projector.vector_index import EdgeIndex, VPoint, Where, point_id

    path = powercut_fs.path / "data" / "vectors"
    ids = [point_id(f"m{i}", 1) for i in range(5)]
    idx = EdgeIndex(path, 4)
    idx.upsert([VPoint(id=pid, payload={"namespace": "ns", "kind": "fact", "seq_from": i},
                       dense=[1.0, float(i), 0.5, 0.25]) for i, pid in enumerate(ids)])  # fmt: skip
    idx.save_checkpoint(5)
    assert sorted(idx.retrieve(ids)) == sorted(ids)
    assert idx.count(Where()) == 5
    idx.close()
    del idx
    powercut_fs.remount()  # a clean reboot: the kernel's caches are gone, the files are what the mount holds
    idx = EdgeIndex(path, 4)
    try:
        assert idx.count(Where()) == 5 and idx.load_checkpoint() == 5
    finally:
        idx.close()
