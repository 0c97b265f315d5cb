"""A generation: one set of read models and the followers that fold into them. Blue/green: a projector serves
from one generation; a replay builds the next, which is caught up and then swapped in."""

from __future__ import annotations

from dataclasses import dataclass

from mneme.follow import LogFollower
from services.projector.code_view import CodeView
from services.projector.memories_view import MemoriesView
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
