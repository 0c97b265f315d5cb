"""A replay whose fold cannot go on ends with the reason instead of waiting for ever (issue 14: every wait
bounded with a clear error, never a hang).

The disk of the copy fills (a file-size limit, RLIMIT_FSIZE, on the `mneme replay` child, as in
tests/test_disk_full.py): every commit fails. Before, the replay retried for ever with its progress line
frozen; now it stops once nothing has moved for MNEME_PROJECTOR_CATCH_UP_STALL_S seconds, exits 1 naming
the follower's reason, and leaves no half-built copy. Real nats-server, DuckDB and `mneme` command.
"""

from __future__ import annotations

import os
import resource
import subprocess
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mneme.catch_up import CatchUpStalled, StallWatch
from mneme.embedded_nats import EmbeddedNats
from schemas import subjects as S
from schemas.events import MemoryCreated, encode_envelope
from tests.harness import MNEME, forged_envelope, log_writer

pytestmark = pytest.mark.anyio

LIMIT = 2_000_000  # bytes any one file of the replay may reach
N, CONTENT = 600, 8_000  # ~4.8 MB of contents: past the limit


async def test_a_replay_on_a_full_disk_fails_with_the_reason(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    url = nats_server.url or ""
    async with log_writer(nats_server) as js:
        for i in range(N):
            mid = str(uuid.uuid4())
            ev = MemoryCreated(memory_id=mid, version=1, content=f"{i} " + "y" * CONTENT)
            await js.publish(S.memory_subject("default", None, mid), encode_envelope(forged_envelope(ev, mid)))
        head = (await js.stream_info(S.EVENTS_STREAM)).state.last_seq

    def small_disk() -> None:  # in the child, before exec
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    env = {**os.environ, "MNEME_PROJECTOR_VECTORS": "off", "MNEME_PROJECTOR_CATCH_UP_STALL_S": "3"}
    out = tmp_path / "copy"
    t0 = time.monotonic()
    proc = subprocess.run(
        [MNEME, "replay", "--data-dir", str(tmp_path / "d"), "--nats-url", url, "--output", str(out)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=small_disk,
        check=False,
    )
    took = time.monotonic() - t0
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert last.startswith("mneme: replay failed: CatchUpStalled: folding stopped at sequence"), last
    assert f"of {head} (nothing moved for" in last and "projector-rows: commit failed" in last, last
    assert "File too large" in last, last  # the commit's own error, as DuckDB gave it
    assert took < 60, took  # the 3 s bound, plus starting, the commits' retries and stopping
    assert not out.exists()  # nothing half-built is left


def follower(staged: int, committed: int, *, stalled: str | None = None, fold_failed: bool = False) -> Any:
    return SimpleNamespace(
        staged=staged, committed=committed, stalled=stalled, fold_failed=fold_failed, consumer="c", stream="S"
    )


def test_the_watch_waits_while_positions_move_and_stops_at_once_on_a_failed_fold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr("mneme.catch_up.time.monotonic", lambda: now[0])
    f = follower(10, 5)
    watch = StallWatch([f], after=30)
    for step in range(10):  # moving a little every 20 s: never stalled
        now[0] += 20
        f.staged += 1 if step % 2 else 0
        f.committed += 0 if step % 2 else 1
        watch.check(100)
    now[0] += 30
    watch.check(100)  # 30 s without a move: not yet past the bound
    now[0] += 1
    with pytest.raises(CatchUpStalled, match=r"stopped at sequence 10 of 100 \(nothing moved for 31 s\): no events"):
        watch.check(100)

    bad = follower(7, 7, stalled="fold failed in EVENTS #8..#8: KeyError: 'x'", fold_failed=True)
    with pytest.raises(CatchUpStalled, match=r"^folding stopped at sequence 7 of 9: c: fold failed in EVENTS #8"):
        StallWatch([follower(9, 9), bad], after=None).check(9)
    StallWatch([follower(1, 1)], after=None).check(9)  # no bound, no failure: waits
