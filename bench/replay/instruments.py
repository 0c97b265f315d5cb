"""bench.replay's instruments: CPU shares, py-spy sampling and where its samples fall, the NATS trouble of each
phase, and wall time of a sink's parts through instance wrappers.
"""

from __future__ import annotations

import asyncio
import linecache
import logging
import os
import signal
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import CpuMeter, log, rnd, spawn, stop_process, system_cpu_seconds
from bench.fixtures import REPO
from bench.replay.corpus import PROFILE_HZ, PYSPY

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
    path = file if os.path.isabs(file) else str(REPO / file)
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
    """What the NATS connections went through: compose.connect's error callback logs every asynchronous
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
