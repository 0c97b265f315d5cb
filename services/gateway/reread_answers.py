"""A recorded read asked again: which queries can be, how, and how the new answer is set beside the recorded one.

Each kind of read keeps what its answer is checked by (services/gateway/access_log.py):

- memories (a get, list or search) and graph entities (search_nodes, open_nodes, read_graph, graph_get): the ids
  in order, with their versions (and a search's scores). Asked again `as_of` the recorded position.
- a memory's history (memory_history, memory_diff): the versions it listed. Versions never change and a later
  one is only ever appended, so the history is asked again as it is now, and the versions the log recorded
  after the read's position are left out: what remains is the history as it stood then.
- stats (memory_stats): a digest of the figures the log fixes at a position, asked again `as_of` it.

`match` is true only when that recorded part is the same; any difference is listed.
"""

from __future__ import annotations

from typing import Any

import msgspec
from pydantic import BaseModel, Field

from schemas.access import ReadRecorded
from schemas.queries import (
    QUERY_TYPES,
    AsOf,
    GetMemory,
    GetResult,
    GraphResult,
    HistoryResult,
    ListResult,
    MemoryHistory,
    MemoryStats,
    SearchResult,
    StatsResult,
)
from services.gateway.access_log import READ_QUERIES, stats_digest

RERUNNABLE: dict[str, Any] = {q.OPERATION: q for q in READ_QUERIES}


class RerunResult(BaseModel):
    id: str
    rank: int | None = Field(None, description="In the re-run (absent: not in it).")
    recorded_rank: int | None = None
    version: int | None = None
    recorded_version: int | None = None
    score: float | None = None
    recorded_score: float | None = None
    semantic_score: float | None = None
    keyword_score: float | None = None
    graph_score: float | None = None
    content: str | None = Field(None, description="As it was then (a graph entity: its name).")


def not_rerunnable(rec: ReadRecorded) -> str | None:
    """Why this access record's read cannot be asked again (None: it can)."""
    if rec.query is None or rec.seq is None:
        return (
            f"a {rec.operation} read keeps no query to ask again: its answer is not one query of the read models "
            "(a status, an answer built from several queries), or it was recorded before reads kept theirs"
        )
    op = rec.query.operation
    if RERUNNABLE.get(op) is None or QUERY_TYPES.get(op) is not RERUNNABLE[op]:
        return f"a {op} query is not asked again (only reads of memories, graph entities, a history or stats)"
    if RERUNNABLE[op] is MemoryStats and rec.digest is None:
        return "this stats read kept no digest of its figures (recorded before stats reads kept one)"
    return None


def decoded(rec: ReadRecorded) -> Any:
    """The recorded query, decoded (msgspec.ValidationError: it no longer decodes)."""
    assert rec.query is not None
    return msgspec.convert(rec.query.arguments, RERUNNABLE[rec.query.operation])


def again(q: Any, seq: int) -> Any:
    """The query to ask: as of the recorded position `seq`, with expiry judged at the time the read judged it."""
    if isinstance(q, GetMemory) and q.version is not None:
        return msgspec.structs.replace(q, min_seq=0)  # a version never changes: asked as it was
    if isinstance(q, MemoryHistory):  # no as_of: versions never change; those recorded after `seq` are left out
        return msgspec.structs.replace(q, min_seq=seq)
    if q.as_of is not None:
        return msgspec.structs.replace(q, min_seq=0)  # it asked for a past moment: the same one again
    return msgspec.structs.replace(q, min_seq=0, as_of=AsOf(seq=seq, time=q.now))


def answer(result: Any) -> list[RerunResult]:
    """The memories (or graph entities) a re-run answered, in order."""
    if isinstance(result, GetResult):
        rows = [result.item.memory] if result.item is not None else []
        return [RerunResult(id=m.id, rank=1, version=m.version, content=m.content) for m in rows]
    if isinstance(result, ListResult):
        return [
            RerunResult(id=r.memory.id, rank=n, version=r.memory.version, content=r.memory.content)
            for n, r in enumerate(result.items, 1)
        ]
    if isinstance(result, GraphResult):
        return [
            RerunResult(id=e.id, rank=n, version=e.version, content=e.name) for n, e in enumerate(result.entities, 1)
        ]
    assert isinstance(result, SearchResult)
    return [
        RerunResult(
            id=h.memory.id,
            rank=n,
            version=h.memory.version,
            score=h.score,
            semantic_score=h.semantic,
            keyword_score=h.keyword,
            graph_score=h.graph,
            content=h.memory.content,
        )
        for n, h in enumerate(result.hits, 1)
    ]


def compare(
    ids: list[str], versions: tuple[int, ...], scores: tuple[float, ...], rerun: list[RerunResult]
) -> tuple[list[RerunResult], list[str], float | None]:
    """The re-run's results with the recorded rank, version and score of each beside its own (then the recorded
    ones it lacks), the differences that break the match, and the largest change of a score."""
    recorded = {
        i: (
            n,
            versions[n - 1] if len(versions) == len(ids) else None,
            scores[n - 1] if len(scores) == len(ids) else None,
        )
        for n, i in enumerate(ids, 1)
    }
    differences: list[str] = []
    drift: float | None = None
    out = []
    for r in rerun:
        if r.id in recorded:
            rank, version, score = recorded[r.id]
            r.recorded_rank, r.recorded_version = rank, version or None
            if score is not None:
                r.recorded_score = score
                if r.score is not None:
                    drift = max(drift or 0.0, abs(r.score - score))
            if r.recorded_version is not None and r.recorded_version != r.version:
                differences.append(f"{r.id}: version {r.recorded_version} recorded, {r.version} in the re-run")
        else:
            differences.append(f"{r.id}: in the re-run (rank {r.rank}, version {r.version}), not recorded")
        out.append(r)
    again_ids = {r.id for r in rerun}
    for i, (rank, version, score) in recorded.items():
        if i not in again_ids:
            out.append(RerunResult(id=i, recorded_rank=rank, recorded_version=version or None, recorded_score=score))
            differences.append(f"{i}: recorded (rank {rank}, version {version or '?'}), not in the re-run")
    common = [r.id for r in rerun if r.id in recorded]
    if common != [i for i in ids if i in again_ids]:
        differences.append("another order: recorded " + ", ".join(ids) + "; re-run " + ", ".join(r.id for r in rerun))
    return out, differences, (round(drift, 6) if drift is not None else None)


def compare_history(
    memory_id: str, recorded: tuple[int, ...], result: HistoryResult, upto: int
) -> tuple[list[RerunResult], list[str]]:
    """A history asked again (the versions recorded up to `upto`) beside the versions the read listed."""
    listed = [v for v in result.versions if v.seq <= upto]
    rank_of = {v: n for n, v in enumerate(recorded, 1)}
    out = []
    differences = []
    for n, v in enumerate(listed, 1):
        r = RerunResult(id=memory_id, rank=n, version=v.version, content=v.state.content)
        if v.version in rank_of:
            r.recorded_rank, r.recorded_version = rank_of[v.version], v.version
        else:
            differences.append(f"{memory_id}: version {v.version} in the re-run (rank {n}), not recorded")
        out.append(r)
    again_versions = [v.version for v in listed]
    for version, n in rank_of.items():
        if version not in again_versions:
            out.append(RerunResult(id=memory_id, recorded_rank=n, recorded_version=version))
            differences.append(f"{memory_id}: version {version} recorded (rank {n}), not in the re-run")
    common = [v for v in again_versions if v in rank_of]
    if common != [v for v in recorded if v in again_versions]:
        differences.append(
            f"another order of versions: recorded {', '.join(map(str, recorded))}; "
            f"re-run {', '.join(map(str, again_versions))}"
        )
    return out, differences


def compare_stats(digest: str | None, result: StatsResult) -> tuple[dict[str, Any], list[str]]:
    """Stats asked again: their figures, and whether they are the recorded ones (by digest)."""
    figures = msgspec.to_builtins(result)
    figures.pop("as_of", None)
    if stats_digest(result) == digest:
        return figures, []
    return figures, ["the figures differ from the recorded ones (their digest)"]
