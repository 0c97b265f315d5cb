"""Every running service says it is alive, and how it is doing, in a NATS key-value bucket.

Each process (a `mneme serve`, a gateway, a projector replica, an auditor) puts one JSON value under
`<role>.<host>-<pid>` in the bucket MNEME_SERVICES every `every` seconds; the bucket forgets a key a
minute after its last put, so a process that died disappears, and one that stopped beating for longer
than three periods shows as stale first. `mneme status` reads the bucket: every service with its own
figures (a projector's position and dead letters, a gateway's calls, refusals and calls in flight).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import BucketNotFoundError, NotFoundError

from mneme import __version__

log = logging.getLogger("mneme.heartbeat")

BUCKET = "MNEME_SERVICES"
TTL = 60.0  # seconds a key outlives its last put
EVERY = 5.0


async def ensure_bucket(js: JetStreamContext, *, replicas: int = 1) -> None:
    try:
        await js.key_value(BUCKET)
        return
    except (BucketNotFoundError, NotFoundError):
        pass
    await js.create_key_value(
        KeyValueConfig(
            bucket=BUCKET,
            description="mneme: the running services and their figures (mneme status)",
            history=1,
            ttl=TTL,
            storage=StorageType.FILE,  # (kept across a restart of nats-server: no bucket to make again)
            replicas=replicas,
        )
    )


class Heartbeat:
    def __init__(self, nc: NATS, role: str, figures: Callable[[], dict[str, Any]], *, every: float = EVERY):
        self.nc, self.role, self.figures, self.every = nc, role, figures, every
        self.key = f"{role}.{socket.gethostname()}-{os.getpid()}".replace(" ", "_")
        self.started_at = time.time()
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    def value(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "role": self.role,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "version": __version__,
            "started_at": self.started_at,
            "at": time.time(),
            "every": self.every,
        }
        try:
            out.update(self.figures())
        except Exception as exc:  # noqa: BLE001 - a figure that fails must not stop the beat
            out["figures_error"] = f"{type(exc).__name__}: {exc}"
        return out

    async def beat(self) -> None:
        kv = await self.nc.jetstream().key_value(BUCKET)
        await kv.put(self.key, json.dumps(self.value(), default=str).encode())

    async def start(self) -> None:
        self._stopping = asyncio.Event()
        self._task = asyncio.create_task(self._loop(self._stopping), name=f"heartbeat-{self.role}")

    async def _loop(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                await self.beat()
            except Exception as exc:  # noqa: BLE001 - NATS away, or no bucket (an old deployment): try again later
                log.debug("heartbeat not sent: %s", exc)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.every):
                    await stopping.wait()

    async def stop(self) -> None:
        if self._task is not None:
            # the event ends the loop even when the cancel is lost (it can be, landing in nats-py's request as the
            # reply does: asyncio.wait_for on 3.11)
            self._stopping.set()
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(Exception):  # gone at once from `mneme status`, not a minute later
            kv = await self.nc.jetstream().key_value(BUCKET)
            async with asyncio.timeout(2.0):
                await kv.delete(self.key)


async def services(js: JetStreamContext) -> list[dict[str, Any]]:
    """Every service's last value, with `age` (seconds since its last beat) and `state` (up or stale).

    Read from the bucket's stream directly (its subjects, then each one's last message): nats-py's
    `kv.keys()` opens a watcher and gives up after a fixed wait, and on a busy machine an empty answer
    from it looked like "nothing is running". Errors here propagate: the caller reports them.
    """
    stream, prefix = f"KV_{BUCKET}", f"$KV.{BUCKET}."
    try:
        info = await js.stream_info(stream, subjects_filter=prefix + ">")
    except NotFoundError:
        return []
    out = []
    now = time.time()
    for subject in sorted(info.state.subjects or {}):
        try:
            msg = await js.get_last_msg(stream, subject)
        except NotFoundError:  # deleted between the listing and the read
            continue
        if not msg.data or (msg.headers or {}).get("KV-Operation") in ("DEL", "PURGE"):
            continue
        v = json.loads(msg.data)
        v["key"] = subject.removeprefix(prefix)
        v["age"] = round(now - float(v.get("at", 0)), 1)
        v["state"] = "up" if v["age"] <= 3 * float(v.get("every", EVERY)) else "stale"
        out.append(v)
    return out
