"""The power-cut filesystem's process: tests/powercut/model.py served over FUSE (mfusepy, libfuse 3's high-level
API), controlled through stdin/stdout by tests/powercut/control.py.

Run as `python -m tests.powercut.fusefs MOUNTPOINT [--names ext4|posix] [--allow-other]`. It mounts, answers
one JSON line per JSON line it reads (`stats`, `sync`, `cut`, `remount`, `quit`), and unmounts when told to
quit, on EOF (its parent went away) and on SIGTERM (it asks for that signal when its parent dies).

FUSE choices (they decide what a cut can drop):
- page cache on, direct_io off: shared mmap works (SQLite's -shm, Qdrant's mmapped segments); writes are still
  write-through (no writeback cache: every write(2) reaches this process before it returns), so a SIGKILLed
  writer's data is in the volatile overlay here. Dirty mmap pages reach it when the kernel writes them back
  (msync, fsync, unmount); fsync/msync(MS_SYNC) is what makes them durable.
- kernel_cache: the page cache is kept across opens (coherent: every change goes through the kernel).
- a cut unmounts first (the kernel forgets every cached page, attribute and name), drops the overlay, and mounts
  again: a reboot. Nothing may hold a file or a working directory on the mount then.
- no lock/flock handlers: the kernel keeps POSIX and BSD locks locally (right for one machine).
- an unlinked (or renamed-over) file that is still open stays usable through its descriptors, fstat included:
  libfuse renames it to .fuse_hidden* (its default, not hard_remove, whose fstat fails with ESTALE); here that
  rename is an unlink in the model, the hidden name is known only to this process (readdir does not list it,
  rmdir of its directory works), and libfuse's unlink of it at the last close forgets it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import json
import logging
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from typing import IO, Any

import mfusepy  # type: ignore[import-untyped]  # (no py.typed)

from tests.powercut.model import Model, Node, fail

log = logging.getLogger("powercut")
FUSE_CAP_WRITEBACK_CACHE = 1 << 16
HIDDEN = ".fuse_hidden"
UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2
CAPACITY = 64 << 30  # what statfs reports as the size of the "disk"


class Handle:
    __slots__ = ("flags", "node")

    def __init__(self, node: Node, flags: int) -> None:
        self.node, self.flags = node, flags


class PowerCutOps(mfusepy.Operations):
    use_ns = True

    def __init__(self, model: Model) -> None:
        self.model = model
        self.mutex = threading.Lock()  # the FUSE loop against the control thread (`lock` would be a FUSE op)
        self.handles: dict[int, Handle] = {}
        self.hidden: dict[str, Node] = {}  # .fuse_hidden* name -> the unlinked, still open node
        self._next_fh = 1
        self.mounted = threading.Event()
        self.conn: dict[str, int] = {}

    # -- setup
    def init_with_config(self, conn: Any, config: Any) -> None:
        if config is not None:
            config.use_ino = 1  # st_ino is the node's own number
            config.nullpath_ok = 1  # handle-based calls need no path (they use the handle)
            config.hard_remove = 0  # open-unlinked files: .fuse_hidden*, kept out of the model (see above)
            config.kernel_cache = 1
            config.direct_io = 0
        if conn is not None:
            conn.want &= ~FUSE_CAP_WRITEBACK_CACHE
            self.conn = {"capable": int(conn.capable), "want": int(conn.want), "max_write": int(conn.max_write)}
        self.mounted.set()

    def _fh(self, node: Node, flags: int) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self.handles[fh] = Handle(node, flags)
        return fh

    def _node(self, path: str | None, fh: int | None) -> Node:
        if fh is not None and fh in self.handles:
            return self.handles[fh].node
        if path is None:
            raise fail(errno.EBADF)
        return self._lookup(path)

    def _lookup(self, path: str) -> Node:
        base = path.rpartition("/")[2]
        if base.startswith(HIDDEN):
            n = self.hidden.get(base)
            if n is None:
                raise fail(errno.ENOENT)
            return n
        return self.model.lookup(path)

    # -- attributes
    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
        with self.mutex:
            n = self._node(path, fh)
            size = n.st_size()
            return {
                "st_mode": n.mode,
                "st_ino": n.ino,
                "st_nlink": 2 + sum(1 for c in n.entries.values() if c.is_dir) if n.is_dir else 1,
                "st_uid": n.uid,
                "st_gid": n.gid,
                "st_size": size,
                "st_blocks": (size + 511) // 512,
                "st_blksize": 4096,
                "st_atime": n.atime_ns,
                "st_mtime": n.mtime_ns,
                "st_ctime": n.ctime_ns,
            }

    def chmod(self, path: str | None, mode: int, fh: int | None = None) -> int:
        with self.mutex:
            n = self._node(path, fh)
            n.mode = stat.S_IFMT(n.mode) | stat.S_IMODE(mode)
            n.ctime_ns = time.time_ns()
        return 0

    def chown(self, path: str | None, uid: int, gid: int, fh: int | None = None) -> int:
        with self.mutex:
            n = self._node(path, fh)
            if uid != -1:
                n.uid = uid
            if gid != -1:
                n.gid = gid
            n.ctime_ns = time.time_ns()
        return 0

    def utimens(self, path: str | None, times: tuple[int | None, int | None] | None = None,
                fh: int | None = None) -> int:  # fmt: skip
        with self.mutex:
            n = self._node(path, fh)
            now = time.time_ns()
            atime, mtime = times if times is not None else (now, now)
            if atime is not None:
                n.atime_ns = atime
            if mtime is not None:
                n.mtime_ns = mtime
            n.ctime_ns = now
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        with self.mutex:
            used = sum(n.size for n in self.model.walk() if n.is_file)
        blocks = CAPACITY // 4096
        free = max(0, blocks - (used + 4095) // 4096)
        return {
            "f_bsize": 4096, "f_frsize": 4096, "f_blocks": blocks, "f_bfree": free, "f_bavail": free,
            "f_files": 1 << 20, "f_ffree": 1 << 20, "f_favail": 1 << 20, "f_namemax": 255,
        }  # fmt: skip

    # -- namespace
    def _ctx(self) -> tuple[int, int]:
        uid, gid, _pid = mfusepy.fuse_get_context()
        return uid, gid

    def mkdir(self, path: str, mode: int) -> int:
        with self.mutex:
            self.model.mkdir(path, mode, *self._ctx())
        return 0

    def rmdir(self, path: str) -> int:
        with self.mutex:
            self.model.rmdir(path)
        return 0

    def unlink(self, path: str) -> int:
        with self.mutex:
            base = path.rpartition("/")[2]
            if base.startswith(HIDDEN):
                if self.hidden.pop(base, None) is None:
                    raise fail(errno.ENOENT)
            else:
                self.model.unlink(path)
        return 0

    def rename(self, old: str, new: str, flags: int = 0) -> int:
        with self.mutex:
            base = new.rpartition("/")[2]
            if base.startswith(HIDDEN):  # libfuse hides a file unlinked while open: an unlink for the model
                n = self.model.lookup(old)
                self.model.unlink(old)
                self.hidden[base] = n
            else:
                self.model.rename(old, new, flags)
        return 0

    def symlink(self, target: str, source: str) -> int:  # mfusepy: the link `target` pointing to `source`
        with self.mutex:
            self.model.symlink(target, source, *self._ctx())
        return 0

    def readlink(self, path: str) -> str:
        with self.mutex:
            n = self.model.lookup(path)
            if not stat.S_ISLNK(n.mode):
                raise fail(errno.EINVAL)
            return n.target

    def link(self, target: str, source: str) -> int:
        raise fail(errno.EPERM)  # hard links are not modelled

    # -- directories
    def opendir(self, path: str) -> int:
        with self.mutex:
            n = self.model.lookup(path)
            if not n.is_dir:
                raise fail(errno.ENOTDIR)
            return self._fh(n, os.O_RDONLY)

    def readdir(self, path: str | None, fh: int) -> list[tuple[str, dict[str, int], int]]:
        with self.mutex:  # (with use_ino the entries need their st_ino: readdir(3) skips inode 0)
            n = self._node(path, fh)
            up = n.parent or n
            out = [(".", {"st_mode": n.mode, "st_ino": n.ino}, 0), ("..", {"st_mode": up.mode, "st_ino": up.ino}, 0)]
            out += [(name, {"st_mode": c.mode, "st_ino": c.ino}, 0) for name, c in n.entries.items()]
            return out

    def releasedir(self, path: str | None, fh: int) -> int:
        with self.mutex:
            self.handles.pop(fh, None)
        return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        with self.mutex:
            self.model.fsync(self._node(path, fh), bool(datasync))
        return 0

    # -- files
    def create(self, path: str, mode: int, flags: int) -> int:
        with self.mutex:
            try:
                n = self.model.create(path, mode, *self._ctx())
            except FileExistsError:
                if flags & os.O_EXCL:
                    raise
                n = self.model.lookup(path)
                if flags & os.O_TRUNC:
                    self.model.truncate(n, 0)
            return self._fh(n, flags)

    def open(self, path: str, flags: int) -> int:
        with self.mutex:
            n = self._lookup(path)
            if n.is_dir:
                raise fail(errno.EISDIR)
            if flags & os.O_TRUNC and flags & os.O_ACCMODE != os.O_RDONLY:
                self.model.truncate(n, 0)
            return self._fh(n, flags)

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        with self.mutex:
            return self.model.read(self._node(path, fh), size, offset)

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        with self.mutex:
            h = self.handles.get(fh)
            n = h.node if h is not None else self._node(path, None)
            written = self.model.write(n, data, offset)
            if h is not None and h.flags & os.O_DSYNC:  # O_SYNC and O_DSYNC: durable before write returns
                self.model.fsync(n, datasync=h.flags & os.O_SYNC != os.O_SYNC)
            return written

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        with self.mutex:
            self.model.truncate(self._node(path, fh), length)
        return 0

    def fallocate(self, path: str | None, mode: int, offset: int, size: int, fh: int) -> int:
        with self.mutex:
            self.model.fallocate(self._node(path, fh), mode, offset, size)
        return 0

    def flush(self, path: str | None, fh: int) -> int:
        return 0  # close(2): NOT a sync

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        with self.mutex:
            self.model.fsync(self._node(path, fh), bool(datasync))
        return 0

    def release(self, path: str | None, fh: int) -> int:
        with self.mutex:
            self.handles.pop(fh, None)
        return 0


class _FUSE(mfusepy.FUSE):
    """mfusepy 3.1 drops a few arguments libfuse 3 passes: rename's flags, and the open file of ftruncate, fchmod,
    fchown and futimens (whose path is NULL under nullpath_ok): these pass them on."""

    def _path(self, path: bytes | None) -> str | None:
        return None if path is None else path.decode(self.encoding, self.errors)

    @staticmethod
    def _fh(fip: Any) -> int | None:
        return int(fip.contents.fh) if fip else None

    def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
        return int(self.operations.rename(self._path(old), self._path(new), flags) or 0)

    def truncate_fuse_3(self, path: bytes | None, length: int, fip: Any) -> int:
        return int(self.operations.truncate(self._path(path), length, self._fh(fip)) or 0)

    def chmod_fuse_3(self, path: bytes | None, mode: int, fip: Any) -> int:
        return int(self.operations.chmod(self._path(path), mode, self._fh(fip)) or 0)

    def chown_fuse_3(self, path: bytes | None, uid: int, gid: int, fip: Any) -> int:
        uid = -1 if ctypes.c_uint32(uid + 1).value == 0 else uid
        gid = -1 if ctypes.c_uint32(gid + 1).value == 0 else gid
        return int(self.operations.chown(self._path(path), uid, gid, self._fh(fip)) or 0)

    def utimens_fuse_3(self, path: bytes | None, buf: Any, fip: Any) -> int:
        now = time.time_ns()

        def ns(ts: Any) -> int | None:  # UTIME_OMIT: leave it; UTIME_NOW: now
            if ts.tv_nsec == UTIME_OMIT:
                return None
            return now if ts.tv_nsec == UTIME_NOW else int(ts.tv_sec) * 10**9 + int(ts.tv_nsec)

        times = (ns(buf.contents.actime), ns(buf.contents.modtime)) if buf else (now, now)
        return int(self.operations.utimens(self._path(path), times, self._fh(fip)) or 0)


def _umount(mountpoint: str, lazy: bool = False) -> tuple[bool, str]:
    z = ["-z"] if lazy else []
    for cmd in (["fusermount3", "-u", *z, mountpoint], ["fusermount", "-u", *z, mountpoint],
                ["umount", *(["-l"] if lazy else []), mountpoint]):  # fmt: skip
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        except FileNotFoundError:
            continue
        return r.returncode == 0, (r.stderr or r.stdout).strip()
    return False, "no fusermount3, fusermount or umount"


def holders(mountpoint: str) -> list[str]:
    """Processes with a descriptor, working directory or root under the mount (why an unmount is busy)."""
    out = []
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        links = []
        with contextlib.suppress(OSError):
            links.append(os.readlink(f"/proc/{pid}/cwd"))
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        hit = [ln for ln in links if ln == mountpoint or ln.startswith(mountpoint + "/")]
        if hit:
            with contextlib.suppress(OSError):
                comm = open(f"/proc/{pid}/comm").read().strip()  # noqa: SIM115 - one read
                out.append(f"{pid} ({comm}): {hit[0]}")
    return out


class Server:
    def __init__(self, ops: PowerCutOps, mountpoint: str, options: dict[str, Any]) -> None:
        self.ops = ops
        self.mountpoint = mountpoint
        self.options = options
        self.want_mount = threading.Event()
        self.unmounted = threading.Event()
        self.stay = True  # mount again after the next unmount (a cut), or end
        self.expect_unmount = False  # the control thread unmounts (a cut): serve again when told
        self.error: str | None = None

    def run(self) -> None:
        """The main thread: mount, serve until unmounted, and again while a cut asks for it."""
        while True:
            self.want_mount.wait()
            self.want_mount.clear()
            if not self.stay:
                return
            try:
                _FUSE(self.ops, self.mountpoint, foreground=True, nothreads=True, **self.options)
            except BaseException as exc:  # noqa: BLE001 - told to the control thread
                self.error = f"{type(exc).__name__}: {exc}"
            self.ops.mounted.clear()
            self.unmounted.set()
            if not self.stay:
                return
            if self.error is None and not self.expect_unmount:
                return  # unmounted from outside or by a signal: end
            self.expect_unmount = False

    def mount(self, timeout: float = 20.0) -> None:
        self.error = None
        self.unmounted.clear()
        self.want_mount.set()
        deadline = time.monotonic() + timeout
        while not self.ops.mounted.wait(0.05):
            if self.unmounted.is_set():
                raise RuntimeError(f"mount failed: {self.error or 'FUSE loop ended'}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"mount did not come up within {timeout} s")
        os.stat(self.mountpoint)  # answered by the FUSE loop: it is serving

    def unmount(self, timeout: float = 20.0) -> None:
        self.expect_unmount = True
        deadline = time.monotonic() + timeout
        while True:
            ok, why = _umount(self.mountpoint)
            if ok:
                break
            if not self.ops.mounted.is_set() and self.unmounted.is_set():
                break
            if time.monotonic() > deadline:
                self.expect_unmount = False
                busy = holders(self.mountpoint)
                raise RuntimeError(f"unmount failed: {why}; held by: {busy or 'nothing found in /proc'}")
            time.sleep(0.1)
        if not self.unmounted.wait(timeout):
            raise RuntimeError("the FUSE loop did not end after the unmount")

    def control(self, inp: IO[str], out: IO[str]) -> None:
        def reply(obj: dict[str, Any]) -> None:
            out.write(json.dumps(obj) + "\n")
            out.flush()

        try:
            self.mount()
            reply({"ok": True, "pid": os.getpid(), "conn": self.ops.conn})
        except Exception as exc:  # noqa: BLE001 - reported to the test, then the process ends
            reply({"ok": False, "error": str(exc)})
            self.stay = False
            self.want_mount.set()
            return
        for line in inp:
            try:
                req = json.loads(line)
                op = req.get("op")
                if op == "stats":
                    with self.ops.mutex:
                        res: dict[str, Any] = self.ops.model.stats()
                    res["open_handles"] = len(self.ops.handles)
                elif op == "sync":
                    with self.ops.mutex:
                        self.ops.model.sync_all()
                        res = self.ops.model.stats()
                elif op == "cut":
                    self.unmount()
                    with self.ops.mutex:
                        res = self.ops.model.cut()
                        self.ops.handles.clear()
                        self.ops.hidden.clear()
                    self.mount()
                elif op == "remount":  # a clean reboot without the cut: caches dropped, nothing lost
                    self.unmount()
                    self.mount()
                    res = {}
                elif op == "quit":
                    break
                else:
                    raise ValueError(f"unknown op {op!r}")
                reply({"ok": True, **res})
            except Exception as exc:  # the test gets the message
                log.exception("control op failed")
                reply({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        # quit or EOF: unmount and end
        self.stay = False
        lazy = False
        try:
            if self.ops.mounted.is_set():
                self.unmount(timeout=5.0)
        except Exception:  # noqa: BLE001 - something still holds the mount: detach it lazily and go
            log.warning("unmount busy (%s): detaching lazily", holders(self.mountpoint))
            _umount(self.mountpoint, lazy=True)
            lazy = True
        self.want_mount.set()
        with contextlib.suppress(Exception):
            reply({"ok": True, "bye": True, "lazy": lazy})
        if lazy:  # the FUSE loop would serve the last open files for ever: its holders get ENOTCONN instead
            os._exit(0)


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.powercut.fusefs")
    ap.add_argument("mountpoint")
    ap.add_argument("--names", default="ext4", choices=("ext4", "posix"))
    ap.add_argument("--allow-other", action="store_true")
    ap.add_argument("--debug", action="store_true")
    args = ap.parse_args(argv)
    if mfusepy.fuse_version_major != 3:
        ap.error(f"needs libfuse 3, mfusepy loaded {mfusepy.fuse_version_major}.{mfusepy.fuse_version_minor}")
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.WARNING, stream=sys.stderr,
                        format="powercut %(levelname)s %(message)s")  # fmt: skip
    ctl_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything else printed goes to stderr, never into the control channel
    _die_with_parent()
    options: dict[str, Any] = {"fsname": "powercut", "subtype": "powercut", "default_permissions": True}
    if args.allow_other:
        options["allow_other"] = True
    if args.debug:
        options["debug"] = True
    mountpoint = os.path.realpath(args.mountpoint)
    server = Server(PowerCutOps(Model(args.names)), mountpoint, options)
    threading.Thread(target=server.control, args=(sys.stdin, ctl_out), name="control", daemon=True).start()
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
