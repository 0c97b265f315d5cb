"""What the projector's and the auditor's request/reply planes share, written once, on FastStream.

Both answer NATS request/reply: queries (msgpack in, a `Reply` out) from read models that followers of the
log keep, and (the projector) the control plane's swap and snapshot requests (JSON both ways). Each service
builds one `NatsRouter` per plane with typed handlers (a msgspec request in, a msgspec reply out) and serves it
through its `Plane`, the small application object that owns the FastStream broker on the service's NATS
connection. What the handlers share lives here:

- waiting for `min_seq` (`wait_applied`): a read model that does not get there within the wait answers
  PROJECTION_LAG with the same details from either service, never a silent answer from behind;
- error mapping (`error_reply`): a `MnemeError` as itself, an undecodable query as INVALID_INPUT, anything
  else as INTERNAL (logged; a request never takes a service down). Decoding happens inside the handler, so an
  undecodable request is answered too (FastStream drops a message its decoder rejects);
- concurrency: every request runs as a task of its own, so a query waiting for its `min_seq` never holds the
  others back. The broker subscribes through `_RequestConnection`, which starts FastStream's callback for each
  message as a task; FastStream's own `max_workers` (an anyio memory stream and task group per subscriber,
  two semaphores per message) measured about 160 µs a request slower on two cores, a task ~25 µs;
- draining (`Plane.stop`): unsubscribe first (new requests go to another replica, or find no responders),
  then let the running ones finish, for at most the given time (the rest are cancelled), then stop the broker.

The log followers are not here: they stay on nats-py's ordered consumer (mneme/follow.py; see
docs/decisions/0015-faststream-for-request-reply-only.md). What is cheapest on FastStream 0.7.8, measured per
request on two busy cores against a bare nats-py responder (≈270 µs round trip): FastStream's dependency injection
off (`apply_types=False`; MEASURED.md: a Context parameter costs ~7×) and its per-message logging off; the handler
gets FastStream's message (body and reply subject, no decoding by FastStream) and sends the reply itself, as bytes
without headers (FastStream's own reply adds content-type and correlation-id headers that both sides then parse:
+~50 µs); no acknowledgement middleware (core request/reply has nothing to ack). All told ≈+120 µs a request."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import msgspec
from faststream.message import StreamMessage
from faststream.middlewares import AckPolicy
from faststream.nats import NatsBroker, NatsRouter
from nats.aio.client import Client as NATS

from mneme.errors import InvalidInput, MnemeError, ProjectionLag
from mneme.follow import LogFollower
from mneme.logs import HEADER, request_id
from schemas import control
from schemas.queries import Reply, encoder

Q = TypeVar("Q")
A = TypeVar("A")
R = TypeVar("R", bound=msgspec.Struct)


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


@dataclass(frozen=True, slots=True)
class Answer:
    """A query's answer handed over in process (a gateway beside its projector: `mneme serve`): the result as
    the read model made it, with no codec on either side; over NATS the same answer travels as a Reply."""

    applied_seq: int
    result: Any

    def reply(self) -> Reply:
        return Reply(applied_seq=self.applied_seq, result=msgspec.Raw(encoder.encode(self.result)))


async def answered(answer: Callable[[Q], Awaitable[A]], query: Q, applied: Callable[[], int],
                   log: logging.Logger, what: str) -> A | Reply:  # fmt: skip
    """`answer`'s reply to a decoded query, or the reply its failure maps to (over NATS, or asked in process)."""
    try:
        return await answer(query)
    except Exception as exc:  # noqa: BLE001 - every failure is a reply
        return error_reply(exc, applied(), log, what)


def too_large(size: int, limit: int) -> InvalidInput:
    """An answer over one NATS message (the server's max_payload): refused, naming what to change."""
    return InvalidInput("limit", f"the answer is {size:,} bytes, over the {limit:,} bytes one NATS message holds: "
                                 "ask for fewer results (limit), or fewer ids at once")  # fmt: skip


def error_reply(exc: BaseException, applied: int, log: logging.Logger, what: str) -> Reply:
    """The reply a failed query gets (the same mapping in every service)."""
    if isinstance(exc, MnemeError):
        return Reply(applied_seq=applied, error=exc.to_dict())
    if isinstance(exc, msgspec.DecodeError | msgspec.ValidationError):
        return Reply(applied_seq=applied, error={"code": "INVALID_INPUT", "message": f"bad query: {exc}"})
    log.error("query %s failed", what, exc_info=exc)
    return Reply(applied_seq=applied, error={"code": "INTERNAL", "message": type(exc).__name__})


class _MessageCodec:
    """FastStream codec: the handler gets FastStream's message as it is (its body is decoded by the handler's
    typed msgspec decoder, so a bad body is still answered; it replies to its reply subject itself)."""

    async def decode(self, msg: StreamMessage[Any]) -> StreamMessage[Any]:
        return msg

    async def encode(self, msg: Any, serializer: Any = None) -> tuple[bytes, str | None]:
        return msg, None  # nothing is published through the broker


class _RequestConnection:
    """The service's NATS connection as its broker sees it: all of it passes through, except that a
    subscription's callback (FastStream's `consume`) runs for each message as a task of its own, kept in
    `running` until its reply is sent. nats-py awaits a subscription's callbacks one after another."""

    def __init__(self, nc: NATS, running: set[asyncio.Task[Any]]):
        self._nc = nc
        self._running = running

    def __getattr__(self, name: str) -> Any:
        return getattr(self._nc, name)

    async def subscribe(self, subject: str, queue: str = "", cb: Any = None, **kwargs: Any) -> Any:
        if cb is None:
            return await self._nc.subscribe(subject, queue=queue, **kwargs)
        running, create_task = self._running, asyncio.create_task

        async def spawn(msg: Any) -> None:
            task = create_task(cb(msg))
            running.add(task)
            task.add_done_callback(running.discard)

        return await self._nc.subscribe(subject, queue=queue, cb=spawn, **kwargs)


class _SharedConnectionBroker(NatsBroker):
    """A NatsBroker on a connection the service already has (and closes itself): one connection per process
    part, as before, with its reconnect settings; stopping the broker leaves the connection open."""

    def __init__(self, nc: NATS, running: set[asyncio.Task[Any]], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shared = cast(NATS, _RequestConnection(nc, running))

    async def _connect(self) -> NATS:
        self.config.connect(self._shared)
        return self._shared

    async def stop(self, *args: Any) -> None:
        self._connection = None  # not drained or closed here: its owner does that
        await super().stop(*args)


class Plane:
    """One service's request/reply planes: a FastStream broker on the service's connection, the routers it
    serves, the requests running now. `router()` gives a new router; `query` and `control` add typed handlers
    to it; `serve(router)` subscribes them (a projector serves its query router only once caught up);
    `stop(timeout)` drains."""

    def __init__(self, nc: NATS, log: logging.Logger):
        self.nc = nc
        self.log = log
        self.running: set[asyncio.Task[Any]] = set()  # the requests being answered now
        self.broker = _SharedConnectionBroker(
            nc, self.running, apply_types=False, codec=_MessageCodec(), logger=None, graceful_timeout=None
        )
        self._routers: list[NatsRouter] = []
        self._closed = False
        self._subscribing = asyncio.Lock()  # a stop never races a serve still subscribing

    @staticmethod
    def router() -> NatsRouter:
        return NatsRouter()

    def query(
        self,
        router: NatsRouter,
        subject: str,
        queue: str,
        query_type: type[Q],
        answer: Callable[[Q], Awaitable[Reply]],
        applied: Callable[[], int],
    ) -> None:
        """Answer `query_type` requests on `subject` (queue group `queue`) with `answer`; a failure is a
        Reply with the error (mapped by `error_reply`), at the read model's `applied()` position."""
        decode = msgspec.msgpack.Decoder(query_type).decode
        encode, log, what = encoder.encode, self.log, subject

        async def handle(msg: StreamMessage[Any]) -> None:
            if msg.headers and (rid := msg.headers.get(HEADER)):
                request_id.set(rid)  # the call this query serves, in this handler's log lines
            try:
                query = decode(msg.body)
            except Exception as exc:  # noqa: BLE001 - an undecodable query is answered too
                reply = error_reply(exc, applied(), log, what)
            else:
                reply = await answered(answer, query, applied, log, what)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("query %s answered at %d", what, reply.applied_seq)
            data = encode(reply)
            if len(data) > self.nc.max_payload:  # NATS would drop it: the asker would wait out its timeout
                data = encode(error_reply(too_large(len(data), self.nc.max_payload), reply.applied_seq, log, what))
            await self._respond(msg, data)

        self._subscribe(router, subject, queue, handle)

    def control(
        self,
        router: NatsRouter,
        subject: str,
        request_type: type[Q],
        answer: Callable[[Q], Awaitable[R]],
        failed: Callable[[Exception], R],
    ) -> None:
        """Answer control requests (JSON, schemas/control.py) on `subject` with `answer`; a failure is the
        reply `failed(exc)` builds (logged)."""
        log = self.log

        async def handle(msg: StreamMessage[Any]) -> None:
            try:
                reply = await answer(control.decode_as(msg.body, request_type))
            except Exception as exc:  # reported to the asker (logged)
                log.exception("%s failed", subject)
                reply = failed(exc)
            await self._respond(msg, control.encode(reply))

        self._subscribe(router, subject, "", handle)

    @staticmethod
    def _subscribe(router: NatsRouter, subject: str, queue: str, handle: Callable[..., Awaitable[None]]) -> None:
        # the handler replies itself (no_reply); core NATS has nothing to acknowledge (MANUAL: no ack middleware).
        # Not in FastStream's AsyncAPI: it builds pydantic models of handler parameters and cannot describe msgspec
        # types; schemas/asyncapi.py describes these subjects (tests/test_asyncapi.py checks they match).
        router.subscriber(subject, queue=queue, no_reply=True, ack_policy=AckPolicy.MANUAL, include_in_schema=False)(
            handle
        )

    async def _respond(self, msg: StreamMessage[Any], data: bytes) -> None:
        if not msg.reply_to:
            return
        try:
            await self.nc.publish(msg.reply_to, data)
        except Exception:  # noqa: BLE001 - the asker may be gone
            self.log.debug("could not reply on %s", msg.reply_to)

    async def serve(self, router: NatsRouter) -> bool:
        """Subscribe `router`'s handlers now (on a stopped plane: nothing, False)."""
        async with self._subscribing:
            if self._closed:
                return False
            await self.broker.connect()
            self.broker.include_router(router)
            self._routers.append(router)
            for sub in router.subscribers:
                await sub.start()
            try:  # subscribed at the server before anyone is told we serve (while NATS is away: when it is back)
                await self.broker.connection.flush(timeout=2)
            except Exception:  # noqa: BLE001 - the subscriptions are resent on reconnect
                self.log.debug("serving before the server confirmed the subscriptions")
            return True

    @property
    def subjects(self) -> list[str]:
        """The subjects served now."""
        return [sub.subject.broker_address for r in self._routers for sub in r.subscribers]  # type: ignore[attr-defined]

    async def stop(self, timeout: float) -> None:
        """Stop taking requests, let running ones finish (at most `timeout` s; the rest are cancelled), then stop
        the broker."""
        async with self._subscribing:
            self._closed = True
            for router in self._routers:
                for sub in router.subscribers:
                    nats_sub, sub.subscription = sub.subscription, None  # type: ignore[attr-defined]
                    if nats_sub is not None:
                        try:
                            await nats_sub.unsubscribe()
                        except Exception:  # noqa: BLE001 - shutting down; the connection may be gone
                            pass
        if self.running:
            await asyncio.wait(set(self.running), timeout=timeout)
        for task in set(self.running):  # past the drain: not answered (the asker times out, as from a dead one)
            task.cancel()
        await self.broker.stop()


class Tasks:
    """A service's background tasks; `drain` lets them finish, for at most some seconds."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def drain(self, timeout: float) -> None:
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=timeout)
