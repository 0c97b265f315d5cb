"""The code index's and a namespace reset's pure deciders (mneme/domain/code_decider.py, reset_decider.py)."""

from __future__ import annotations

from dataclasses import dataclass

from mneme.domain import code_decider as cd
from mneme.domain.reset_decider import ResetTally, decide_reset, keeps
from schemas.code_events import CodeFileRemoved


@dataclass(frozen=True)
class F:
    path: str
    sha256: str
    size: int


def test_a_run_indexes_only_changed_and_new_files_and_removes_the_gone_ones() -> None:
    indexed = {"a.py": "h1", "b.py": "h2", "gone.py": "h3", "also_gone.py": "h4"}
    scanned = [F("a.py", "h1", 10), F("b.py", "CHANGED", 20), F("new.py", "h5", 30)]
    plan = cd.decide_run("p", "run-1", "/src/p", indexed, scanned)
    assert [f.path for f in plan.changed] == ["b.py", "new.py"]  # scan order
    assert plan.removed == [CodeFileRemoved(project_id="p", run_id="run-1", path=p) for p in ("also_gone.py",
                                                                                              "gone.py")]  # fmt: skip
    s = plan.started
    assert (s.total_files, s.total_bytes, s.unchanged, s.root) == (2, 50, 1, "/src/p")


def test_an_unchanged_project_runs_with_nothing_to_do() -> None:
    plan = cd.decide_run("p", "r", "/x", {"a.py": "h"}, [F("a.py", "h", 5)])
    assert (plan.changed, plan.removed, plan.started.unchanged, plan.started.total_files) == ([], [], 1, 0)


def test_a_project_id_is_its_directory_name_unless_another_directory_has_it() -> None:
    assert cd.decide_project_id("/a/app", "app", {}) == "app"
    assert cd.decide_project_id("/a/app", "app", {"app": "/a/app"}) == "app"  # itself, indexed again
    other = cd.decide_project_id("/b/app", "app", {"app": "/a/app"})
    assert other.startswith("app-") and len(other) == len("app-") + 8
    assert other == cd.decide_project_id("/b/app", "app", {"app": "/a/app"})  # the same every time


def test_a_run_finishes_completed_or_failed_with_its_error() -> None:
    assert cd.decide_finish("p", "r", None).status == "completed"
    failed = cd.decide_finish("p", "r", "OSError: disk")
    assert (failed.status, failed.error) == ("failed", "OSError: disk")


def test_a_reset_keeps_what_the_caller_may_not_delete_and_stops_on_anything_else() -> None:
    assert keeps("MEMORY_LOCKED") and keeps("WRITE_NOT_ALLOWED") and keeps("MEMORY_NOT_FOUND")
    assert not keeps("UNAVAILABLE") and not keeps("CONCURRENCY_CONFLICT")
    ev = decide_reset("tidy", 41, ResetTally(memories=3, kept=1, entities=2, relations=1, code_chunks=9))
    assert (ev.reason, ev.before_seq, ev.memories, ev.kept, ev.entities, ev.relations, ev.code_chunks) == (
        "tidy", 41, 3, 1, 2, 1, 9,
    )  # fmt: skip
