"""Read-your-writes (invariant 3): the one place that knows which log position a read must wait for.

DESIGN.md keys the mark per client session. mcp 2.x's 2026-07-28 protocol is stateless (each request stands
alone, with no session to hang a mark on), so the mark is kept per gateway: every read through this gateway
waits for every write made through it, a superset of read-your-writes that costs nothing measurable (the
projector applies the log in order anyway). Reads through another gateway: consistency="linearizable", which
waits for the head of the log instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mneme.eventlog import EventLogInterface

Consistency = Literal["gateway", "linearizable"]


@dataclass
class ReadYourWrites:
    log: EventLogInterface
    consistency: Consistency = "gateway"
    high_water: int = 0

    async def mark(self) -> int:
        """The position a read waits for: this gateway's last write, or the head of the log (linearizable)."""
        if self.consistency == "linearizable":
            return await self.log.last_seq()
        return self.high_water

    def wrote(self, seq: int) -> None:
        """A write landed at `seq`: later reads wait for it."""
        self.high_water = max(self.high_water, seq)

    def went_back(self, head: int) -> None:
        """The log ends before the mark (it lost events: QueryClient.answer): wait for what it holds."""
        self.high_water = min(self.high_water, head)
