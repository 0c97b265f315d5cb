"""The history of a run and its check, in the spirit of Jepsen's.

A client records every write attempt as an `Op`: its client id, the gateway it went through, the operation
(`add`: memory_add, `update`: memory_update of an existing memory), the request id (a retry sends the same one:
one logical write, several attempts), the memory id, the unique content it writes, when it was invoked and
when it completed (seconds since the history began), and its outcome:

- ok: the tool call answered success (the write is acknowledged);
- fail: it answered an error that says nothing was written (bad input, a conflict given up on, "not sent");
- unknown: anything else (a timeout, an UNAVAILABLE that "may or may not have been applied", a dropped
  connection): the write may or may not have happened.

After the run, `check` compares the history with the log (every event of MNEME_EVENTS, `LogEvent`) and with each
projector replica's tables (`Replica`), and lists every anomaly:

- lost: an acknowledged write whose event is not in the log;
- duplicated: a logical write whose event is in the log more than once;
- failed_applied: a write whose every attempt failed definitely, yet its event is in the log;
- wrong_ack: an acknowledgement that disagrees with the log (another memory id, version or sequence);
- corrupt: an event whose content is not what its write sent;
- version_gaps: a memory whose versions in the log are not 1, 2, 3... in log order (or does not start with
  its creation);
- realtime: an acknowledged write B invoked after an acknowledged write A completed, whose event precedes A's
  in the log (the log's order contradicts real time);
- phantoms: events whose request id no client sent;
- divergent: a replica whose checkpoint is not the head of the log, whose versions or memories differ from
  a fold of the log done here (independently of the projector's code), or whose canonical digest differs
  from a fresh replay's.

Unit-tested on hand-made histories in tests/test_history.py (each anomaly must be caught).
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

OK, FAIL, UNKNOWN = "ok", "fail", "unknown"
ADD, UPDATE = "add", "update"
CREATED, UPDATED = "memory_created", "memory_updated"
EXPECTED_TYPE = {ADD: CREATED, UPDATE: UPDATED}

# error codes that mean the call wrote nothing (anything else is indeterminate: unknown)
DEFINITE_FAILURES = frozenset(
    {
        "INVALID_INPUT",
        "MEMORY_NOT_FOUND",
        "IDEMPOTENCY_KEY_REUSED",
        "ALREADY_EXISTS",
        "MEMORY_LOCKED",
        "RATE_LIMIT",
        "CONFLICT",
        "PERMISSION_ERROR",
        "SCOPE_VIOLATION",
    }
)


def outcome_of_error(error: dict[str, Any]) -> str:
    """fail when the error says nothing was written, else unknown. UNAVAILABLE is both: "the write was not
    sent" (the gateway had no connection to NATS: it never published) is a failure; "did not confirm the
    write ... may or may not have been applied" is unknown."""
    code = str(error.get("code", ""))
    if code in DEFINITE_FAILURES:
        return FAIL
    if code == "UNAVAILABLE" and "was not sent" in str(error.get("message", "")):
        return FAIL
    return UNKNOWN


@dataclass
class Op:
    """One attempt of one write."""

    index: int
    client: str
    gateway: str
    kind: str  # add | update
    request_id: str
    content: str
    memory_id: str | None  # an update's target; an add's once an answer named it
    invoked: float
    completed: float | None = None
    outcome: str | None = None  # ok | fail | unknown (None: still in flight)
    version: int | None = None  # what the acknowledgement said
    seq: int | None = None
    duplicate: bool = False  # the acknowledgement said: applied before (a retry), nothing new
    error: str | None = None


class History:
    """Write attempts as they happen (one event loop: no lock needed)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.ops: list[Op] = []

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 6)

    def invoke(self, client: str, gateway: str, kind: str, request_id: str, content: str,
               memory_id: str | None = None) -> Op:  # fmt: skip
        op = Op(len(self.ops), client, gateway, kind, request_id, content, memory_id, self.now())
        self.ops.append(op)
        return op

    def ok(self, op: Op, *, memory_id: str, version: int | None, seq: int | None, duplicate: bool) -> None:
        op.completed, op.outcome = self.now(), OK
        op.memory_id, op.version, op.seq, op.duplicate = memory_id, version, seq, duplicate

    def fail(self, op: Op, error: str) -> None:
        op.completed, op.outcome, op.error = self.now(), FAIL, error

    def unknown(self, op: Op, error: str) -> None:
        op.completed, op.outcome, op.error = self.now(), UNKNOWN, error

    def close(self) -> None:
        """Attempts still in flight when the run ended are unknown."""
        for op in self.ops:
            if op.outcome is None:
                self.unknown(op, "in flight at the end")

    def save(self, path: Path) -> None:
        with open(path, "w") as f:
            for op in self.ops:
                f.write(json.dumps(asdict(op)) + "\n")

    @classmethod
    def load(cls, path: Path) -> History:
        h = cls()
        h.ops = [Op(**json.loads(line)) for line in Path(path).read_text().splitlines() if line.strip()]
        return h


@dataclass(frozen=True)
class LogEvent:
    seq: int
    type: str
    memory_id: str
    version: int
    request_id: str
    content: str | None  # None: the event does not set it


def log_events(entries: Iterable[tuple[int, Any, Any]]) -> list[LogEvent]:
    """From (seq, msg id, Envelope) as tests/powercut/cluster.py reads them."""
    from msgspec import UNSET

    from schemas.events import event_name

    out = []
    for seq, _msg_id, env in entries:
        ev = env.event
        content = getattr(ev, "content", None)
        memory_id = getattr(ev, "memory_id", env.aggregate_id)
        version = getattr(ev, "version", 0)
        out.append(
            LogEvent(
                seq, event_name(ev), memory_id, int(version), env.request_id, None if content is UNSET else content
            )
        )
    return out


@dataclass
class Replica:
    """What one projector replica holds: its checkpoint, every version row, every memory's current version
    and content, and its canonical digest (MemoriesView.canonical_digest)."""

    name: str
    checkpoint: int
    versions: set[tuple[str, int, int, str, str]]  # (id, version, seq, request_id, content)
    memories: dict[str, tuple[int, str]]  # id -> (version, content)
    digest: dict[str, str] | None = None


def read_replica(name: str, db: Path) -> Replica:
    """A replica's DuckDB file, read after its projector stopped."""
    import duckdb

    from services.projector.memories_view import MemoriesView

    with duckdb.connect(str(db), read_only=True) as con:
        versions = {
            (r[0], int(r[1]), int(r[2]), r[3], r[4])
            for r in con.execute("SELECT id, version, seq, request_id, content FROM memory_versions").fetchall()
        }
        memories = {
            r[0]: (int(r[1]), r[2]) for r in con.execute("SELECT id, version, content FROM memories").fetchall()
        }
    view = MemoriesView(str(db))
    try:
        digest, checkpoint = view.canonical_digest(), view.checkpoint
    finally:
        view.close()
    return Replica(name, checkpoint, versions, memories, digest)


@dataclass
class Report:
    writes: int = 0  # logical writes (request ids)
    attempts: int = 0
    acknowledged: int = 0  # logical writes with an ok attempt
    failed: int = 0  # logical writes whose every attempt failed definitely
    unknown: int = 0  # neither
    unknown_applied: int = 0  # of the unknown, those the log holds (once)
    events: int = 0
    head: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    failed_applied: list[str] = field(default_factory=list)
    wrong_ack: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    version_gaps: list[str] = field(default_factory=list)
    realtime: list[str] = field(default_factory=list)
    phantoms: list[str] = field(default_factory=list)
    divergent: list[str] = field(default_factory=list)

    ANOMALIES = ("lost", "duplicated", "failed_applied", "wrong_ack", "corrupt", "version_gaps", "realtime",
                 "phantoms", "divergent")  # fmt: skip

    @property
    def valid(self) -> bool:
        return not any(getattr(self, a) for a in self.ANOMALIES)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            k: getattr(self, k)
            for k in ("writes", "attempts", "acknowledged", "failed", "unknown", "unknown_applied", "events", "head")
        }
        out |= {a: len(getattr(self, a)) for a in self.ANOMALIES}
        out["valid"] = self.valid
        return out

    def explain(self, limit: int = 10) -> str:
        lines = [json.dumps(self.summary())]
        for a in self.ANOMALIES:
            for item in getattr(self, a)[:limit]:
                lines.append(f"{a}: {item}")
        return "\n".join(lines)


def fold(log: list[LogEvent]) -> tuple[set[tuple[str, int, int, str, str]], dict[str, tuple[int, str]]]:
    """The versions and the memories a replica must hold, folded here from the log (creates and content
    updates: the workload's events) independently of the projector."""
    state: dict[str, tuple[int, str]] = {}
    versions = set()
    for e in log:
        if e.type not in (CREATED, UPDATED):
            continue
        prev = state.get(e.memory_id)
        content = e.content if e.content is not None else (prev[1] if prev else "")
        state[e.memory_id] = (e.version, content)
        versions.add((e.memory_id, e.version, e.seq, e.request_id, content))
    return versions, state


def check(history: History | list[Op], log: list[LogEvent], replicas: Iterable[Replica] = (),
          replay_digest: dict[str, str] | None = None, head: int | None = None) -> Report:  # fmt: skip
    ops = history.ops if isinstance(history, History) else history
    r = Report(attempts=len(ops), events=len(log), head=head if head is not None else (log[-1].seq if log else 0))
    writes: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        writes[op.request_id].append(op)
    r.writes = len(writes)
    by_rid: dict[str, list[LogEvent]] = defaultdict(list)
    for e in log:
        by_rid[e.request_id].append(e)

    first_seq: dict[str, int] = {}  # request id -> its event's sequence (acknowledged writes)
    for rid, attempts in writes.items():
        kind, content = attempts[0].kind, attempts[0].content
        evs = by_rid.get(rid, [])
        if len(evs) > 1:
            r.duplicated.append(f"{rid}: {len(evs)} events at seqs {[e.seq for e in evs]}")
        for e in evs:
            if e.type != EXPECTED_TYPE[kind] or e.content != content:
                r.corrupt.append(f"{rid}: {kind} of {content!r} logged as {e.type} of {e.content!r} at {e.seq}")
        oks = [op for op in attempts if op.outcome == OK]
        if oks:
            r.acknowledged += 1
            if not evs:
                r.lost.append(f"{rid}: {kind} acknowledged at t={oks[0].completed} (memory {oks[0].memory_id}, "
                              f"version {oks[0].version}, seq {oks[0].seq}) is not in the log")  # fmt: skip
                continue
            e = evs[0]
            first_seq[rid] = e.seq
            for op in oks:
                if op.memory_id != e.memory_id:
                    r.wrong_ack.append(f"{rid}: acknowledged memory {op.memory_id}, logged {e.memory_id}")
                if not op.duplicate and op.seq is not None and (op.seq, op.version) != (e.seq, e.version):
                    r.wrong_ack.append(
                        f"{rid}: acknowledged version {op.version} at seq {op.seq}, logged {e.version} at {e.seq}"
                    )
        elif all(op.outcome == FAIL for op in attempts):
            r.failed += 1
            if evs:
                r.failed_applied.append(f"{rid}: every attempt failed ({attempts[-1].error}) yet logged at "
                                        f"{[e.seq for e in evs]}")  # fmt: skip
        else:
            r.unknown += 1
            r.unknown_applied += 1 if evs else 0

    for rid, evs in by_rid.items():
        if rid not in writes:
            r.phantoms.append(f"{rid}: {[(e.type, e.memory_id, e.seq) for e in evs]}")

    per_memory: dict[str, list[LogEvent]] = defaultdict(list)
    for e in log:
        per_memory[e.memory_id].append(e)
    for mid, evs in per_memory.items():
        versions = [e.version for e in evs]
        if versions != list(range(1, len(evs) + 1)) or evs[0].type != CREATED:
            r.version_gaps.append(f"{mid}: versions {versions} at seqs {[e.seq for e in evs]}")

    # real time: a write invoked after another completed (both acknowledged) comes later in the log
    done = sorted((op.completed, first_seq[op.request_id], op.request_id) for op in ops
                  if op.outcome == OK and op.request_id in first_seq and op.completed is not None)  # fmt: skip
    # (from the write's first attempt: a retry that lands as a duplicate is as old as the attempt that landed)
    started = sorted((min(op.invoked for op in writes[rid]), seq, rid) for rid, seq in first_seq.items())
    i, top, top_rid = 0, -1, ""
    for t, seq, rid in started:
        while i < len(done) and done[i][0] < t:
            if done[i][1] > top:
                top, top_rid = done[i][1], done[i][2]
            i += 1
        if seq < top:
            r.realtime.append(f"{rid} (seq {seq}) was invoked after {top_rid} (seq {top}) was acknowledged")

    want_versions, want_memories = fold(log)
    for rep in replicas:
        if rep.checkpoint != r.head:
            r.divergent.append(f"{rep.name}: checkpoint {rep.checkpoint}, the log's head is {r.head}")
        if rep.versions != want_versions:
            extra, missing = sorted(rep.versions - want_versions), sorted(want_versions - rep.versions)
            r.divergent.append(f"{rep.name}: versions differ from the log's: {len(extra)} extra {extra[:3]}, "
                               f"{len(missing)} missing {missing[:3]}")  # fmt: skip
        if rep.memories != want_memories:
            diff = sorted(k for k in rep.memories.keys() | want_memories.keys()
                          if rep.memories.get(k) != want_memories.get(k))  # fmt: skip
            r.divergent.append(f"{rep.name}: {len(diff)} memories differ from the log's fold, e.g. "
                               f"{[(k, rep.memories.get(k), want_memories.get(k)) for k in diff[:3]]}")  # fmt: skip
        if replay_digest is not None and rep.digest is not None and rep.digest != replay_digest:
            tables = sorted(t for t in replay_digest if rep.digest.get(t) != replay_digest[t])
            r.divergent.append(f"{rep.name}: canonical digest differs from a fresh replay's in {tables}")
    return r
