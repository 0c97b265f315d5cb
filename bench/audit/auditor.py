"""bench.audit's auditors in their own processes: the probe (`--probe-auditor`: the Auditor's followers around a
trail that notes its commits) and the real `mneme auditor`, asked audit queries.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import nats.errors
from nats.aio.client import Client as NATS

from bench import fixtures
from bench.audit.config import NS, TRAIL_FILE
from bench.audit.trail import TimedTrail
from bench.common import cpu_seconds
from bench.fixtures import tail
from mneme.app import compose, gc_policy
from mneme.app.compose import close_nats, connect
from mneme.app.settings import AuditorSettings
from schemas import subjects as S
from schemas.queries import AuditQuery, AuditResult, Reply
from schemas.queries import encoder as query_encoder

# -- the auditor-shape probe: its own process --------------------------------------------------------


def probe_main(data_dir: Path, url: str) -> None:
    """`--probe-auditor`: the Auditor's two followers (AuditorSettings) into a TimedTrail, until SIGTERM;
    then the commit notes go to commits.json. It answers no audit queries (the real auditor does)."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")

    async def run() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        nc = await connect(url, "bench-audit-probe")
        trail = fixtures.trail(data_dir / TRAIL_FILE, TimedTrail)
        aus = AuditorSettings()
        aud = compose.auditor(nc, trail, aus)
        try:
            for f in aud.followers:
                await f.start()
            (data_dir / "ready").write_text(str(os.getpid()))
            await stop.wait()
        finally:
            await aud.stop()
            (data_dir / "commits.json").write_text(json.dumps(trail.commits))
            trail.close()
            await close_nats(nc)

    gc_policy.tune()  # (as `mneme auditor` runs)
    asyncio.run(run())


# -- talking to the real auditor ------------------------------------------------------------------------

_reply = msgspec.msgpack.Decoder(Reply)
_audit_result = msgspec.msgpack.Decoder(AuditResult)


async def audit_ask(nc: NATS, *, timeout: float = 30.0, **filters: Any) -> tuple[int, int]:
    """One audit query over all namespaces: (the auditor's committed event checkpoint, matching records).
    The auditor commits what it has staged before it answers (and waits for `min_seq`, up to 10 s)."""
    q = AuditQuery(namespace=NS, now=datetime.now(UTC), namespaces=("*",), limit=1, **filters)
    msg = await nc.request(S.query_subject(AuditQuery.OPERATION), query_encoder.encode(q), timeout=timeout)
    reply = _reply.decode(msg.data)
    if reply.error is not None:
        raise RuntimeError(f"audit query failed: {reply.error}")
    return reply.applied_seq, _audit_result.decode(reply.result).total


async def wait_auditor_ready(
    nc: NATS, proc: subprocess.Popen[bytes], log_path: Path, timeout: float = 60
) -> tuple[float, float]:
    """When the real auditor first answered: (perf_counter time the answered query was sent, the
    process's CPU seconds then). It subscribes to audit queries right after starting its followers."""
    deadline = time.perf_counter() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"`mneme auditor` exited with {proc.returncode}: {tail(log_path)}")
        cpu = cpu_seconds(proc.pid)
        sent = time.perf_counter()
        try:
            await audit_ask(nc, timeout=15)
            return sent, cpu
        except (TimeoutError, nats.errors.NoRespondersError, nats.errors.TimeoutError):
            pass
        if time.perf_counter() > deadline:
            raise RuntimeError(f"`mneme auditor` did not answer within {timeout} s: {tail(log_path)}")
        await asyncio.sleep(0.01)


async def until_total(nc: NATS, access: int, timeout: float = 30) -> None:
    """Ask the real auditor until its trail holds every access record."""
    deadline = time.perf_counter() + timeout
    while True:
        _, total = await audit_ask(nc, action="read:")
        if total >= access:
            return
        if time.perf_counter() > deadline:
            raise RuntimeError(f"`mneme auditor` holds {total} of {access} read records after {timeout} s")
        await asyncio.sleep(0.01)
