"""What the projector's and the auditor's query servers share, written once.

Both answer NATS request/reply queries (msgpack in, a `Reply` out) from read models that followers of the
log keep. Before a query runs, the read model must have applied the caller's `min_seq` (read-your-writes);
a read model that does not get there within the wait answers PROJECTION_LAG with the same details from
either service, never a silent answer from behind. Errors map to replies the same way: a `MnemeError` as
itself, an undecodable query as INVALID_INPUT, anything else as INTERNAL (logged; a query never takes a
service down). Each request runs as a task of its own; `drain` lets running ones finish at shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import msgspec
from nats.aio.msg import Msg

from mneme.errors import MnemeError, ProjectionLag
from mneme.follow import LogFollower
from schemas.queries import Reply, encoder


async def wait_applied(waits: list[tuple[LogFollower, str]], need: int, timeout: float, *,
                       committed: bool = True) -> None:  # fmt: skip
    """Wait (up to `timeout` each) until every follower has applied `need` (committed, or only staged);
    raise PROJECTION_LAG naming the first read model still behind (`waits`: follower and what it keeps)."""
    lagging = [(f, what) for f, what in waits if not await f.wait_for(need, timeout, committed=committed)]
    if lagging:
        follower, what = lagging[0]
        behind = follower.committed if committed else follower.applied
        raise ProjectionLag(
            f"the {what} has applied sequence {behind}, not yet {need}; retry shortly",
            details={"applied_seq": behind, "min_seq": need},
        )


def error_reply(exc: BaseException, applied: int, log: logging.Logger, what: str) -> Reply:
    """The reply a failed query gets (the same mapping in every service)."""
    if isinstance(exc, MnemeError):
        return Reply(applied_seq=applied, error=exc.to_dict())
    if isinstance(exc, msgspec.DecodeError | msgspec.ValidationError):
        return Reply(applied_seq=applied, error={"code": "INVALID_INPUT", "message": f"bad query: {exc}"})
    log.error("query %s failed", what, exc_info=exc)
    return Reply(applied_seq=applied, error={"code": "INTERNAL", "message": type(exc).__name__})


class QueryServer:
    """One task per request; the reply is sent whatever happens (the asker may be gone: logged at debug)."""

    def __init__(self, log: logging.Logger):
        self.log = log
        self.tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def serve(self, answer: Callable[[Msg], Awaitable[Reply]]) -> Callable[[Msg], Awaitable[None]]:
        """A subscription callback that answers each request with `answer` in a task of its own."""

        async def on_msg(msg: Msg) -> None:
            self.spawn(self._respond(msg, answer))

        return on_msg

    async def _respond(self, msg: Msg, answer: Callable[[Msg], Awaitable[Reply]]) -> None:
        try:
            reply = await answer(msg)
        except BaseException as exc:  # an answer that raised still gets a reply
            if isinstance(exc, asyncio.CancelledError):
                raise
            reply = error_reply(exc, 0, self.log, msg.subject)
        try:
            await msg.respond(encoder.encode(reply))
        except Exception:  # noqa: BLE001 - the asker may be gone
            self.log.debug("could not reply to %s", msg.subject)

    async def drain(self, timeout: float) -> None:
        """Let running requests (and other spawned tasks) finish, for at most `timeout` seconds."""
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=timeout)
