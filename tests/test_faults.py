"""Faults with real processes (mneme.app.cluster.LocalCluster: nats-server, `mneme gateway|projector|auditor`).

Each test ends with the same three checks (`three_checks`):
- nothing acknowledged is lost: every write whose publish ack (or tool receipt) came back is in the log exactly
  once, at the sequence it was acknowledged with, readable through a gateway and in the projection's versions;
- the projection equals a fresh replay of the log (canonical digests, as tests/test_projector_recovery.py);
- the audit trail holds every event exactly once, in order, and its hash chain verifies (the check
  `mneme audit verify` runs, on the trail file read-only).

The faults: projector and auditor SIGKILLed at random points while writes go on (restarted each time); the one
nats-server SIGKILLed and restarted under concurrent writes and queries whose clients retry; gateways whose
wall clocks are an hour apart. Set MNEME_FAULT_COUNTS to a path to get the tallies (faults injected by kind,
acknowledged writes checked, lost, duplicates, mismatches, audit failures) as JSON for the reliability report.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import nats
import pytest
from mcp import Client
from nats.aio.client import Client as NATS
from nats.js.api import DeliverPolicy

from bench.synthetic import history
from mneme.app.cluster import LocalCluster, Service, stop_process
from mneme.app.maintenance import rebuild
from mneme.app.settings import CoreSettings, ProjectorSettings
from mneme.errors import Unavailable
from mneme.eventlog import EventLog
from schemas import subjects as S
from schemas.events import Envelope, MemoryCreated, MemoryDeleted, MemoryUpdated, decode_envelope, encode_envelope
from schemas.queries import AuditQuery, MemoryStats, Reply, encoder
from services.auditor.trail import verify_chain
from services.projector.memories_view import MemoriesView
from tests.harness import ToolFailure, result_of, text_of

pytestmark = pytest.mark.anyio

RETRYABLE = ("UNAVAILABLE", "PROJECTION_LAG", "CONFLICT")

# -- the reliability report's tallies ---------------------------------------------------------------------------
COUNTS: dict[str, Any] = {
    "faults": Counter(),
    "acknowledged_writes_checked": 0,
    "lost": 0,
    "duplicates": 0,
    "mismatches": 0,
    "audit_failures": 0,
    "tests": {},
}


@pytest.fixture(scope="module", autouse=True)
def fault_counts() -> Iterator[None]:
    yield
    path = os.environ.get("MNEME_FAULT_COUNTS")
    if path:
        out = {**COUNTS, "faults": dict(sorted(COUNTS["faults"].items()))}
        Path(path).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


def tally(test: str, faults: Counter[str], report: Report) -> None:
    COUNTS["faults"].update(faults)
    for k in ("acknowledged_writes_checked", "lost", "duplicates", "mismatches", "audit_failures"):
        COUNTS[k] += getattr(report, k)
    COUNTS["tests"][test] = {"faults": dict(faults), **report.summary()}


# -- what was acknowledged, and the three checks ----------------------------------------------------------------
@dataclass(frozen=True)
class Acked:
    """One acknowledged write: its request id (unique per write in these tests), aggregate and log position."""

    request_id: str
    memory_id: str
    seq: int
    version: int
    namespace: str


@dataclass
class Report:
    acknowledged_writes_checked: int = 0
    lost: int = 0
    duplicates: int = 0
    mismatches: int = 0
    audit_failures: int = 0
    problems: list[str] = field(default_factory=list)

    def problem(self, kind: str, text: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.problems) < 40:
            self.problems.append(f"{kind}: {text}")

    def summary(self) -> dict[str, int]:
        return {
            k: getattr(self, k)
            for k in ("acknowledged_writes_checked", "lost", "duplicates", "mismatches", "audit_failures")
        }


@dataclass(frozen=True)
class Logged:
    seq: int
    recorded_at: datetime
    msg_id: str | None
    env: Envelope


def version_of(e: Envelope) -> int:
    """The version an event gave its memory (every memory event carries one)."""
    return int(getattr(e.event, "version", 0))


def content_of(e: Envelope) -> Any:
    """The content an event set (None: it set none)."""
    got = getattr(e.event, "content", None)
    return got if isinstance(got, str) else None


async def admin_nc(c: LocalCluster) -> NATS:
    return await nats.connect(servers=c.layout.nats_url.split(","), **c.credentials("admin"))


async def read_log(c: LocalCluster) -> list[Logged]:
    """The whole event log, in order (an ordered push consumer, as the projector follows it)."""
    nc = await admin_nc(c)
    try:
        js = nc.jetstream(timeout=10)
        head = (await js.stream_info(S.EVENTS_STREAM)).state.last_seq
        out: list[Logged] = []
        if head == 0:
            return out
        sub = await js.subscribe(S.EVENTS_SUBJECTS, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
        try:
            while not out or out[-1].seq < head:
                msg = await sub.next_msg(timeout=10)
                md = msg.metadata
                hdr = (msg.headers or {}).get(S.HDR_MSG_ID)
                out.append(Logged(md.sequence.stream, md.timestamp, hdr, decode_envelope(msg.data)))
        finally:
            await sub.unsubscribe()
        return out
    finally:
        await nc.close()


async def ask(nc: NATS, query: Any, timeout: float = 5) -> Reply | None:
    try:
        msg = await nc.request(S.query_subject(query.OPERATION), encoder.encode(query), timeout=timeout)
    except Exception:  # noqa: BLE001 - nobody serving yet (a restart), or the wait timed out: asked again
        return None
    return msgspec.msgpack.decode(msg.data, type=Reply)


async def caught_up(c: LocalCluster, head: int, timeout: float = 120) -> None:
    """Until the projector(s) serve at `head` and the auditor has folded it (each answers a query only then)."""
    nc = await admin_nc(c)
    try:
        roles = {s.role for s in c.layout.services}
        deadline = time.monotonic() + timeout
        for role, query in (
            ("projector", MemoryStats(namespace="default", now=datetime.now(UTC), min_seq=head)),
            ("auditor", AuditQuery(namespace="default", now=datetime.now(UTC), min_seq=head, limit=1)),
        ):
            while role in roles:
                for s in c.layout.services:
                    c.check_alive(s.name)
                reply = await ask(nc, query)
                if reply is not None and reply.error is None and reply.applied_seq >= head:
                    break
                assert time.monotonic() < deadline, f"the {role} did not reach sequence {head} in {timeout} s"
                await asyncio.sleep(0.1)
    finally:
        await nc.close()


async def three_checks(
    c: LocalCluster,
    acked: dict[str, Acked],
    tmp: Path,
    *,
    readable: Callable[[], Awaitable[list[str]]] | None = None,
) -> Report:
    """The three checks, with every process but the nats-server(s) stopped at the end (the files are read)."""
    r = Report(acknowledged_writes_checked=len(acked))
    log = await read_log(c)
    head = log[-1].seq if log else 0
    await caught_up(c, head)
    if readable is not None:  # through a live gateway, before the services stop
        for text in await readable():
            r.problem("mismatches", text)
    procs = {s.name: c.procs[s.name] for s in c.layout.services}  # SIGTERM: each commits and exits 0
    await asyncio.gather(*(stop_process(p.pid, 20, p) for p in procs.values()))
    for name, proc in procs.items():
        if proc.returncode != 0:
            r.problem("mismatches", f"{name} exited {proc.returncode} on SIGTERM")

    # 1. nothing acknowledged lost: each acknowledged request exactly once in the log, where its ack said
    by_request: dict[str, list[Logged]] = {}
    for m in log:
        by_request.setdefault(m.env.request_id, []).append(m)
    for rid, a in acked.items():
        found = by_request.get(rid, [])
        if not found:
            r.problem("lost", f"{rid} (acknowledged at seq {a.seq}) is not in the log")
        elif len(found) > 1:
            r.problem("duplicates", f"{rid} is in the log {len(found)} times: seqs {[m.seq for m in found]}")
        elif found[0].seq != a.seq or found[0].env.aggregate_id != a.memory_id:
            r.problem("mismatches", f"{rid} acknowledged at seq {a.seq}, in the log at {found[0].seq}")
    resent = [(i, n) for i, n in Counter(m.msg_id for m in log).items() if n > 1]
    if resent:  # the same Nats-Msg-Id twice: the duplicate window did not hold
        r.problem("duplicates", f"{len(resent)} message ids in the log more than once (e.g. {resent[:3]})")
    extra = [m.seq for m in log if m.env.request_id not in acked]
    if extra:  # every write in these tests is retried until acknowledged: nothing else may be in the log
        r.problem("duplicates", f"{len(extra)} log events no write acknowledged (e.g. seqs {extra[:5]})")

    # 2. the projection equals a fresh replay, and holds every acknowledged version
    pw = c.passwords or {}
    fresh = await rebuild(
        CoreSettings(nats_url=c.layout.nats_url, data_dir=tmp / "fresh", nats_user="admin", nats_password=pw["admin"]),
        ProjectorSettings(),
    )
    if fresh["events"] != head:
        r.problem("mismatches", f"the replay folded {fresh['events']} events, the log has {head}")
    for s in c.layout.services:
        if s.role != "projector":
            continue
        view = MemoriesView(str(Path(s.data_dir) / "projector.duckdb"))
        try:
            if view.checkpoint != head:
                r.problem("mismatches", f"{s.name} checkpoint {view.checkpoint}, log head {head}")
            live = view.canonical_digest()
            if live != fresh["digest"]:
                differ = sorted(t for t in live if live[t] != fresh["digest"].get(t))  # type: ignore[attr-defined]
                r.problem("mismatches", f"{s.name}'s projection differs from a fresh replay in {differ}")
            versions = set(view.reader().execute("SELECT id, version, seq FROM memory_versions").fetchall())
        finally:
            view.close()
        missing = [a for a in acked.values() if (a.memory_id, a.version, a.seq) not in versions]
        for a in missing[:5]:
            r.problem("lost", f"{a.request_id} (seq {a.seq}, v{a.version}) is not in {s.name}'s memory_versions")
        r.lost += max(0, len(missing) - 5)

    # 3. the audit trail: every event once, in order, and the hash chain verifies (as `mneme audit verify` checks it)
    for s in c.layout.services:
        if s.role != "auditor":
            continue
        with duckdb.connect(str(Path(s.data_dir) / "audit.duckdb"), read_only=True) as con:
            seqs = [
                row[0]
                for row in con.execute(
                    "SELECT source_seq FROM audit_trail WHERE source = 'events' ORDER BY trail_seq"
                ).fetchall()
            ]
            (records,) = con.execute("SELECT count(*) FROM audit_trail").fetchone() or (0,)
            checked, broken = verify_chain(con)  # what `mneme audit verify` runs, on the file read-only
        if seqs != list(range(1, head + 1)):
            gaps = sorted(set(range(1, head + 1)) - set(seqs))[:5]
            dups = [q for q, n in Counter(seqs).items() if n > 1][:5]
            r.problem(
                "audit_failures", f"{s.name}: {len(seqs)} event records for {head} events (gaps {gaps}, dups {dups})"
            )
        if broken is not None or checked != records or records < head:
            r.problem("audit_failures", f"{s.name}: chain of {records} records broken at {broken} ({checked} checked)")
    return r


def assert_clean(r: Report) -> None:
    assert (r.lost, r.duplicates, r.mismatches, r.audit_failures) == (0, 0, 0, 0), "\n".join(r.problems)


async def call(mcp: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    res = await mcp.call_tool(tool, args)
    if res.is_error:
        raise ToolFailure(text_of(res))
    out: dict[str, Any] = res.structured_content or {}
    return out


@contextlib.asynccontextmanager
async def cluster(root: Path, **kw: Any) -> AsyncIterator[LocalCluster]:
    c = kw.pop("cls", LocalCluster)(root, **kw)
    await c.up()
    try:
        yield c
    finally:
        await c.down()


# == 1. projector and auditor SIGKILLed at random points of a run =================================================
async def sigkills_during_writes(
    tmp_path: Path, seed: int, events: int, seconds: float, kills: tuple[int, int], *, vectors: str = "edge"
) -> None:
    """`events` synthetic events (creates, updates, moves, archives, restores, deletes over three namespaces) are
    appended through the event log's write path (Nats-Msg-Id, retried until acknowledged) at a steady pace over
    `seconds`. Meanwhile the projector and the auditor are each SIGKILLed a random number of times (`kills`
    bounds it), each kill at a random moment either while it serves (it answers queries: it folds live writes)
    or while it starts (imports, opening its files, catching up on the writes it missed), and restarted after
    a random pause while the writes go on. `vectors`: the projector's vector index (Qdrant Edge, or off)."""
    rng = random.Random(seed)
    env = {
        "MNEME_LOG_LEVEL": "INFO",
        "MNEME_PROJECTOR_BATCH_MAX": "500",  # more commits, more places for a kill to land
        "MNEME_PROJECTOR_CATCH_UP_BATCH_MAX": "500",  # (a restart catching up too)
        "MNEME_AUDITOR_BATCH_MAX": "200",
        "MNEME_AUDITOR_LINGER": "0.02",
        "MNEME_PROJECTOR_VECTORS": vectors,
    }
    pairs = list(history(events, namespaces=3, seed=seed))
    faults: Counter[str] = Counter()
    acked: dict[str, Acked] = {}
    writing = asyncio.Event()
    kill_log: list[str] = []
    async with cluster(tmp_path / "c", nodes=1, gateways=1, projectors=1, auditors=1, env=env) as c:
        nc = await admin_nc(c)
        log = EventLog(nc.jetstream(), timeout=5, connected=lambda: nc.is_connected)

        async def append(subject: str, e: Envelope) -> None:
            deadline = time.monotonic() + 60
            while True:
                try:
                    seq, _ = await log.append(subject, encode_envelope(e), msg_id=e.event_id, expected_seq=None)
                    break
                except Unavailable:
                    assert time.monotonic() < deadline, f"{e.request_id} never acknowledged"
                    await asyncio.sleep(0.1)
            acked[e.request_id] = Acked(e.request_id, e.aggregate_id, seq, version_of(e), e.namespace)

        async def writer() -> None:
            chunk, t0 = 25, time.monotonic()
            writing.set()
            try:
                for start in range(0, events, chunk):
                    # (one connection, in order: an aggregate's events land in version order)
                    await asyncio.gather(*(append(s, e) for s, e in pairs[start : start + chunk]))
                    await asyncio.sleep(max(0.0, t0 + seconds * (start + chunk) / events - time.monotonic()))
            finally:
                writing.clear()

        async def serving(name: str, query: Any) -> bool:
            while writing.is_set():
                c.check_alive(name)  # (it did not die on its own)
                reply = await ask(nc, query, timeout=1)
                if reply is not None and reply.error is None:
                    return True
                await asyncio.sleep(0.05)
            return False

        async def injector(name: str, query: Any, n: int, rng: random.Random) -> None:
            """n kills at random moments of the run: each either at a random time of the run once the process
            serves, or a random 0.2-3 s after its last (re)start; labelled by whether it answered a query."""
            await writing.wait()
            t0 = time.monotonic()
            for at in sorted(rng.uniform(0.05, 0.95) * seconds for _ in range(n)):
                if rng.random() < 0.5:
                    await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
                    if not await serving(name, query):
                        return
                    await asyncio.sleep(rng.uniform(0, 0.5))
                else:
                    await asyncio.sleep(rng.uniform(0.2, 3.0))
                if not writing.is_set():
                    return
                c.check_alive(name)  # (it did not die on its own)
                reply = await ask(nc, query, timeout=0.2)
                state = "serving" if reply is not None and reply.error is None else "starting"
                c.kill(name, signal.SIGKILL)
                faults[f"sigkill:{name[:-1]}({state})"] += 1
                kill_log.append(f"{name} {state}, {len(acked)} of {events} written")
                await asyncio.sleep(rng.uniform(0.1, 1.5))
                c.start_service(c.service(name))

        now = datetime.now(UTC)
        targets = {
            "projector1": MemoryStats(namespace="default", now=now),
            "auditor1": AuditQuery(namespace="default", now=now, limit=1),
        }
        await asyncio.gather(
            writer(),
            *(injector(name, q, rng.randint(*kills), random.Random(rng.random())) for name, q in targets.items()),
        )
        await nc.close()
        assert len(acked) == events

        # the memories as the acknowledged events left them: each read through the gateway (a sample)
        final: dict[str, tuple[str, int, str | None]] = {}  # id -> (namespace, version, content or None: deleted)
        for _, e in pairs:
            content = final.get(e.aggregate_id, ("", 0, None))[2]
            if isinstance(e.event, MemoryCreated | MemoryUpdated) and isinstance(e.event.content, str):
                content = e.event.content
            final[e.aggregate_id] = (
                e.namespace,
                version_of(e),
                None if isinstance(e.event, MemoryDeleted) else content,
            )

        async def readable() -> list[str]:
            bad = []
            url = c.layout.services[-1].url
            assert url is not None
            async with Client(url) as mcp:
                for mid in rng.sample(sorted(final), min(60, len(final))):
                    ns, version, content = final[mid]
                    res = await mcp.call_tool("memory_get", {"id": mid, "namespace": ns})
                    got = res.structured_content or {}
                    if content is None:
                        if not res.is_error or ToolFailure(text_of(res)).code != "MEMORY_NOT_FOUND":
                            bad.append(f"deleted {mid} read back as {text_of(res)[:200]}")
                    elif res.is_error or (got.get("version"), got.get("content")) != (version, content):
                        bad.append(f"{mid}: expected v{version} {content!r}, got {text_of(res)[:200]}")
            return bad

        report = await three_checks(c, acked, tmp_path, readable=readable)
    tally(f"sigkills seed={seed} events={events}", faults, report)
    COUNTS["tests"][f"sigkills seed={seed} events={events}"]["kills"] = kill_log
    for role in ("projector", "auditor"):
        assert sum(n for f, n in faults.items() if f.startswith(f"sigkill:{role}")) >= 1, faults
    assert_clean(report)


async def test_projector_and_auditor_sigkilled_during_2000_writes(tmp_path: Path) -> None:
    """The default run's size; no vector index (the embedding model's load on each restart is most of its CPU):
    the slow runs below keep it."""
    await sigkills_during_writes(tmp_path, seed=101, events=2000, seconds=8, kills=(1, 3), vectors="off")


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(10))
async def test_projector_and_auditor_sigkilled_during_20000_writes(tmp_path: Path, seed: int) -> None:
    """The issue's size: 20,000 events, ten seeds (python -m pytest -m slow)."""
    await sigkills_during_writes(tmp_path, seed=seed, events=20_000, seconds=40, kills=(2, 5))


# == 2. NATS restarted under concurrent writes and queries ========================================================
async def test_nats_restarted_under_concurrent_writes_and_queries(tmp_path: Path) -> None:
    """Writers add and update memories through the gateway (each write with its own request id, retried with it
    until it answers), readers get and list them meanwhile; the nats-server is SIGKILLed and restarted (same
    port, same store) in the middle. Every acknowledged write before, during and after is there once; no read
    ever answers older than a write the same gateway acknowledged before the read began."""
    faults: Counter[str] = Counter()
    acked: dict[str, Acked] = {}
    contents: dict[str, dict[int, str]] = {}  # memory id -> version -> content
    latest: dict[str, str] = {}
    stats: Counter[str] = Counter()
    stale: list[str] = []
    read_back: list[tuple[str, int, str]] = []
    bad_errors: list[str] = []
    stop = asyncio.Event()
    env = {"MNEME_PROJECTOR_VECTORS": "off"}  # (no search here: the CPU goes to the load)
    async with cluster(tmp_path / "c", nodes=1, gateways=1, projectors=1, auditors=1, env=env) as c:
        url = c.layout.services[-1].url
        assert url is not None

        async def until_done(mcp: Client, tool: str, args: dict[str, Any]) -> dict[str, Any]:
            deadline = time.monotonic() + 60
            while True:
                try:
                    return await call(mcp, tool, args)
                except ToolFailure as e:
                    stats[f"write {e.code}"] += 1
                    if e.code not in RETRYABLE:
                        bad_errors.append(f"{tool} {args.get('request_id')}: {e.error}")
                        raise
                except Exception as e:  # noqa: BLE001 - the HTTP call itself failed: retried the same way
                    stats[f"write {type(e).__name__}"] += 1
                assert time.monotonic() < deadline, f"{tool} {args['request_id']} never answered"
                await asyncio.sleep(0.1)

        async def writer(k: int) -> None:
            async with Client(url) as mcp:
                mine: list[str] = []
                j = 0
                while not stop.is_set():
                    j += 1
                    rid = f"w{k}-{j}"
                    if mine and j % 3 == 0:
                        mid = mine[j % len(mine)]
                        text = f"writer {k} update {j}"
                        got = await until_done(mcp, "memory_update", {"id": mid, "content": text, "request_id": rid})
                    else:
                        text = f"writer {k} note {j}"
                        got = await until_done(mcp, "memory_add", {"content": text, "request_id": rid})
                        mid = got["id"]
                        mine.append(mid)
                    acked[rid] = Acked(rid, mid, got["seq"], got["version"], "default")
                    contents.setdefault(mid, {})[got["version"]] = text
                    latest[mid] = text

        async def reader(k: int) -> None:
            rng = random.Random(k)
            async with Client(url) as mcp:
                while not stop.is_set():
                    if not contents:
                        await asyncio.sleep(0.05)
                        continue
                    mid = rng.choice(sorted(contents))
                    seen = max(contents[mid])  # acknowledged before this read began
                    try:
                        if rng.random() < 0.8:
                            got = await call(mcp, "memory_get", {"id": mid})
                            if got["version"] < seen:
                                stale.append(f"{mid}: read v{got['version']} {got['content']!r} after v{seen}")
                            read_back.append((mid, got["version"], got["content"]))  # (checked once all are acked)
                        else:
                            await call(mcp, "memory_list", {"limit": 5})
                        stats["read ok"] += 1
                    except ToolFailure as e:
                        stats[f"read {e.code}"] += 1
                        if e.code not in RETRYABLE:
                            bad_errors.append(f"read {mid}: {e.error}")
                        await asyncio.sleep(0.1)
                    except Exception as e:  # noqa: BLE001 - the HTTP call itself failed: the reader goes on
                        stats[f"read {type(e).__name__}"] += 1
                        await asyncio.sleep(0.1)

        async def until_acked(n: int, timeout: float) -> float:
            t0 = time.monotonic()
            while len(acked) < n:
                assert time.monotonic() - t0 < timeout, f"{len(acked)} writes acknowledged, waiting for {n}"
                assert not bad_errors, bad_errors
                await asyncio.sleep(0.05)
            return time.monotonic() - t0

        tasks = [asyncio.create_task(writer(k)) for k in range(3)] + [asyncio.create_task(reader(k)) for k in range(2)]
        try:
            await until_acked(40, 60)
            node = c.layout.nodes[0]
            c.kill(node.name, signal.SIGKILL)
            faults["sigkill+restart:nats-server"] += 1
            before = len(acked)
            await asyncio.sleep(1.0)
            c.start_node(node)
            recovered = await until_acked(before + 40, 60)
            stats["acknowledged before the restart"] = before
            stats["seconds to 40 more writes after it"] = round(recovered)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
        assert not bad_errors, bad_errors
        assert stats["read ok"] > 0, stats

        async def readable() -> list[str]:
            bad = []
            async with Client(url) as mcp:
                for mid, text in latest.items():
                    got = await call(mcp, "memory_get", {"id": mid})
                    if got["content"] != text or got["version"] != max(contents[mid]):
                        bad.append(f"{mid}: expected v{max(contents[mid])} {text!r}, got v{got['version']}")
            for mid, version, text in read_back:  # every read answered a version some write made, as it made it
                if contents[mid].get(version) != text:
                    bad.append(f"{mid}: read v{version} {text!r}, written as {contents[mid].get(version)!r}")
            return bad + stale

        report = await three_checks(c, acked, tmp_path, readable=readable)
    tally("nats restart under load", faults, report)
    COUNTS["tests"]["nats restart under load"]["calls"] = dict(stats)
    assert_clean(report)


# == 3. gateways whose clocks disagree ============================================================================
SKEWED = """
import datetime as _dt, sys
import services.gateway.commands as _commands
_off = _dt.timedelta(seconds=float(sys.argv.pop(1)))
class _Skewed(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return _dt.datetime.now(tz) + _off
_commands.datetime = _Skewed  # utc_now, the gateway's one clock (occurred_at, a query's `now`, as_of checks)
from mneme.app.cli import main
main()
"""
SKEW = timedelta(hours=1)


class SkewedCluster(LocalCluster):
    """Gateway processes whose wall clock runs `skew[name]` seconds off (the real `mneme gateway`, started through
    a bootstrap that shifts the clock function every event time and `now` comes from)."""

    def __init__(self, root: Path, *, skew: dict[str, float], **kw: Any):
        super().__init__(root, **kw)
        self.skew = skew

    def _service_args(self, s: Service) -> list[str]:
        args = super()._service_args(s)
        if s.name not in self.skew:
            return args
        assert args[1:3] == ["-m", "mneme"], args
        return [sys.executable, "-c", SKEWED, str(self.skew[s.name]), *args[3:]]


@contextlib.asynccontextmanager
async def skewed_writes(tmp_path: Path) -> AsyncIterator[tuple[LocalCluster, dict[str, Acked], list[str]]]:
    """gateway1's clock an hour ahead, gateway2's an hour behind. One memory changed in turn through each, one
    changed by both at once; yields the cluster, what was acknowledged and the two memories' ids."""
    # a read through either gateway sees the other's writes; no search here, so no vector index
    env = {"MNEME_GATEWAY_CONSISTENCY": "linearizable", "MNEME_PROJECTOR_VECTORS": "off"}
    async with cluster(
        tmp_path / "c",
        cls=SkewedCluster,
        skew={"gateway1": SKEW.total_seconds(), "gateway2": -SKEW.total_seconds()},
        nodes=1,
        gateways=2,
        projectors=1,
        auditors=1,
        env=env,
    ) as c:
        urls = [s.url for s in c.layout.services if s.url]
        acked: dict[str, Acked] = {}
        async with Client(urls[0]) as ahead, Client(urls[1]) as behind:
            gws = (ahead, behind)

            def note(rid: str, got: dict[str, Any]) -> None:
                acked[rid] = Acked(rid, got["id"], got["seq"], got["version"], "default")

            # in turn: ahead, behind, ahead, ... (each write a little after the last, by the log's clock)
            got = await call(ahead, "memory_add", {"content": "turn 1", "request_id": "turn-1"})
            note("turn-1", got)
            turns = got["id"]
            for k in range(2, 7):
                await asyncio.sleep(0.03)
                rid = f"turn-{k}"
                note(
                    rid,
                    await call(
                        gws[(k - 1) % 2], "memory_update", {"id": turns, "content": f"turn {k}", "request_id": rid}
                    ),
                )
            # at once: both gateways change one memory, optimistic concurrency orders them
            got = await call(behind, "memory_add", {"content": "race 0", "request_id": "race-0"})
            note("race-0", got)
            race = got["id"]

            async def racer(g: int) -> None:
                for k in range(5):
                    rid = f"race-{g}-{k}"
                    args = {"id": race, "content": f"race {g}.{k}", "request_id": rid}
                    note(rid, await call(gws[g], "memory_update", args))

            await asyncio.gather(racer(0), racer(1))
        yield c, acked, [turns, race]


async def test_order_comes_from_the_log_not_from_gateway_clocks(tmp_path: Path) -> None:
    """With occurred_at an hour ahead or behind depending on the gateway, the log's order still decides: the
    latest version is the last one in the log (in turn and in a race), history runs in log order, and as_of a
    log sequence (through either gateway) or a record time (through the gateway whose clock is ahead) answers the
    version the log held then."""
    faults = Counter({"clock-skew:gateway(+1h)": 1, "clock-skew:gateway(-1h)": 1})
    async with skewed_writes(tmp_path) as (c, acked, (turns, race)):
        log = await read_log(c)
        # the skew is real: occurred_at is an hour off the stream's time, and runs backwards along the log
        offsets = {round((m.env.occurred_at - m.recorded_at) / SKEW) for m in log}
        assert offsets == {1, -1}, offsets
        assert any(b.env.occurred_at < a.env.occurred_at for a, b in itertools.pairwise(log))

        urls = [s.url for s in c.layout.services if s.url]
        async with Client(urls[0]) as ahead, Client(urls[1]) as behind:
            for mid in (turns, race):
                mine = [m for m in log if m.env.aggregate_id == mid]
                last = mine[-1]
                assert [version_of(m.env) for m in mine] == list(range(1, len(mine) + 1))
                for mcp in (ahead, behind):
                    got = await call(mcp, "memory_get", {"id": mid})
                    assert (got["version"], got["content"]) == (version_of(last.env), content_of(last.env))
                    hist = await call(mcp, "memory_history", {"id": mid})
                    assert [(h["version"], h["seq"]) for h in hist["results"]] == [
                        (version_of(m.env), m.seq) for m in mine
                    ]
                # as_of a log position: the version the log held at that position, through both gateways
                for m, nxt in zip(mine, [*mine[1:], None], strict=True):
                    positions = {m.seq} | ({nxt.seq - 1} if nxt is not None else set())
                    for seq in positions:
                        for mcp in (ahead, behind):
                            got = await call(mcp, "memory_get", {"id": mid, "as_of": seq})
                            assert (got["version"], got["content"]) == (version_of(m.env), content_of(m.env))
                # as_of a record time (the stream's clock, between two events) through the gateway ahead
                for m, nxt in itertools.pairwise(mine):
                    between = m.recorded_at + (nxt.recorded_at - m.recorded_at) / 2
                    got = await call(ahead, "memory_get", {"id": mid, "as_of": between.isoformat()})
                    assert (got["version"], got["content"]) == (version_of(m.env), content_of(m.env))
        report = await three_checks(c, acked, tmp_path)
        # the projection's row: the latest version is the last in the log
        for s in c.layout.services:
            if s.role == "projector":
                with duckdb.connect(str(Path(s.data_dir) / "projector.duckdb"), read_only=True) as con:
                    for mid in (turns, race):
                        row = con.execute(
                            "SELECT version, last_seq, content FROM memories WHERE id = ?", [mid]
                        ).fetchone()
                        last = [m for m in log if m.env.aggregate_id == mid][-1]
                        if row != (version_of(last.env), last.seq, content_of(last.env)):
                            report.problem("mismatches", f"{mid}: projection row {row}, last in the log seq {last.seq}")
    tally("clock skew between gateways", faults, report)
    assert_clean(report)


async def test_as_of_a_record_time_through_a_gateway_whose_clock_is_behind(tmp_path: Path) -> None:
    """A memory written and changed a moment ago; as_of a record time between the two (the stream's clock)
    through a gateway whose clock runs an hour behind must answer the first version."""
    async with cluster(
        tmp_path / "c", cls=SkewedCluster, skew={"gateway1": -SKEW.total_seconds()}, nodes=1, projectors=1, gateways=1,
        auditors=0, env={"MNEME_PROJECTOR_VECTORS": "off"},
    ) as c:  # fmt: skip
        url = c.layout.services[-1].url
        assert url is not None
        async with Client(url) as behind:
            mid = (await call(behind, "memory_add", {"content": "first"}))["id"]
            await asyncio.sleep(0.05)
            await call(behind, "memory_update", {"id": mid, "content": "second"})
            first, second = await read_log(c)
            between = first.recorded_at + (second.recorded_at - first.recorded_at) / 2
            res = await behind.call_tool("memory_get", {"id": mid, "as_of": between.isoformat()})
    got = result_of(res)  # (raised here, not inside the client's task group)
    assert (got["version"], got["content"]) == (1, "first")
