"""bench.replay — rebuilding the read models from the log, beside the raw receive-and-decode floor,
and as_of reads at that size.

    python -m bench.replay            # full run: 1,000,000 events over 200,000 memories
    python -m bench.replay --quick    # 100,000 events over 20,000 memories
    options: --keep (keep the temporary directory), --no-profile (no py-spy), --no-vectors-only,
             --cache PATH (the embedding cache; default ~/.cache/mneme-bench/embeddings.sqlite),
             --fresh-cache (a cache in the temporary directory, filled in this run), and for experiments
             --events N --memories N --pool N --queries N

One embedded nats-server on 127.0.0.1 (streams from ensure_streams), one temporary directory.

(0) the log: `mneme.synthetic.history(events, n_memories=memories, namespaces=4)` (its mix: creates,
    then updates with new content and importance, moves, archives/restores, deletes; versions and
    paths consistent), published pipelined. Every content (creates and content updates) is replaced
    by a sentence drawn from a pool of `pool` distinct sentences (50,000 full, 10,000 quick), so the
    embedding cache can hold every text: history()'s own texts are 12 random words, all distinct,
    and embedding ~800,000 of them at ~700/s would take 20 minutes. The pool is deterministic; its
    vectors are put in the embedding cache before anything is timed (texts already there are
    skipped: the default cache under ~/.cache/mneme-bench/ persists across runs; the run reports
    how many it embedded and how long that took).
(1) floor: an ordered push consumer with a callback (what LogFollower uses) that receives every
    message of MNEME_EVENTS from the start, reads its stream sequence and decodes the envelope
    (schemas.events.decode_envelope). Three times, interleaved with the replays; the median.
(2) replays, the embedding cache warm (none may embed a text: checked):
    full:         mneme.replay.replay(core, ps, use_snapshots=False, swap=False, output=DIR): the
                  DuckDB view and the Qdrant Edge index, each with its own follower, as `mneme
                  replay --output` runs them. Its `seconds` (start -> both caught up) gives events/s.
    DuckDB only:  the same with ProjectorSettings(vectors="off").
    vectors only: a LogFollower into a VectorView (open_vectors: Edge + BM25 + cache), the same
                  batch size and linger as the replay's, timed start -> committed the last event;
                  its parts (stage, BM25, cache, Edge upsert / set_payload / retrieve, checkpoint)
                  are timed through wrappers on the instance.
    Ratio = events/s / floor events/s; target: the full replay >= 0.50. py-spy (if installed in the
    venv) samples this process during the DuckDB-only and vectors-only replays (not during the full
    one) and the run prints where the CPU went. Both DuckDB files are verified by replay() itself
    (verify_generation), must have equal canonical digests, and must hold a version for every one of
    the sequences 1..N (every event of this log makes one: a missing one was never folded). A replay
    that applies nothing for 90 s is stopped and reported as stalled. The NATS trouble of each phase
    is counted: "Slow Consumer Detected" in nats-server.log, and what nats-py reports through
    runtime.connect's error callback (messages dropped as a slow consumer, disconnects, timeouts).
(3) as_of latency at that size: a Projector serving queries on the full replay's generation (if that
    one is not whole: the DuckDB-only rows with the vectors-only index, said so in the output; its own
    embedding cache, empty: every query text is embedded cold). Through QueryClient.ask (NATS
    request/reply): GetMemory(memory_id=random memory, as_of=AsOf(seq=random sequence while it
    existed)), and SearchMemories(mode keyword/semantic/hybrid, namespace=random of 4, limit 10,
    as_of=AsOf(seq=random past sequence)), `queries` each (300 full, 100 quick), interleaved in a
    rotating order after a warm-up. Target p95 < 50 ms each. Beside them: the same without as_of
    (a third as many) and a core NATS request/reply echo.

Progress goes to stderr; stdout is the tables, then one JSON object with all figures as its LAST line.
A failed verification, a failed query or an embedding during a replay is printed and the process
exits 1 after the JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import linecache
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET
from nats.aio.client import Client as NATS
from nats.js.api import ConsumerConfig, DeliverPolicy

from bench.common import (
    CpuMeter,
    emit_json,
    log,
    machine_info,
    median,
    percentile,
    print_table,
    rnd,
    spawn,
    stop_process,
    system_cpu_seconds,
    verdict,
)
from mneme.compose import close_nats, connect, open_vectors, open_view
from mneme.embed_cache import EmbeddingCache, text_key
from mneme.embedded_nats import EmbeddedNats
from mneme.embedding import MODELS, OnnxEmbedder
from mneme.eventlog import ensure_streams
from mneme.follow import LogFollower
from mneme.replay import ReplayFailed, replay
from mneme.settings import CoreSettings, ProjectorSettings
from mneme.synthetic import WORDS, history, publish
from schemas import subjects as S
from schemas.events import Envelope, MemoryCreated, MemoryDeleted, MemoryUpdated, decode_envelope, event_name
from schemas.queries import AsOf, GetMemory, SearchMemories
from services.gateway.queries import QueryClient
from services.projector.service import Projector, close_generation

TARGET_RATIO = 0.50
TARGET_P95_MS = 50.0
MODES = ("keyword", "semantic", "hybrid")
DEFAULT_CACHE = Path.home() / ".cache" / "mneme-bench" / "embeddings.sqlite"
PYSPY = Path(sys.executable).parent / "py-spy"
PROFILE_HZ = 50


@dataclass(frozen=True)
class Config:
    events: int
    memories: int
    namespaces: int
    pool: int  # distinct content texts
    queries: int  # per query kind
    floor_rounds: int

    @staticmethod
    def full() -> Config:
        return Config(events=1_000_000, memories=200_000, namespaces=4, pool=50_000, queries=300, floor_rounds=3)

    @staticmethod
    def quick() -> Config:
        return Config(events=100_000, memories=20_000, namespaces=4, pool=10_000, queries=100, floor_rounds=3)


# -- the log ----------------------------------------------------------------------------------------------

_MORE_WORDS = (
    "prefers likes avoids uses wants asked decided agreed moved switched started stopped joined left owns manages "
    "reviewed wrote shipped fixed broke tested planned cancelled postponed approved rejected booked paid sent "
    "kitchen garden office laptop phone bicycle car train flight hotel restaurant library museum park beach "
    "monday tuesday wednesday thursday saturday sunday april may june july august september october november "
    "python rust typescript golang kubernetes terraform grafana kafka redis mongodb sqlite spark airflow "
    "sister brother mother father manager colleague neighbour friend doctor dentist teacher landlord client "
    "chocolate pasta sushi salad soup bread cheese wine beer juice water pizza curry noodles rice"
)
VOCAB = tuple(dict.fromkeys([*WORDS, *_MORE_WORDS.split()]))  # 154 words


def pool_texts(n: int, seed: int = 1234) -> list[str]:
    """`n` distinct sentences of 8-24 words (the memory contents), the same for a given (n, seed)."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        words = rng.choices(VOCAB, k=rng.randint(8, 24))
        out[" ".join(words).capitalize() + "."] = None
    return list(out)


@dataclass
class LogFacts:
    """What the published log holds: counts, and per memory (namespace, first seq, last seq it existed)."""

    by_type: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    content_changes: int = 0
    ns: dict[str, str] = field(default_factory=dict)
    created: dict[str, int] = field(default_factory=dict)
    ended: dict[str, int] = field(default_factory=dict)  # seq of the permanent delete
    texts_used: set[int] = field(default_factory=set)

    def note(self, seq: int, env: Envelope, text_ix: int | None) -> None:
        ev = env.event
        self.by_type[event_name(ev)] += 1
        if text_ix is not None:
            self.texts_used.add(text_ix)
            self.content_changes += not isinstance(ev, MemoryCreated)
        if isinstance(ev, MemoryCreated):
            self.ns[ev.memory_id] = env.namespace
            self.created[ev.memory_id] = seq
        elif isinstance(ev, MemoryDeleted):
            self.ended[ev.memory_id] = seq


def log_events(cfg: Config, pool: list[str], facts: LogFacts) -> Iterator[tuple[str, Envelope]]:
    """history()'s events in its order, each content replaced by a pool sentence; facts noted as they go
    (sequence = position + 1: the stream is fresh and publish() keeps the order)."""
    rng = random.Random(99)
    pairs = history(cfg.events, n_memories=cfg.memories, namespaces=cfg.namespaces, seed=11)
    for i, (subject, env) in enumerate(pairs):
        ev = env.event
        ix = None
        if isinstance(ev, MemoryCreated) or (isinstance(ev, MemoryUpdated) and ev.content is not UNSET):
            ix = rng.randrange(len(pool))
            env = msgspec.structs.replace(env, event=msgspec.structs.replace(ev, content=pool[ix]))
        facts.note(i + 1, env, ix)
        yield subject, env


def prefill_cache(path: Path, model_name: str, pool: list[str], threads: int | None) -> dict[str, Any]:
    """Put every pool sentence's vector in the cache (the texts already there are skipped)."""
    t0 = time.perf_counter()
    cache = EmbeddingCache(path)
    model_id = MODELS[model_name].id
    try:
        keys = [text_key(t) for t in pool]
        have: set[bytes] = set()
        for i in range(0, len(keys), 5000):
            have.update(cache.get_many(model_id, keys[i : i + 5000]))
        todo = [(k, t) for k, t in zip(keys, pool, strict=True) if k not in have]
        embed_s = 0.0
        if todo:
            emb = OnnxEmbedder(model_name, threads=threads)
            t1 = time.perf_counter()
            for i in range(0, len(todo), 1024):
                chunk = todo[i : i + 1024]
                vecs = emb.embed([t for _, t in chunk])
                cache.put_many(model_id, {k: v for (k, _), v in zip(chunk, vecs, strict=True)})
                if (i // 1024) % 10 == 9:
                    done = i + len(chunk)
                    log(
                        f"(0) embedded {done:,} of {len(todo):,} pool texts "
                        f"({done / (time.perf_counter() - t1):,.0f}/s)"
                    )
            embed_s = time.perf_counter() - t1
    finally:
        cache.close()
    return {
        "cache": str(path),
        "model": model_id,
        "pool_texts": len(pool),
        "already_cached": len(have),
        "embedded_now": len(todo),
        "embed_seconds": rnd(embed_s, 2),
        "embed_per_s": rnd(len(todo) / embed_s, 1) if embed_s else None,
        "seconds": rnd(time.perf_counter() - t0, 2),
    }


# -- the floor ----------------------------------------------------------------------------------------------


async def floor_once(js: Any, target: int) -> float:
    """An ordered push consumer with a callback: receive, read the sequence, decode. Seconds to the last."""
    done = asyncio.Event()
    count = 0

    async def cb(m: Any) -> None:
        nonlocal count
        seq = m.metadata.sequence.stream
        decode_envelope(m.data)
        count += 1
        if seq >= target:
            done.set()

    t0 = time.perf_counter()
    sub = await js.subscribe(
        S.EVENTS_SUBJECTS,
        stream=S.EVENTS_STREAM,
        cb=cb,
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
        idle_heartbeat=1.0,
    )
    try:
        await asyncio.wait_for(done.wait(), 900)
        secs = time.perf_counter() - t0
    finally:
        try:
            await sub.unsubscribe()
        except Exception:  # noqa: BLE001 - the connection may be gone
            pass
    if count != target:
        raise RuntimeError(f"the floor consumer received {count} messages, not {target}")
    return secs


# -- CPU and the profiler -------------------------------------------------------------------------------


class Meter:
    """CPU seconds of this process, nats-server and the profiler over a block, and what others used."""

    def __init__(self, pids: dict[str, int]):
        self.cpu = CpuMeter(pids)
        self.sys0 = 0.0
        self.t0 = 0.0

    def start(self) -> None:
        self.cpu.start()
        self.sys0 = system_cpu_seconds()
        self.t0 = time.perf_counter()

    def stop(self) -> dict[str, Any]:
        used = self.cpu.stop()
        wall = time.perf_counter() - self.t0
        used["others"] = max(0.0, system_cpu_seconds() - self.sys0 - sum(used.values()))
        return {k: rnd(v / wall, 3) for k, v in used.items()}  # share of one core


class Profiler:
    """py-spy sampling this process (all threads, on-CPU samples only, --nonblocking) into a raw file."""

    def __init__(self, path: Path, enabled: bool):
        self.path = path
        self.enabled = enabled and PYSPY.exists()
        self.proc: subprocess.Popen[bytes] | None = None
        self.note = None if self.enabled else ("disabled" if not enabled else f"{PYSPY} not installed")

    async def start(self) -> int | None:
        if not self.enabled:
            return None
        self.proc = spawn([str(PYSPY), "record", "--pid", str(os.getpid()), "--rate", str(PROFILE_HZ),
                           "--nonblocking", "--threads", "--format", "raw", "--output", str(self.path)],
                          log_path=self.path.with_suffix(".log"))  # fmt: skip
        await asyncio.sleep(1.0)  # it attaches
        if self.proc.poll() is not None:
            self.note = f"py-spy exited: {self.path.with_suffix('.log').read_text(errors='replace')[-300:]}"
            self.enabled = False
            return None
        return self.proc.pid

    async def stop(self) -> dict[str, Any] | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            try:
                await asyncio.to_thread(self.proc.wait, 60)
            except subprocess.TimeoutExpired:
                stop_process(self.proc)
        self.proc = None
        return summarize_profile(self.path) if self.path.exists() else None


# (category, file substring, function names or None = any): the leaf-most frame that matches decides
RULES: list[tuple[str, str, tuple[str, ...] | None]] = [
    ("Edge upsert (points built + shard.update)", "vector_index.py", ("upsert", "_point")),
    ("Edge set_payload (seq_to of replaced versions)", "vector_index.py", ("set_payload",)),
    ("Edge retrieve (previous state)", "vector_index.py", ("retrieve",)),
    ("Edge flush + checkpoint file", "vector_index.py", ("save_checkpoint", "close", "load_checkpoint")),
    ("point ids (uuid5)", "vector_index.py", ("point_id",)),
    ("BM25 sparse encoding", "vector_view.py", ("document",)),
    ("payload dict + state JSON encode", "vector_view.py", ("payload_of", "index_text", "epoch", "normalize_subject")),
    ("state JSON decode (read back from a point)", "vector_view.py", ("state_of",)),
    ("embedding cache lookups + vectors to lists", "embed_cache.py", None),
    ("embedding cache lookups + vectors to lists", "vector_view.py", ("_vectors",)),
    ("vector stage: the rest", "vector_view.py", ("stage", "_missing", "stage_reads_disk")),
    ("vector commit: the rest", "vector_view.py", ("commit", "fill_pending")),
    ("fold (evolve)", "state.py", ("evolve",)),
    ("DuckDB load of previous rows", "memories_view.py", ("_load", "row_state")),
    ("row tuples (state_row)", "memories_view.py", ("state_row",)),
    ("categories_of", "validation.py", ("categories_of",)),
    ("DuckDB stage: the rest", "memories_view.py", ("stage", "_to_load", "stage_reads_disk")),
    ("DuckDB commit", "memories_view.py", ("commit",)),
    ("decode envelope (msgspec)", "events.py", ("decode_envelope",)),
    ("message metadata (nats-py)", "msg.py", None),
    ("follower loop (batching, Positioned, queue)", "follow.py", None),
    ("receive (nats-py client, asyncio)", "nats/", None),
    ("asyncio event loop", "asyncio/", None),
    ("worker thread bookkeeping", "threading.py", None),
    ("worker thread bookkeeping", "concurrent/futures", None),
]


def _classify(frames: list[str]) -> tuple[str, str]:
    """(category, the deciding frame as 'func file:line') for one stack, leaf last."""
    for fr in reversed(frames):
        full, _, where = fr.partition(" (")
        where = where.rstrip(")")
        name = full.rsplit(".", 1)[-1]  # py-spy names methods Class.method
        for cat, fsub, funcs in RULES:
            if fsub in where and (funcs is None or name in funcs):
                return cat, f"{full} {where}"
    leaf = frames[-1] if frames else "?"
    return "other", leaf


def summarize_profile(path: Path, top: int = 14) -> dict[str, Any]:
    """Shares of on-CPU samples per category and the top deciding frames (py-spy raw: 'a;b;c N' lines)."""
    cats: dict[str, int] = defaultdict(int)
    frames: dict[str, int] = defaultdict(int)
    threads: dict[str, int] = defaultdict(int)
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        parts = stack.split(";")
        thread = parts[0] if parts and parts[0].startswith("thread") else "?"
        parts = parts[1:] if thread != "?" else parts
        k = int(n)
        total += k
        cat, frame = _classify(parts)
        cats[cat] += k
        frames[frame] += k
        kind = "event loop" if any("run_forever" in p for p in parts) else "worker threads"
        threads[kind] += k
    if not total:
        return {"samples": 0}

    def label(frame: str) -> str:  # a DuckDB commit line says which statement it is
        name, _, where = frame.partition(" ")
        file, _, ln = where.rpartition(":")
        if name.endswith("commit") and file.endswith("memories_view.py") and ln.isdigit():
            src = _commit_line(file, int(ln))
            return f"{frame}  [{src}]" if src else frame
        return frame

    return {
        "samples": total,
        "hz": PROFILE_HZ,
        "cpu_seconds_sampled": rnd(total / PROFILE_HZ, 1),
        "by_thread": {k: rnd(v / total, 3) for k, v in sorted(threads.items(), key=lambda x: -x[1])},
        "categories": {k: rnd(v / total, 3) for k, v in sorted(cats.items(), key=lambda x: -x[1])},
        "top_frames": [[label(f), rnd(v / total, 3)] for f, v in sorted(frames.items(), key=lambda x: -x[1])[:top]],
    }


def _commit_line(file: str, ln: int) -> str:
    """Which statement of MemoriesView.commit a sampled line belongs to."""
    path = file if os.path.isabs(file) else str(Path(__file__).resolve().parent.parent / file)
    here = linecache.getline(path, ln)
    if "append_rows(live)" in here:
        return "append memories rows"
    if "append_rows(rows)" in here:
        return "append memory_versions rows"
    if "state_row" in here:
        return "state_row (Python)"
    if "closed.pop" in here:
        return "version rows + seq_to (Python)"
    for k in range(ln, max(ln - 8, 0), -1):
        text = linecache.getline(path, k)
        if "appender(" in text:
            return f"appender {text.split('appender(')[1].split(')')[0]} {'flush' if 'flush' in here else ''}".strip()
        if "w.execute(" in text:
            sql = text.split("w.execute(", 1)[1].strip() or linecache.getline(path, k + 1).strip()
            return (sql.split('"')[1] if '"' in sql else sql)[:45]
    return here.strip()[:45]


class Noise(logging.Handler):
    """What the NATS connections went through: runtime.connect's error callback logs every asynchronous
    error as a warning on the 'mneme' logger (client-side slow consumer = a message dropped because the
    subscription's pending buffer was full; unexpected EOF = the server closed the connection), and the
    server logs "Slow Consumer Detected" when a client's outbound buffer passes its max_pending. Counted
    per phase; the first few of each kind are printed."""

    def __init__(self, server_log: Path):
        super().__init__(logging.WARNING)
        self.server_log = server_log
        self.counts: dict[str, int] = defaultdict(int)

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "slow consumer" in msg:
            kind = "client_dropped_slow_consumer"
        elif "unexpected EOF" in msg:
            kind = "disconnected_unexpected_eof"
        elif "timeout" in msg:
            kind = "timeout"
        else:
            kind = "other"
        self.counts[kind] += 1
        if self.counts[kind] <= (10 if kind == "other" else 2):
            log(f"{record.name}: {msg[:200]}")

    def server_slow(self) -> int:
        try:
            return self.server_log.read_text(errors="replace").count("Slow Consumer Detected")
        except OSError:
            return 0

    def mark(self) -> dict[str, int]:
        return {**self.counts, "server_slow_consumer": self.server_slow()}

    def since(self, mark: dict[str, int]) -> dict[str, int]:
        now = self.mark()
        return {k: v - mark.get(k, 0) for k, v in now.items() if v - mark.get(k, 0)}


# -- instance wrappers: exact wall time of a sink's parts --------------------------------------------------


class Timings:
    def __init__(self) -> None:
        self.s: dict[str, float] = defaultdict(float)
        self.n: dict[str, int] = defaultdict(int)
        self.last: dict[str, float] = defaultdict(float)  # the latest call's seconds

    def wrap(self, obj: Any, name: str, label: str, after: Callable[[str, float], None] | None = None) -> None:
        orig = getattr(obj, name)

        def timed(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return orig(*a, **kw)
            finally:
                dt = time.perf_counter() - t
                self.s[label] += dt
                self.n[label] += 1
                self.last[label] = dt
                if after is not None:
                    after(label, dt)

        setattr(obj, name, timed)  # an instance attribute: the class and other instances are untouched


# -- replays ---------------------------------------------------------------------------------------------------


def progress_logger(label: str) -> Callable[[int, int, float], None]:
    last = [0.0]

    def progress(done: int, target: int, secs: float) -> None:
        if secs - last[0] >= 15 or done >= target:
            last[0] = secs
            log(f"    {label}: {done:,} of {target:,} ({done / secs if secs else 0:,.0f} events/s)")

    return progress


STALL_S = 90.0  # a replay that applies nothing for this long is stopped and reported as stalled


def completeness(db: Path, target: int) -> dict[str, Any]:
    """What a DuckDB view folded: its checkpoint, its versions, and which sequences 1..target have no version
    (this log's every event makes one version, so none may be missing)."""
    import duckdb

    try:
        con = duckdb.connect(str(db))  # in this process: the instance the (stalled) view holds, or the closed file
    except Exception as exc:  # noqa: BLE001 - reported
        return {"error": f"{type(exc).__name__}: {exc}"}
    try:
        ck = con.execute("SELECT seq FROM checkpoints WHERE name = 'memories'").fetchone()
        versions = (con.execute("SELECT count(*) FROM memory_versions").fetchone() or (0,))[0]
        gaps = con.execute(
            "WITH m AS (SELECT s FROM range(1, ? + 1) t(s) ANTI JOIN memory_versions v ON v.seq = t.s), "
            "g AS (SELECT s, s - row_number() OVER (ORDER BY s) AS grp FROM m) "
            "SELECT min(s), max(s), count(*) FROM g GROUP BY grp ORDER BY 1",
            [target],
        ).fetchall()
    finally:
        con.close()
    missing = sum(g[2] for g in gaps)
    return {
        "checkpoint": ck[0] if ck else None,
        "versions": versions,
        "missing_events": missing,
        "gaps": len(gaps),
        "first_gaps": [list(g) for g in gaps[:5]],
    }


async def run_replay(
    label: str,
    core: CoreSettings,
    ps: ProjectorSettings,
    out: Path,
    meter: Meter,
    prof: Profiler | None,
    noise: Noise,
    target: int,
) -> dict[str, Any]:
    log(f"(2) {label}: replay() into {out.name}")
    if prof is not None:
        await prof.start()
    mark = noise.mark()
    seen = {"done": -1, "at": time.perf_counter()}
    plog = progress_logger(label)

    def progress(done: int, tgt: int, secs: float) -> None:
        if done != seen["done"]:
            seen.update(done=done, at=time.perf_counter())
        plog(done, tgt, secs)

    meter.start()
    t0 = time.perf_counter()
    task = asyncio.ensure_future(replay(core, ps, output=out, use_snapshots=False, swap=False, progress=progress))
    stalled = None
    while not task.done():
        await asyncio.wait({task}, timeout=5)
        if not task.done() and time.perf_counter() - seen["at"] > STALL_S:
            stalled = seen["done"]
            log(f"(2) {label}: STALLED at {stalled:,} of {target:,}: nothing applied for {STALL_S:.0f} s; stopping it")
            task.cancel()
            try:
                await task
            except BaseException:  # noqa: BLE001 - cancelled on purpose
                pass
    cpu = meter.stop()
    nats_noise = noise.since(mark)
    profile = await prof.stop() if prof is not None else None
    log(f"(2) {label}: NATS: {nats_noise or 'nothing to report'}")
    last_progress_s = seen["at"] - t0
    if stalled is not None:
        res = {
            "events": target,
            "seconds": None,
            "events_per_s": None,
            "embedded": None,
            "digest": None,
            "verify": {"stalled_at": stalled, "last_progress_s": rnd(last_progress_s, 1)},
        }
        failed: Any = f"stalled at {stalled} of {target}"
    else:
        try:
            res = task.result()
            failed = None
        except ReplayFailed as exc:
            res, failed = exc.result, exc.result.get("verify")
        log(
            f"(2) {label}: {res['events']:,} events in {res['seconds']:.1f} s = {res['events_per_s']:,.0f} events/s; "
            f"embedded {res['embedded']}; verify {'ok' if failed is None else failed}"
        )
    folded = completeness(out / ps.db_name, target)
    if stalled is not None and folded.get("versions") is not None:
        folded["folded_per_s"] = rnd(folded["versions"] / last_progress_s, 1)  # what it really folded, until it stopped
    if folded.get("missing_events"):
        log(
            f"(2) {label}: the DuckDB view has NO version for {folded['missing_events']:,} of {target:,} events "
            f"(checkpoint {folded['checkpoint']:,}; {folded['gaps']} gaps, "
            f"first {folded['first_gaps'][:2]})"
        )
    return {
        "events": res["events"],
        "seconds": res["seconds"],
        "events_per_s": res["events_per_s"],
        "embedded": res["embedded"],
        "verify": res["verify"],
        "digest": res["digest"],
        "folded": folded,
        "cpu_share_of_a_core": cpu,
        "profile": profile,
        "failed": failed,
        "nats": nats_noise,
        "disk_mb": rnd(du(out) / 1e6, 1),
    }


async def vectors_only(
    core: CoreSettings,
    ps: ProjectorSettings,
    js: Any,
    out: Path,
    target: int,
    meter: Meter,
    prof: Profiler | None,
    noise: Noise,
) -> dict[str, Any]:
    """A LogFollower into a VectorView alone (what the replay's vector follower does), parts timed."""
    log(f"(2) vectors only: a LogFollower into a VectorView in {out.name}")
    out.mkdir(parents=True)
    vv = open_vectors(core, ps, base=out)
    assert vv is not None
    tm = Timings()
    parts = (
        (vv, "stage", "stage (worker thread or loop)"),
        (vv.index, "retrieve", "  stage: Edge retrieve (previous states)"),
        (vv.bm25, "document", "  stage: BM25 sparse encoding"),
        (vv, "commit", "commit (worker thread)"),
        (vv, "_vectors", "  commit: cache lookups + vectors to lists"),
        (vv.cache, "get_many", "    of which EmbeddingCache.get_many"),
        (vv.index, "upsert", "  commit: Edge upsert (build points + update)"),
        (vv.index, "set_payload", "  commit: Edge set_payload (seq_to), one call per seq"),
        (vv.index, "save_checkpoint", "  commit: Edge flush + checkpoint file"),
    )
    commits: list[tuple[float, int, float, float, float]] = []  # (end, committed seq, commit s, upsert s, flush s)
    flush_label, upsert_label, commit_label = parts[8][2], parts[6][2], parts[3][2]

    def noted(label: str, dt: float) -> None:
        if label == commit_label:
            commits.append((time.perf_counter(), vv.committed, dt, tm.last[upsert_label], tm.last[flush_label]))
            tm.last[upsert_label] = tm.last[flush_label] = 0.0

    for obj, name, label in parts:
        tm.wrap(obj, name, label, noted if label == commit_label else None)
    follower = LogFollower(js, vv, batch_max=ps.vector_batch_max, linger=ps.linger, stop_at=target)
    await asyncio.to_thread(vv.model.wait, 120)  # as in a replay, the model loads meanwhile; not needed: cache warm
    if prof is not None:
        await prof.start()
    mark = noise.mark()
    meter.start()
    t0 = time.perf_counter()
    await follower.start()
    last_log = t0
    stalled = None
    moved = (follower.committed, time.perf_counter())
    while not await follower.wait_for(target, 0.5):
        if follower.committed != moved[0]:
            moved = (follower.committed, time.perf_counter())
        elif time.perf_counter() - moved[1] > STALL_S:
            stalled = follower.committed
            last_progress = moved[1] - t0
            log(f"(2) vectors only: STALLED at {stalled:,} of {target:,}: nothing committed for {STALL_S:.0f} s")
            break
        if time.perf_counter() - last_log >= 15:
            last_log = time.perf_counter()
            log(
                f"    vectors only: {follower.committed:,} of {target:,} "
                f"({follower.committed / (last_log - t0):,.0f} events/s)"
            )
    secs = time.perf_counter() - t0
    cpu = meter.stop()
    nats_noise = noise.since(mark)
    log(f"(2) vectors only: NATS: {nats_noise or 'nothing to report'}")
    profile = await prof.stop() if prof is not None else None
    await follower.stop()
    points = vv.index.count(_all_points())
    embedded = vv.embedded
    vv.close()
    tenths = by_tenth(commits, t0, target)
    per = {label: rnd(tm.s[label] * 1e6 / target, 2) for _, _, label in parts}
    calls = {label: tm.n[label] for _, _, label in parts}
    log(
        f"(2) vectors only: {follower.committed:,} events in {secs:.1f} s = {follower.committed / secs:,.0f} events/s; "
        f"{points:,} points; embedded {embedded}"
    )
    rate = None if stalled is not None else rnd(target / secs, 1)
    done = stalled if stalled is not None else target
    if stalled is not None:  # per event over what it got through, until it stopped
        per = {label: rnd(tm.s[label] * 1e6 / max(done, 1), 2) for _, _, label in parts}
    return {
        "events": target,
        "seconds": rnd(secs, 3),
        "events_per_s": rate,
        "points": points,
        "embedded": embedded,
        "us_per_event": per,
        "calls": calls,
        "cpu_share_of_a_core": cpu,
        "nats": nats_noise,
        "stalled_at": stalled,
        "events_done": done,
        "stalled": None
        if stalled is None
        else {
            "at": stalled,
            "last_progress_s": rnd(last_progress, 1),
            "points": points,
            "points_per_s": rnd(points / last_progress, 1),
        },
        "profile": profile,
        "disk_mb": rnd(du(out) / 1e6, 1),
        "by_tenth": tenths,
    }


def by_tenth(commits: list[tuple[float, int, float, float, float]], t0: float, target: int) -> list[dict[str, Any]]:
    """Per tenth of the log (by the sequence a commit reached): events/s, and per commit the mean ms of the
    commit, its Edge upsert and its flush: does it slow down as the shard grows?"""
    out = []
    prev_t, prev_seq = t0, 0
    for k in range(10):
        hi = target * (k + 1) // 10
        inside = [c for c in commits if prev_seq < c[1] <= hi]
        if not inside:
            continue
        end_t, end_seq = inside[-1][0], inside[-1][1]
        n = len(inside)
        out.append(
            {
                "upto": end_seq,
                "events_per_s": rnd((end_seq - prev_seq) / (end_t - prev_t), 1),
                "commits": n,
                "commit_ms": rnd(sum(c[2] for c in inside) * 1000 / n, 1),
                "upsert_ms": rnd(sum(c[3] for c in inside) * 1000 / n, 1),
                "flush_ms": rnd(sum(c[4] for c in inside) * 1000 / n, 1),
            }
        )
        prev_t, prev_seq = end_t, end_seq
    return out


def _all_points() -> Any:
    from services.projector.vector_index import Cond, Where

    return Where(must=(Cond("seq_from", "range", gte=1),))


def du(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


# -- as_of latency -----------------------------------------------------------------------------------------------


def summary_ms(samples: list[float]) -> dict[str, Any]:
    ms = [s * 1000 for s in samples]
    return {
        "n": len(ms),
        "p50_ms": rnd(percentile(ms, 50), 2),
        "p95_ms": rnd(percentile(ms, 95), 2),
        "p99_ms": rnd(percentile(ms, 99), 2),
        "max_ms": rnd(max(ms), 2) if ms else None,
    }


async def latency(
    nc: NATS,
    core: CoreSettings,
    ps: ProjectorSettings,
    view_dir: Path,
    vec_dir: Path,
    facts: LogFacts,
    cfg: Config,
    target: int,
    tmp: Path,
) -> dict[str, Any]:
    log(f"(3) a projector serving queries on {view_dir.name} (rows) and {vec_dir.name} (vectors)")
    t0 = time.perf_counter()
    view = open_view(core, ps, base=view_dir)
    qcache = EmbeddingCache(tmp / "query-cache.sqlite")  # empty: every query text is embedded cold
    vectors = open_vectors(core, ps, base=vec_dir, cache=qcache)
    assert vectors is not None
    proj = Projector(
        nc,
        view,
        vectors=vectors,
        batch_max=ps.batch_max,
        wait_timeout=ps.wait_timeout,
        linger=ps.linger,
        vector_batch_max=ps.vector_batch_max,
    )
    out: dict[str, Any] = {
        "rows_from": view_dir.name,
        "vectors_from": vec_dir.name,
        "versions": (view.con.execute("SELECT count(*) FROM memory_versions").fetchone() or (0,))[0],
        "points": vectors.index.count(_all_points()),
    }
    try:
        await proj.start()
        await asyncio.wait_for(proj.serving.wait(), 300)
        if not await asyncio.to_thread(vectors.model.wait, 120):
            raise RuntimeError("the embedding model did not load")
        out["open_to_serving_s"] = rnd(time.perf_counter() - t0, 2)
        log(f"(3) serving after {out['open_to_serving_s']} s; {cfg.queries} queries per kind")
        qc = QueryClient(nc, timeout=30)
        rng = random.Random(17)
        mids = list(facts.created)
        n_ns = cfg.namespaces
        failures: list[str] = []
        found = {"get": 0, "get_now": 0}
        hits: dict[str, list[int]] = defaultdict(list)

        def get_q(as_of: bool) -> GetMemory:
            mid = mids[rng.randrange(len(mids))]
            end = facts.ended.get(mid, target + 1) - 1
            at = AsOf(seq=rng.randint(facts.created[mid], end)) if as_of else None
            if not as_of and end < target:  # deleted by now: pick another one
                return get_q(False)
            return GetMemory(namespace=facts.ns[mid], now=datetime.now(UTC), memory_id=mid, as_of=at)

        def search_q(mode: Any, as_of: bool) -> SearchMemories:
            text = " ".join(rng.choices(VOCAB, k=rng.randint(2, 5)))
            at = AsOf(seq=rng.randint(1, target)) if as_of else None
            return SearchMemories(
                namespace=f"ns{rng.randrange(n_ns)}", now=datetime.now(UTC), mode=mode, query=text, limit=10, as_of=at
            )

        kinds: dict[str, Callable[[], Any]] = {"get": lambda: get_q(True)}
        for m in MODES:
            kinds[m] = functools.partial(search_q, m, True)
        now_kinds: dict[str, Callable[[], Any]] = {"get_now": lambda: get_q(False)}
        for m in MODES:
            now_kinds[f"{m}_now"] = functools.partial(search_q, m, False)
        samples: dict[str, list[float]] = defaultdict(list)

        async def one(kind: str, make: Callable[[], Any], record: bool) -> None:
            q = make()
            t = time.perf_counter()
            try:
                res = await qc.ask(q)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                failures.append(f"{kind}: {type(exc).__name__}: {exc}")
                return
            dt = time.perf_counter() - t
            if not record:
                return
            samples[kind].append(dt)
            if kind.startswith("get"):
                ok = res.item is not None and res.item.memory.id == q.memory_id
                found[kind] += ok
                if not ok and len(failures) < 20:
                    failures.append(f"{kind}: {q.memory_id} not found as of {q.as_of}")
            else:
                hits[kind].append(len(res.hits))

        warm = max(5, cfg.queries // 10)
        for _ in range(warm):  # warm-up: the model, DuckDB and Edge caches
            for kind, make in {**kinds, **now_kinds}.items():
                await one(kind, make, False)

        async def respond(m: Any) -> None:
            await m.respond(m.data)

        echo = await nc.subscribe("bench.replay.echo", cb=respond)
        names = list(kinds)
        for i in range(cfg.queries):
            k = i % len(names)
            for kind in names[k:] + names[:k]:
                await one(kind, kinds[kind], True)
            if i % 3 == 0:
                for kind, make in now_kinds.items():
                    await one(kind, make, True)
            t = time.perf_counter()
            await nc.request("bench.replay.echo", b"x", timeout=5)
            samples["echo"].append(time.perf_counter() - t)
            if i % max(1, cfg.queries // 5) == 0 and i:
                log(f"    {i} of {cfg.queries} rounds")
        await echo.unsubscribe()
        out["latency"] = {k: summary_ms(v) for k, v in samples.items()}
        out["found"] = {k: f"{v}/{len(samples[k])}" for k, v in found.items()}
        out["hits_mean"] = {k: rnd(sum(v) / len(v), 2) if v else None for k, v in hits.items()}
        out["failures"] = len(failures)
        out["first_failures"] = failures[:5]
        out["missing"] = sum(len(samples[k]) - v for k, v in found.items())
    finally:
        await proj.stop()
        close_generation(proj.gen)
        qcache.close()
    return out


# -- the run --------------------------------------------------------------------------------------------------------


async def amain(cfg: Config, args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    machine = machine_info()
    started = time.perf_counter()
    main_task = asyncio.current_task()
    if main_task is not None:  # SIGTERM unwinds like Ctrl-C: children stopped, temporary directory removed
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    tmp = Path(tempfile.mkdtemp(prefix="mneme-bench-replay-"))
    log(f"temporary directory {tmp}")
    cache_path = tmp / "embeddings.sqlite" if args.fresh_cache else Path(args.cache).expanduser()
    problems: list[str] = []
    try:
        server = EmbeddedNats(tmp / "nats")
        url = await server.start()
        assert server.proc is not None
        nats_pid = server.proc.pid  # (EmbeddedNats.pid is unreachable: mneme/embedded_nats.py, see the report)
        noise = Noise(tmp / "nats" / "nats-server.log")
        mlog = logging.getLogger("mneme")
        mlog.addHandler(noise)
        mlog.propagate = False  # counted instead of printed (a replay can log hundreds of thousands)
        nc = await connect(url, "bench-replay")
        try:
            js = nc.jetstream()
            await ensure_streams(js)
            core = CoreSettings(data_dir=tmp / "data", nats_url=url)
            ps = ProjectorSettings(embedding_cache=str(cache_path.resolve()))
            ps_off = ps.model_copy(update={"vectors": "off"})

            # (0) the pool, the cache, the log
            pool = pool_texts(cfg.pool)
            log(f"(0) {len(pool):,} pool texts; filling the embedding cache {cache_path}")
            pre = await asyncio.to_thread(prefill_cache, cache_path, ps.embedding_model, pool, ps.embedding_threads)
            log(
                f"(0) cache: {pre['already_cached']:,} already there, {pre['embedded_now']:,} embedded now in "
                f"{pre['embed_seconds']} s"
            )
            facts = LogFacts()
            log(f"(0) publishing {cfg.events:,} events over {cfg.memories:,} memories")
            t = time.perf_counter()
            last = await publish(js, log_events(cfg, pool, facts), window=1024)
            pub_s = time.perf_counter() - t
            info = (await js.stream_info(S.EVENTS_STREAM)).state
            if info.last_seq != cfg.events or info.messages != cfg.events or last != cfg.events:
                raise RuntimeError(f"the log holds {info.messages} messages up to {info.last_seq}, not {cfg.events}")
            target = info.last_seq
            log(f"(0) published {target:,} events ({info.bytes / 1e6:,.0f} MB) in {pub_s:.1f} s")
            logd = {
                "events": target,
                "bytes": info.bytes,
                "mean_event_bytes": rnd(info.bytes / target, 1),
                "publish_seconds": rnd(pub_s, 2),
                "publish_per_s": rnd(target / pub_s, 1),
                "memories_created": len(facts.created),
                "memories_deleted": len(facts.ended),
                "by_type": dict(sorted(facts.by_type.items(), key=lambda x: -x[1])),
                "content_updates": facts.content_changes,
                "distinct_texts_used": len(facts.texts_used),
                "namespaces": cfg.namespaces,
                "pool": cfg.pool,
            }

            meter = Meter({"bench": os.getpid(), "nats": nats_pid})
            floors: list[float] = []
            floor_cpu: list[dict[str, Any]] = []
            floor_noise: list[dict[str, int]] = []

            async def floor(r: int) -> None:
                await asyncio.sleep(0.5)
                mark = noise.mark()
                meter.start()
                floors.append(await floor_once(js, target))
                floor_cpu.append(meter.stop())
                if noise.since(mark):
                    log(f"(1) floor round {r + 1}: NATS: {noise.since(mark)}")
                floor_noise.append(noise.since(mark))
                log(f"(1) floor round {r + 1}: {target / floors[-1]:,.0f} events/s ({floors[-1]:.2f} s)")

            def profiler(name: str) -> Profiler | None:
                return Profiler(tmp / f"profile-{name}.txt", not args.no_profile)

            await floor(0)
            full = await run_replay("full (DuckDB + vectors)", core, ps, tmp / "gen-full", meter, None, noise, target)
            await floor(1)
            duck = await run_replay(
                "DuckDB only", core, ps_off, tmp / "gen-duckdb", meter, profiler("duckdb"), noise, target
            )
            vec = None
            if not args.no_vectors_only:
                vec = await vectors_only(core, ps, js, tmp / "gen-vectors", target, meter, profiler("vectors"), noise)
            for r in range(2, cfg.floor_rounds):
                await floor(r)
            mark = noise.mark()

            def whole(r: dict[str, Any] | None) -> bool:
                if not r:
                    return False
                return (
                    not r.get("failed")
                    and not r.get("stalled_at")
                    and not (r.get("folded") or {}).get("missing_events")
                )

            view_dir, vec_dir, note = tmp / "gen-full", tmp / "gen-full", None
            if not whole(full):  # (a stalled replay still holds its files: serve the other two generations)
                view_dir, vec_dir = tmp / "gen-duckdb", tmp / "gen-vectors"
                note = "the full replay is not whole: served the DuckDB-only rows with the vectors-only index"
                if not (whole(duck) and whole(vec)):
                    note += " (NOT whole either: figures at a smaller effective size)"
                log(f"(3) {note}")
            try:
                lat = await latency(nc, core, ps, view_dir, vec_dir, facts, cfg, target, tmp)
            except Exception as exc:  # noqa: BLE001 - reported
                log(f"(3) latency phase failed: {type(exc).__name__}: {exc}")
                lat = {
                    "skipped": f"{type(exc).__name__}: {exc}",
                    "latency": {},
                    "found": {},
                    "hits_mean": {},
                    "failures": 0,
                    "first_failures": [],
                }
            lat["note"] = note
            lat["nats"] = noise.since(mark)
        finally:
            await close_nats(nc)
            await server.stop()
        wall = time.perf_counter() - started
        try:
            result = report(cfg, machine, args, pre, logd, floors, floor_cpu, full, duck, vec, lat, wall, problems)
            result["floor"]["nats"] = floor_noise
        except Exception as exc:  # noqa: BLE001 - the figures still go out as JSON
            import traceback

            traceback.print_exc()
            problems.append(f"report failed: {type(exc).__name__}: {exc}")
            result = {
                "bench": "replay",
                "report_error": str(exc),
                "machine": machine,
                "config": dataclasses.asdict(cfg),
                "cache": pre,
                "log": logd,
                "floor_seconds": floors,
                "floor_nats": floor_noise,
                "replay_full": full,
                "replay_duckdb_only": duck,
                "vectors_only": vec,
                "latency": lat,
            }
        return result, problems
    finally:
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


# -- report ---------------------------------------------------------------------------------------------------------


def report(
    cfg: Config,
    machine: dict[str, Any],
    args: argparse.Namespace,
    pre: dict[str, Any],
    logd: dict[str, Any],
    floors: list[float],
    floor_cpu: list[dict[str, Any]],
    full: dict[str, Any],
    duck: dict[str, Any],
    vec: dict[str, Any] | None,
    lat: dict[str, Any],
    wall: float,
    problems: list[str],
) -> dict[str, Any]:
    target = logd["events"]
    f_rates = [target / s for s in floors]
    floor_rate = median(f_rates)
    mode = "quick" if args.quick else "full"
    print(
        f"mneme bench.replay ({mode}) — {machine['nproc']} cores, {machine['cpu_model']}, "
        f"{machine['ram_gb']} GB RAM, Python {machine['python']}, {machine['date']}, "
        f"load average at start {machine['loadavg_at_start']}"
    )
    print(
        f"log: {target:,} events ({logd['bytes'] / 1e6:,.0f} MB, {logd['mean_event_bytes']} B/event) over "
        f"{logd['memories_created']:,} memories in {cfg.namespaces} namespaces: "
        + ", ".join(f"{k} {v:,}" for k, v in logd["by_type"].items())
        + f"; contents from a pool of {cfg.pool:,} sentences ({logd['distinct_texts_used']:,} used)"
    )
    print(
        f"embedding cache {pre['cache']}: {pre['already_cached']:,} of {pre['pool_texts']:,} pool texts were "
        f"there, {pre['embedded_now']:,} embedded in this run ({pre['embed_seconds']} s)"
    )

    rows: list[list[Any]] = [["floor: ordered push consumer, callback: receive + seq + decode_envelope", floor_rate,
             rnd(target / floor_rate, 2), 1.0, None, "", "-", floor_cpu[0]]]  # fmt: skip
    runs = [
        ("full replay(): DuckDB + Edge vectors, cache warm", full, True),
        ("DuckDB only: replay(), vectors='off'", duck, False),
    ]
    if vec is not None:
        runs.append(("vectors only: LogFollower into VectorView", vec, False))
    targets: dict[str, dict[str, Any]] = {}
    for name, r, is_target in runs:
        ratio = r["events_per_s"] / floor_rate if r["events_per_s"] else None
        st = (r.get("folded") or {}).get("folded_per_s") or (r.get("stalled") or {}).get("points_per_s")
        if st is not None:
            at = r["verify"].get("stalled_at") if r.get("verify") else r.get("stalled_at")
            unit = "points" if r.get("stalled") else "DuckDB rows"
            name += f" — STALLED at {at or r.get('stalled_at'):,}; {unit} written until then: {st:,.0f}/s"
        r["vs_floor"] = rnd(ratio, 3)
        ok = ratio is not None and ratio >= TARGET_RATIO
        nn = r.get("nats") or {}
        trouble = (
            f"{nn.get('server_slow_consumer', 0)} / {nn.get('disconnected_unexpected_eof', 0)} / "
            f"{nn.get('client_dropped_slow_consumer', 0):,}"
        )
        rows.append([name, r["events_per_s"], r["seconds"], rnd(ratio, 3), r["embedded"],
                     f">= {TARGET_RATIO:.2f} {verdict(ok)}" if is_target else "", trouble,
                     r["cpu_share_of_a_core"]])  # fmt: skip
        if is_target:
            targets["replay_vs_floor"] = {
                "ratio": rnd(ratio, 3),
                "target": TARGET_RATIO,
                "pass": ok,
                "replay_events_per_s": r["events_per_s"],
                "floor_events_per_s": rnd(floor_rate, 1),
            }
    print_table(
        f"(1)+(2) Replay of {target:,} events beside the floor (floor: median of {len(floors)} rounds "
        f"{', '.join(f'{x:,.0f}' for x in f_rates)} events/s)",
        [
            "measure",
            "events/s",
            "seconds",
            "ratio to floor",
            "embedded",
            "target",
            "NATS: server slow consumer / disconnects / client drops",
            "cpu share of a core",
        ],
        [[*r[:7], ", ".join(f"{k} {v}" for k, v in (r[7] or {}).items())] for r in rows],
    )

    if vec is not None:
        us = vec["us_per_event"]
        total = vec["seconds"] * 1e6 / max(vec["events_done"], 1)
        prow = [[k, v, rnd(v / total, 3), vec["calls"].get(k)] for k, v in us.items()]
        prow.append(["total wall per event", rnd(total, 2), 1.0, None])
        print_table(
            "(2) vectors only: where the wall time goes (instance wrappers; µs per event)",
            ["part", "µs/event", "share of wall", "calls"],
            prow,
        )
        print_table(
            "(2) vectors only, per tenth of the log: does it slow down as the shard grows? (ms per commit)",
            ["up to seq", "events/s", "commits", "commit ms", "Edge upsert ms", "Edge flush ms"],
            [
                [x["upto"], x["events_per_s"], x["commits"], x["commit_ms"], x["upsert_ms"], x["flush_ms"]]
                for x in vec["by_tenth"]
            ],
        )
    for name, rr in (("DuckDB only", duck), ("vectors only", vec)):
        p = (rr or {}).get("profile")
        if not p or not p.get("samples"):
            continue
        print_table(
            f"(2) {name}: py-spy, on-CPU samples of all threads at {PROFILE_HZ} Hz "
            f"({p['cpu_seconds_sampled']} CPU s; by thread {p['by_thread']})",
            ["category", "share of samples"],
            list(p["categories"].items()),
        )
        print_table(
            f"(2) {name}: top frames (the leaf-most frame that decided the category)",
            ["frame", "share"],
            p["top_frames"],
        )

    for name, r in (("full", full), ("DuckDB only", duck)):
        if r.get("failed"):
            problems.append(f"{name} replay failed: {r['failed']}")
        if r["embedded"]:
            problems.append(f"{name} replay embedded {r['embedded']} texts: the cache was not warm")
        fo = r.get("folded") or {}
        if fo.get("missing_events"):
            problems.append(
                f"{name} replay: the DuckDB view has no version for {fo['missing_events']:,} of "
                f"{target:,} events although its checkpoint is {fo.get('checkpoint')} (events skipped; "
                f"{fo['gaps']} gaps, first {fo['first_gaps'][:3]})"
            )
    if vec is not None and vec["embedded"]:
        problems.append(f"vectors-only replay embedded {vec['embedded']} texts")
    if vec is not None and vec.get("stalled_at") is not None:
        problems.append(f"vectors only: stalled at {vec['stalled_at']} of {target}")
    same = None
    if full["digest"] is not None and duck["digest"] is not None:
        same = full["digest"] == duck["digest"]
        if not same:
            problems.append("the DuckDB tables of the full and the DuckDB-only replays differ (canonical digests)")
    if vec is not None and full["verify"].get("points") is not None and vec["points"] != full["verify"]["points"]:
        problems.append(f"vectors only: {vec['points']} points, the full replay {full['verify'].get('points')}")

    L = lat["latency"]
    lrows = []
    for kind in ("get", *MODES):
        x = L.get(kind, {})
        ok = x.get("p95_ms") is not None and x["p95_ms"] < TARGET_P95_MS
        targets[f"as_of_{kind}_p95"] = {"p95_ms": x.get("p95_ms"), "target_ms": TARGET_P95_MS, "pass": ok}
        lrows.append([f"{'GetMemory' if kind == 'get' else 'SearchMemories ' + kind}, as_of=AsOf(seq=random)",
                      x.get("n"), x.get("p50_ms"), x.get("p95_ms"), x.get("p99_ms"), x.get("max_ms"),
                      f"< {TARGET_P95_MS:.0f} ms {verdict(ok)}"])  # fmt: skip
    for kind in ("get_now", *(f"{m}_now" for m in MODES)):
        x = L.get(kind, {})
        lrows.append([f"  the same without as_of: {kind.replace('_now', '')}", x.get("n"), x.get("p50_ms"),
                      x.get("p95_ms"), x.get("p99_ms"), x.get("max_ms"), ""])  # fmt: skip
    x = L.get("echo", {})
    lrows.append(["core NATS request/reply echo (floor)", x.get("n"), x.get("p50_ms"), x.get("p95_ms"),
                  x.get("p99_ms"), x.get("max_ms"), ""])  # fmt: skip
    print_table(
        f"(3) Query latency at {target:,} events ({lat.get('versions') or 0:,} versions from "
        f"{lat.get('rows_from')}, {lat.get('points') or 0:,} points from {lat.get('vectors_from')}) "
        "through QueryClient.ask (ms)",
        ["query", "n", "p50", "p95", "p99", "max", "target"],
        lrows,
    )
    print(f"gets found: {lat['found']}; search hits per query (mean): {lat['hits_mean']}; failures {lat['failures']}")
    if lat["failures"]:
        problems.append(f"{lat['failures']} queries failed or missed: {lat['first_failures']}")
    targets["verified"] = {"pass": not problems, "problems": list(problems), "digests_equal": same}
    print("\nTargets: " + ", ".join(f"{k} {verdict(v['pass'])}" for k, v in targets.items()))
    print(f"wall time {wall:.1f} s")
    for rr in (full, duck, vec):
        if rr is not None:
            rr.pop("digest", None)
    return {
        "bench": "replay",
        "mode": mode,
        "machine": machine,
        "config": dataclasses.asdict(cfg),
        "cache": pre,
        "log": logd,
        "floor": {
            "events_per_s": rnd(floor_rate, 1),
            "per_round": [rnd(x, 1) for x in f_rates],
            "cpu_share_of_a_core": floor_cpu,
        },
        "replay_full": full,
        "replay_duckdb_only": duck,
        "vectors_only": vec,
        "latency": lat,
        "settings": {
            "batch_max": ProjectorSettings().batch_max,
            "vector_batch_max": ProjectorSettings().vector_batch_max,
            "linger_s": ProjectorSettings().linger,
            "model": ProjectorSettings().embedding_model,
        },
        "targets": targets,
        "wall_seconds": rnd(wall, 1),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.replay", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100,000 events over 20,000 memories, 100 queries per kind")
    ap.add_argument(
        "--keep", action="store_true", help="keep the temporary directory (DuckDB files, Edge shards, profiles)"
    )
    ap.add_argument("--no-profile", action="store_true", help="do not sample with py-spy")
    ap.add_argument("--no-vectors-only", action="store_true", help="skip the vectors-only replay")
    ap.add_argument("--cache", default=str(DEFAULT_CACHE), help=f"embedding cache file (default {DEFAULT_CACHE})")
    ap.add_argument(
        "--fresh-cache",
        action="store_true",
        help="an empty cache in the temporary directory, filled before anything is timed",
    )
    ap.add_argument("--events", type=int)
    ap.add_argument("--memories", type=int)
    ap.add_argument("--pool", type=int)
    ap.add_argument("--queries", type=int)
    ap.add_argument("--stall-seconds", type=float, help=argparse.SUPPRESS)  # (to test the stalled path)
    args = ap.parse_args(argv)
    if args.stall_seconds:
        global STALL_S
        STALL_S = args.stall_seconds
    cfg = Config.quick() if args.quick else Config.full()
    over = {k: getattr(args, k) for k in ("events", "memories", "pool", "queries") if getattr(args, k) is not None}
    if over:
        cfg = dataclasses.replace(cfg, **over)
    try:
        result, problems = asyncio.run(amain(cfg, args))
    except (KeyboardInterrupt, asyncio.CancelledError):
        log("interrupted: children stopped" + ("" if args.keep else ", temporary directory removed"))
        sys.exit(130)
    emit_json(result)
    if problems:
        for line in problems:
            log(f"FAILED: {line}")
        sys.exit(1)


if __name__ == "__main__":
    main()
