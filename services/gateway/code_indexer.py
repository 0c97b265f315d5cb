"""Indexing a project's code: scan and chunk where the files are (the gateway's machine), record the run in
the log, and let the projector embed and serve it (mneme/code for the scanning and chunking).

A run compares the tree with what the index holds (content hashes, from a projector), records only the
changed files (`code_file_indexed`, with their chunks) and the removed ones, between `code_index_started`
and `code_index_finished`; a failure is recorded too (`failed`, with the error). It runs in the background:
`index` waits up to `wait` seconds for the run to be recorded and answers what it did so far; the status
query follows it to the end (chunking, then embedding).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from mneme.code import Chunker, DryRun, InvalidPath, SourceFile, dry_run, scan_project, validate_project_path
from mneme.domain import code_decider
from mneme.errors import MnemeError, ProjectionLag
from mneme.eventlog import EventLogInterface
from mneme.ids import envelope, new_id
from schemas import subjects as S
from schemas.code_events import (
    AnyCodeEvent,
    CodeChunk,
    CodeFileIndexed,
    CodeProjectDeleted,
)
from schemas.events import Actor, Envelope, encode_envelope
from schemas.queries import CodeFiles, CodeProjects
from services.gateway.queries import QueryClient

log = logging.getLogger("mneme.gateway.code")
MAX_FILE_BYTES = 512 * 1024


@dataclass
class Run:
    """One indexing run, as the gateway sees it while it records it."""

    project_id: str
    root: str
    total_files: int
    unchanged: int
    removed: int
    files_indexed: int = 0
    chunks_created: int = 0
    failed_files: list[str] = field(default_factory=list)
    seq: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)
    error: str | None = None


_local = threading.local()


def _chunk(f: SourceFile) -> list[CodeChunk]:
    chunker = getattr(_local, "chunker", None)
    if chunker is None:
        chunker = _local.chunker = Chunker()  # one per thread: tree-sitter parsers are not thread-safe
    return [
        CodeChunk(
            start_line=c.start_line,
            end_line=c.end_line,
            chunk_type=c.chunk_type,
            name=c.name,
            header=c.header,
            code=c.code,
        )
        for c in chunker.chunk(f.path, f.read(), f.language)
    ]


class CodeIndexer:
    def __init__(
        self,
        log_: EventLogInterface,
        queries: QueryClient,
        clock: Callable[[], datetime],
        *,
        allowed_roots: list[Path] | None = None,
        max_file_bytes: int = MAX_FILE_BYTES,
    ):
        self.log, self.queries, self.clock = log_, queries, clock
        self.allowed_roots = allowed_roots
        self.max_file_bytes = max_file_bytes
        self.runs: dict[tuple[str, str], Run] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def validate(self, path: str) -> Path:
        return validate_project_path(path, self.allowed_roots)

    async def project_id_for(self, ns: str, root: Path, min_seq: int) -> str:
        """The project's id (code_decider.decide_project_id), from the projects the namespace has."""
        got = await self.queries.ask(CodeProjects(namespace=ns, now=self.clock(), min_seq=min_seq))
        return code_decider.decide_project_id(
            str(root), root.name or "root", {p.project_id: p.root for p in got.projects}
        )

    def _envelope(self, ns: str, ev: AnyCodeEvent, actor: Actor, request_id: str, key: str) -> Envelope:
        return envelope(f"code:{ev.run_id}:{key}", ns, ev.project_id, ev, actor, request_id, self.clock())

    async def _append(self, ns: str, ev: AnyCodeEvent, actor: Actor, request_id: str, key: str) -> int:
        env = self._envelope(ns, ev, actor, request_id, key)
        seq, _ = await self.log.append(
            S.code_subject(ns, ev.project_id), encode_envelope(env), msg_id=f"code:{ev.run_id}:{key}", expected_seq=None
        )
        return seq

    async def index(self, ns: str, path: str, actor: Actor, request_id: str, min_seq: int, *, wait: float) -> Run:
        root = await asyncio.to_thread(self.validate, path)
        project_id = await self.project_id_for(ns, root, min_seq)
        before = await self.queries.ask(
            CodeFiles(namespace=ns, now=self.clock(), min_seq=min_seq, project_id=project_id)
        )
        scan = await asyncio.to_thread(
            scan_project, root, allowed_roots=self.allowed_roots, max_file_bytes=self.max_file_bytes
        )
        run_id = new_id()
        plan = code_decider.decide_run(project_id, run_id, str(root), before.files, scan.files)
        run = Run(project_id, str(root), len(plan.changed), plan.started.unchanged, len(plan.removed))
        self.runs[(ns, project_id)] = run
        run.seq = await self._append(ns, plan.started, actor, request_id, "start")
        task = asyncio.create_task(self._record(ns, run, run_id, plan, actor, request_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            async with asyncio.timeout(wait):
                await asyncio.shield(run.done.wait())
        except TimeoutError:
            pass  # still recording: the status query follows it
        return run

    async def _record(
        self,
        ns: str,
        run: Run,
        run_id: str,
        plan: code_decider.RunPlan[SourceFile],
        actor: Actor,
        request_id: str,
    ) -> None:
        pid = run.project_id
        error = None
        try:
            for f in plan.changed:
                try:
                    chunks = await asyncio.to_thread(_chunk, f)
                    ev = CodeFileIndexed(
                        project_id=pid,
                        run_id=run_id,
                        path=f.path,
                        language=f.language,
                        sha256=f.sha256,
                        size=f.size,
                        chunks=tuple(chunks),
                    )
                    run.seq = await self._append(ns, ev, actor, request_id, f"file:{f.path}")
                except MnemeError as exc:
                    if exc.retryable and exc.code != "FILE_CHANGED":
                        raise
                    run.failed_files.append(f.path)  # changed or gone while indexing: the next run takes it
                    continue
                run.files_indexed += 1
                run.chunks_created += len(chunks)
            for rm in plan.removed:
                run.seq = await self._append(ns, rm, actor, request_id, f"rm:{rm.path}")
        except Exception as exc:
            log.warning("indexing %s failed", run.root, exc_info=True)
            error = f"{type(exc).__name__}: {exc}"
        try:
            fin = code_decider.decide_finish(pid, run_id, error)
            run.seq = await self._append(ns, fin, actor, request_id, "finish")
        finally:
            run.error = error
            run.done.set()

    async def delete(self, ns: str, project_id: str, actor: Actor, request_id: str) -> int:
        run_id = new_id()
        return await self._append(
            ns, CodeProjectDeleted(project_id=project_id, run_id=run_id), actor, request_id, "delete"
        )

    async def estimate(self, path: str) -> DryRun:
        """What indexing `path` would read: files and bytes (a dry run; nothing is recorded)."""
        root = await asyncio.to_thread(self.validate, path)
        return await asyncio.to_thread(
            dry_run, root, allowed_roots=self.allowed_roots, max_file_bytes=self.max_file_bytes
        )

    async def drain(self, timeout: float) -> None:
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)


async def status_query(queries: QueryClient, query: Any) -> Any:
    """A code-index status or project list: read-your-writes when the projector keeps up; while it folds a large
    run (a status is asked often, and must not fail then), the projector's state as it stands."""
    try:
        return await queries.ask(query)
    except ProjectionLag:
        return await queries.ask(msgspec.structs.replace(query, min_seq=0))


__all__ = ["CodeIndexer", "InvalidPath", "Run", "status_query"]
