"""The code index's queries and their results: semantic search over indexed code chunks, a project's indexing
status, the projects and the files an index holds. Answered by a projector's code view
(services/projector/code_queries.py); re-exported by schemas/queries.py.
"""

from __future__ import annotations

from typing import ClassVar

from msgspec import Struct

from schemas.events import UtcTime
from schemas.query_base import Query


class SearchCode(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Semantic search over the namespace's indexed code (chunks that have their vector)."""

    OPERATION: ClassVar[str] = "code.search"
    query: str
    project_id: str | None = None
    language: str | None = None
    limit: int = 10


class CodeIndexStatus(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    OPERATION: ClassVar[str] = "code.status"
    project_id: str


class CodeProjects(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    OPERATION: ClassVar[str] = "code.projects"


class CodeFiles(Query, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The files a project's index holds, with their content hashes (what an indexing run can skip)."""

    OPERATION: ClassVar[str] = "code.files"
    project_id: str


class CodeHit(Struct, frozen=True, kw_only=True):
    id: str
    project_id: str
    path: str
    language: str
    start_line: int
    end_line: int
    chunk_type: str
    name: str | None
    content: str
    score: float


class CodeSearchResult(Struct, frozen=True, kw_only=True):
    hits: list[CodeHit]
    pending: int  # chunks of the namespace still waiting for their vector (not searchable yet)
    model: str | None = None


class CodeStatusResult(Struct, frozen=True, kw_only=True):
    project_id: str
    found: bool
    status: str = "pending"  # pending | indexing | completed | failed
    root: str | None = None
    total_files: int = 0
    indexed_files: int = 0
    total_chunks: int = 0
    embedded_chunks: int = 0
    progress_percent: float = 0.0
    eta_seconds: float | None = None
    started_at: UtcTime | None = None
    completed_at: UtcTime | None = None
    error: str | None = None


class CodeProjectsResult(Struct, frozen=True, kw_only=True):
    projects: list[CodeStatusResult]


class CodeFilesResult(Struct, frozen=True, kw_only=True):
    root: str | None
    files: dict[str, str]  # path -> sha256
