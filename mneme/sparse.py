"""Copying files that are mostly holes (Qdrant Edge preallocates ~240 MB per shard, nearly all of it
never written) without writing the holes out: only the data extents are copied (SEEK_DATA/SEEK_HOLE),
and within them runs of zeros are skipped too, so the copy is sparse even where the source is not,
or where the filesystem cannot report holes. The copy reads back byte for byte as the source."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

BLOCK = 64 * 1024


def _extents(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """(start, end) of each data extent; the whole file where the filesystem cannot say."""
    if not hasattr(os, "SEEK_DATA"):
        yield 0, size
        return
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nothing but a hole from pos to the end
                return
            if exc.errno == errno.EINVAL and pos == 0:  # SEEK_DATA unsupported here
                yield 0, size
                return
            raise
        end = os.lseek(fd, start, os.SEEK_HOLE)
        yield start, min(end, size)
        pos = end


def copy_sparse(src: str | Path, dst: str | Path) -> str:
    """Copy `src` to `dst` (contents, then mode and times) leaving holes where `src` reads zeros."""
    zero = bytes(BLOCK)
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        size = os.fstat(fi.fileno()).st_size
        for start, end in _extents(fi.fileno(), size):
            pos = start
            while pos < end:
                chunk = os.pread(fi.fileno(), min(BLOCK, end - pos), pos)
                if not chunk:
                    break
                if chunk != zero[: len(chunk)]:
                    os.pwrite(fo.fileno(), chunk, pos)
                pos += len(chunk)
        fo.truncate(size)
    shutil.copystat(src, dst)
    return str(dst)


def copytree_sparse(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, copy_function=copy_sparse)


def disk_usage(root: Path) -> tuple[int, int, int]:
    """(files, bytes as read, bytes on disk) under `root` (a file or a directory)."""
    paths = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
    n = size = disk = 0
    for p in paths:
        st = p.stat()
        n, size, disk = n + 1, size + st.st_size, disk + st.st_blocks * 512
    return n, size, disk
