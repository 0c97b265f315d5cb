"""Code-index tools (group "code", served when an operator asks: `--tools core,...,code`): index a project
directory (validated; gitignore and default ignores honoured; a dry run counts files and bytes first), search
its chunks by meaning, follow the indexing's status, forget a project. Chunks come from files but live in the
log, so a replay rebuilds the index without the files (docs/graph-and-code.md)."""

from __future__ import annotations

import asyncio
from typing import Annotated

from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from mneme.code import InvalidPath
from schemas.queries import CodeIndexStatus, CodeProjects, CodeStatusResult, SearchCode
from services.gateway.gateway import Call
from services.gateway.limits import shown
from services.gateway.params import READ, WRITE, Namespace
from services.gateway.toolkit import Toolset

tools = Toolset(group="code", flow=True)
FORGET = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
Project = Annotated[str, Field(min_length=1, max_length=255)]


class CodeHitOut(BaseModel):
    id: str
    project: str
    path: str
    language: str
    start_line: int
    end_line: int
    chunk_type: str
    name: str | None = None
    content: str
    score: float


class CodeHits(BaseModel):
    results: list[CodeHitOut]
    pending: int = Field(description="Chunks not yet searchable (still being embedded).")


class ProjectStatus(BaseModel):
    project: str
    status: str = Field(description="pending, indexing, completed or failed.")
    files: int
    files_indexed: int
    chunks: int
    chunks_embedded: int
    percent: float
    eta_s: float | None = None
    error: str | None = None

    @classmethod
    def of(cls, s: CodeStatusResult) -> ProjectStatus:
        return cls(
            project=s.project_id,
            status=s.status,
            files=s.total_files,
            files_indexed=s.indexed_files,
            chunks=s.total_chunks,
            chunks_embedded=s.embedded_chunks,
            percent=s.progress_percent,
            eta_s=s.eta_seconds,
            error=s.error,
        )


async def project_path(call: Call, path: str) -> str:
    """`path`, checked as the indexer checks it before anything runs: a missing, unreadable or disallowed
    directory is the indexer's INVALID_INPUT; a path the operating system will not even look up (a NUL
    character, a name too long, the ~ of a user there is not) is one too, rather than a failure inside."""
    try:
        await asyncio.to_thread(call.app.code.validate, path)
    except InvalidPath:
        raise
    except (OSError, ValueError, RuntimeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "it cannot name a file"
        if "\x00" in path:
            why = "it holds a NUL character"
        raise InvalidPath(shown(path.replace("\x00", "\\0"), 200), "missing", f"no such directory ({why})") from None
    return path


class IndexReceipt(BaseModel):
    project: str
    files: int = Field(description="Files to index (dry run) or recorded by this run (changed ones only).")
    bytes: int | None = None
    chunks: int | None = None
    unchanged: int | None = None


class Projects(BaseModel):
    results: list[ProjectStatus]


@tools.tool(intent="write", hints=WRITE)
async def code_index(
    call: Call,
    path: Annotated[str, Field(min_length=1, max_length=4096, description="The project's root directory.")],
    dry_run: Annotated[bool, Field(description="Only count the files and bytes it would index.")] = False,
    namespace: Namespace = None,
) -> IndexReceipt:
    """Index (or re-index: only changed files) a project directory for code_search; it is searchable as its
    chunks are embedded (code_status)."""
    path = await project_path(call, path)
    if dry_run:
        est = await call.app.code.estimate(path)
        return IndexReceipt(project=est.root.name, files=est.files, bytes=est.bytes)
    run = await call.app.code.index(call, path, wait=60)
    return IndexReceipt(
        project=run.project_id, files=run.files_indexed, chunks=run.chunks_created, unchanged=run.unchanged
    )


@tools.tool(intent="read", hints=READ)
async def code_search(
    call: Call,
    query: Annotated[str, Field(min_length=1, max_length=2048)],
    project: Project | None = None,
    language: Annotated[
        str | None, Field(max_length=32, description="python, javascript, typescript, go, rust")
    ] = None,
    limit: Annotated[int, Field(ge=1, le=50)] = 10,
    namespace: Namespace = None,
) -> CodeHits:
    """Find code by what it does: the indexed chunks closest in meaning, with file, lines and symbol."""
    gw = call.gw
    got = await call.app.reads.send(
        call,
        SearchCode(
            namespace=call.namespace,
            now=gw.now(),
            query=query,
            project_id=project,
            language=language,
            limit=limit,
        ),
    )
    hits = [
        CodeHitOut(
            id=h.id,
            project=h.project_id,
            path=h.path,
            language=h.language,
            start_line=h.start_line,
            end_line=h.end_line,
            chunk_type=h.chunk_type,
            name=h.name,
            content=h.content,
            score=round(h.score, 4),
        )
        for h in got.hits
    ]
    return CodeHits(results=hits, pending=got.pending)


@tools.tool(intent="read", hints=READ)
async def code_status(call: Call, project: Project | None = None, namespace: Namespace = None) -> Projects:
    """Indexing status (progress, ETA, error) of one project, or of every indexed project."""
    gw = call.gw
    if project is not None:
        s = await call.app.reads.status(
            call,
            CodeIndexStatus(namespace=call.namespace, now=gw.now(), project_id=project),
        )
        return Projects(results=[ProjectStatus.of(s)] if s.found else [])
    got = await call.app.reads.status(call, CodeProjects(namespace=call.namespace, now=gw.now()))
    return Projects(results=[ProjectStatus.of(p) for p in got.projects])


@tools.tool(intent="write", hints=FORGET)
async def code_forget(call: Call, project: Project, namespace: Namespace = None) -> Projects:
    """Remove a project from the code index (its history stays in the log)."""
    gw = call.gw
    s = await call.app.reads.status(
        call,
        CodeIndexStatus(namespace=call.namespace, now=gw.now(), project_id=project),
    )
    if s.found:
        await call.app.code.delete(call, project)
    return Projects(results=[ProjectStatus.of(s)] if s.found else [])
