"""Shared setup for the benchmarks: the embedded nats-server and its connections, the read models and the
Projector every benchmark builds, the audit trail, the temporary run directory, and child-process helpers.

Every `Projector(...)` in bench/ is built by `projector()` below, every MemoriesView by `memories_view()`,
every VectorView by `vector_view()` and every Trail by `trail()`: a change to a constructor is made here once.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, overload

from nats.aio.client import Client as NATS

from bench.common import log, stop_process
from mneme.app import compose
from mneme.app.compose import close_nats, connect
from mneme.app.settings import CoreSettings, ProjectorSettings
from mneme.embed_cache import EmbeddingCache
from mneme.embedded_nats import EmbeddedNats
from mneme.embedding import DEFAULT_MODEL, ModelHandle
from mneme.eventlog import ensure_streams
from services.auditor.trail import Trail
from services.projector.memories_view import MemoriesView
from services.projector.service import Projector, catch_up
from services.projector.vector_index import EdgeIndex
from services.projector.vector_view import VectorView

REPO = Path(__file__).resolve().parent.parent
MNEME = str(Path(sys.executable).parent / "mneme")  # the `mneme` console script of this interpreter's venv

# -- NATS ----------------------------------------------------------------------------------------------


@dataclass
class Nats:
    """An embedded nats-server on a random loopback port and one connection to it, streams ensured."""

    server: EmbeddedNats
    url: str
    pid: int  # the nats-server process, for CPU meters
    nc: NATS
    js: Any  # nats-py's JetStreamContext


async def start_nats(stack: AsyncExitStack, store_dir: Path, name: str) -> Nats:
    """Start nats-server under `store_dir` and connect as `name` (MNEME_EVENTS and MNEME_ACCESS ensured).
    `stack` closes the connection, then stops the server gracefully (SIGTERM: JetStream is flushed, so a
    later phase can reopen the same log)."""
    server = await start_server(stack, store_dir)
    assert server.pid is not None and server.url is not None
    url = server.url
    nc = await connect_nats(stack, url, name)
    js = nc.jetstream()
    await ensure_streams(js)
    return Nats(server, url, server.pid, nc, js)


async def start_server(stack: AsyncExitStack, store_dir: Path) -> EmbeddedNats:
    """nats-server alone under `store_dir` (its URL in `.url`), stopped gracefully by `stack`."""
    server = EmbeddedNats(store_dir, sync=CoreSettings().nats_sync)  # MNEME_NATS_SYNC: as `mneme serve` would
    await server.start()
    stack.push_async_callback(server.stop)
    return server


async def connect_nats(stack: AsyncExitStack, url: str, name: str) -> NATS:
    """One more connection (compose.connect: the product's options and error callback), closed by `stack`."""
    nc = await connect(url, name)
    stack.push_async_callback(close_nats, nc)
    return nc


# -- read models, the projector, the trail ----------------------------------------------------------------


def memories_view(path: Path | str) -> MemoriesView:
    """A DuckDB read model at `path` (created if new)."""
    return MemoriesView(str(path))


def vector_view(index: Any, model: Any, cache: Any, *, cls: type[VectorView] = VectorView, **kw: Any) -> VectorView:
    """A VectorView (or a bench-side subclass, `cls`) over an Edge index, a model handle and an embedding cache."""
    return cls(index, model, cache, **kw)


def projector(nc: NATS, view: MemoriesView, settings: ProjectorSettings | None = None, **kw: Any) -> Projector:
    """Every Projector the benchmarks build, through the product's composition root (mneme.app.compose.projector):
    its batch size, wait timeout, linger and vector batch size from `settings` (default: ProjectorSettings(), as
    `mneme serve` takes them); `kw` (vectors, also, also_access, stop_at, access, log_nc) as the factory takes
    them."""
    return compose.projector(nc, view, settings, **kw)


T = TypeVar("T", bound=Trail)


@overload
def trail(path: Path | str) -> Trail: ...
@overload
def trail(path: Path | str, cls: type[T]) -> T: ...
def trail(path: Path | str, cls: type[Trail] = Trail) -> Trail:
    """An audit trail file (or a bench-side subclass of Trail, `cls`) at `path`."""
    return cls(str(path))


@dataclass
class Recall:
    """A projector with vectors in one directory: the DuckDB view, a Qdrant Edge index, the model and a fresh
    embedding cache (what bench.graph and bench.locomo ask)."""

    projector: Projector
    view: MemoriesView
    vectors: VectorView
    model: ModelHandle


def recall_projector(stack: AsyncExitStack, nc: NATS, tmp: Path, model_name: str = DEFAULT_MODEL) -> Recall:
    """The projector (its model loading meanwhile), stopped and closed by `stack`; start it with `fold()`."""
    model = ModelHandle(model_name).start()
    view = memories_view(tmp / "projector.duckdb")
    stack.callback(view.close)
    vectors = vector_view(EdgeIndex(tmp / "vectors", model.dim), model, EmbeddingCache(tmp / "emb.sqlite"))
    stack.callback(vectors.close)
    proj = projector(nc, view, vectors=vectors)
    stack.push_async_callback(proj.stop)
    return Recall(proj, view, vectors, model)


async def fold(r: Recall) -> tuple[float, float]:
    """Start the projector, fold the log and embed every memory: (seconds until the rows were folded, seconds
    until every vector was in). Then wait until it serves queries."""
    t = time.perf_counter()
    await r.projector.start()
    await catch_up(r.projector)
    rows_s = time.perf_counter() - t
    await asyncio.to_thread(r.model.wait, 120)
    assert r.projector.vector_follower is not None
    await r.projector.vector_follower.wait_for(r.projector.applied, 600)
    await asyncio.to_thread(r.vectors.fill_pending)
    vectors_s = time.perf_counter() - t
    await r.projector.serving.wait()
    return rows_s, vectors_s


# -- the run directory ------------------------------------------------------------------------------------


@asynccontextmanager
async def run_dir(name: str, keep: bool) -> AsyncIterator[Path]:
    """A temporary directory for one run, removed at the end unless `keep`; SIGTERM unwinds like Ctrl-C
    (servers and children stopped by their exit stacks, the directory removed)."""
    main_task = asyncio.current_task()
    if main_task is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    tmp = Path(tempfile.mkdtemp(prefix=f"mneme-bench-{name}-"))
    log(f"temporary directory {tmp}")
    try:
        yield tmp
    finally:
        if keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


# -- child processes and waiting ----------------------------------------------------------------------


def tail(path: Path, n: int = 1500) -> str:
    """The end of a child's log, for an error message."""
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return "(no log)"


async def stop_child(proc: subprocess.Popen[bytes]) -> int | None:
    return await asyncio.to_thread(stop_process, proc)


async def wait_file(path: Path, proc: subprocess.Popen[bytes], log_path: Path, timeout: float = 60) -> None:
    """Until a child writes `path` (its "ready" file); its log in the error if it exits or times out."""
    deadline = time.perf_counter() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"child exited with {proc.returncode}: {tail(log_path)}")
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{path} did not appear within {timeout} s: {tail(log_path)}")
        await asyncio.sleep(0.02)


async def until(cond: Callable[[], bool], timeout: float, what: str, step: float = 0.005) -> float:
    """Poll `cond` every `step` seconds; the seconds it took (RuntimeError after `timeout`)."""
    t0 = time.perf_counter()
    while not cond():
        if time.perf_counter() - t0 > timeout:
            raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(step)
    return time.perf_counter() - t0
