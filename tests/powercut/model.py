"""The page-cache model behind the power-cut filesystem: what a power cut keeps, and what it drops.

Every node (file, directory, symlink) has two states:

- the *current* state, what every read sees: file size and pages (`size`, `pages`), directory entries
  (`entries`), and where the node is linked now (`parent`, `name`);
- the *durable* state, what is on the "disk": file size and pages as of the file's last fsync (`dsize`, None
  when the file was never made durable, and `dpages`), directory entries as of the directory's last fsync
  (`dentries`), and where the durable tree links the node (`dparent`, `dname`).

File bytes are kept in 4 KiB pages, a missing page reading as zeros (files are sparse: a preallocated or
ftruncated file costs nothing until written); an fsync copies the pages written since the last one.

Writes, truncates, fallocate, create, mkdir, symlink, unlink, rmdir and rename change the current state only.
`cut()` throws the current state away: every directory gets its durable entries back, every file its durable
bytes, and whatever the durable tree does not reach is gone, as after a power cut. Nothing becomes durable on
its own (there is no 5 s journal commit, no 30 s writeback): the model is the worst moment to lose power, right
after the last acknowledgement.

What makes state durable (close() never does: FUSE's FLUSH on close is a no-op here):

- fsync(fd) and fdatasync(fd) on a file: its bytes and size (pages written since the last sync are copied;
  the whole file on its first sync).
- fsync(fd) on a directory: its entries exactly as they are now (creates, unlinks, renames in it). A node that
  gets a durable name this way and was never synced is durable with no bytes (a 0-byte file), as on ext4.
  A rename is one atomic operation: making either side of it durable (the old name's directory or the new
  name's) makes both durable, so a durable node never has two durable names, nor loses its only one, through a
  cross-directory rename.
- the name model, `names`:
  - "ext4" (the default): fsync/fdatasync of a file (or of a directory) also makes its current name durable,
    and its parent directory's name, up to the root: what ext4, XFS and btrfs do in practice (the create or
    rename is in the journal transaction that the fsync commits). Other pending namespace changes stay volatile
    (stricter than ext4, whose journal commit carries every earlier metadata change with it).
  - "posix": only fsync of the directory makes a name durable (fsync(2): "Calling fsync() does not necessarily
    ensure that the entry in the directory containing the file has also reached disk"), and a new directory's
    own name needs an fsync of its parent.
- `sync_all()`: everything current becomes durable (sync(1)), e.g. to set up a baseline.

Mode, owner and times are kept once (a chmod or utime survives a cut); hard links are not modelled.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Iterator
from typing import Any

PAGE = 4096
NAMES = ("ext4", "posix")

# fallocate(2) modes
FALLOC_FL_KEEP_SIZE = 0x01
FALLOC_FL_PUNCH_HOLE = 0x02
FALLOC_FL_ZERO_RANGE = 0x10
RENAME_NOREPLACE = 1


def fail(code: int) -> OSError:
    return OSError(code, os.strerror(code))


class Node:
    __slots__ = (
        "atime_ns",
        "ctime_ns",
        "dentries",
        "dirty",
        "dirty_bytes",
        "dname",
        "dpages",
        "dparent",
        "dsize",
        "entries",
        "gid",
        "ino",
        "minsize",
        "mode",
        "mtime_ns",
        "name",
        "pages",
        "parent",
        "size",
        "target",
        "uid",
    )

    def __init__(self, ino: int, mode: int, uid: int = 0, gid: int = 0, target: str = "") -> None:
        self.ino = ino
        self.mode = mode
        self.uid, self.gid = uid, gid
        self.atime_ns = self.mtime_ns = self.ctime_ns = time.time_ns()
        self.size = 0  # current size (files)
        self.pages: dict[int, bytearray] = {}  # current pages (files); a missing one reads as zeros
        self.dsize: int | None = None  # durable size (files); None: never made durable
        self.dpages: dict[int, bytes] = {}  # durable pages (files)
        self.dirty: set[int] = set()  # pages changed since the last sync
        self.minsize = 0  # the smallest size the file had since the last sync
        self.dirty_bytes = 0  # bytes written since the last sync
        self.entries: dict[str, Node] = {}  # current entries (directories)
        self.dentries: dict[str, Node] = {}  # durable entries (directories)
        self.target = target  # symlinks
        self.parent: Node | None = None
        self.name = ""
        self.dparent: Node | None = None
        self.dname = ""

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.mode)

    def st_size(self) -> int:
        if self.is_file:
            return self.size
        if self.is_dir:
            return PAGE
        return len(self.target.encode())

    def touch(self) -> None:
        self.mtime_ns = self.ctime_ns = time.time_ns()

    def unsynced(self) -> bool:
        """The file's current bytes may differ from its durable ones."""
        return self.dsize is None or bool(self.dirty) or self.size != self.dsize or self.minsize < self.dsize


class Model:
    def __init__(self, names: str = "ext4") -> None:
        if names not in NAMES:
            raise ValueError(f"names={names!r}: one of {NAMES}")
        self.names = names
        self.root = Node(1, stat.S_IFDIR | 0o755)
        self._next_ino = 2
        self.counters: dict[str, int] = dict.fromkeys(
            ("writes", "write_bytes", "truncates", "fsyncs", "fdatasyncs", "fsyncdirs", "synced_bytes", "cuts",
             "lost_write_bytes", "lost_files", "lost_names"),
            0,
        )  # fmt: skip

    # -- paths
    def lookup(self, path: str) -> Node:
        node = self.root
        for part in path.split("/"):
            if not part:
                continue
            if not node.is_dir:
                raise fail(errno.ENOTDIR)
            child = node.entries.get(part)
            if child is None:
                raise fail(errno.ENOENT)
            node = child
        return node

    def parent_of(self, path: str) -> tuple[Node, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        if not name:
            raise fail(errno.EINVAL)
        parent = self.lookup(head)
        if not parent.is_dir:
            raise fail(errno.ENOTDIR)
        return parent, name

    def path_of(self, node: Node) -> str | None:
        parts = []
        while node is not self.root:
            if node.parent is None:
                return None
            parts.append(node.name)
            node = node.parent
        return "/" + "/".join(reversed(parts))

    # -- namespace (current state only)
    def _new(self, mode: int, uid: int, gid: int, target: str = "") -> Node:
        node = Node(self._next_ino, mode, uid, gid, target)
        self._next_ino += 1
        return node

    @staticmethod
    def _link(parent: Node, name: str, node: Node) -> None:
        parent.entries[name] = node
        node.parent, node.name = parent, name
        parent.touch()

    @staticmethod
    def _unlink(node: Node) -> None:
        parent = node.parent
        assert parent is not None
        del parent.entries[node.name]
        node.parent, node.name = None, ""
        parent.touch()

    def create(self, path: str, mode: int, uid: int = 0, gid: int = 0) -> Node:
        parent, name = self.parent_of(path)
        if name in parent.entries:
            raise fail(errno.EEXIST)
        node = self._new(stat.S_IFREG | stat.S_IMODE(mode), uid, gid)
        self._link(parent, name, node)
        return node

    def mkdir(self, path: str, mode: int, uid: int = 0, gid: int = 0) -> Node:
        parent, name = self.parent_of(path)
        if name in parent.entries:
            raise fail(errno.EEXIST)
        node = self._new(stat.S_IFDIR | stat.S_IMODE(mode), uid, gid)
        self._link(parent, name, node)
        return node

    def symlink(self, path: str, target: str, uid: int = 0, gid: int = 0) -> Node:
        parent, name = self.parent_of(path)
        if name in parent.entries:
            raise fail(errno.EEXIST)
        node = self._new(stat.S_IFLNK | 0o777, uid, gid, target)
        self._link(parent, name, node)
        return node

    def unlink(self, path: str) -> None:
        node = self.lookup(path)
        if node.is_dir:
            raise fail(errno.EISDIR)
        self._unlink(node)

    def rmdir(self, path: str) -> None:
        node = self.lookup(path)
        if not node.is_dir:
            raise fail(errno.ENOTDIR)
        if node is self.root:
            raise fail(errno.EBUSY)
        if node.entries:
            raise fail(errno.ENOTEMPTY)
        self._unlink(node)

    def rename(self, old: str, new: str, flags: int = 0) -> None:
        if flags & ~RENAME_NOREPLACE:
            raise fail(errno.EINVAL)  # RENAME_EXCHANGE, RENAME_WHITEOUT: not modelled
        node = self.lookup(old)
        parent, name = self.parent_of(new)
        anc: Node | None = parent
        while anc is not None:  # no directory into itself
            if anc is node:
                raise fail(errno.EINVAL)
            anc = anc.parent
        target = parent.entries.get(name)
        if target is node:
            return
        if target is not None:
            if flags & RENAME_NOREPLACE:
                raise fail(errno.EEXIST)
            if target.is_dir:
                if not node.is_dir:
                    raise fail(errno.EISDIR)
                if target.entries:
                    raise fail(errno.ENOTEMPTY)
            elif node.is_dir:
                raise fail(errno.ENOTDIR)
            self._unlink(target)
        self._unlink(node)
        self._link(parent, name, node)
        node.ctime_ns = time.time_ns()

    # -- file contents (current state only)
    def read(self, node: Node, size: int, offset: int) -> bytes:
        node.atime_ns = time.time_ns()
        end = min(offset + size, node.size)
        if end <= offset:
            return b""
        pages = node.pages
        first, last = offset // PAGE, (end - 1) // PAGE
        if first == last:
            pg = pages.get(first)
            a = offset - first * PAGE
            return bytes(pg[a : a + end - offset]) if pg is not None else bytes(end - offset)
        out = bytearray()
        for p in range(first, last + 1):
            a = max(offset, p * PAGE) - p * PAGE
            b = min(end, (p + 1) * PAGE) - p * PAGE
            pg = pages.get(p)
            out += pg[a:b] if pg is not None else bytes(b - a)
        return bytes(out)

    def write(self, node: Node, buf: bytes, offset: int) -> int:
        n = len(buf)
        if n == 0:
            return 0
        end = offset + n
        pages, dirty = node.pages, node.dirty
        p = offset // PAGE
        pos = 0
        while pos < n:
            a = offset + pos - p * PAGE
            take = min(PAGE - a, n - pos)
            pg = pages.get(p)
            if pg is None:
                pg = pages[p] = bytearray(PAGE)
            pg[a : a + take] = buf[pos : pos + take]
            dirty.add(p)
            pos += take
            p += 1
        if end > node.size:
            node.size = end
        node.dirty_bytes += n
        node.touch()
        c = self.counters
        c["writes"] += 1
        c["write_bytes"] += n
        return n

    def truncate(self, node: Node, length: int) -> None:
        if not node.is_file:
            raise fail(errno.EISDIR if node.is_dir else errno.EINVAL)
        if length < 0:
            raise fail(errno.EINVAL)
        if length < node.size:
            keep = -(-length // PAGE)  # pages [0, keep) stay
            for p in [p for p in node.pages if p >= keep]:
                del node.pages[p]
            tail = length % PAGE
            if tail:  # the last page's bytes past the end read as zeros when the file grows again
                pg = node.pages.get(length // PAGE)
                if pg is not None:
                    pg[tail:] = bytes(PAGE - tail)
                node.dirty.add(length // PAGE)
            node.minsize = min(node.minsize, length)
        node.size = length
        node.touch()
        self.counters["truncates"] += 1

    def fallocate(self, node: Node, mode: int, offset: int, length: int) -> None:
        if not node.is_file:
            raise fail(errno.ENODEV)
        end = offset + length
        if mode & ~(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE):
            raise fail(errno.EOPNOTSUPP)
        if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE):
            if mode & FALLOC_FL_PUNCH_HOLE and not mode & FALLOC_FL_KEEP_SIZE:
                raise fail(errno.EOPNOTSUPP)
            stop = min(end, node.size)
            size = node.size
            for start in range(offset, stop, 1 << 20):
                self.write(node, bytes(min(1 << 20, stop - start)), start)
            node.size = size
        if not mode & FALLOC_FL_KEEP_SIZE and end > node.size:
            self.truncate(node, end)

    # -- durability
    def fsync(self, node: Node, datasync: bool = False) -> None:
        self.counters["fdatasyncs" if datasync else "fsyncs"] += 1
        if node.is_dir:
            self.fsync_dir(node, counted=True)
            return
        self._persist_data(node)
        if self.names == "ext4":
            self._persist_chain(node)

    def fsync_dir(self, node: Node, *, counted: bool = False) -> None:
        if not counted:
            self.counters["fsyncdirs"] += 1
        for name, old in list(node.dentries.items()):
            if node.entries.get(name) is not old:
                del node.dentries[name]
                old.dparent, old.dname = None, ""
                if old.parent is not None:  # renamed away: the rename is one operation, its other side too
                    self._persist_link(old, set())
        for child in node.entries.values():
            if not self._durably_linked(child):
                self._persist_link(child, {node})
        if self.names == "ext4":
            self._persist_chain(node)

    def _persist_data(self, node: Node) -> None:
        if not node.is_file:
            return
        if node.dsize is None:
            node.dpages = {p: bytes(pg) for p, pg in node.pages.items()}
            copied = len(node.pages) * PAGE
        elif node.unsynced():
            dp = node.dpages
            if node.minsize < node.dsize:  # truncated since the last sync: durable pages past that go
                keep = -(-node.minsize // PAGE)
                for p in [p for p in dp if p >= keep]:
                    del dp[p]
            pages = node.pages
            for p in node.dirty:
                pg = pages.get(p)
                if pg is None:
                    dp.pop(p, None)
                else:
                    dp[p] = bytes(pg)
            copied = len(node.dirty) * PAGE
        else:
            return
        node.dsize = node.size
        self.counters["synced_bytes"] += copied
        node.dirty.clear()
        node.minsize = node.size
        node.dirty_bytes = 0

    def _durably_linked(self, node: Node) -> bool:
        if node is self.root:
            return True
        p = node.parent
        return p is not None and node.dparent is p and node.dname == node.name and p.dentries.get(node.name) is node

    def _persist_link(self, node: Node, seen: set[Node]) -> None:
        """Make the node's current name durable (and drop its old durable name: a rename is atomic)."""
        if node is self.root or node in seen:
            return
        seen.add(node)
        dp = node.dparent
        if dp is not None and (dp is not node.parent or node.dname != node.name):
            if dp.dentries.get(node.dname) is node:
                del dp.dentries[node.dname]
            node.dparent, node.dname = None, ""
        parent = node.parent
        if parent is None:  # unlinked: that it is gone is now durable
            return
        displaced = parent.dentries.get(node.name)
        if displaced is not node:
            parent.dentries[node.name] = node
            node.dparent, node.dname = parent, node.name
            if node.is_file and node.dsize is None:
                node.dsize, node.minsize = 0, 0  # a durable name, no durable bytes yet: a 0-byte file
                node.dirty.update(node.pages)
            if displaced is not None:
                displaced.dparent, displaced.dname = None, ""
                if displaced.parent is not None:  # it was renamed away: that rename is durable too
                    self._persist_link(displaced, seen)

    def _persist_chain(self, node: Node) -> None:
        """ext4: the node's name, and every ancestor's, up to the root."""
        seen: set[Node] = set()
        n: Node | None = node
        while n is not None and n is not self.root:
            if not self._durably_linked(n):
                self._persist_link(n, seen)
            n = n.parent

    def sync_all(self) -> None:
        """sync(1): the whole current tree becomes durable."""
        for node in list(self.walk()):
            if node.is_dir:
                self.fsync_dir(node, counted=True)
            else:
                self._persist_data(node)

    def cut(self) -> dict[str, int]:
        """The power cut: back to the durable image. Returns what it dropped."""
        lost = self.pending()
        for name in ("lost_write_bytes", "lost_files", "lost_names"):
            self.counters[name] += lost[name]
        self.counters["cuts"] += 1

        def revert(node: Node) -> None:
            if node.is_file:
                node.size = node.dsize or 0
                node.pages = {p: bytearray(b) for p, b in node.dpages.items()}
                node.dirty.clear()
                node.minsize = node.size
                node.dirty_bytes = 0
            elif node.is_dir:
                node.entries = dict(node.dentries)
                for name, child in node.entries.items():
                    child.parent, child.name = node, name
                    child.dparent, child.dname = node, name
                    revert(child)

        self.root.parent = None
        revert(self.root)
        return lost

    # -- inspection
    def walk(self, node: Node | None = None) -> Iterator[Node]:
        stack = [node or self.root]
        while stack:
            n = stack.pop()
            yield n
            if n.is_dir:
                stack.extend(n.entries.values())

    def walk_durable(self) -> Iterator[Node]:
        stack = [self.root]
        while stack:
            n = stack.pop()
            yield n
            if n.is_dir:
                stack.extend(n.dentries.values())

    def pending(self) -> dict[str, int]:
        """What a cut now would drop: bytes written since their file's last sync, files whose durable bytes
        differ from what reads see, and names whose current and durable entries differ."""
        write_bytes = files = names = 0
        durable = {id(n) for n in self.walk_durable()}
        for n in self.walk():
            if n.is_file:
                write_bytes += n.dirty_bytes
                if n.unsynced():
                    files += 1
            if n.is_dir:
                if id(n) not in durable:
                    names += len(n.entries)
                else:
                    names += sum(
                        1 for k in n.entries.keys() | n.dentries.keys() if n.entries.get(k) is not n.dentries.get(k)
                    )
        return {"lost_write_bytes": write_bytes, "lost_files": files, "lost_names": names}

    def stats(self) -> dict[str, Any]:
        files = dirs = size = mem = 0
        for n in self.walk():
            if n.is_file:
                files += 1
                size += n.size
                mem += len(n.pages) * PAGE
            elif n.is_dir:
                dirs += 1
        durable = [n for n in self.walk_durable() if n.is_file]
        dsize = sum(n.dsize or 0 for n in durable)
        mem += sum(len(n.dpages) * PAGE for n in durable)
        pend = self.pending()
        return {
            "names": self.names,
            "files": files,
            "dirs": dirs,
            "bytes": size,
            "durable_bytes": dsize,
            "memory_bytes": mem,  # pages held, current and durable
            "unsynced_write_bytes": pend["lost_write_bytes"],
            "unsynced_files": pend["lost_files"],
            "unsynced_names": pend["lost_names"],
            **self.counters,
        }
