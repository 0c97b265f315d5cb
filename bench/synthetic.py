"""Synthetic histories for tests and benchmarks: consistent event sequences, published fast.

`history` yields envelopes whose versions and paths are consistent (what the
gateway would have decided), mixing creates with updates, moves, archives,
restores and deletes. `publish` pipelines them into the log.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

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


def history(
    n_events: int, *, n_memories: int | None = None, namespaces: int = 1, seed: int = 7, store: str | None = "s"
) -> Iterator[tuple[str, Envelope]]:
    """(subject, envelope) pairs: about `n_memories` creates, the rest changes to live memories."""
    rng = random.Random(seed)
    n_memories = n_memories or max(1, n_events // 5)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    live: dict[str, tuple[str, int, str | None, str]] = {}  # id -> (namespace, version, path, status)
    ids: list[str] = []
    created = 0
    for i in range(n_events):
        at = t0 + timedelta(seconds=i)
        if not live or (created < n_memories and rng.random() < n_memories / n_events * 1.2):
            # (with nothing live there is nothing to change: create, even past n_memories)
            ns = f"ns{rng.randrange(namespaces)}"
            mid = f"{rng.getrandbits(128):032x}"
            mid = f"{mid[:8]}-{mid[8:12]}-4{mid[13:16]}-a{mid[17:20]}-{mid[20:32]}"
            path = f"cat{rng.randrange(20)}/sub{rng.randrange(10)}/m{created}" if store else None
            ev: AnyEvent = MemoryCreated(
                memory_id=mid,
                version=1,
                store=store,
                path=path,
                content=_text(rng),
                kind=rng.choice(KINDS),
                category=rng.choice(("diet", "work", "travel", None)),
                subject=rng.choice(("alice", "bob", None)),
                tags=tuple(sorted(set(rng.sample(WORDS, 3)))),
                importance=round(rng.random(), 2),
            )
            live[mid] = (ns, 1, path, "active")
            ids.append(mid)
            created += 1
        else:
            mid = rng.choice(ids)
            while mid not in live:
                mid = rng.choice(ids)
            ns, ver, path, status = live[mid]
            roll = rng.random()
            if roll < 0.8 or not store:
                ev = MemoryUpdated(
                    memory_id=mid, version=ver + 1, content=_text(rng), importance=round(rng.random(), 2)
                )
            elif roll < 0.9:
                new_path = f"{path}-moved{ver}"
                ev = MemoryMoved(memory_id=mid, version=ver + 1, from_path=path or "", to_path=new_path, to_store=store)
                path = new_path
            elif roll < 0.97:
                ev = (MemoryArchived if status == "active" else MemoryRestored)(memory_id=mid, version=ver + 1)
                status = "archived" if status == "active" else "active"
            else:
                ev = MemoryDeleted(memory_id=mid, version=ver + 1, reason="synthetic")
            live[mid] = (ns, ver + 1, path, status)
            if isinstance(ev, MemoryDeleted):
                del live[mid]
        env = Envelope(
            event_id=f"evt-{seed}-{i}",
            schema_version=ev.SCHEMA_VERSION,
            namespace=ns,
            aggregate_id=mid,
            occurred_at=at,
            actor=Actor(agent_id=f"agent-{i % 3}"),
            request_id=f"req-{seed}-{i}",
            event=ev,
        )
        yield S.memory_subject(ns, store, mid), env


async def publish(js: JetStreamContext, pairs: Iterator[tuple[str, Envelope]], *, window: int = 512) -> int:
    """Append pre-decided events, `window` in flight at a time. Returns the last sequence."""
    last = 0
    pending: list[asyncio.Future[object]] = []
    for subject, env in pairs:
        pending.append(asyncio.ensure_future(js.publish(subject, encode_envelope(env), timeout=30)))
        if len(pending) >= window:
            last = max(last, *(a.seq for a in await asyncio.gather(*pending)))  # type: ignore[attr-defined]
            pending = []
    if pending:
        last = max(last, *(a.seq for a in await asyncio.gather(*pending)))  # type: ignore[attr-defined]
    return last
