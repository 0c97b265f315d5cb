"""Blue/green: a projector serves from one generation of read models while the next is built (`mneme replay`
asks over the control plane, naming the new generation's directory): the new generation's followers start
from its own checkpoints and catch up with the log while the current one keeps answering, then one
assignment swaps it in. The old generation finishes the queries it is running and is stopped, or, when its
followers also feed other sinks (the code index), they go on feeding those without its views.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Protocol

from nats.js import JetStreamContext

from mneme.follow import LogFollower
from mneme.sink import FanOut
from schemas import subjects as S
from schemas.control import SwapReply, SwapRequest
from services.projector.generation import Generation, close_generation
from services.projector.memories_view import MemoriesView
from services.projector.options import Control
from services.projector.vector_view import VectorView

log = logging.getLogger("mneme.projector")


class Swapping(Protocol):
    """What a swap needs of its projector (services/projector/service.py's Projector)."""

    gen: Generation
    js: JetStreamContext
    swap_lock: asyncio.Lock
    retired: list[LogFollower]  # swapped-out followers still feeding other sinks (the trail)
    control: Control | None

    @property
    def applied(self) -> int: ...

    def generation(self, view: MemoriesView, vectors: VectorView | None) -> Generation: ...


async def swap(p: Swapping, view: MemoriesView, vectors: VectorView | None) -> Generation:
    """Serve from a new generation: start its followers (from its own checkpoints), let it catch up with
    the log while the current one keeps answering, then switch in one step. The old generation finishes
    the queries it is running and is returned, stopped, for the caller to close."""
    async with p.swap_lock:
        old = p.gen
        new = p.generation(view, vectors)  # its own followers; the trail stays with the old ones
        await new.start()
        if vectors is not None:  # a new model (a replay --model) answers semantic search before it serves
            vectors.start_filler()
            await asyncio.to_thread(vectors.model.wait, 600)
            await asyncio.to_thread(vectors.fill_pending)
        while True:
            head = (await p.js.stream_info(S.EVENTS_STREAM)).state.last_seq
            if await new.caught_up(head, 60) and head == (await p.js.stream_info(S.EVENTS_STREAM)).state.last_seq:
                while vectors is not None and vectors.dense_applied < vectors.committed:  # the filler's last
                    await asyncio.sleep(0.01)
                break
        p.gen = new  # one assignment: every query from here on reads the new generation
        log.info("projector swapped to %s at sequence %d", view.path, new.follower.applied)
        while old.inflight:
            await asyncio.sleep(0.01)
        if old.followers_own:
            for f in old.followers:
                await f.stop()
        else:  # the old followers keep feeding the other sinks (the code index), without the old views
            for follower, sink in (
                (old.follower, old.view),
                (old.access_follower, None),
                (old.vector_follower, old.vectors),
            ):
                if follower is None:
                    continue
                if isinstance(follower.sink, FanOut):
                    follower.sink.remove(sink if sink is not None else follower.sink.sinks[0])
                    await follower.idle()
                    p.retired.append(follower)
                else:
                    await follower.stop()
        return old


async def answer_swap(p: Swapping, req: SwapRequest) -> SwapReply:
    """The control plane's swap request: open the generation it names, swap it in, close the old one."""
    assert p.control is not None and p.control.opener is not None
    view, vectors = await asyncio.to_thread(p.control.opener, Path(req.path))
    old = await swap(p, view, vectors)
    close_generation(old)
    return SwapReply(ok=True, seq=p.applied, path=view.path)


def swap_failed(exc: Exception) -> SwapReply:  # reported to the replay command
    return SwapReply(ok=False, error=f"{type(exc).__name__}: {exc}")
