"""A generation's vector index, built in a process of its own (replay and rebuild use both cores).

Folding rows (DuckDB) and folding vectors (BM25, point payloads, Qdrant Edge, embedding) each hold the
GIL for most of their work, so in one process they run one after the other. A replay folds the rows in its
own process and starts `python -m mneme.app.vector_build` for the vectors: the child follows the log into
the generation's vector index up to the target, embeds what the embedding cache lacks, saves its
position and reports the index's figures.

Protocol: the parent writes one JSON line on the child's stdin (core and projector settings, the
generation directory, the target) and keeps stdin open; the child writes JSON lines on stdout: progress
(`{"applied": N}`), then its result (`{"result": {...}}`) or its failure (`{"error": "..."}`). The child
dies with its parent (PR_SET_PDEATHSIG on Linux; stdin closing elsewhere), so a killed replay leaves no
writer on the shard, and the next run resumes from the position the vectors saved.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mneme.app.child_process import die_with_parent, settings_for_child
from mneme.app.compose import close_nats, connect, open_vectors
from mneme.app.settings import CoreSettings, ProjectorSettings
from mneme.catch_up import StallWatch
from mneme.follow import LogFollower
from services.projector.snapshot import vector_facts
from services.projector.vector_view import VectorView

PROGRESS_EVERY = 0.5  # seconds between progress lines
CONNECT_S = 30.0  # the child gives up (and the replay fails, saying why) when NATS refuses it this long


async def build(
    core: CoreSettings, ps: ProjectorSettings, out: Path, target: int, report: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    """Fold the log into `out`'s vector index up to `target` (from its saved position), embed, save."""
    assert core.nats_url, "the parent passes the URL of the log it replays"
    try:  # (nats-py retries a refused first connection for ever: a wrong password hung the replay)
        async with asyncio.timeout(CONNECT_S):
            nc = await connect(core.nats_url, "mneme-vector-build", core)
    except TimeoutError:
        raise RuntimeError(f"could not connect to the log at {core.nats_url} within {CONNECT_S:.0f} s") from None
    vectors = open_vectors(core, ps, base=out)
    assert vectors is not None
    try:
        follower = LogFollower(nc.jetstream(), vectors, batch_max=ps.vector_batch_max, linger=ps.linger, stop_at=target)
        start = vectors.checkpoint
        t0 = time.monotonic()
        await follower.start()
        # what was folded while the model loaded is embedded as soon as it is ready (the position may then move)
        early_fill = asyncio.ensure_future(_fill_when_ready(vectors))
        try:
            watch = StallWatch([follower], ps.catch_up_stall_s)
            while not await follower.wait_for(target, PROGRESS_EVERY, committed=False):
                report({"applied": follower.committed})
                watch.check(target)
            await follower.wait_for(target, 3600, committed=True)
            if not await asyncio.to_thread(vectors.model.wait, 600):
                vectors.model.get()  # raises why the model did not load
            await early_fill
            await asyncio.to_thread(vectors.fill_pending)
        finally:
            early_fill.cancel()
            await follower.stop()
        seconds = time.monotonic() - t0
        vectors.save()
        result = {
            **vector_facts(vectors),
            "resumed_from": start,
            "embedded": vectors.embedded,
            "seconds": round(seconds, 3),
        }
        report({"applied": follower.committed})
        return result
    finally:
        vectors.close()
        await close_nats(nc)


async def _fill_when_ready(vectors: VectorView) -> None:
    if await asyncio.to_thread(vectors.model.wait, None):
        await asyncio.to_thread(vectors.fill_pending)


# -- the parent's side ---------------------------------------------------------------------------------------
class VectorBuild:
    """The child process, seen from the replay: start it, follow its progress, await its result."""

    def __init__(self, core: CoreSettings, ps: ProjectorSettings, out: Path, target: int, nats_url: str):
        self.request = {
            "core": settings_for_child(core.model_copy(update={"nats_url": nats_url})),
            "projector": json.loads(ps.model_dump_json()),
            "out": str(out),
            "target": target,
        }
        self.applied = 0
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "mneme.app.vector_build",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=None,
            limit=1 << 20,
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(self.request).encode() + b"\n")
        await self.proc.stdin.drain()

    async def result(self) -> dict[str, Any]:
        """Read progress until the result; raise what the child reported (or its exit) as a RuntimeError."""
        assert self.proc is not None and self.proc.stdout is not None
        failure = None
        async for line in self.proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue  # not ours (a library printing): stderr is the place, but never fail on it
            if "applied" in msg:
                self.applied = int(msg["applied"])
            elif "result" in msg:
                await self.close()
                return dict(msg["result"])
            elif "error" in msg:
                failure = str(msg["error"])
        code = await self.proc.wait()
        raise RuntimeError(failure or f"the vector build process exited with {code} and no result")

    async def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.stdin is not None:
            with contextlib.suppress(Exception):
                self.proc.stdin.close()
        try:
            async with asyncio.timeout(30):
                await self.proc.wait()
        except TimeoutError:
            self.proc.kill()
            await self.proc.wait()

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()


# -- the child's side ----------------------------------------------------------------------------------------
def main() -> None:
    parent = os.getppid()
    request = json.loads(sys.stdin.buffer.readline())
    die_with_parent(parent)
    lock = threading.Lock()

    def emit(msg: dict[str, Any]) -> None:
        with lock:
            sys.stdout.write(json.dumps(msg) + "\n")
            sys.stdout.flush()

    core = CoreSettings.model_validate(request["core"])
    ps = ProjectorSettings.model_validate(request["projector"])
    try:
        result = asyncio.run(build(core, ps, Path(request["out"]), int(request["target"]), emit))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the replay with it
        emit({"error": f"{type(exc).__name__}: {exc}"})
        sys.exit(1)
    emit({"result": result})


if __name__ == "__main__":
    main()
