"""Time tools: a memory's history and the diff of two versions (record time).

Record time is the log's: every version has the interval of sequences [seq, seq_to) during
which it was the memory's state. Valid time is the world's: valid_from (inclusive) to
valid_until (exclusive). `as_of` on the read tools moves along record time, `valid_at` on
memory_list and memory_search along valid time (memory_retire's invalidate and outdated modes
end it); both together answer "what did we believe at 14:02 about what held last March".
"""

from __future__ import annotations

import difflib
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, Field

from mneme.domain import validation as v
from mneme.domain.state import MemoryState
from mneme.errors import InvalidInput, MemoryNotFound
from schemas.queries import MemoryHistory, VersionDetail
from services.gateway.gateway import Call, split_ref
from services.gateway.models import Memory, Result
from services.gateway.params import READ, Namespace, Ref
from services.gateway.toolkit import Toolset

tools = Toolset(group="time", flow=True)

# what a version diff compares (bookkeeping like version, updated_at, last_seq is in the version line itself)
FIELDS = (
    "content",
    "store",
    "path",
    "kind",
    "category",
    "subject",
    "tags",
    "importance",
    "confidence",
    "citations",
    "metadata",
    "status",
    "status_reason",
    "verification",
    "locked",
    "lock_reason",
    "expires_at",
    "valid_from",
    "valid_until",
    "invalid_reason",
    "superseded_by",
)


class VersionEntry(BaseModel):
    version: int
    seq: int = Field(description="Log sequence that recorded this version.")
    seq_to: int | None = Field(None, description="Log sequence that replaced it; absent while it is current.")
    recorded_at: datetime = Field(description="When the log recorded it.")
    event: str = Field(description="memory_created, memory_updated, memory_moved, ... memory_deleted")
    agent_id: str
    request_id: str
    changed: list[str] = Field(description="Fields this version changed from the one before.")
    deleted: bool = False
    memory: Result | None = Field(None, description="The memory as this version left it (include_content).")


class HistoryPage(BaseModel):
    id: str
    total: int
    results: list[VersionEntry] = Field(description="Versions, oldest first.")
    has_more: bool


class FieldChange(BaseModel):
    field: str
    before: Any = Field(None, description="Absent when it was empty (null).")
    after: Any = Field(None, description="Absent when it is empty (null).")


class DiffResult(BaseModel):
    id: str
    from_version: int
    to_version: int
    changes: list[FieldChange]
    content_diff: str | None = Field(None, description="Unified diff of the content, when it changed.")


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
    return "\n".join(difflib.unified_diff(before.splitlines(), after.splitlines(), from_name, to_name, lineterm=""))


async def _memory_id(call: Call, ref: str) -> str:
    """The id of the memory a tool names by id (a permanently deleted one too) or by store:path (the memory
    that holds the path now, expired ones included)."""
    gw = call.gw
    assert gw is not None
    mid, store, path = split_ref(ref)
    if mid is not None:
        return v.memory_id(mid)
    row = await call.app.reads.resolve(call, None, store, path)
    return row.memory.id


async def _versions(call: Call, memory_id: str, ref: str, **kw: Any) -> tuple[list[VersionDetail], int]:
    gw = call.gw
    assert gw is not None
    q = MemoryHistory(namespace=call.namespace, now=gw.now(), memory_id=memory_id, **kw)
    got = await call.app.reads.send(call, q)
    if got.total == 0:
        raise MemoryNotFound(ref)
    return got.versions, got.total


@tools.tool(intent="read", hints=READ)
async def memory_history(
    call: Call,
    id: Annotated[
        str, Field(min_length=1, max_length=600, description="Memory id (a deleted one too), or store:path.")
    ],
    namespace: Namespace = None,
    limit: Annotated[int, Field(ge=1, le=500)] = 100,
    offset: Annotated[int, Field(ge=0)] = 0,
    include_content: Annotated[bool, Field(description="Each version's full memory, not just what changed.")] = False,
) -> HistoryPage:
    """Every version of a memory, oldest first: who changed it, when, and which fields. Use memory_diff
    for what exactly changed."""
    gw = call.gw
    assert gw is not None
    # one version before the page, to say what the first version on the page changed
    start = max(offset - 1, 0)
    mid = await _memory_id(call, id)
    rows, total = await _versions(call, mid, id, limit=limit + (offset - start), offset=start)
    now = gw.now()
    entries = []
    prev: MemoryState | None = None
    for i, r in enumerate(rows):
        if offset > 0 and i == 0:  # the version before the page: context only
            prev = r.state
            continue
        entries.append(
            VersionEntry(
                version=r.version,
                seq=r.seq,
                seq_to=r.seq_to,
                recorded_at=r.recorded_at,
                event=r.event_type,
                agent_id=r.agent_id,
                request_id=r.request_id,
                deleted=r.deleted,
                changed=["deleted"] if r.deleted else changed_fields(prev, r.state),
                memory=Result(**gw.shown(call, Memory.of(r.state, now)).model_dump()) if include_content else None,
            )
        )
        prev = r.state
    call.read([mid])
    return HistoryPage(id=mid, total=total, results=entries, has_more=offset + len(entries) < total)


@tools.tool(intent="read", hints=READ)
async def memory_diff(
    call: Call,
    id: Ref,
    from_version: Annotated[int, Field(ge=1)],
    to_version: Annotated[int | None, Field(ge=1, description="Default: the latest version.")] = None,
    namespace: Namespace = None,
) -> DiffResult:
    """What changed between two versions of a memory: each field before and after, and a diff of the
    content."""
    mid = await _memory_id(call, id)
    if to_version is None:
        rows, total = await _versions(call, mid, id, limit=1, offset=0)
        last = (await _versions(call, mid, id, limit=1, offset=total - 1))[0][0]
        target = last.version if not last.deleted else last.version - 1
    else:
        target = to_version
    rows, _ = await _versions(call, mid, id, versions=(from_version, target), limit=2)
    got = {r.version: r for r in rows}
    for name, want in (("from_version", from_version), ("to_version", target)):
        if want not in got or got[want].deleted:
            raise InvalidInput(name, f"memory {id} has no version {want}")
    a, b = got[from_version].state, got[target].state
    changes = [
        FieldChange(field=f, before=_value(a, f), after=_value(b, f)) for f in FIELDS if _value(a, f) != _value(b, f)
    ]
    text = None
    if a.content != b.content:
        text = content_diff(a.content, b.content, f"version {from_version}", f"version {target}")
    call.read([mid])
    return DiffResult(id=mid, from_version=from_version, to_version=target, changes=changes, content_diff=text)
