"""The gateway's write side: load state from a projector, decide, append; retry on conflict.

A handler is load → pure decide → one append. On a concurrency conflict it reloads
with `min_seq` set to the sequence that beat it and decides again, a bounded number
of times (invariant 4). It never writes a read model (invariant 1).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import msgspec

from mneme.domain import decider
from mneme.domain.state import MemoryState, evolve
from mneme.errors import IdempotencyKeyReused, MemoryNotFound, MnemeError
from mneme.eventlog import EventLogInterface, WrongLastSequence
from mneme.ids import envelope, memory_id_for, request_key
from schemas import subjects as S
from schemas.commands import (
    CreateMemory,
    DeleteMemory,
    DeprecateMemory,
    InvalidateMemory,
    LockMemory,
    MoveMemory,
    RestoreMemory,
    UnlockMemory,
    UpdateMemory,
    VerifyMemory,
)
from schemas.events import Actor, AnyEvent, Envelope, encode_envelope
from schemas.queries import GetMemory, PathOwner
from services.gateway.pacing import IndexPacer
from services.gateway.path_claims import PathClaims, claim_expects
from services.gateway.queries import QueryClient
from services.gateway.retry import until_not_beaten

Clock = Callable[[], datetime]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# the commands that act on an existing memory: every one but a create
Change = (
    UpdateMemory
    | MoveMemory
    | DeleteMemory
    | RestoreMemory
    | VerifyMemory
    | LockMemory
    | UnlockMemory
    | DeprecateMemory
    | InvalidateMemory
)
Command = CreateMemory | Change
# the operation a request id is scoped to (with the principal): one agent's "r-1" for an add and for an update
# are two requests
OPERATION = {
    CreateMemory: "add",
    UpdateMemory: "update",
    MoveMemory: "move",
    DeleteMemory: "delete",
    RestoreMemory: "restore",
    VerifyMemory: "verify",
    LockMemory: "lock",
    UnlockMemory: "unlock",
    DeprecateMemory: "deprecate",
    InvalidateMemory: "invalidate",
}


@dataclass(frozen=True, slots=True)
class Request:
    """One request's identity: its scoped idempotency key and the digest of its arguments."""

    request_id: str
    operation: str
    key: str
    digest: str

    @classmethod
    def of(cls, cmd: Command, actor: Actor, request_id: str) -> Request:
        op = OPERATION[type(cmd)]
        if isinstance(cmd, InvalidateMemory):  # `at` is the gateway's clock, not an argument: a retry differs there
            cmd = msgspec.structs.replace(cmd, at=_EPOCH)
        body = msgspec.json.encode(cmd, order="sorted")
        return cls(request_id, op, request_key(actor.agent_id, op, request_id), hashlib.sha256(body).hexdigest())


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Written:
    """What a write did: the memory after it, the log position, and whether it was a retry or a no-op."""

    memory: MemoryState | None
    seq: int
    event: AnyEvent | None
    duplicate: bool = False

    @property
    def changed(self) -> bool:
        return self.event is not None


class CommandService:
    def __init__(
        self,
        log: EventLogInterface,
        queries: QueryClient,
        *,
        clock: Clock = utc_now,
        max_attempts: int = 25,
        max_content: int = 65_536,
        pacer: IndexPacer | None = None,
    ):
        """`pacer`: a write that brings a text to embed first waits for the local vector index's backlog
        (services/gateway/pacing.py)."""
        self.log = log
        self.queries = queries
        self.clock = clock
        self.max_attempts = max_attempts
        self.max_content = max_content
        self.pacer = pacer
        self.claims = PathClaims(log)

    def _envelope(
        self, ns: str, event: AnyEvent, actor: Actor, request_id: str, correlation_id: str | None
    ) -> Envelope:
        key = f"{request_id}:{event.memory_id}:{event.version}"
        return envelope(key, ns, event.memory_id, event, actor, request_id, self.clock(), correlation_id)

    async def _load(self, ns: str, memory_id: str, min_seq: int) -> MemoryState | None:
        """Current state from a projector; a miss is confirmed at the head of the log."""
        query = GetMemory(namespace=ns, now=self.clock(), min_seq=min_seq, memory_id=memory_id, include_expired=True)
        got = await self.queries.ask_confirmed(query, lambda got: got.item is None, self.log.last_seq)
        return got.item.memory if got.item else None

    async def _retrying(self, attempt: Callable[[int], Awaitable[Written]], min_seq: int, request_id: str) -> Written:
        """Run `attempt` until it is not beaten by another writer (services/gateway/retry.py); a retryable
        failure names the request id."""
        try:
            return await until_not_beaten(attempt, after=min_seq, attempts=self.max_attempts, what="this memory")
        except MnemeError as exc:
            if exc.retryable:
                exc.details["request_id"] = request_id
            raise

    async def create(
        self, cmd: CreateMemory, *, actor: Actor, request_id: str, min_seq: int = 0, correlation_id: str | None = None
    ) -> Written:
        ns = cmd.namespace
        req = Request.of(cmd, actor, request_id)
        memory_id = memory_id_for(ns, req.key)
        subject = S.memory_subject(ns, cmd.store, memory_id)
        msg_id = f"{req.key}:{memory_id}"
        store_last = 0  # the store's last sequence, as the log said when a claim lost (see path_claims.claim_expects)
        if self.pacer is not None:
            await self.pacer.pace()

        async def attempt(min_seq: int) -> Written:
            nonlocal store_last
            owner, expected, expected_subject = None, 0, None
            if cmd.store is not None and cmd.path is not None:
                decider.decide_create(
                    cmd, memory_id=memory_id, path_owner=None, max_content=self.max_content, actor=actor
                )
                po = await self.queries.ask(
                    PathOwner(namespace=ns, now=self.clock(), min_seq=min_seq, store=cmd.store, path=cmd.path)
                )
                if po.memory_id == memory_id:  # this very request landed before: answer as a retry
                    landed = await self.log.landed(subject, 0, msg_id)
                    if landed is None:  # (the create is older than the subject's first 64 messages: cannot be)
                        return await self._replay_of(ns, memory_id, min_seq, req)
                    return await self._replay_of(ns, memory_id, landed.seq, req, landed.headers)
                owner, expected, expected_subject = po.memory_id, po.store_seq, S.store_filter(ns, cmd.store)
                expected = claim_expects(po.store_seq, store_last, min_seq)
            event = decider.decide_create(
                cmd, memory_id=memory_id, path_owner=owner, max_content=self.max_content, actor=actor
            )
            env = self._envelope(ns, event, actor, request_id, correlation_id)
            try:
                seq, dup = await self.claims.append(
                    subject,
                    encode_envelope(env),
                    msg_id=msg_id,
                    expected=expected,
                    expected_subject=expected_subject,
                    memory_id=memory_id,
                    path=cmd.path,
                    digest=req.digest,
                )
            except WrongLastSequence as lost:
                landed = await self.log.landed(subject, 0, msg_id)
                if landed is not None:
                    return await self._replay_of(ns, memory_id, landed.seq, req, landed.headers)
                store_last = max(store_last, lost.last_seq)
                raise
            if dup:
                return await self._replay_of(ns, memory_id, seq, req)
            return Written(evolve(None, env, seq), seq, event)

        return await self._retrying(attempt, min_seq, request_id)

    async def _replay_of(
        self, ns: str, memory_id: str, seq: int, req: Request, headers: dict[str, str] | None = None
    ) -> Written:
        """A request that landed before: a retry if its arguments are the same, else the key was reused.
        `headers`: the landed message's, when it was read already (else one direct get reads them).
        (Events written before digests were recorded carry none: they are taken as retries.)"""
        stored = (
            (headers or {}).get(S.HDR_REQUEST_DIGEST)
            if headers is not None
            else await self.log.header(seq, S.HDR_REQUEST_DIGEST)
        )
        if stored is not None and stored != req.digest:
            raise IdempotencyKeyReused(req.request_id, req.operation, memory_id, seq)
        state = await self._load(ns, memory_id, seq)
        return Written(state, seq, None, duplicate=True)

    async def _change(
        self,
        cmd: Change,
        decide: Callable[[MemoryState | None, str | None], AnyEvent | None],
        *,
        actor: Actor,
        request_id: str,
        min_seq: int,
        correlation_id: str | None,
        new_path: str | None = None,
    ) -> Written:
        """Load → decide → append for an existing memory. `new_path` claims a path (move)."""
        ns, memory_id = cmd.namespace, cmd.memory_id
        req = Request.of(cmd, actor, request_id)
        msg_id = f"{req.key}:{memory_id}"
        store_last = 0  # (as in create)

        async def attempt(min_seq: int) -> Written:
            nonlocal store_last
            state = await self._load(ns, memory_id, min_seq)
            if state is None:
                raise MemoryNotFound(memory_id)
            owner, expected, expected_subject = None, state.last_seq, None
            if new_path is not None and state.store is not None:
                po = await self.queries.ask(
                    PathOwner(namespace=ns, now=self.clock(), min_seq=min_seq, store=state.store, path=new_path)
                )
                owner = po.memory_id if po.memory_id != memory_id else None
                expected, expected_subject = po.store_seq, S.store_filter(ns, state.store)
                expected = claim_expects(po.store_seq, store_last, min_seq)
            event = decide(state, owner)
            if event is None:
                return Written(state, state.last_seq, None)
            env = self._envelope(ns, event, actor, request_id, correlation_id)
            subject = S.memory_subject(ns, state.store, memory_id)
            try:
                seq, dup = await self.claims.append(
                    subject,
                    encode_envelope(env),
                    msg_id=msg_id,
                    expected=expected,
                    expected_subject=expected_subject,
                    memory_id=memory_id,
                    path=new_path,
                    digest=req.digest,
                )
            except WrongLastSequence as lost:
                landed = await self.log.landed(subject, state.last_seq, msg_id)
                if landed is not None:
                    return await self._replay_of(ns, memory_id, landed.seq, req, landed.headers)
                if expected_subject is not None:
                    store_last = max(store_last, lost.last_seq)
                raise
            if dup:
                return await self._replay_of(ns, memory_id, seq, req)
            return Written(evolve(state, env, seq), seq, event)

        return await self._retrying(attempt, min_seq, request_id)

    async def update(
        self,
        cmd: UpdateMemory,
        *,
        actor: Actor,
        request_id: str,
        min_seq: int = 0,
        correlation_id: str | None = None,
        locked_for_all: bool = False,
    ) -> Written:
        """`locked_for_all`: a locked memory is MEMORY_LOCKED for admins too (governed's memory-write)."""
        if self.pacer is not None and cmd.content is not msgspec.UNSET:  # a new text to embed
            await self.pacer.pace()
        return await self._change(
            cmd,
            lambda st, _: decider.decide_update(
                st, cmd, max_content=self.max_content, actor=actor, locked_for_all=locked_for_all
            ),
            actor=actor,
            request_id=request_id,
            min_seq=min_seq,
            correlation_id=correlation_id,
        )

    async def move(
        self, cmd: MoveMemory, *, actor: Actor, request_id: str, min_seq: int = 0, correlation_id: str | None = None
    ) -> Written:
        return await self._change(
            cmd,
            lambda st, owner: decider.decide_move(st, cmd, path_owner=owner, actor=actor),
            actor=actor,
            request_id=request_id,
            min_seq=min_seq,
            correlation_id=correlation_id,
            new_path=cmd.to_path,
        )

    async def delete(
        self, cmd: DeleteMemory, *, actor: Actor, request_id: str, min_seq: int = 0, correlation_id: str | None = None
    ) -> Written:
        return await self._change(
            cmd,
            lambda st, _: decider.decide_delete(st, cmd, actor=actor),
            actor=actor,
            request_id=request_id,
            min_seq=min_seq,
            correlation_id=correlation_id,
        )

    async def restore(
        self, cmd: RestoreMemory, *, actor: Actor, request_id: str, min_seq: int = 0, correlation_id: str | None = None
    ) -> Written:
        return await self._change(
            cmd,
            lambda st, _: decider.decide_restore(st, cmd, actor=actor),
            actor=actor,
            request_id=request_id,
            min_seq=min_seq,
            correlation_id=correlation_id,
        )

    async def govern(
        self,
        cmd: VerifyMemory | LockMemory | UnlockMemory | DeprecateMemory | InvalidateMemory,
        *,
        actor: Actor,
        request_id: str,
        min_seq: int = 0,
        correlation_id: str | None = None,
    ) -> Written:
        """verify / lock / unlock / deprecate / invalidate: lifecycle changes without new content."""
        decide = {
            VerifyMemory: decider.decide_verify,
            LockMemory: decider.decide_lock,
            UnlockMemory: decider.decide_unlock,
            DeprecateMemory: decider.decide_deprecate,
            InvalidateMemory: decider.decide_invalidate,
        }[type(cmd)]
        return await self._change(
            cmd,
            lambda st, _: decide(st, cmd, actor=actor),  # type: ignore[operator]
            actor=actor,
            request_id=request_id,
            min_seq=min_seq,
            correlation_id=correlation_id,
        )
