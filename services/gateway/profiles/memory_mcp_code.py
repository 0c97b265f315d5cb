"""memory-mcp's code-search tools: index_project, search_code, get_index_status, list_projects, delete_project.

Indexing scans and chunks the directory where the gateway runs (mneme/code), records the run in the log and
answers once the files are recorded (up to INDEX_WAIT seconds; a larger tree goes on in the background); the
projector embeds the chunks behind it, and get_index_status follows both halves (files, then vectors) with a
percentage and an ETA. `watch` is accepted and not acted on (the contract defers it). docs/profiles.md.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from schemas.queries import CodeFiles, CodeIndexStatus, CodeProjects, CodeSearchResult, SearchCode
from services.gateway.code_tools import project_path
from services.gateway.gateway import Call
from services.gateway.params import DESTRUCTIVE, READ, WRITE
from services.gateway.toolkit import Toolset

tools = Toolset()
INDEX_WAIT = 60.0  # seconds index_project waits for the run to be recorded before it answers

ProjectId = Annotated[str, Field(min_length=1, max_length=255)]
CodeLimit = Annotated[int, Field(ge=1, le=50)]


class Indexed(BaseModel):
    project_id: str
    files_indexed: int
    chunks_created: int


class CodeResult(BaseModel):
    id: str
    file_path: str
    content: str
    language: str
    start_line: int
    end_line: int
    chunk_type: str
    name: str | None
    score: float


class CodeResults(BaseModel):
    results: list[CodeResult]
    count: int


class IndexStatus(BaseModel):
    project_id: str
    status: str
    total_files: int
    indexed_files: int
    total_chunks: int
    progress_percent: float
    eta_seconds: float | None
    started_at: str | None
    completed_at: str | None
    error: str | None = None


class Projects(BaseModel):
    projects: list[str]
    count: int


class ProjectDeleted(BaseModel):
    chunks_deleted: int


def code_results(got: CodeSearchResult) -> list[CodeResult]:
    return [
        CodeResult(
            id=h.id,
            file_path=h.path,
            content=h.content,
            language=h.language,
            start_line=h.start_line,
            end_line=h.end_line,
            chunk_type=h.chunk_type,
            name=h.name,
            score=round(h.score, 4),
        )
        for h in got.hits
    ]


@tools.tool(intent="write", hints=WRITE)
async def index_project(call: Call, path: str, watch: bool = False) -> Indexed:
    """Index a codebase for semantic search."""
    path = await project_path(call, path)
    run = await call.app.code.index(call, path, wait=INDEX_WAIT)
    return Indexed(project_id=run.project_id, files_indexed=run.files_indexed, chunks_created=run.chunks_created)


@tools.tool(intent="read", hints=READ)
async def search_code(call: Call, query: str, project_id: str | None = None, limit: CodeLimit = 10) -> CodeResults:
    """Semantic search over indexed code."""
    got = await call.app.reads.ask(call, SearchCode, query=query, project_id=project_id, limit=limit)
    results = code_results(got)
    return CodeResults(results=results, count=len(results))


@tools.tool(intent="read", hints=READ)
async def get_index_status(call: Call, project_id: ProjectId) -> IndexStatus:
    """Get indexing status for a project."""
    q = CodeIndexStatus(namespace=call.namespace, now=call.gw.now(), project_id=project_id)
    s = await call.app.reads.status(call, q)
    return IndexStatus(
        project_id=project_id,
        status=s.status,
        total_files=s.total_files,
        indexed_files=s.indexed_files,
        total_chunks=s.total_chunks,
        progress_percent=s.progress_percent,
        eta_seconds=round(s.eta_seconds) if s.eta_seconds is not None else None,
        started_at=s.started_at.isoformat().replace("+00:00", "Z") if s.started_at else None,
        completed_at=s.completed_at.isoformat().replace("+00:00", "Z") if s.completed_at else None,
        error=s.error,
    )


@tools.tool(intent="read", hints=READ)
async def list_projects(call: Call) -> Projects:
    """List all indexed projects."""
    got = await call.app.reads.status(call, CodeProjects(namespace=call.namespace, now=call.gw.now()))
    ids = [p.project_id for p in got.projects]
    return Projects(projects=ids, count=len(ids))


@tools.tool(intent="write", hints=DESTRUCTIVE)
async def delete_project(call: Call, project_id: ProjectId) -> ProjectDeleted:
    """Delete all indexed code chunks for a project."""
    app = call.app
    q = CodeIndexStatus(namespace=call.namespace, now=call.gw.now(), project_id=project_id)
    s = await app.reads.status(call, q)
    if not s.found:
        files = await app.reads.ask(call, CodeFiles, project_id=project_id)
        if not files.files:
            return ProjectDeleted(chunks_deleted=0)
    await app.code.delete(call, project_id)
    return ProjectDeleted(chunks_deleted=s.total_chunks)
