"""memento's writes: store a fact once, update it, mark it outdated, over the domain's commands.

- Idempotency: the same fact about the same subject (case and spacing aside) is one memory. store_memory's
  request id is derived from the normalized subject and content, so the write side itself names the first
  memory on a second store, through any gateway and at any later time; nothing is looked up first.
- Consistency: one spelling per subject. A subject is compared without case and spacing everywhere (the
  domain's filters and stats do so); a new memory takes the spelling of the subject's first memory, and a
  subject seen for the first time is tidied ("emma", " EMMA " -> "Emma"; "McDonald" is kept).
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from mneme.domain import decider
from mneme.domain import validation as v
from mneme.domain.state import ACTIVE, MemoryState
from mneme.errors import IdempotencyKeyReused, InvalidInput, MemoryNotFound
from schemas.commands import CreateMemory, InvalidateMemory, UpdateMemory
from schemas.queries import ListMemories
from services.gateway.gateway import Call, Gateway
from services.gateway.profiles.memento_models import Stored, Updated

KIND = "fact"  # the domain kind of every memory stored through memento
MAX_RESTATEMENTS = 16  # how often one fact may be stored anew after it was outdated, changed or deleted
NO_REASON = "marked outdated (no reason given)"  # the domain records a reason for every outdated memory
UPDATE_REASON = "update_reason"  # the metadata key that keeps update_memory's reason for a new content


def norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def tidy_subject(subject: str) -> str:
    """A subject's display form the first time it is seen: spacing collapsed; written all in lower or all in
    upper case, each word capitalized ("emma", " EMMA " -> "Emma"); mixed case kept ("McDonald")."""
    s = " ".join(subject.split())
    if s == s.lower() or s == s.upper():
        s = " ".join(w[:1].upper() + w[1:].lower() for w in s.split(" "))
    return s


def outdated(m: MemoryState, now: datetime) -> bool:
    return m.valid_until is not None and m.valid_until <= now


def _current(m: MemoryState, content: str, now: datetime) -> bool:
    """Still the fact as stored: active, not outdated, the same content."""
    return m.status == ACTIVE and not outdated(m, now) and norm(m.content) == norm(content)


async def _spelling(call: Call, subject: str) -> str:
    got = await call.app.reads.ask(
        call,
        ListMemories,
        subject=subject,
        status="any",
        include_expired=True,
        limit=1,
        sort_by="created_at",
        sort_order="asc",
    )
    first = got.items[0].memory.subject if got.items else None
    return first or tidy_subject(subject)


async def store(
    call: Call,
    content: str,
    subject: str | None,
    category: str | None,
    tags: list[str] | tuple[str, ...],
    confidence: float,
) -> Stored:
    """Store one fact, once. Stored again, the first memory is returned (`duplicate`); stored again with other
    labels, the write side refuses the reused request id (IDEMPOTENCY_KEY_REUSED) and the memory takes this
    call's category and confidence and the tags of both. A fact stored again after it was outdated, changed
    or deleted is a new memory: the request id then carries a generation (":2", ":3", ...)."""
    gw, app = call.gw, call.app
    assert gw is not None
    label = v.label(subject, "subject")
    spelled = await _spelling(call, label) if label is not None else None
    key = hashlib.sha256(f"{norm(label or '')}\n{norm(content)}".encode()).hexdigest()[:40]
    cmd = CreateMemory(
        namespace=call.namespace,
        content=content,
        kind=KIND,
        category=category,
        subject=spelled,
        tags=tuple(tags),
        confidence=confidence,
    )
    for generation in range(1, MAX_RESTATEMENTS + 1):
        rid = f"memento-store:{key}" + (f":{generation}" if generation > 1 else "")
        m: MemoryState | None
        try:
            w = await app.memories.create(call, cmd, request_id=rid)
        except IdempotencyKeyReused as reused:  # stored before, with other labels (the mark is after that write)
            try:
                m = (await app.reads.resolve(call, reused.details["memory_id"])).memory
            except MemoryNotFound:
                m = None  # deleted since
        else:
            if not w.duplicate:
                assert w.memory is not None
                return Stored.of(w.memory, duplicate=False)
            m = w.memory  # None once deleted
        if m is not None and _current(m, content, gw.now()):
            return await _restated(call, m, cmd)
    raise InvalidInput("content", f"this fact was stored and retired {MAX_RESTATEMENTS} times; rephrase it")


async def _restated(call: Call, m: MemoryState, cmd: CreateMemory) -> Stored:
    """A fact stored again: it takes this call's category and confidence, and the tags of both."""
    tags = tuple(dict.fromkeys((*m.tags, *v.tags(cmd.tags))))
    if (m.category, m.confidence, m.tags) == (v.label(cmd.category, "category"), cmd.confidence, tags):
        return Stored.of(m, duplicate=True)
    up = UpdateMemory(
        namespace=call.namespace, memory_id=m.id, category=cmd.category, tags=tags, confidence=cmd.confidence
    )
    w = await call.app.memories.apply("update", call, up)
    return Stored.of(w.memory or m, duplicate=True)


async def new_content(call: Call, gw: Gateway, old: MemoryState, content: str, reason: str | None) -> Updated:
    """The memory says something new (the domain's UpdateMemory: a new version; every version stays readable).
    A reason is kept in its metadata under `update_reason`."""
    why = {"metadata": {**old.metadata, UPDATE_REASON: reason}} if reason else {}
    cmd = UpdateMemory(namespace=call.namespace, memory_id=old.id, content=content, **why)  # type: ignore[arg-type]
    w = await call.app.memories.apply("update", call, cmd)
    m = w.memory or old
    return Updated.of(
        m,
        updated_at=m.updated_at,
        updated=w.changed,
        outdated=outdated(m, gw.now()),
        reason=reason,
        superseded_by=m.superseded_by,
    )


async def mark_outdated(call: Call, gw: Gateway, old: MemoryState, content: str | None, reason: str | None) -> Updated:
    """Outdated: the memory's valid time ends now, recorded as outdated (the domain's InvalidateMemory with
    outdated=True); it stays readable with its history. With new content, that is stored as a memory of its
    own (same subject, category, tags, confidence) and named as the successor (superseded_by). The domain's
    decider rules first, so a refused change (a locked memory) stores nothing."""
    why = reason or NO_REASON

    def invalidate(successor: str | None) -> InvalidateMemory:
        return InvalidateMemory(
            namespace=call.namespace, memory_id=old.id, at=gw.now(), reason=why, superseded_by=successor, outdated=True
        )

    decider.decide_invalidate(old, invalidate(None), actor=call.principal.actor)  # raises what the write would
    successor = None
    if content is not None:
        successor = (await store(call, content, old.subject, old.category, old.tags, old.confidence)).id
    w = await call.app.memories.apply("govern", call, invalidate(successor))
    m = w.memory or old
    return Updated.of(
        m,
        updated_at=m.updated_at,
        updated=w.changed,
        outdated=outdated(m, gw.now()),
        reason=m.invalid_reason or why,
        superseded_by=m.superseded_by or successor,
    )
