"""bench.search (3): search latency through NATS and in-process, cold and warm, interleaved query by query
with its floors (raw Edge queries, one query embedding, a core NATS request/reply echo).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np

from bench.common import latency_summary, rnd, system_cpu_seconds
from bench.floors import echo_once, echo_responder
from bench.search.corpus import MODES, QUERY_TEMPLATES, TARGET_NS, QuerySpec, filter_name
from bench.search.timing import Timers
from schemas.queries import SearchMemories, SearchMode, SearchResult
from services.gateway.queries import QueryClient
from services.projector.search import FETCH_MIN, where_of
from services.projector.service import Projector
from services.projector.vector_index import EdgeIndex, Search
from services.projector.vector_view import BM25


def top_mentions(result: SearchResult, spec: QuerySpec) -> bool:
    if not result.hits:
        return False
    content = result.hits[0].memory.content.casefold()
    return any(e.casefold() in content for e in spec.entities)


@dataclass
class Series:
    name: str
    lat: list[float] = field(default_factory=list)
    hits: list[int] = field(default_factory=list)
    mentions: list[bool] = field(default_factory=list)
    failures: int = 0
    first_failure: str | None = None
    parts: dict[str, float] = field(default_factory=dict)  # seconds inside the query, by timed part

    def fail(self, exc: BaseException) -> None:
        self.failures += 1
        if self.first_failure is None:
            self.first_failure = f"{type(exc).__name__}: {exc}"

    def summary(self) -> dict[str, Any]:
        s: dict[str, Any] = latency_summary(self.lat, (50, 90, 95, 99))
        s["failures"] = self.failures
        if self.first_failure:
            s["first_failure"] = self.first_failure
        if self.hits:
            s["mean_hits"] = rnd(sum(self.hits) / len(self.hits), 2)
            s["with_hits"] = rnd(sum(1 for h in self.hits if h) / len(self.hits), 3)
        if self.mentions:
            s["top_hit_names_a_query_entity"] = rnd(sum(self.mentions) / len(self.mentions), 3)
        if self.parts and self.lat:
            s["mean_ms_by_part"] = {k: rnd(v * 1000 / len(self.lat), 3) for k, v in sorted(self.parts.items())}
        return s


QUERY_PARTS = ("model.embed", "edge.search", "cache.get_many", "cache.put_many", "bm25.query")


def record(
    series: Series, spec: QuerySpec, seconds: float, res: SearchResult, timers: Timers, before: dict[str, float]
) -> None:
    series.lat.append(seconds)
    series.hits.append(len(res.hits))
    series.mentions.append(top_mentions(res, spec))
    after = timers.seconds(QUERY_PARTS)
    for k in QUERY_PARTS:
        series.parts[k] = series.parts.get(k, 0.0) + after[k] - before[k]


async def ask_nats(qc: QueryClient, timers: Timers, series: Series, spec: QuerySpec, mode: SearchMode) -> None:
    q = spec.query(mode, datetime.now(UTC))
    before = timers.seconds(QUERY_PARTS)
    t = time.perf_counter()
    try:
        res = await qc.ask(q)
    except Exception as exc:  # noqa: BLE001 - counted and reported
        series.fail(exc)
        return
    record(series, spec, time.perf_counter() - t, res, timers, before)


def ask_in_process(projector: Projector, timers: Timers, series: Series, spec: QuerySpec, mode: SearchMode) -> None:
    """The function the projector's worker thread runs for a query, called directly (no NATS, no thread hop)."""
    q = spec.query(mode, datetime.now(UTC))
    before = timers.seconds(QUERY_PARTS)
    t = time.perf_counter()
    try:
        res = projector.run_query(q)
    except Exception as exc:  # noqa: BLE001
        series.fail(exc)
        return
    record(series, spec, time.perf_counter() - t, res, timers, before)


RAW = ("dense", "bm25", "dense+bm25 batched")


def ask_edge(index: EdgeIndex, bm25: BM25, vec: np.ndarray, spec: QuerySpec, out: dict[str, Series]) -> None:
    """Edge alone: the Searcher's requests (same filter, same candidate count), the vector computed beforehand."""
    now = datetime.now(UTC)
    where = where_of(spec.query("hybrid", now), now)
    fetch = max(FETCH_MIN, 10 * 5)
    dense = Search("dense", vec.tolist(), where, fetch)
    sparse = Search("bm25", bm25.query(spec.text), where, fetch)
    for name, reqs in (("dense", [dense]), ("bm25", [sparse]), ("dense+bm25 batched", [dense, sparse])):
        t = time.perf_counter()
        res = index.search(reqs)
        out[name].lat.append(time.perf_counter() - t)
        out[name].hits.append(len(res[0]))


def rotated(i: int) -> tuple[SearchMode, ...]:
    k = i % len(MODES)
    return MODES[k:] + MODES[:k]


@dataclass
class Searchers:
    """What the latency rounds ask: the projector through NATS and in-process, the Edge index and BM25 alone,
    the model alone, and NATS alone (an echo)."""

    qc: QueryClient
    nc: Any
    projector: Projector
    timers: Timers
    index: EdgeIndex
    bm25: BM25
    embedder: Any


@dataclass
class Specs:
    """Each series' own query texts: per mode through NATS and in-process, and for the raw floors."""

    nats: dict[SearchMode, list[QuerySpec]]
    inproc: dict[SearchMode, list[QuerySpec]]
    raw: list[QuerySpec]


async def cold_pass(ss: Searchers, specs: Specs, vecs: Any, out: dict[str, Any]) -> None:
    """Pass 1: cold texts through NATS and in-process, with the floors (raw Edge queries with the vectors `vecs`
    computed beforehand), query by query."""
    S_, raw = out["series"], out["raw"]
    for i in range(len(specs.raw)):
        for mode in rotated(i):
            await ask_nats(ss.qc, ss.timers, S_[f"nats_cold {mode}"], specs.nats[mode][i], mode)
            ask_in_process(ss.projector, ss.timers, S_[f"inproc_cold {mode}"], specs.inproc[mode][i], mode)
        ask_edge(ss.index, ss.bm25, vecs[i], specs.raw[i], raw)
        t = time.perf_counter()
        ss.embedder.embed([specs.raw[i].text])
        out["embed_one"].lat.append(time.perf_counter() - t)
        out["echo"].lat.append(await echo_once(ss.qc.nc, ECHO, PAYLOAD))


async def warm_pass(ss: Searchers, specs: Specs, out: dict[str, Any]) -> None:
    """Pass 2: the NATS texts again, warm (their vectors cached), through NATS and in-process."""
    S_ = out["series"]
    for i in range(len(specs.raw)):
        for mode in rotated(i):
            await ask_nats(ss.qc, ss.timers, S_[f"nats_warm {mode}"], specs.nats[mode][i], mode)
            ask_in_process(ss.projector, ss.timers, S_[f"inproc_warm {mode}"], specs.nats[mode][i], mode)


ECHO, PAYLOAD = "bench.search.echo", b"x" * 200


async def latency_rounds(ss: Searchers, specs: Specs) -> dict[str, Any]:
    """Every series interleaved query by query (modes in a rotating order), so the machine's noise falls on
    all alike. Pass 1: cold texts (NATS; in-process) with the floors; pass 2: the NATS texts again, warm."""
    tags = ("nats_cold", "nats_warm", "inproc_cold", "inproc_warm")
    out: dict[str, Any] = {
        "series": {f"{tag} {m}": Series(f"{tag} {m}") for tag in tags for m in MODES},
        "raw": {k: Series(k) for k in RAW},
        "embed_one": Series("embed one query"),
        "echo": Series("core NATS request/reply echo"),
    }
    vecs = ss.embedder.embed([s.text for s in specs.raw])
    sub = await echo_responder(ss.nc, ECHO)
    for _ in range(20):
        await ss.qc.nc.request(ECHO, PAYLOAD, timeout=5)
    cpu0, sys0, t0 = time.process_time(), system_cpu_seconds(), time.perf_counter()
    try:
        await cold_pass(ss, specs, vecs, out)
        await warm_pass(ss, specs, out)
    finally:
        await sub.unsubscribe()
    secs = time.perf_counter() - t0
    ours = time.process_time() - cpu0
    others = max(0.0, system_cpu_seconds() - sys0 - ours)  # nats-server counts as "others" here (small)
    return {**out, "seconds": secs, "others_cores": rnd(others / secs, 2)}


def selectivity(index: EdgeIndex, now: datetime) -> dict[str, Any]:
    """Share of the target namespace's live memories each filter of the query templates selects."""
    base = index.count(where_of(SearchMemories(namespace=TARGET_NS, now=now, mode="keyword", query="x"), now))
    out: dict[str, Any] = {"namespace_points": base}
    for _, f in QUERY_TEMPLATES:
        name = filter_name(f)
        if name not in out:
            n = index.count(where_of(SearchMemories(namespace=TARGET_NS, now=now, mode="keyword", query="x", **f), now))
            out[name] = rnd(n / base, 3) if base else None
    return out


def shard_info(index: EdgeIndex) -> dict[str, Any]:
    try:
        info = index.shard.info()
        return {
            "segments": info.segments_count,
            "points": info.points_count,
            "indexed_vectors": info.indexed_vectors_count,
        }
    except Exception as exc:  # noqa: BLE001 - diagnostic only
        return {"error": repr(exc)}
