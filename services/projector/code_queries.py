"""The code index's queries, answered from the CodeView's DuckDB file."""

from __future__ import annotations

from typing import Any

import numpy as np

from mneme.embed_cache import text_key
from mneme.errors import InvalidInput
from schemas.queries import (
    CodeFiles,
    CodeFilesResult,
    CodeHit,
    CodeIndexStatus,
    CodeProjects,
    CodeProjectsResult,
    CodeSearchResult,
    CodeStatusResult,
    SearchCode,
)
from services.projector.code_view import CodeView

_PROJECT = (
    "SELECT p.project_id, p.root, p.status, p.error, p.total_files, p.files_done, p.started_at, p.finished_at, "
    "(SELECT count(*) FROM code_chunks c WHERE c.namespace = p.namespace AND c.project_id = p.project_id), "
    "(SELECT count(*) FROM code_chunks c WHERE c.namespace = p.namespace AND c.project_id = p.project_id "
    "AND c.embedding IS NOT NULL) FROM code_projects p WHERE p.namespace = ?"
)


def _status(code: CodeView, r: tuple[Any, ...]) -> CodeStatusResult:
    project, root, status, error, total, done, started, finished, chunks, embedded = r
    pending = chunks - embedded
    # a run's files are chunked and recorded first, then embedded: progress counts both halves
    files_part = done / total if total else 1.0
    embed_part = embedded / chunks if chunks else 1.0
    if status == "failed":
        shown = "failed"
    elif status == "completed" and pending == 0:
        shown = "completed"
    else:
        shown = "indexing" if (done or embedded or status == "completed") else "pending"
    percent = 100.0 if shown == "completed" else round(100.0 * (0.5 * files_part + 0.5 * embed_part), 1)
    eta = None
    if shown == "indexing" and code.rate > 0:
        eta = round(pending / code.rate, 1)
    return CodeStatusResult(
        project_id=project, found=True, status=shown, root=root, total_files=total, indexed_files=done,
        total_chunks=chunks, embedded_chunks=embedded, progress_percent=percent, eta_seconds=eta,
        started_at=started, completed_at=finished if shown in ("completed", "failed") else None, error=error,
    )  # fmt: skip


def status(code: CodeView, q: CodeIndexStatus) -> CodeStatusResult:
    rows = code.reader().execute(_PROJECT + " AND p.project_id = ?", [q.namespace, q.project_id]).fetchall()
    return _status(code, rows[0]) if rows else CodeStatusResult(project_id=q.project_id, found=False)


def projects(code: CodeView, q: CodeProjects) -> CodeProjectsResult:
    rows = code.reader().execute(_PROJECT + " ORDER BY p.project_id", [q.namespace]).fetchall()
    return CodeProjectsResult(projects=[_status(code, r) for r in rows])


def files(code: CodeView, q: CodeFiles) -> CodeFilesResult:
    cur = code.reader()
    root = cur.execute(
        "SELECT root FROM code_projects WHERE namespace = ? AND project_id = ?", [q.namespace, q.project_id]
    ).fetchall()
    rows = cur.execute(
        "SELECT path, sha256 FROM code_files WHERE namespace = ? AND project_id = ?", [q.namespace, q.project_id]
    ).fetchall()
    return CodeFilesResult(root=root[0][0] if root else None, files=dict(rows))


def search(code: CodeView, q: SearchCode) -> CodeSearchResult:
    text = q.query.strip()
    if not text:
        raise InvalidInput("query", "must not be empty")
    embedder = code.model.get()  # EMBEDDING_MODEL_LOADING until the model is ready
    key = text_key(text)
    got = code.cache.get_many(embedder.model_id, [key])
    vec = got[key] if key in got else embedder.embed([text])[0]
    m = code.matrix(q.namespace)
    mask = np.ones(len(m.ids), dtype=bool)
    if q.project_id is not None:
        mask &= m.projects == q.project_id
    if q.language is not None:
        mask &= m.languages == q.language.lower()
    picked = np.flatnonzero(mask)
    rows: list[tuple[Any, ...]] = []
    if len(picked):
        qv = np.array(vec, dtype=np.float32)  # (a copy: a cached vector is read-only)
        qv /= max(float(np.linalg.norm(qv)), 1e-12)
        scores = (m.vectors @ qv)[picked]  # (every row, then the picked: copying the rows costs 4x the product)
        k = min(q.limit, len(picked))
        top = np.argpartition(-scores, k - 1)[:k]
        order = sorted(top.tolist(), key=lambda i: (-float(scores[i]), m.ids[picked[i]]))
        best = {m.ids[picked[i]]: float(scores[i]) for i in order}
        found = {
            r[0]: r
            for r in code.reader()
            .execute(
                "SELECT id, project_id, path, language, start_line, end_line, chunk_type, name, code FROM code_chunks "
                "WHERE id IN (SELECT unnest(?))",
                [list(best)],
            )
            .fetchall()
        }
        rows = [(*found[i], s) for i, s in best.items() if i in found]
    hits = [CodeHit(id=r[0], project_id=r[1], path=r[2], language=r[3], start_line=r[4], end_line=r[5],
                    chunk_type=r[6], name=r[7], content=r[8], score=round(float(r[9]), 6)) for r in rows]  # fmt: skip
    return CodeSearchResult(hits=hits, pending=code.pending(q.namespace), model=embedder.model_id)


CODE_HANDLERS: dict[type, Any] = {SearchCode: search, CodeIndexStatus: status, CodeProjects: projects, CodeFiles: files}
