"""Walking a project directory for the code index: which files to index, their languages and hashes.

    root = validate_project_path(path, allowed_roots)  # InvalidPath (INVALID_INPUT, field "path") if not
    result = scan_project(root)                          # ScanResult: files (sorted), skipped counts
    estimate = dry_run(root)                             # DryRun: the same walk, file count and bytes only

`scan_project` reads each kept file once to hash it (SHA-256 of its bytes): an indexer re-indexes a file
only when its hash changed and removes the files that are gone. `SourceFile.read()` returns the bytes to chunk
and raises `FileChanged` if they no longer have the scanned hash (edited meanwhile: scan again). `dry_run`
walks the same way but reads at most the first 8 KiB of a file (to tell binary and minified files), so its
counts equal the scan's.

What is skipped, with the reason counted in `skipped` (a directory counts once, not its files):
gitignored, default_ignored (see `mneme.code.ignore`), binary, minified, too_large (over `max_file_bytes`,
default 512 KiB), symlink_outside (its target is outside the project), symlink_in_tree (its target is inside
and is indexed at its own path: symlinks are never followed, so a loop cannot be), symlink_broken (dangling
or a loop), unreadable, not_regular (sockets, pipes, devices). Paths are relative to the root, POSIX, sorted.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mneme.code import ignore
from mneme.code.languages import language_for
from mneme.errors import MnemeError

MAX_FILE_BYTES = 512 * 1024
_DIR = -1  # what _Walk._entry answers for a directory to descend into


class InvalidPath(MnemeError):
    """The project path cannot be indexed; `details.reason` says why (memory-mcp's "Invalid path: {path}")."""

    code = "INVALID_INPUT"
    REASONS = ("missing", "not_a_directory", "unreadable", "outside_allowed_roots")

    def __init__(self, path: str, reason: str, problem: str):
        super().__init__(f"Invalid path: {path}: {problem}", field="path", details={"path": path, "reason": reason})
        self.reason = reason


class FileChanged(MnemeError):
    """A scanned file changed or went away before it was read: scan again."""

    code = "FILE_CHANGED"
    retryable = True

    def __init__(self, path: str):
        super().__init__(f"{path} changed since it was scanned", field="path", details={"path": path})


def validate_project_path(
    path: str | os.PathLike[str], allowed_roots: Sequence[str | os.PathLike[str]] | None = None
) -> Path:
    """The project directory, resolved (symlinks too); InvalidPath when it cannot be indexed.

    `allowed_roots` None allows any directory; otherwise the resolved path must be one of them or below one.
    The roots are checked first, so a path outside them says nothing about whether it exists.
    """
    shown = os.fspath(path)
    if not shown.strip():
        raise InvalidPath(shown, "missing", "no path given")
    try:
        real = Path(os.path.realpath(Path(shown).expanduser()))
        return _checked(shown, real, allowed_roots)
    except (ValueError, OSError, RuntimeError) as exc:  # NUL, too long, an unknown ~user, a symlink loop
        raise InvalidPath(shown, "invalid", f"not a usable path ({type(exc).__name__})") from None


def _checked(shown: str, real: Path, allowed_roots: Sequence[str | os.PathLike[str]] | None) -> Path:
    if allowed_roots is not None:
        roots = [Path(os.path.realpath(Path(os.fspath(r)).expanduser())) for r in allowed_roots]
        if not any(real.is_relative_to(r) for r in roots):
            listed = ", ".join(str(r) for r in roots) or "none"
            raise InvalidPath(shown, "outside_allowed_roots", f"outside the allowed roots ({listed})")
    if not real.exists():
        raise InvalidPath(shown, "missing", "no such file or directory")
    if not real.is_dir():
        raise InvalidPath(shown, "not_a_directory", "not a directory")
    try:
        with os.scandir(real):
            pass
    except OSError as exc:
        raise InvalidPath(shown, "unreadable", f"cannot be read ({exc.strerror or exc})") from None
    return real


@dataclass(frozen=True)
class SourceFile:
    path: str  # relative to the project root, POSIX
    language: str  # python, javascript, typescript, go, rust or text
    size: int
    sha256: str
    abspath: Path

    def read(self) -> bytes:
        """The bytes that were scanned; FileChanged if the file is no longer what was scanned."""
        try:
            data = self.abspath.read_bytes()
        except OSError:
            raise FileChanged(self.path) from None
        if len(data) != self.size or hashlib.sha256(data).hexdigest() != self.sha256:
            raise FileChanged(self.path)
        return data


@dataclass(frozen=True)
class ScanResult:
    root: Path
    files: tuple[SourceFile, ...]  # sorted by path
    skipped: dict[str, int]  # reason -> count
    skipped_paths: tuple[tuple[str, str], ...] = field(default=())  # (path, reason), sorted by path

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)


@dataclass(frozen=True)
class DryRun:
    root: Path
    files: int
    bytes: int
    languages: dict[str, int]  # language -> files
    skipped: dict[str, int]


def scan_project(
    path: str | os.PathLike[str],
    *,
    allowed_roots: Sequence[str | os.PathLike[str]] | None = None,
    max_file_bytes: int = MAX_FILE_BYTES,
) -> ScanResult:
    root = validate_project_path(path, allowed_roots)
    walk = _Walk(root, max_file_bytes)
    files: list[SourceFile] = []
    for rel, abspath, _size in walk.candidates():
        try:
            data = abspath.read_bytes()
        except OSError:
            walk.skip(rel, "unreadable")
            continue
        reason = _content_reason(abspath.name, data[: ignore.HEAD_BYTES])
        if reason is None and len(data) > max_file_bytes:  # grew since it was listed
            reason = "too_large"
        if reason:
            walk.skip(rel, reason)
            continue
        digest = hashlib.sha256(data).hexdigest()
        files.append(SourceFile(rel, language_for(rel), len(data), digest, abspath))
    files.sort(key=lambda f: f.path)
    return ScanResult(root, tuple(files), walk.counts(), tuple(sorted(walk.skipped)))


def dry_run(
    path: str | os.PathLike[str],
    *,
    allowed_roots: Sequence[str | os.PathLike[str]] | None = None,
    max_file_bytes: int = MAX_FILE_BYTES,
) -> DryRun:
    """What `scan_project` would keep, counted: files, bytes, files per language, skips per reason."""
    root = validate_project_path(path, allowed_roots)
    walk = _Walk(root, max_file_bytes)
    files = size = 0
    languages: Counter[str] = Counter()
    for rel, abspath, file_size in walk.candidates():
        try:
            with abspath.open("rb") as f:
                head = f.read(ignore.HEAD_BYTES)
        except OSError:
            walk.skip(rel, "unreadable")
            continue
        reason = _content_reason(abspath.name, head)
        if reason:
            walk.skip(rel, reason)
            continue
        files += 1
        size += file_size
        languages[language_for(rel)] += 1
    return DryRun(root, files, size, dict(sorted(languages.items())), walk.counts())


def _content_reason(name: str, head: bytes) -> str | None:
    if ignore.binary_head(head):
        return "binary"
    if ignore.minified(name, head):
        return "minified"
    return None


class _Walk:
    """A depth-first walk in sorted order that yields the files worth reading and records the rest."""

    def __init__(self, root: Path, max_file_bytes: int):
        self.root = root
        self.max_file_bytes = max_file_bytes
        self.skipped: list[tuple[str, str]] = []

    def skip(self, rel: str, reason: str) -> None:
        self.skipped.append((rel, reason))

    def counts(self) -> dict[str, int]:
        return dict(sorted(Counter(reason for _, reason in self.skipped).items()))

    def candidates(self) -> Iterator[tuple[str, Path, int]]:
        """(relative path, absolute path, size) of each file that passes every rule decided without reading."""
        stack: list[tuple[Path, str, ignore.GitIgnores]] = [(self.root, "", ignore.GitIgnores.at_root(self.root))]
        while stack:
            directory, rel_dir, rules = stack.pop()
            try:
                with os.scandir(directory) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError:
                self.skip(rel_dir or ".", "unreadable")
                continue
            subdirs: list[tuple[Path, str, ignore.GitIgnores]] = []
            for entry in entries:
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                found = self._entry(entry, rel, rules)
                if found is None:
                    continue
                if found == _DIR:
                    subdir = Path(entry.path)
                    subdirs.append((subdir, rel, rules.entering(subdir, rel)))
                else:
                    yield rel, Path(entry.path), found
            stack.extend(reversed(subdirs))  # pop in sorted order

    def _entry(self, entry: os.DirEntry[str], rel: str, rules: ignore.GitIgnores) -> int | None:
        """_DIR to descend into, a file's size to consider, or None once the reason to skip is recorded."""
        name = entry.name
        try:
            is_link = entry.is_symlink()
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            self.skip(rel, "unreadable")
            return None
        if name == ".git" or (is_dir and ignore.ignored_dir(name)) or (not is_dir and ignore.ignored_file(name)):
            self.skip(rel, "default_ignored")
            return None
        if rules.ignored(rel, is_dir):
            self.skip(rel, "gitignored")
            return None
        if is_link:
            self.skip(rel, self._link_reason(entry.path))
            return None
        if is_dir:
            return _DIR
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            self.skip(rel, "unreadable")
            return None
        if not stat.S_ISREG(info.st_mode):
            self.skip(rel, "not_regular")
            return None
        if ignore.binary_name(name):
            self.skip(rel, "binary")
            return None
        if info.st_size > self.max_file_bytes:
            self.skip(rel, "too_large")
            return None
        return info.st_size

    def _link_reason(self, path: str) -> str:
        target = Path(os.path.realpath(path))
        if not target.exists():
            return "symlink_broken"
        return "symlink_in_tree" if target.is_relative_to(self.root) else "symlink_outside"
