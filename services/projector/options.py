"""What a projector is given beyond its read models: how it folds and answers (`Tuning`: the operator's
ProjectorSettings, or a frozen copy's fold), and, for the projector serving a data directory, its control plane
(`Control`: `mneme replay`'s swap and `mneme snapshot`'s requests, periodic snapshots)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from services.projector.memories_view import MemoriesView
from services.projector.vector_view import VectorView

Opener = Callable[[Path], tuple[MemoriesView, VectorView | None]]


@dataclass(frozen=True)
class Tuning:
    batch_max: int = 5000  # events a follower stages before it commits
    catch_up_batch: int | None = None  # the rows' commits while catching up (LogFollower)
    wait_timeout: float = 5.0  # how long a query waits for its min_seq (then PROJECTION_LAG)
    linger: float = 0.1  # how long a follower waits for more events before it commits
    access_linger: float = 1.0  # read records: statistics nobody waits for (a waiter commits)
    vector_batch_max: int = 2000
    stop_at: int | None = None  # fold the log only up to this sequence (a point-in-time copy)
    fold_access: bool = True  # fold the access records (statistics); a frozen copy does not


@dataclass(frozen=True)
class Control:
    control_id: str  # listens on mneme.ctl.<control_id>.swap / .snapshot
    opener: Opener | None = None  # opens the generation a swap names
    snapshots: Path | None = None  # where snapshots are written (on request, and every `snapshot_every` events)
    snapshot_every: int = 0
