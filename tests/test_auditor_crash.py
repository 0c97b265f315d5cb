"""The auditor killed with SIGKILL while 10,000 events arrive, then restarted: the trail has every
event exactly once, in order, and its hash chain verifies."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client as NATS

from bench.synthetic import history, publish
from mneme.app.compose import close_nats, connect
from mneme.embedded_nats import EmbeddedNats
from mneme.eventlog import ensure_streams
from schemas import subjects as S
from schemas.queries import AuditQuery, Reply, encoder
from services.auditor.trail import Trail
from tests.harness import MNEME

pytestmark = pytest.mark.anyio
N = 10_000


def start_auditor(url: str, data: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MNEME_AUDITOR_BATCH_MAX": "100", "MNEME_AUDITOR_LINGER": "0.01"}
    return subprocess.Popen(
        [MNEME, "auditor", "--nats-url", url, "--data-dir", str(data)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


async def caught_up(nc: NATS, n: int, timeout: float = 60) -> None:
    """Ask the auditor an audit query that waits until sequence n is committed to the trail."""
    q = encoder.encode(AuditQuery(namespace="ns0", now=datetime.now(UTC), min_seq=n, limit=1))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = await nc.request(S.query_subject(AuditQuery.OPERATION), q, timeout=15)
            if msgspec.msgpack.decode(msg.data, type=Reply).applied_seq >= n:
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        await asyncio.sleep(0.1)
    raise AssertionError("the auditor did not catch up in time")


def trail_state(path: Path) -> tuple[int, list[int], tuple[int, int | None]]:
    trail = Trail(str(path))
    try:
        seqs = [
            r[0]
            for r in trail.con.execute(
                "SELECT source_seq FROM audit_trail WHERE source = 'events' ORDER BY trail_seq"
            ).fetchall()
        ]
        return trail.checkpoints["events"], seqs, trail.verify()
    finally:
        trail.close()


async def test_sigkill_during_10000_events_leaves_a_gap_free_verified_trail(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    url = nats_server.url or ""
    nc = await connect(url, "test")
    data = tmp_path / "auditor"
    try:
        await ensure_streams(nc.jetstream())
        proc = start_auditor(url, data)
        db = data / "audit.duckdb"
        deadline = time.monotonic() + 30
        while not db.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        # publish while the auditor folds; kill it part-way through
        pairs = list(history(N, n_memories=2000, namespaces=3, seed=11))
        await publish(nc.jetstream(), iter(pairs[: N // 2]))
        await asyncio.sleep(0.3)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        killed_at, _, _ = trail_state(db)
        assert 0 < killed_at < N, f"the kill should land part-way through (checkpoint {killed_at})"
        await publish(nc.jetstream(), iter(pairs[N // 2 :]))

        proc = start_auditor(url, data)
        try:
            await caught_up(nc, N)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0, proc.stderr.read().decode() if proc.stderr else ""
        finally:
            if proc.poll() is None:
                proc.kill()
        checkpoint, seqs, (checked, broken) = trail_state(db)
        assert checkpoint == N
        assert seqs == list(range(1, N + 1)), "gap or duplicate in the trail"
        assert (checked, broken) == (N, None)
    finally:
        await close_nats(nc)
