"""Exactly-once effect (invariant 5) and rebuild-equals-live (invariant 1), with real processes.

A `mneme projector` process is killed with SIGKILL in the middle of folding 10,000
events and restarted; its tables must equal those of an uninterrupted rebuild
(compared by canonical digest). Then its DuckDB file is deleted and rebuilt from
the log: identical again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client as NATS

from bench.synthetic import history, publish
from mneme.app.compose import close_nats, connect
from mneme.app.maintenance import rebuild
from mneme.app.settings import CoreSettings, ProjectorSettings
from mneme.embedded_nats import EmbeddedNats
from mneme.eventlog import ensure_streams
from schemas import subjects as S
from schemas.queries import MemoryStats, Reply, encoder
from services.projector.memories_view import MemoriesView
from tests.harness import MNEME, Stack

pytestmark = pytest.mark.anyio
N_EVENTS = 10_000


def start_projector(url: str, data: Path, *extra: str, batch: int = 5000) -> subprocess.Popen[bytes]:
    # (a catch-up commits its own, larger batches: small ones here too, so a kill can land between commits)
    env = {**os.environ, "MNEME_PROJECTOR_BATCH_MAX": str(batch), "MNEME_PROJECTOR_CATCH_UP_BATCH_MAX": str(batch)}
    return subprocess.Popen(
        [MNEME, "projector", "--nats-url", url, "--data-dir", str(data), *extra],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


async def wait_serving(nc: NATS, target: int, timeout: float = 60) -> None:
    """A projector joins the query group only once caught up; then its applied_seq is checked."""
    from datetime import UTC, datetime

    q = encoder.encode(MemoryStats(namespace="ns0", now=datetime.now(UTC), min_seq=target))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = await nc.request(S.query_subject(MemoryStats.OPERATION), q, timeout=2)
            if msgspec.msgpack.decode(msg.data, type=Reply).applied_seq >= target:
                return
        except Exception:  # noqa: BLE001 - not serving yet
            pass
        await asyncio.sleep(0.1)
    raise AssertionError("projector did not catch up in time")


def digest_of(path: Path) -> dict[str, str]:
    view = MemoriesView(str(path))
    try:
        return view.canonical_digest()
    finally:
        view.close()


def checkpoint_of(path: Path) -> int:
    view = MemoriesView(str(path))
    try:
        return view.checkpoint
    finally:
        view.close()


async def test_sigkill_mid_fold_then_restart_equals_uninterrupted(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    url = nats_server.url or ""
    nc = await connect(url, "test")
    try:
        await ensure_streams(nc.jetstream())
        last = await publish(nc.jetstream(), history(N_EVENTS, n_memories=2000, namespaces=3))
        assert last == N_EVENTS

        # Kill while folding: small batches make the fold take long enough; adapt the delay
        # until the kill lands strictly between the first and the last event.
        delay, data, killed_at = 0.15, tmp_path / "p0", None
        for attempt in range(8):
            data = tmp_path / f"p{attempt}"
            proc = start_projector(url, data, batch=50)
            db = data / "projector.duckdb"
            deadline = time.monotonic() + 30
            while not db.exists() and time.monotonic() < deadline and proc.poll() is None:
                await asyncio.sleep(0.005)
            await asyncio.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            killed_at = checkpoint_of(db)
            if 0 < killed_at < N_EVENTS:
                break
            delay = delay / 2 if killed_at >= N_EVENTS else delay * 2
        assert killed_at is not None and 0 < killed_at < N_EVENTS, f"could not kill mid-fold ({killed_at})"

        proc = start_projector(url, data)
        try:
            await wait_serving(nc, N_EVENTS)
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0, proc.stderr.read().decode() if proc.stderr else ""
        recovered = digest_of(data / "projector.duckdb")

        fresh = await rebuild(CoreSettings(nats_url=url, data_dir=tmp_path / "fresh"), ProjectorSettings())
        assert fresh["events"] == N_EVENTS
        assert recovered == fresh["digest"]

        # Delete the file and rebuild it from the log with the CLI: identical tables.
        (data / "projector.duckdb").unlink()
        out = subprocess.run(
            [MNEME, "rebuild", "--nats-url", url, "--data-dir", str(data)], capture_output=True, timeout=120, check=True
        )
        assert json.loads(out.stdout.splitlines()[-1])["digest"] == recovered
        assert digest_of(data / "projector.duckdb") == recovered

        # `mneme projector --rebuild` starts from an empty file and converges to the same tables.
        proc = start_projector(url, data, "--rebuild")
        try:
            await wait_serving(nc, N_EVENTS)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
        assert digest_of(data / "projector.duckdb") == recovered
    finally:
        await close_nats(nc)


async def test_rebuild_from_the_log_equals_the_live_projection(stack: Stack, tmp_path: Path) -> None:
    ids = []
    for i in range(30):
        ids.append(
            (
                await stack.call(
                    "memory_add",
                    content=f"fact {i}",
                    store="s",
                    path=f"c{i % 3}/m{i}",
                    tags=[f"t{i % 4}"],
                    metadata={"i": i},
                )
            )["id"]
        )
    for mid in ids[:10]:
        await stack.call("memory_update", id=mid, content="changed", citations=["x:1"])
    await stack.call("memory_move", id=ids[10], to_path="moved/m10")
    await stack.call("memory_retire", id=ids[11], mode="archive")
    await stack.call("memory_retire", id=ids[12], mode="delete")
    await stack.call("memory_add", content="again", store="s", path="c0/m12")
    assert await stack.projector.follower.wait_for(await stack.last_seq(), 10)
    live = stack.view.canonical_digest()
    rebuilt = await rebuild(CoreSettings(nats_url=stack.url, data_dir=tmp_path / "rb"), ProjectorSettings())
    assert rebuilt["digest"] == live
    assert rebuilt["events"] == await stack.last_seq()
