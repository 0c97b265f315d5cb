"""How tests/corpus/events_v1.jsonl was made (run once, then checked in).

    cd /work/main && .venv/bin/python tests/corpus/make_corpus.py > tests/corpus/events_v1.jsonl

Fixed ids and times, no randomness, no clock: the output is the same on every run.
Do NOT regenerate events_v1.jsonl after a schema change: it stands for what v1 writers
put in the log, and tests/test_schemas.py checks today's code still reads it. A new
event type gets new lines appended (built here, then appended by hand or by rerunning
before the change is released); a breaking change gets a new tag, never an edited line.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

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

NS = "acme/research"
MEM_FULL = "3f2b8c1e-9a4d-4e6f-8b7a-1c2d3e4f5a6b"
MEM_MIN = "7d9e0f1a-2b3c-4d5e-9f60-718293a4b5c6"
UTC = UTC


def _at(minute: int) -> datetime:
    return datetime(2025, 3, 14, 9, minute, 53, 589793, tzinfo=UTC)


def _env(
    n: int, event: AnyEvent, *, agent: str = "agent-alpha", role: str = "agent", correlation_id: str | None = None
) -> Envelope:
    return Envelope(
        event_id=f"00000000-0000-4000-8000-{n:012d}",
        schema_version=type(event).SCHEMA_VERSION,
        namespace=NS,
        aggregate_id=event.memory_id,
        occurred_at=_at(n),
        actor=Actor(agent_id=agent, role=role),
        request_id=f"req-{n:04d}",
        correlation_id=correlation_id,
        event=event,
    )


def envelopes() -> list[Envelope]:
    return [
        _env(
            1,
            MemoryCreated(
                memory_id=MEM_FULL,
                version=1,
                store="main",
                path="projects/mneme/decisions/event-log",
                content="Use NATS JetStream as the event log; DuckDB is a projection.",
                kind="decision",
                category="architecture",
                subject="event log",
                tags=("nats", "jetstream"),
                importance=0.8,
                confidence=0.9,
                citations=("https://docs.nats.io/nats-concepts/jetstream", "adr-0001"),
                metadata={"source": "design-review", "priority": 2, "reviewers": ["ana", "bo"]},
                expires_at=datetime(2026, 1, 1, tzinfo=UTC),
                valid_from=datetime(2025, 3, 1, tzinfo=UTC),
                valid_until=datetime(2025, 12, 31, 23, 59, 59, tzinfo=UTC),
                status="active",
            ),
            agent="ana",
            role="human",
            correlation_id="corr-0001",
        ),
        _env(2, MemoryCreated(memory_id=MEM_MIN, version=1, content="Standup moved to 10:00.")),
        _env(
            3,
            MemoryUpdated(
                memory_id=MEM_FULL,
                version=2,
                content="Use NATS JetStream as the event log; DuckDB and Qdrant are projections.",
                tags=("nats", "jetstream", "qdrant"),
                importance=0.9,
                expires_at=None,
            ),
            agent="agent-beta",
        ),
        _env(
            4,
            MemoryMoved(
                memory_id=MEM_FULL,
                version=3,
                from_path="projects/mneme/decisions/event-log",
                to_path="projects/mneme/adr/0001-event-log",
            ),
        ),
        _env(5, MemoryArchived(memory_id=MEM_FULL, version=4, reason="superseded by ADR 0002")),
        _env(6, MemoryRestored(memory_id=MEM_FULL, version=5)),
        _env(7, MemoryDeleted(memory_id=MEM_MIN, version=2, reason="duplicate")),
    ]


def main() -> None:
    for env in envelopes():
        sys.stdout.buffer.write(encode_envelope(env) + b"\n")


if __name__ == "__main__":
    main()


def v2_lines() -> list[bytes]:
    """events_v2.jsonl: the governance events (verify, lock, unlock, deprecate) and a created
    memory carrying `verification`, as this version writes them.

        .venv/bin/python -c "from tests.corpus.make_corpus import v2_lines; import sys; \\
            sys.stdout.buffer.write(b''.join(l + b'\\n' for l in v2_lines()))" > tests/corpus/events_v2.jsonl
    """
    from schemas.events import MemoryDeprecated, MemoryLocked, MemoryUnlocked, MemoryVerified

    gov = "9c1d2e3f-4a5b-4c6d-8e7f-90a1b2c3d4e5"
    admin = Actor(agent_id="alice", role="admin")
    agent = Actor(agent_id="agent-7", role="agent")
    events: list[tuple[AnyEvent, Actor]] = [
        (
            MemoryCreated(
                memory_id=gov,
                version=1,
                content="Deploys need two approvals",
                kind="business_rule",
                verification="verified",
            ),
            admin,
        ),
        (MemoryVerified(memory_id=gov, version=2), admin),
        (MemoryLocked(memory_id=gov, version=3, reason="org rule"), admin),
        (MemoryUnlocked(memory_id=gov, version=4), admin),
        (MemoryDeprecated(memory_id=gov, version=5, reason="superseded by the 2026 policy"), agent),
    ]
    out = []
    for i, (ev, actor) in enumerate(events):
        env = Envelope(
            event_id=f"00000000-0000-4000-8000-0000000002{i:02d}",
            schema_version=type(ev).SCHEMA_VERSION,
            namespace=NS,
            aggregate_id=gov,
            occurred_at=_at(30 + i),
            actor=actor,
            request_id=f"req-v2-{i}",
            event=ev,
        )
        out.append(encode_envelope(env))
    return out


def v3_lines() -> list[bytes]:
    """events_v3.jsonl: a schema-2 move (memory_moved_v2, with to_store) and an invalidation, as this
    version writes them.

        .venv/bin/python -c "from tests.corpus.make_corpus import v3_lines; import sys; \\
            sys.stdout.buffer.write(b''.join(l + b'\\n' for l in v3_lines()))" > tests/corpus/events_v3.jsonl
    """
    from schemas.events import MemoryInvalidated

    mid = "5e6f7a8b-9c0d-4e1f-a2b3-c4d5e6f7a8b9"
    succ = "6f7a8b9c-0d1e-4f2a-b3c4-d5e6f7a8b9c0"
    actor = Actor(agent_id="agent-7", role="agent")
    events: list[AnyEvent] = [
        MemoryCreated(memory_id=mid, version=1, store="notes", path="team/standup", content="Standup at 9:30"),
        MemoryMoved(
            memory_id=mid, version=2, from_path="team/standup", to_path="team/rituals/standup", to_store="notes"
        ),
        MemoryInvalidated(memory_id=mid, version=3, valid_until=_at(45), reason="moved to 10:00", superseded_by=succ),
        MemoryInvalidated(memory_id=mid, version=4, valid_until=_at(46), reason="no standups", outdated=True),
    ]
    out = []
    for i, ev in enumerate(events):
        env = Envelope(
            event_id=f"00000000-0000-4000-8000-0000000003{i:02d}",
            schema_version=type(ev).SCHEMA_VERSION,
            namespace=NS,
            aggregate_id=mid,
            occurred_at=_at(40 + i),
            actor=actor,
            request_id=f"req-v3-{i}",
            event=ev,
        )
        out.append(encode_envelope(env))
    return out
