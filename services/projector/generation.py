"""A generation: one set of read models and the followers that fold into them, and how a projector wires them
(`wire`: which follower feeds which sink). Blue/green: a projector serves from one generation; a replay builds
the next, which is caught up and then swapped in (services/projector/blue_green.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from nats.js import JetStreamContext

from mneme.follow import LogFollower, access_follower
from mneme.sink import FanOut, Sink
from services.projector.access_view import AccessView
from services.projector.code_view import CodeView
from services.projector.graph_signal import GraphSignal
from services.projector.memories_view import MemoriesView
from services.projector.options import Tuning
from services.projector.search import Searcher
from services.projector.vector_view import VectorView


@dataclass
class Generation:
    """One set of read models and the followers that fold into them. Blue/green: a projector serves
    from one generation; a replay builds the next, which is caught up and then swapped in."""

    view: MemoriesView
    follower: LogFollower
    access_follower: LogFollower
    vectors: VectorView | None = None
    vector_follower: LogFollower | None = None
    searcher: Searcher | None = None
    code: CodeView | None = None  # the code index (one per data directory, fed as an extra sink)
    inflight: int = 0
    followers_own: bool = True  # False: the followers also feed other sinks (the code index)
    fold_access: bool = True

    @property
    def followers(self) -> list[LogFollower]:
        acc = self.access_follower if self.fold_access else None
        return [f for f in (self.follower, acc, self.vector_follower) if f is not None]

    async def start(self) -> None:
        for f in self.followers:
            await f.start()

    async def caught_up(self, target: int, timeout: float = 3600) -> bool:
        for f in (self.follower, self.vector_follower):
            if f is not None and not await f.wait_for(target, timeout):
                return False
        return True


def close_generation(gen: Generation) -> None:
    gen.view.close()
    if gen.vectors is not None:
        gen.vectors.close()


def embedding_in_background(gen: Generation) -> VectorView | None:
    """The generation's vector index when a filler embeds for it in the background with a model that is ready
    (what a semantic search waits for, and what writes in serve are paced against); else None."""
    v = gen.vectors
    return v if v is not None and v.background and v.model.ready else None


class Wiring(Protocol):
    """What wiring a generation needs of its projector (services/projector/service.py's Projector)."""

    js: JetStreamContext
    tuning: Tuning
    code: CodeView | None


def wire(
    p: Wiring,
    view: MemoriesView,
    vectors: VectorView | None,
    *,
    also: tuple[Sink, ...] = (),
    also_access: tuple[Sink, ...] = (),
    on_diverged: Callable[[str], None] | None = None,
) -> Generation:
    """A generation of these read models with its followers: the rows' (feeding `also` too), the access
    stream's (likewise `also_access`) and, when there are vectors, the vectors' own; `on_diverged` is told
    when a follower finds its read model ahead of the log."""
    sink: Sink = FanOut(view, *also) if also else view
    follower = LogFollower(
        p.js,
        sink,
        batch_max=p.tuning.batch_max,
        catch_up_batch=p.tuning.catch_up_batch,
        linger=p.tuning.linger,
        stop_at=p.tuning.stop_at,
        consumer="projector-rows",
    )
    access: Sink = AccessView(view)
    access = FanOut(access, *also_access) if also_access else access
    acc = access_follower(
        p.js, access, batch_max=p.tuning.batch_max, linger=p.tuning.access_linger, consumer="projector-access"
    )
    gen = Generation(
        view=view,
        follower=follower,
        access_follower=acc,
        followers_own=not (also or also_access),
        fold_access=p.tuning.fold_access,
    )
    if vectors is not None:  # a follower of its own: embedding never holds the rows back
        gen.vectors = vectors
        gen.vector_follower = LogFollower(
            p.js,
            vectors,
            batch_max=p.tuning.vector_batch_max,
            linger=p.tuning.linger,
            stop_at=p.tuning.stop_at,
            consumer="projector-vectors",
        )
        gen.searcher = Searcher(vectors.index, vectors.model, vectors.cache, vectors.bm25, GraphSignal(view))
    gen.code = p.code
    for f in gen.followers:
        f.on_diverged = on_diverged
    return gen
