"""Time tools: a memory's history and the diff of two versions (record time), and valid time:
what holds now or at a given moment, invalidate, mark outdated.

Record time is the log's: every version has the interval of sequences [seq, seq_to) during
which it was the memory's state. Valid time is the world's: valid_from (inclusive) to
valid_until (exclusive). `as_of` on the read tools moves along record time; `memory_valid`
moves along valid time; both together answer "what did we believe at 14:02 about what held
last March".
"""

from __future__ import annotations

import difflib
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field

from mneme.domain import validation as v
from mneme.domain.state import MemoryState
from mneme.errors import InvalidInput, MemoryNotFound
from schemas.commands import InvalidateMemory
from schemas.queries import ListMemories, MemoryHistory, VersionDetail
from services.gateway.gateway import Call
from services.gateway.models import LifecycleResult, Memory, MemoryPage
from services.gateway.params import READ, WRITE, MemoryId, Namespace, Path, RequestId, Store
from services.gateway.toolkit import Toolset

tools = Toolset(doc_indent=8)

# what a version diff compares (bookkeeping like version, updated_at, last_seq is in the version line itself)
FIELDS = ("content", "store", "path", "kind", "category", "subject", "tags", "importance", "confidence",
          "citations", "metadata", "status", "status_reason", "verification", "locked", "lock_reason",
          "expires_at", "valid_from", "valid_until", "invalid_reason", "superseded_by")  # fmt: skip


class VersionEntry(BaseModel):
    version: int
    seq: int = Field(description="Log sequence that recorded this version.")
    seq_to: int | None = Field(description="Log sequence that replaced it; null while it is the current version.")
    recorded_at: datetime = Field(description="When the log recorded it.")
    event: str = Field(description="memory_created, memory_updated, memory_moved, ... memory_deleted")
    agent_id: str
    request_id: str
    changed: list[str] = Field(description="Fields this version changed from the one before.")
    deleted: bool = False
    memory: Memory | None = Field(None, description="The memory as this version left it (include_content).")


class HistoryPage(BaseModel):
    id: str
    total: int
    versions: list[VersionEntry]
    has_more: bool


class FieldChange(BaseModel):
    field: str
    before: Any
    after: Any


class DiffResult(BaseModel):
    id: str
    from_version: int
    to_version: int
    changes: list[FieldChange]
    content_diff: str | None = Field(None, description="Unified diff of the content, when it changed.")


class ValidPage(MemoryPage):
    at: datetime = Field(description="The valid-time moment asked about (now when not given).")


def _value(s: MemoryState, f: str) -> Any:
    x = getattr(s, f)
    if isinstance(x, tuple):
        return list(x)
    if isinstance(x, datetime):
        return x.isoformat()
    return x


def changed_fields(before: MemoryState | None, after: MemoryState) -> list[str]:
    if before is None:
        return ["created"]
    return [f for f in FIELDS if _value(before, f) != _value(after, f)]


def content_diff(before: str, after: str, from_name: str, to_name: str) -> str:
    """A unified diff, one line per line: content without a final newline must not glue the removed line
    to the added one, as difflib does with keepends=True."""
    return "\n".join(difflib.unified_diff(before.splitlines(), after.splitlines(), from_name, to_name,
                                          lineterm=""))  # fmt: skip


async def _versions(call: Call, memory_id: str, **kw: Any) -> tuple[list[VersionDetail], int]:
    gw = call.gw
    assert gw is not None
    q = MemoryHistory(namespace=call.namespace, now=gw.now(), min_seq=await gw.min_seq(),
                      memory_id=v.memory_id(memory_id), **kw)  # fmt: skip
    got = await gw.queries.ask(q)
    if got.total == 0:
        raise MemoryNotFound(memory_id)
    return got.versions, got.total


@tools.tool(intent="read", hints=READ)
async def memory_history(
    call: Call,
    id: Annotated[str, Field(max_length=64, description="Memory id (a permanently deleted one too).")],
    namespace: Namespace = None,
    limit: Annotated[int, Field(ge=1, le=500)] = 100,
    offset: Annotated[int, Field(ge=0)] = 0,
    include_content: Annotated[bool, Field(description="Each version's full memory, not just what changed.")] = False,
) -> HistoryPage:
    """Every version of a memory, oldest first: who (agent), when (log sequence and time), which request,
    what kind of change and which fields it changed. Deleted memories keep their history."""
    gw = call.gw
    assert gw is not None
    # one version before the page, to say what the first version on the page changed
    start = max(offset - 1, 0)
    rows, total = await _versions(call, id, limit=limit + (offset - start), offset=start)
    now = gw.now()
    entries = []
    prev: MemoryState | None = None
    for i, r in enumerate(rows):
        if offset > 0 and i == 0:  # the version before the page: context only
            prev = r.state
            continue
        entries.append(VersionEntry(
            version=r.version, seq=r.seq, seq_to=r.seq_to, recorded_at=r.recorded_at, event=r.event_type,
            agent_id=r.agent_id, request_id=r.request_id, deleted=r.deleted,
            changed=["deleted"] if r.deleted else changed_fields(prev, r.state),
            memory=gw.shown(call, Memory.of(r.state, now)) if include_content else None,
        ))  # fmt: skip
        prev = r.state
    call.read([id])
    return HistoryPage(id=id, total=total, versions=entries, has_more=offset + len(entries) < total)


@tools.tool(intent="read", hints=READ)
async def memory_diff(
    call: Call,
    id: Annotated[str, Field(max_length=64)],
    from_version: Annotated[int, Field(ge=1)],
    to_version: Annotated[int | None, Field(ge=1, description="Default: the latest version.")] = None,
    namespace: Namespace = None,
) -> DiffResult:
    """What changed between two versions of a memory: each changed field before and after, and a unified
    diff of the content."""
    if to_version is None:
        rows, total = await _versions(call, id, limit=1, offset=0)
        last = (await _versions(call, id, limit=1, offset=total - 1))[0][0]
        target = last.version if not last.deleted else last.version - 1
    else:
        target = to_version
    rows, _ = await _versions(call, id, versions=(from_version, target), limit=2)
    got = {r.version: r for r in rows}
    for name, want in (("from_version", from_version), ("to_version", target)):
        if want not in got or got[want].deleted:
            raise InvalidInput(name, f"memory {id} has no version {want}")
    a, b = got[from_version].state, got[target].state
    changes = [FieldChange(field=f, before=_value(a, f), after=_value(b, f))
               for f in FIELDS if _value(a, f) != _value(b, f)]  # fmt: skip
    text = None
    if a.content != b.content:
        text = content_diff(a.content, b.content, f"version {from_version}", f"version {target}")
    call.read([id])
    return DiffResult(id=id, from_version=from_version, to_version=target, changes=changes,
                      content_diff=text)  # fmt: skip


@tools.tool(intent="read", hints=READ)
async def memory_valid(
    call: Call,
    at: Annotated[datetime | None, Field(description="Valid at this time (ISO 8601; no offset means UTC); "
                                         "default: now.")] = None,  # fmt: skip
    namespace: Namespace = None,
    subject: Annotated[str | None, Field(max_length=128, description="Only memories about this subject.")] = None,
    created_by: Annotated[str | None, Field(max_length=128, description="Only memories this agent wrote.")] = None,
    kind: Annotated[str | None, Field(max_length=32)] = None,
    limit: Annotated[int, Field(ge=1, le=100)] = 20,
    offset: Annotated[int, Field(ge=0)] = 0,
) -> ValidPage:
    """Memories whose valid time holds at `at` (valid_from <= at < valid_until; open ends hold), newest
    first. Without `at`: the currently valid memories."""
    gw = call.gw
    assert gw is not None
    when = v.utc(at, "at") or gw.now()
    q = ListMemories(namespace=call.namespace, now=gw.now(), min_seq=await gw.min_seq(), valid_at=when,
                     subject=subject, created_by=created_by, kind=kind, limit=limit, offset=offset,
                     status="live")  # fmt: skip
    got = await gw.queries.ask(q)
    now = gw.now()
    items = [gw.shown(call, Memory.of(r.memory, now, r)) for r in got.items]
    call.read([m.id for m in items])
    return ValidPage(items=items, total=got.total, limit=limit, offset=offset, at=when,
                     has_more=offset + len(items) < got.total)  # fmt: skip


async def _invalidate(call: Call, memory_id: str | None, store: str | None, path: str | None,
                      request_id: str | None, reason: str | None, superseded_by: str | None,
                      outdated: bool) -> LifecycleResult:  # fmt: skip
    gw = call.gw
    assert gw is not None
    successor = None
    if superseded_by is not None:  # it must be a memory the caller can see in the same namespace
        v.memory_id(superseded_by, "superseded_by")
        try:
            successor = (await gw.resolve(call.namespace, superseded_by, None, None, await gw.min_seq())).memory.id
        except MemoryNotFound:
            raise InvalidInput("superseded_by", f"no memory {superseded_by} in {call.namespace}") from None
    row, w = await gw.change(
        call, memory_id, store, path, request_id,
        lambda mid: InvalidateMemory(namespace=call.namespace, memory_id=mid, at=gw.now(), reason=reason,
                                     superseded_by=successor, outdated=outdated),
        gw.commands.govern,
    )  # fmt: skip
    m = w.memory or row.memory
    return LifecycleResult(id=m.id, version=m.version, status=m.status, verification=m.verification,
                           locked=m.locked, changed=w.changed, at=m.updated_at,
                           valid_until=m.valid_until)  # fmt: skip


@tools.tool(intent="write", hints=WRITE)
async def memory_invalidate(
    call: Call,
    id: MemoryId = None, namespace: Namespace = None, store: Store = None, path: Path = None,
    reason: Annotated[str | None, Field(max_length=128, description="Why it no longer holds.")] = None,
    superseded_by: Annotated[str | None, Field(max_length=64, description="The memory that replaces it.")] = None,
    request_id: RequestId = None,
) -> LifecycleResult:  # fmt: skip
    """End a memory's valid time now (valid_until = now): soft, it stays readable with its history and
    reads as of earlier times still see it valid. Optionally name the memory that supersedes it."""
    return await _invalidate(call, id, store, path, request_id, reason, superseded_by, False)


@tools.tool(intent="write", hints=WRITE)
async def memory_mark_outdated(
    call: Call,
    reason: Annotated[str, Field(min_length=1, max_length=128, description="Why it is outdated.")],
    id: MemoryId = None, namespace: Namespace = None, store: Store = None, path: Path = None,
    request_id: RequestId = None,
) -> LifecycleResult:  # fmt: skip
    """Mark a memory outdated, with a reason: its valid time ends now (like memory_invalidate), recorded as
    outdated rather than superseded."""
    return await _invalidate(call, id, store, path, request_id, reason, None, True)
