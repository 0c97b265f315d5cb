"""Code-index events: a project's files, chunked by syntax, in the log beside memories and the graph.

Code comes from files, not from agents' statements, but the log stays the only source of truth: an indexing
run (`mneme.evt.<ns>.code.<project>`) records what it found, file by file, with the chunks' text. So a
replay rebuilds the code index (chunks, and their vectors from the embedding cache or the model) without the
original files, and `as_of` is not needed: a run's events say what the index held after it. Only changed
files (by content hash) are recorded again; a file gone from the tree is recorded as removed.

The same rules as schemas/events.py: a tag is never reused, a field never retyped, new fields get defaults.
"""

from __future__ import annotations

from typing import ClassVar

from msgspec import Struct

from schemas.wide_ints import Int32, Int64


class CodeEvent(Struct, frozen=True, kw_only=True, tag_field="type"):
    SCHEMA_VERSION: ClassVar[int] = 1
    project_id: str
    run_id: str


class CodeChunk(Struct, frozen=True, kw_only=True):
    start_line: Int32  # 1-based, inclusive
    end_line: Int32
    chunk_type: str  # function, method, class, struct, impl, interface, imports, block, lines, file…
    name: str | None
    header: str  # "path > Class > function" (with U+203A): embedded with the code
    code: str


class CodeIndexStarted(CodeEvent, frozen=True, kw_only=True, tag="code_index_started"):
    root: str  # the directory indexed, as the gateway that indexed it saw it
    total_files: Int64  # files to chunk in this run (changed or new)
    total_bytes: Int64
    unchanged: Int64 = 0  # files already indexed with the same content


class CodeFileIndexed(CodeEvent, frozen=True, kw_only=True, tag="code_file_indexed"):
    path: str  # relative POSIX path
    language: str
    sha256: str
    size: Int64
    chunks: tuple[CodeChunk, ...]


class CodeFileRemoved(CodeEvent, frozen=True, kw_only=True, tag="code_file_removed"):
    path: str


class CodeIndexFinished(CodeEvent, frozen=True, kw_only=True, tag="code_index_finished"):
    status: str  # completed | failed
    error: str | None = None


class CodeProjectDeleted(CodeEvent, frozen=True, kw_only=True, tag="code_project_deleted"):
    pass


AnyCodeEvent = CodeIndexStarted | CodeFileIndexed | CodeFileRemoved | CodeIndexFinished | CodeProjectDeleted
