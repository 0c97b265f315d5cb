"""The auditor process: follows the log from its own checkpoint into the hash-chained trail."""

from __future__ import annotations

from nats.aio.client import Client as NATS

from mneme.follow import LogFollower
from services.auditor.trail import Trail


class Auditor:
    def __init__(self, nc: NATS, trail: Trail, *, batch_max: int = 5000, linger: float = 0.5):
        self.trail = trail
        self.follower = LogFollower(nc.jetstream(), trail, batch_max=batch_max, linger=linger)

    @property
    def applied(self) -> int:
        return self.follower.applied

    async def start(self) -> None:
        await self.follower.start()

    async def stop(self) -> None:
        await self.follower.stop()
