"""bench.code's corpus: the standard library's .py files, copied into the run directory, chunked in this
process by the product's Chunker (the texts the projector embeds), and search queries made from the names
of the definitions in them.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from mneme.code import Chunker, scan_project
from services.gateway.code_indexer import MAX_FILE_BYTES
from services.projector.code_view import chunk_text

# parts of Lib that are not the library itself (tests, demos, the IDE, vendored wheels) or need a GUI
SKIP_DIRS = {
    "test", "tests", "idlelib", "turtledemo", "tkinter", "lib2to3", "ensurepip", "site-packages", "__pycache__",
    "config-3.11-x86_64-linux-gnu",
}  # fmt: skip


@dataclass(frozen=True)
class Corpus:
    root: Path  # the copied tree that is indexed
    files: list[str]  # relative paths
    bytes: int
    texts: list[str]  # every chunk's embedded text, in file order
    named: list[tuple[str, str, str]]  # (file, definition name, chunk type) of the named chunks
    skipped: dict[str, int]  # what the scan left out, by reason
    line_ranges: int  # distinct (file, start line, end line): pieces of one long line share one


def stdlib_files(seed: int, limit: int | None) -> tuple[Path, list[str]]:
    """The .py files of this interpreter's Lib under the size cap, sorted; a seeded sample of `limit`."""
    lib = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for d, dirs, files in os.walk(lib):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("config-"))
        for f in files:
            p = Path(d) / f
            if f.endswith(".py") and not p.is_symlink() and p.stat().st_size <= MAX_FILE_BYTES:
                found.append(p.relative_to(lib).as_posix())
    found.sort()
    if limit is not None and limit < len(found):
        found = sorted(random.Random(seed).sample(found, limit))
    return lib, found


def build(dest: Path, seed: int, limit: int | None) -> Corpus:
    """Copy the files into `dest`, then scan and chunk them as the gateway does (scan_project, Chunker)."""
    lib, files = stdlib_files(seed, limit)
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lib / rel, dest / rel)
    scan = scan_project(dest)
    chunker = Chunker()
    texts: list[str] = []
    ranges: set[tuple[str, int, int]] = set()
    named: list[tuple[str, str, str]] = []
    for f in scan.files:
        for c in chunker.chunk(f.path, f.read(), f.language):
            texts.append(chunk_text(c.header, c.code))
            ranges.add((f.path, c.start_line, c.end_line))
            if c.name and not c.name.startswith("_"):
                named.append((f.path, c.name, c.chunk_type))
    return Corpus(dest, [f.path for f in scan.files], scan.total_bytes, texts, named, dict(scan.skipped), len(ranges))


def words_of(name: str) -> list[str]:
    """`parse_header_words` -> parse header words; `HTTPConnection` -> http connection."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", name))
    return [w.lower() for w in re.split(r"[_\s]+", spaced) if w]


def queries(corpus: Corpus, n: int, seed: int) -> list[tuple[str, str]]:
    """(query text, the file it was made from): n distinct queries from definitions of two words or more."""
    rng = random.Random(seed)
    pool = [(f, w, kind) for f, name, kind in corpus.named if len(w := words_of(name)) >= 2]
    rng.shuffle(pool)
    out: dict[str, str] = {}
    for f, w, kind in pool:
        text = f"{'class for' if kind == 'class' else 'code that'} {' '.join(w)}"
        out.setdefault(text, f)
        if len(out) >= n:
            break
    return list(out.items())
