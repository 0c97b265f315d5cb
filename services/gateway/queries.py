"""Asking a projector: NATS request/reply to the queue group, typed both ways."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec
import nats.errors
from nats.aio.client import Client as NATS

from mneme.errors import MnemeError, ProjectionLag, Unavailable, from_dict
from mneme.logs import HEADER, request_id
from mneme.query_server import Answer
from schemas import subjects as S
from schemas.queries import QUERY_TYPES, REPAIR_TYPES, RESULT_TYPES, Query, Reply, encoder
from services.gateway.access_log import Answered

T = TypeVar("T")
Q = TypeVar("Q", bound=Query)

_reply = msgspec.msgpack.Decoder(Reply)
_results: dict[str, msgspec.msgpack.Decoder[Any]] = {op: msgspec.msgpack.Decoder(t) for op, t in RESULT_TYPES.items()}


_PROJECTOR_QUERIES = frozenset(QUERY_TYPES.values())
Local = Callable[[Query], Awaitable[Answer | Reply | None]]
Progress = Callable[[], dict[str, Any] | None]
MODEL_LOADING = "EMBEDDING_MODEL_LOADING"
log = logging.getLogger("mneme.gateway")
RETRY_AFTER_S = 2.0  # the hint a search still refused after the wait carries


class QueryClient:
    """`local`: a projector in this process (`mneme serve`) answers its queries without the NATS round trip,
    through the same answer and error mapping as its query plane; while it does not serve (a cold start, a
    stop) its answer is None and the query goes over NATS, and is asked again between the retries.
    `catching_up`: that projector's progress through the log it found at start (None once it serves), which
    an UNAVAILABLE answer carries while nobody serves queries."""

    def __init__(
        self,
        nc: NATS,
        *,
        timeout: float = 6.0,
        local: Local | None = None,
        catching_up: Progress | None = None,
        model_wait: float = 10.0,
    ):
        self.nc = nc
        self.timeout = timeout
        self.local = local
        self.catching_up = catching_up
        self.model_wait = model_wait
        # the log's last sequence, and who to tell when it is below what this gateway waits for (the log lost
        # acknowledged events: a power cut under a lazy sync, an older store put back): set by compose.gateway
        self.log_head: Callable[[], Awaitable[int]] | None = None
        self.log_behind: Callable[[int], None] | None = None

    async def ask(self, query: Query, *, wait_model: bool = True) -> Any:
        """The projector's answer to `query` (see `answer`)."""
        return (await self.answer(query, wait_model=wait_model)).result

    async def answer(self, query: Query, *, wait_model: bool = True) -> Answered:
        """The projector's answer to `query` (see `_ask_waiting`), with the query as asked and the position it
        was answered at (what a read record keeps). A query that waited in vain for a position past the log's
        last sequence (the log lost events this gateway wrote) is asked again for what the log holds, once, and
        the gateway's read-your-writes mark comes down to it."""
        try:
            return await self._ask_waiting(query, wait_model)
        except MnemeError as exc:
            if exc.code != ProjectionLag.code or query.min_seq <= 0 or self.log_head is None:
                raise
            head = await self.log_head()
            if head >= query.min_seq:
                raise
        log.warning("the log ends at %d, before %d this gateway wrote: reads wait for the log as it is", head,
                    query.min_seq)  # fmt: skip
        if self.log_behind is not None:
            self.log_behind(head)
        return await self._ask_waiting(msgspec.structs.replace(query, min_seq=head), wait_model)

    async def ask_confirmed(self, query: Q, missed: Callable[[Any], bool], head: Callable[[], Awaitable[int]]) -> Any:
        """`answer_confirmed`'s result."""
        return (await self.answer_confirmed(query, missed, head)).result

    async def answer_confirmed(
        self, query: Q, missed: Callable[[Any], bool], head: Callable[[], Awaitable[int]]
    ) -> Answered:
        """Ask; when what was asked for is missing (`missed(answer)`), ask again at the head of the log (`head()`):
        a memory or an entity another gateway wrote a moment ago is found, not reported missing."""
        got = await self.answer(query)
        if missed(got.result) and (at := await head()) > query.min_seq:
            got = await self.answer(msgspec.structs.replace(query, min_seq=at))
        return got

    async def _ask_waiting(self, query: Query, wait_model: bool) -> Answered:
        """A search that needs the embedding model while it still loads (the first seconds after a start) is
        asked again until the model is ready, for `model_wait` seconds at most, and only then refused, with a
        retry hint; `wait_model=False` refuses at once (a status probe)."""
        try:
            return await self._ask(query)
        except MnemeError as exc:
            if exc.code != MODEL_LOADING or not wait_model:
                raise
            if self.model_wait <= 0:
                raise _with_retry_hint(exc, 0.0) from None
        deadline = time.monotonic() + self.model_wait
        delay = 0.05
        while True:
            await asyncio.sleep(max(min(delay, deadline - time.monotonic()), 0.0))
            delay = min(delay * 2, 0.25)
            try:
                return await self._ask(query)
            except MnemeError as exc:
                if exc.code != MODEL_LOADING:
                    raise
                if time.monotonic() >= deadline:
                    raise _with_retry_hint(exc, self.model_wait) from None

    async def _ask(self, query: Query) -> Answered:
        op = query.OPERATION
        deadline = time.monotonic() + self.timeout
        here_too = self.local is not None and type(query) in _PROJECTOR_QUERIES
        if here_too and (here := await self._here(query, deadline)) is not None:
            return self._result(op, query, here)
        # (a repair goes to every replica over NATS, the one beside this gateway too: the first reply answers)
        subject = S.repair_subject(op) if op in REPAIR_TYPES else S.query_subject(op)
        data = encoder.encode(query)
        rid = request_id.get()
        headers = {HEADER: rid} if rid else None  # (the projector's log lines for it carry the call's id)
        delay = 0.02
        no_projector = False  # seen "no responders": nobody serves queries (yet), which is not lag
        while True:
            left = deadline - time.monotonic()
            if not self.nc.is_connected:
                if left <= delay:
                    raise Unavailable("NATS is unreachable; queries cannot reach a projector") from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.25)
                continue
            try:
                msg = await self.nc.request(subject, data, timeout=max(left, 0.05), headers=headers)
                break
            except nats.errors.NoRespondersError:
                no_projector = True
                if left <= delay:
                    raise self._no_projector() from None
            except (TimeoutError, nats.errors.TimeoutError):
                if no_projector:
                    raise self._no_projector() from None
                raise ProjectionLag(f"no projector answered {op} within {self.timeout:.0f} s") from None
            except (
                nats.errors.ConnectionClosedError,
                nats.errors.OutboundBufferLimitError,
                nats.errors.ConnectionReconnectingError,
                nats.errors.StaleConnectionError,
            ):
                if left <= delay:
                    raise Unavailable("NATS is unreachable; queries cannot reach a projector") from None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)
            # the projector in this process may have started serving meanwhile (a cold start that caught up):
            # it answers at once, where the next request would queue behind its catch-up's deliveries
            if here_too and (here := await self._here(query, deadline)) is not None:
                return self._result(op, query, here)
        return self._result(op, query, _reply.decode(msg.data))

    def _no_projector(self) -> Unavailable:
        progress = self.catching_up() if self.catching_up is not None else None
        if not progress:
            return Unavailable("no projector is serving queries yet; retry shortly")
        eta = progress.get("eta_s")
        left = f"about {eta:.0f} s left" if eta is not None else "starting"
        return Unavailable(
            f"the projection is catching up with the log ({progress['done']:,} of {progress['total']:,} events; "
            f"{left}); reads answer once it has: retry shortly",
            details=progress,
        )

    async def _here(self, query: Query, deadline: float) -> Answer | Reply | None:
        assert self.local is not None
        try:
            async with asyncio.timeout(max(deadline - time.monotonic(), 0.05)):
                return await self.local(query)
        except TimeoutError:
            raise ProjectionLag(f"no projector answered {query.OPERATION} within {self.timeout:.0f} s") from None

    @staticmethod
    def _result(op: str, query: Query, reply: Answer | Reply) -> Answered:
        if isinstance(reply, Answer):  # from the projector in this process: no codec
            result = reply.result
        else:
            if reply.error is not None:
                raise from_dict(reply.error)
            result = _results[op].decode(reply.result)
        return Answered(query, reply.applied_seq, result)


def _with_retry_hint(exc: MnemeError, waited: float) -> MnemeError:
    """A model still loading after the wait: the same code, with how long was waited and when to ask again."""
    waited_text = f" (waited {waited:.0f} s for it)" if waited > 0 else ""
    exc.message = f"{exc.message}; retry in {RETRY_AFTER_S:.0f} s{waited_text}"
    exc.args = (exc.message,)
    exc.details = {**exc.details, "retry_after_s": RETRY_AFTER_S, "waited_s": round(waited, 1)}
    return exc
