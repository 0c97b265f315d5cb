"""Synthetic histories for tests and benchmarks: consistent event sequences, published fast.

`history` yields envelopes whose versions and paths are consistent (what the
gateway would have decided), mixing creates with updates, moves, archives,
restores and deletes. `publish` pipelines them into the log.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from nats.js import JetStreamContext

from schemas import subjects as S
from schemas.events import (
    Actor,
    AnyEvent,
    Envelope,
    MemoryArchived,
    MemoryCreated,
    MemoryDeleted,
    MemoryMoved,
    MemoryRestored,
    MemoryUpdated,
    encode_envelope,
)

WORDS = (
    "user prefers pytest over unittest dark mode vegetarian allergic peanuts deploy friday never staging "
    "database postgres migration schema review latency budget alice bob carol dave project roadmap meeting "
    "notes decision architecture event sourcing nats jetstream duckdb qdrant vector search embedding model "
    "birthday march travel berlin tokyo coffee tea morning routine gym weekly report invoice customer"
).split()
KINDS = ("note", "fact", "preference", "decision", "task")


def _text(rng: random.Random, n: int = 12) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def envelope(ns: str, aggregate: str, event: Any, ids: tuple[str, str], at: datetime, actor: Actor) -> Envelope:
    """An event's envelope as the gateway writes it; `ids` are its (event id, request id)."""
    return Envelope(
        event_id=ids[0],
        schema_version=event.SCHEMA_VERSION,
        namespace=ns,
        aggregate_id=aggregate,
        occurred_at=at,
        actor=actor,
        request_id=ids[1],
        event=event,
    )


class _Live:
    """The memories of a history so far: what each next event may change (id -> namespace, version, path,
    status), and how many were created."""

    def __init__(self, rng: random.Random, namespaces: int, store: str | None):
        self.rng, self.namespaces, self.store = rng, namespaces, store
        self.live: dict[str, tuple[str, int, str | None, str]] = {}
        self.ids: list[str] = []
        self.created = 0

    def create(self) -> tuple[str, str, AnyEvent]:
        rng = self.rng
        ns = f"ns{rng.randrange(self.namespaces)}"
        mid = f"{rng.getrandbits(128):032x}"
        mid = f"{mid[:8]}-{mid[8:12]}-4{mid[13:16]}-a{mid[17:20]}-{mid[20:32]}"
        path = f"cat{rng.randrange(20)}/sub{rng.randrange(10)}/m{self.created}" if self.store else None
        ev = MemoryCreated(
            memory_id=mid,
            version=1,
            store=self.store,
            path=path,
            content=_text(rng),
            kind=rng.choice(KINDS),
            category=rng.choice(("diet", "work", "travel", None)),
            subject=rng.choice(("alice", "bob", None)),
            tags=tuple(sorted(set(rng.sample(WORDS, 3)))),
            importance=round(rng.random(), 2),
        )
        self.live[mid] = (ns, 1, path, "active")
        self.ids.append(mid)
        self.created += 1
        return ns, mid, ev

    def change(self) -> tuple[str, str, AnyEvent]:
        rng = self.rng
        mid = rng.choice(self.ids)
        while mid not in self.live:
            mid = rng.choice(self.ids)
        ns, ver, path, status = self.live[mid]
        roll = rng.random()
        ev: AnyEvent
        if roll < 0.8 or not self.store:
            ev = MemoryUpdated(memory_id=mid, version=ver + 1, content=_text(rng), importance=round(rng.random(), 2))
        elif roll < 0.9:
            new_path = f"{path}-moved{ver}"
            ev = MemoryMoved(
                memory_id=mid, version=ver + 1, from_path=path or "", to_path=new_path, to_store=self.store
            )
            path = new_path
        elif roll < 0.97:
            ev = (MemoryArchived if status == "active" else MemoryRestored)(memory_id=mid, version=ver + 1)
            status = "archived" if status == "active" else "active"
        else:
            ev = MemoryDeleted(memory_id=mid, version=ver + 1, reason="synthetic")
        self.live[mid] = (ns, ver + 1, path, status)
        if isinstance(ev, MemoryDeleted):
            del self.live[mid]
        return ns, mid, ev


def history(
    n_events: int, *, n_memories: int | None = None, namespaces: int = 1, seed: int = 7, store: str | None = "s"
) -> Iterator[tuple[str, Envelope]]:
    """(subject, envelope) pairs: about `n_memories` creates, the rest changes to live memories."""
    rng = random.Random(seed)
    n_memories = n_memories or max(1, n_events // 5)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    state = _Live(rng, namespaces, store)
    for i in range(n_events):
        # (with nothing live there is nothing to change: create, even past n_memories)
        fresh = not state.live or (state.created < n_memories and rng.random() < n_memories / n_events * 1.2)
        ns, mid, ev = state.create() if fresh else state.change()
        ids = (f"evt-{seed}-{i}", f"req-{seed}-{i}")
        yield (
            S.memory_subject(ns, store, mid),
            envelope(ns, mid, ev, ids, t0 + timedelta(seconds=i), Actor(agent_id=f"agent-{i % 3}")),
        )


async def publish(js: JetStreamContext, pairs: Iterator[tuple[str, Envelope]], *, window: int = 512) -> int:
    """Append pre-decided events, `window` in flight at a time. Returns the last sequence."""
    return await publish_windowed(js, ((subject, encode_envelope(env), None) for subject, env in pairs), window)


async def publish_windowed(
    js: Any, msgs: Iterable[tuple[str, bytes, dict[str, str] | None]], window: int = 512, timeout: float = 30
) -> int:
    """Pipelined publishes of (subject, data, headers), `window` in flight at a time: the last sequence."""
    last = 0
    pending: list[asyncio.Future[Any]] = []
    for subject, data, headers in msgs:
        pending.append(asyncio.ensure_future(js.publish(subject, data, timeout=timeout, headers=headers)))
        if len(pending) >= window:
            last = max(last, *(a.seq for a in await asyncio.gather(*pending)))
            pending = []
    if pending:
        last = max(last, *(a.seq for a in await asyncio.gather(*pending)))
    return last
