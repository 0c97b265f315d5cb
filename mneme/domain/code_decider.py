"""The code index's decider: pure functions from what the index holds (a project's files and their digests, the
projects of a namespace) and what a scan found, to the events of an indexing run. The write side
(services/gateway/code_indexer.py) scans, chunks and appends around them.

A run indexes only the files whose content changed (by SHA-256) and removes the files that are gone; a file
unchanged since the last run is counted, not read again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from schemas.code_events import CodeFileRemoved, CodeIndexFinished, CodeIndexStarted


class Scanned(Protocol):
    """A file a scan found (mneme.code.SourceFile is one)."""

    @property
    def path(self) -> str: ...

    @property
    def sha256(self) -> str: ...

    @property
    def size(self) -> int: ...


F = TypeVar("F", bound=Scanned)


@dataclass(frozen=True)
class RunPlan(Generic[F]):
    """What a run records: its start, the files to chunk and index (in scan order), the removals."""

    started: CodeIndexStarted
    changed: list[F]
    removed: list[CodeFileRemoved]


def decide_project_id(root: str, name: str, projects: Mapping[str, str]) -> str:
    """A project's id: its directory's `name`, made unique in the namespace by a short hash of its path when
    another directory of that name is indexed already (`projects`: project id → root)."""
    if name in projects and projects[name] != root:
        return f"{name}-{hashlib.sha256(root.encode()).hexdigest()[:8]}"
    return name


def decide_run(project_id: str, run_id: str, root: str, indexed: Mapping[str, str], scanned: Sequence[F]) -> RunPlan[F]:
    """The run over `scanned` of a project whose index holds `indexed` (path → sha256)."""
    changed = [f for f in scanned if indexed.get(f.path) != f.sha256]
    gone = sorted(set(indexed) - {f.path for f in scanned})
    size, unchanged = sum(f.size for f in changed), len(scanned) - len(changed)
    started = CodeIndexStarted(project_id=project_id, run_id=run_id, root=root, total_files=len(changed),
                               total_bytes=size, unchanged=unchanged)  # fmt: skip
    removed = [CodeFileRemoved(project_id=project_id, run_id=run_id, path=p) for p in gone]
    return RunPlan(started, changed, removed)


def decide_finish(project_id: str, run_id: str, error: str | None) -> CodeIndexFinished:
    """How a run ends: completed, or failed with the error that stopped it."""
    status = "completed" if error is None else "failed"
    return CodeIndexFinished(project_id=project_id, run_id=run_id, status=status, error=error)
