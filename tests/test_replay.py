"""`mneme replay`, end to end: determinism, frozen copies up to a sequence or a time, the blue/green swap
under load, a replay killed with SIGKILL and resumed, snapshots, and upcasting of old events.

Everything is real: a nats-server child per test, DuckDB, Qdrant Edge and the embedding model (replays
share the data directory's embedding cache, so re-embedding what the live stack embedded is cheap).
Logs are small except where size is the point (the SIGKILL test folds 30,000 synthetic events).
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import pytest

from bench.synthetic import history, publish
from mneme.app.compose import close_nats, connect
from mneme.app.generations import projection_dir
from mneme.app.preflight import Refused
from mneme.app.replay import replay, seq_at
from mneme.app.settings import CoreSettings, ProjectorSettings
from mneme.embedded_nats import EmbeddedNats, nats_server_binary
from mneme.eventlog import ensure_streams
from schemas import subjects as S
from schemas.events import Envelope, MemoryCreated, MemoryUpdated
from services.projector.memories_view import MemoriesView
from services.projector.snapshot import newest_snapshot, verify_generation
from tests.harness import MNEME, Stack, ToolFailure, log_writer, start_stack

pytestmark = pytest.mark.anyio

MODEL = ProjectorSettings().embedding_model
NO_VECTORS = ProjectorSettings(vectors="off")


def core_of(stack: Stack) -> CoreSettings:
    return CoreSettings(data_dir=stack.data_dir, nats_url=stack.url)


@pytest.fixture
async def stack(tmp_path: Path, nats_server: EmbeddedNats) -> AsyncIterator[Stack]:
    """A stack that answers `mneme replay`'s swap and snapshot requests, with the vector index."""
    s = await start_stack(tmp_path / "data", nats_server, vectors=True, replayable=True)
    yield s
    await s.close()


async def settled(stack: Stack) -> int:
    """The head of the log, once the serving generation has committed it (rows and vectors)."""
    head = await stack.last_seq()
    p = stack.projector
    assert await p.follower.wait_for(head, 20, committed=True)
    if p.vector_follower is not None:
        assert await p.vector_follower.wait_for(head, 60, committed=True)
        assert p.vectors is not None
        await asyncio.to_thread(p.vectors.fill_pending)
    return head


async def populate(stack: Stack, ns: str, n: int = 12) -> list[str]:
    """A little history of every kind: creates, updates, a move, archive/restore, deprecate, invalidate,
    permanent deletes, a recreate at a freed path."""
    ids = []
    for i in range(n):
        text = f"quokka fact {i} about topic {i % 3}: Jürgen in Zürich 🚀 東京"  # non-ASCII in every digest
        ids.append(
            (
                await stack.call(
                    "memory_add",
                    namespace=ns,
                    content=text,
                    store="kb",
                    path=f"c{i % 3}/m{i}",
                    tags=[f"t{i % 2}"],
                    importance=0.1 * (i % 10),
                    metadata={"i": i, "città": "Zürich ☕"},
                )
            )["id"]
        )
    for mid in ids[: n // 2]:
        await stack.call(
            "memory_update", id=mid, namespace=ns, content=f"quokka changed {mid[:8]} — naïve café", citations=["x:1"]
        )
    await stack.call("memory_move", id=ids[1], namespace=ns, to_path="moved/m1")
    await stack.call("memory_retire", id=ids[2], namespace=ns, mode="archive")
    await stack.call("memory_restore", id=ids[2], namespace=ns)
    await stack.call("memory_retire", id=ids[3], namespace=ns, mode="archive")
    await stack.call("memory_retire", id=ids[4], namespace=ns, mode="deprecate", reason="old")
    await stack.call(
        "memory_retire", id=ids[5], namespace=ns, mode="invalidate", reason="replaced", superseded_by=ids[6]
    )
    await stack.call("memory_retire", id=ids[7], namespace=ns, mode="delete")
    ids.append(
        (await stack.call("memory_add", namespace=ns, content="quokka recreated", store="kb", path="c1/m7"))["id"]
    )
    await stack.call(
        "memory_add",
        namespace=ns,
        content="quokka without a path",
        kind="fact",
        expires_at=(datetime.now(UTC) + timedelta(days=1)).isoformat(),
    )
    return ids


def table(path: Path, sql: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        con.execute("SET TimeZone = 'UTC'")
        return con.execute(sql).fetchall()
    finally:
        con.close()


def checkpoint_of(path: Path) -> int:
    view = MemoriesView(str(path))
    try:
        return view.checkpoint
    finally:
        view.close()


def digest_of(path: Path) -> dict[str, str]:
    view = MemoriesView(str(path))
    try:
        return view.canonical_digest()
    finally:
        view.close()


# -- 5. determinism ------------------------------------------------------------------------------------------


async def test_replaying_twice_gives_identical_digests_equal_to_the_live_projection(
    stack: Stack, tmp_path: Path
) -> None:
    await populate(stack, "replay/det")
    await populate(stack, "replay/det2", n=8)
    head = await settled(stack)  # nothing is written from here on
    live = stack.projector.view.canonical_digest()
    live_report = verify_generation(stack.projector.view, stack.projector.vectors, head)
    core, ps = core_of(stack), ProjectorSettings()

    one = await replay(core, ps, output=tmp_path / "one", use_snapshots=False)
    two = await replay(core, ps, output=tmp_path / "two", use_snapshots=False)
    for r in (one, two):
        assert (r["target_seq"], r["head_seq"], r["resumed_from"], r["snapshot_seq"], r["events"]) == (
            head,
            head,
            0,
            None,
            head,
        )
        assert r["verify"]["ok"], r["verify"]
        assert r["model"] == MODEL
    assert one["digest"] == two["digest"] == live
    assert one["verify"] == two["verify"] == live_report
    assert one["verify"]["versions"] == head  # one version per event
    # the files agree with the reported digests
    assert digest_of(tmp_path / "one" / "projector.duckdb") == live

    # swap=False without --output: builds into projections/building and leaves it there; run again, it
    # resumes at the target and folds nothing
    # (without a vector index, to keep it quick)
    three = await replay(core, NO_VECTORS, swap=False, use_snapshots=False)
    assert Path(three["path"]) == core.data_dir / "projections" / "building"
    assert three["digest"] == live and three["verify"] == {
        k: live_report[k] for k in ("memories", "versions", "ok", "problems")
    }
    four = await replay(core, NO_VECTORS, swap=False, use_snapshots=False)
    assert (four["resumed_from"], four["events"], four["digest"]) == (head, 0, live)
    # a build left with other settings (no vector index) is not resumed: it is started afresh
    five = await replay(core, ps, swap=False, use_snapshots=False)
    assert (five["resumed_from"], five["events"], five["digest"], five["verify"]) == (0, head, live, live_report)
    # the live projector still serves from the data directory
    assert projection_dir(core) == core.data_dir
    assert Path(stack.projector.view.path) == core.data_dir / "projector.duckdb"


# -- 6. frozen copies up to a sequence or a time --------------------------------------------------------------


def rows_of(out: Path) -> dict[str, tuple[Any, ...]]:
    return {
        r[0]: tuple(r[1:])
        for r in table(
            out / "projector.duckdb", "SELECT id, version, content, store, path, status, last_seq FROM memories"
        )
    }


def listed_rows(page: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """A memory_list page (detail="full") as rows of the memories table."""
    return {
        m["id"]: (m["version"], m["content"], m.get("store"), m.get("path"), m["status"], m["seq"])
        for m in page["results"]
    }


async def test_replay_up_to_a_sequence_or_a_time_equals_as_of(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    stack = await start_stack(tmp_path / "data", nats_server)
    try:
        ns = "replay/upto"
        marks: list[int] = []
        ids = []
        for i in range(4):
            ids.append(
                (await stack.call("memory_add", namespace=ns, content=f"quokka {i}", store="s", path=f"p/{i}"))["id"]
            )
            await stack.call("memory_update", id=ids[0], namespace=ns, content=f"quokka zero v{i + 2}")
            if i == 1:
                await stack.call("memory_move", id=ids[1], namespace=ns, to_path="q/1")
            if i == 2:
                await stack.call("memory_retire", id=ids[1], namespace=ns, mode="delete")
                await stack.call("memory_add", namespace=ns, content="quokka at the freed path", store="s", path="q/1")
            marks.append(await stack.last_seq())
            await asyncio.sleep(0.05)  # a gap in record time after each mark
        core = core_of(stack)

        async def as_of(at: int | str) -> dict[str, Any]:
            return await stack.call(
                "memory_list", namespace=ns, status="any", include_expired=True, limit=500, as_of=at, detail="full"
            )

        for k, mark in enumerate(marks[:3]):
            want = await as_of(mark)
            r = await replay(core, NO_VECTORS, upto=str(mark), output=tmp_path / f"seq{k}")
            assert (r["target_seq"], r["events"], r["verify"]["ok"]) == (mark, mark, True), r
            assert "swap" not in r  # a frozen copy is never swapped in
            got = rows_of(tmp_path / f"seq{k}")
            assert got == listed_rows(want) and len(got) == want["total"], k
            # every version up to the mark, none after
            assert table(
                tmp_path / f"seq{k}" / "projector.duckdb", "SELECT max(seq), count(*) FROM memory_versions"
            ) == [(mark, mark)]

            # by time: a moment inside the gap after the mark
            t = datetime.fromisoformat(want["as_of"]["time"]) + timedelta(milliseconds=20)
            by_time = await as_of(t.isoformat())
            assert by_time["as_of"]["seq"] == mark and listed_rows(by_time) == listed_rows(want)
            r = await replay(core, NO_VECTORS, upto=t.isoformat(), output=tmp_path / f"time{k}")
            assert r["target_seq"] == mark, (k, r["target_seq"])
            assert rows_of(tmp_path / f"time{k}") == listed_rows(by_time)
            assert r["digest"] == digest_of(tmp_path / f"seq{k}" / "projector.duckdb")
        # an --output that already holds something is refused
        with pytest.raises(Refused, match="not empty"):
            await replay(core, NO_VECTORS, upto=str(marks[0]), output=tmp_path / "seq0")
        # the copy is frozen: the live projection moved on, the data directory's generation is untouched
        assert projection_dir(core) == core.data_dir
        assert len((await as_of(await stack.last_seq()))["results"]) > len(rows_of(tmp_path / "seq0"))
        # a time before the first event: an empty copy; a time after the last event: the whole log
        r = await replay(core, NO_VECTORS, upto="2000-01-01T00:00:00Z", output=tmp_path / "empty")
        assert (r["target_seq"], r["verify"]["memories"]) == (0, 0)
        r = await replay(core, NO_VECTORS, upto=datetime.now(UTC).isoformat(), output=tmp_path / "all")
        assert r["target_seq"] == await stack.last_seq()
        # a sequence past the head, or a time in the future, is refused (as `as_of` is), and nothing is built
        head = await stack.last_seq()
        with pytest.raises(Refused, match=rf"--upto: sequence {10**9} is beyond the head of the log \({head}\)"):
            await replay(core, NO_VECTORS, upto=str(10**9), output=tmp_path / "past")
        with pytest.raises(Refused, match=r"--upto: .* is in the future"):
            await replay(
                core, NO_VECTORS, upto=(datetime.now(UTC) + timedelta(hours=1)).isoformat(), output=tmp_path / "future"
            )
        with pytest.raises(Refused, match="--upto"):
            await replay(core, NO_VECTORS, upto="yesterday", output=tmp_path / "bad")
        assert not any((tmp_path / d).exists() for d in ("past", "future", "bad"))
    finally:
        await stack.close()


async def test_replay_up_to_the_reported_time_of_a_sequence_includes_it(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    stack = await start_stack(tmp_path / "data", nats_server)
    try:
        seqs = [(await stack.call("memory_add", namespace="replay/t", content=f"quokka {i}"))["seq"] for i in range(16)]
        wrong = []
        for seq in seqs:
            reported = (await stack.call("memory_list", namespace="replay/t", as_of=seq))["as_of"]
            assert reported["seq"] == seq
            # as_of the reported time answers at that sequence ...
            t = reported["time"]
            assert (await stack.call("memory_list", namespace="replay/t", as_of=t))["as_of"]["seq"] == seq
            # ... and so must replay --upto that time (seq_at is what replay resolves it with)
            at = await seq_at(stack.nc.jetstream(), datetime.fromisoformat(t))
            if at != seq:
                wrong.append((seq, at, t))
        assert not wrong, wrong
    finally:
        await stack.close()


# -- 7. blue/green swap while writes continue ------------------------------------------------------------------


async def test_blue_green_swap_while_writes_continue(stack: Stack) -> None:
    ns = "replay/swap"
    core = core_of(stack)
    written: dict[str, str] = {}  # id -> content
    errors: list[str] = []
    calls = 0
    stop = asyncio.Event()

    async def write(i: int, tag: str) -> None:
        nonlocal calls
        content = f"quokka {tag} {i} marmalade"
        a = await stack.call("memory_add", namespace=ns, content=content, store="s", path=f"{tag}/{i}")
        written[a["id"]] = content
        g = await stack.call("memory_get", id=a["id"], namespace=ns)
        assert g["content"] == content, g
        listed = await stack.call("memory_list", namespace=ns, limit=5)
        assert a["id"] in [m["id"] for m in listed["results"]], "the newest memory is first (updated_at desc)"
        found = await stack.call("memory_search", mode="keyword", namespace=ns, query=f"{tag} {i}", limit=100)
        assert a["id"] in [h["id"] for h in found["results"]], (tag, i)
        calls += 4

    async def writer() -> None:
        i = 0
        while not stop.is_set():
            try:
                await write(i, "during")
            except (ToolFailure, AssertionError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
            i += 1

    for i in range(8):
        await write(i, "before")
    old_dir = core.data_dir
    assert Path(stack.projector.view.path).parent == old_dir
    task = asyncio.create_task(writer())
    try:
        await asyncio.sleep(0.3)
        before_replay = len(written)
        first = await replay(core, ProjectorSettings())
        during_first = len(written) - before_replay
        gen1 = Path(first["path"])
        assert first["swap"]["live"] is True and first["verify"]["ok"], first
        assert gen1.parent == core.data_dir / "projections" and gen1.name.startswith("gen-")
        assert Path(stack.projector.view.path) == gen1 / "projector.duckdb"
        assert projection_dir(core) == gen1
        # the old generation (the read models at the data directory's root) is gone
        assert sorted(first["removed"]) == ["projector.duckdb", f"vectors-{MODEL}", f"vectors-{MODEL}.checkpoint.json"]
        assert not (old_dir / "projector.duckdb").exists() and not list(old_dir.glob("vectors-*"))
        assert not (core.data_dir / "projections" / "building").exists()
        await asyncio.sleep(0.3)
        # a second replay swaps generation 1 out for generation 2, and removes generation 1's directory
        second = await replay(core, ProjectorSettings())
        gen2 = Path(second["path"])
        assert second["swap"]["live"] is True and gen2 != gen1 and gen2.name.startswith("gen-")
        assert Path(stack.projector.view.path) == gen2 / "projector.duckdb"
        assert second["removed"] == [gen1.name] and not gen1.exists()
        assert sorted(p.name for p in (core.data_dir / "projections").iterdir()) == ["CURRENT", gen2.name]
        await asyncio.sleep(0.3)
    finally:
        stop.set()
        await task
    assert not errors, errors[:5]
    assert during_first > 0, "the writer made no progress while the replay ran"
    for i in range(4):
        await write(i, "after")
    # every memory written before, during and after the swaps is there, as written
    assert len(written) > 8 + 4 and calls == 4 * len(written)
    listed = await stack.call("memory_list", namespace=ns, limit=500)
    assert {m["id"]: m["content"] for m in listed["results"]} == written and listed["total"] == len(written)
    for mid, content in written.items():
        assert (await stack.call("memory_get", id=mid, namespace=ns))["content"] == content
    found = await stack.call("memory_search", mode="keyword", namespace=ns, query="marmalade", limit=100)
    assert len(found["results"]) == min(100, len(written))
    # and the serving generation is what a clean replay of the log builds
    head = await settled(stack)
    assert verify_generation(stack.projector.view, stack.projector.vectors, head)["ok"]


# -- 8. SIGKILL during a replay, then run it again -------------------------------------------------------------

N_BIG = 30_000
PROGRESS = re.compile(rb"(\d+)/(\d+) events")


class Progress:
    """Reads a `mneme replay` child's stderr (a terminal: `start_replay`) on a thread: `done` is the most events
    its progress bar reported."""

    def __init__(self, proc: subprocess.Popen[bytes]):
        self.proc, self.done, self.text = proc, 0, b""
        self.fd: int = proc.terminal  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:  # (the child is gone: EIO)
                return
            if not chunk:
                return
            self.text += chunk
            for m in PROGRESS.finditer(chunk):
                self.done = max(self.done, int(m.group(1)))

    def join(self) -> None:
        self._thread.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        os.close(self.fd)


def start_replay(url: str, data: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A replay whose stderr is a pseudo-terminal: it draws its progress bar there as it goes (on a pipe or a file
    it writes a line every few seconds: mneme/app/progress.py), by which the tests kill it part-way."""
    terminal, child_end = pty.openpty()
    proc = subprocess.Popen(
        [MNEME, "replay", "--data-dir", str(data), "--nats-url", url],
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=child_end,
    )
    os.close(child_end)
    proc.terminal = terminal  # type: ignore[attr-defined]
    return proc


def finish_replay(url: str, data: Path, env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run(
        [MNEME, "replay", "--data-dir", str(data), "--nats-url", url],
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=180,
        check=False,
    )
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    # the vector build's child watched its stdin from a daemon thread in the buffered reader, and every replay
    # printed "Fatal Python error: _enter_buffered_busy" as it exited
    assert b"Fatal Python error" not in out.stderr, out.stderr.decode()[-2000:]
    return dict(json.loads(out.stdout.splitlines()[-1]))


async def test_sigkill_during_replay_then_run_again_resumes_and_equals_a_clean_replay(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    url = nats_server.url or ""
    async with log_writer(nats_server) as js:
        assert await publish(js, history(N_BIG, n_memories=4000, namespaces=3)) == N_BIG
    data = tmp_path / "d"
    env = {
        "MNEME_PROJECTOR_VECTORS": "off",
        "MNEME_PROJECTOR_BATCH_MAX": "2000",
        "MNEME_PROJECTOR_CATCH_UP_BATCH_MAX": "2000",
    }
    building = data / "projections" / "building"

    killed_at = 0
    for attempt in range(6):  # noqa: B007 - counted after the loop
        proc = start_replay(url, data, env)
        progress = Progress(proc)
        deadline = time.monotonic() + 60
        # kill once it folded a fair part (it commits every 2,000 events)
        while proc.poll() is None and time.monotonic() < deadline and progress.done < 4000:
            await asyncio.sleep(0.005)
        assert proc.poll() is None, f"the replay ended before the kill: {progress.text[-2000:]!r}"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
        progress.join()
        assert building.is_dir()
        killed_at = checkpoint_of(building / "projector.duckdb")
        if 0 < killed_at < N_BIG:
            break
        assert killed_at == 0, f"killed at {killed_at}: past the end?"  # nothing committed yet: go again
    assert 0 < killed_at < N_BIG, f"could not kill part-way ({killed_at}, {attempt + 1} attempts)"
    assert not (data / "projections" / "CURRENT").exists()

    result = finish_replay(url, data, env)
    assert result["resumed_from"] == killed_at and result["events"] == N_BIG - killed_at < N_BIG, result
    assert (result["target_seq"], result["snapshot_seq"], result["model"]) == (N_BIG, None, None)
    assert result["verify"]["ok"] and result["verify"]["versions"] == N_BIG, result["verify"]
    assert result["swap"]["live"] is False  # no projector runs on that data directory
    gen = Path(result["path"])
    assert gen.name.startswith("gen-") and projection_dir(CoreSettings(data_dir=data)) == gen
    assert not building.exists()

    clean = await replay(
        CoreSettings(data_dir=tmp_path / "clean", nats_url=url),
        NO_VECTORS,
        output=tmp_path / "clean-out",
        use_snapshots=False,
    )
    assert clean["events"] == N_BIG
    assert result["digest"] == clean["digest"] == digest_of(gen / "projector.duckdb")


def few_texts(pairs: Iterator[tuple[str, Envelope]], distinct: int = 150) -> Iterator[tuple[str, Envelope]]:
    """The same history with its contents drawn from a small pool of texts."""
    for i, (subject, env) in enumerate(pairs):
        ev = env.event
        if isinstance(ev, MemoryCreated | MemoryUpdated) and isinstance(ev.content, str):
            text = f"pooled text {i % distinct}: the team {('meets', 'ships', 'tests')[i % 3]} on day {i % 7}"
            env = msgspec.structs.replace(env, event=msgspec.structs.replace(ev, content=text))
        yield subject, env


async def test_sigkill_during_a_replay_with_vectors_then_resume(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    url = nats_server.url or ""
    # The vectors save their position once the model is ready (what was folded before, embedded at once), then
    # at every commit. A log long enough to outlast the model's loading, of few distinct texts to keep embedding
    # cheap, lets the kill land between two of those positions.
    n = 4000
    async with log_writer(nats_server) as js:
        assert await publish(js, few_texts(history(n, n_memories=600, namespaces=2, seed=11))) == n
    data = tmp_path / "d"
    env = {
        "MNEME_PROJECTOR_VECTOR_BATCH_MAX": "50",
        "MNEME_PROJECTOR_BATCH_MAX": "200",
        "MNEME_PROJECTOR_CATCH_UP_BATCH_MAX": "200",
    }
    building = data / "projections" / "building"
    ck = building / f"vectors-{MODEL}.checkpoint.json"

    def vector_seq() -> int:
        try:
            return int(json.loads(ck.read_text())["seq"])
        except (FileNotFoundError, ValueError, KeyError):
            return 0

    killed_vectors = 0
    for attempt in range(4):  # noqa: B007 - counted after the loop
        proc = start_replay(url, data, env)
        progress = Progress(proc)
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline and vector_seq() == 0:
            await asyncio.sleep(0.01)
        assert proc.poll() is None, f"the replay ended before the kill: {progress.text[-2000:]!r}"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
        progress.join()
        killed_vectors = vector_seq()
        if 0 < killed_vectors < n:
            break
        # on a busy machine the model can finish loading after the whole log was folded: its first position is
        # the end, and a resume would have nothing to do. Start over.
        assert killed_vectors == n, killed_vectors
        shutil.rmtree(building)
    assert 0 < killed_vectors < n, f"could not kill part-way ({killed_vectors}, {attempt + 1} attempts)"
    killed_rows = checkpoint_of(building / "projector.duckdb")

    result = finish_replay(url, data, env)
    assert result["resumed_from"] == killed_rows and result["events"] == n - killed_rows, result
    assert result["resumed_from"] > 0 or result["events"] < n
    v = result["verify"]
    assert v["ok"] and v["vector_checkpoint"] == n and v["versions"] == n, v

    clean = await replay(
        CoreSettings(data_dir=data, nats_url=url), ProjectorSettings(), output=tmp_path / "clean", use_snapshots=False
    )
    assert clean["digest"] == result["digest"]
    assert clean["verify"] == v


async def test_a_replay_on_a_server_with_users_builds_its_vectors_with_the_password(tmp_path: Path) -> None:
    """The vector build's process connects with the replay's user and password (pydantic writes a SecretStr
    as `**********`: the child was refused by a server with users, and the replay failed)."""
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    store = tmp_path / "nats"
    args = ["-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store), "--user", "admin", "--pass", "s3cret pass"]
    proc = subprocess.Popen([nats_server_binary(), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"nats://127.0.0.1:{port}"
        core = CoreSettings(data_dir=tmp_path / "d", nats_url=url, nats_user="admin", nats_password="s3cret pass")
        for _ in range(500):
            try:
                nc = await connect(url, "test", core)
                break
            except Exception:  # noqa: BLE001 - not listening yet
                await asyncio.sleep(0.02)
        try:
            await ensure_streams(nc.jetstream())
            assert await publish(nc.jetstream(), few_texts(history(300, n_memories=60, seed=5), distinct=20)) == 300
        finally:
            await close_nats(nc)
        async with asyncio.timeout(120):  # (before, the child retried its refused connection for ever)
            result = await replay(core, ProjectorSettings(), output=tmp_path / "out", use_snapshots=False)
        v = result["verify"]
        assert v["ok"] and v["vector_checkpoint"] == 300 and v["versions"] == 300, v
    finally:
        proc.terminate()
        proc.wait(10)


# -- 9. snapshots ----------------------------------------------------------------------------------------------


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


async def test_replay_starts_from_a_snapshot_and_skips_a_corrupted_one(stack: Stack, tmp_path: Path) -> None:
    ns = "replay/snap"
    core, ps = core_of(stack), ProjectorSettings()
    snaps = core.data_dir / "snapshots"
    await populate(stack, ns, n=10)
    s1 = await settled(stack)
    m1 = await stack.projector.snapshot()
    assert (m1["seq"], m1["vector_seq"], m1["model"]) == (s1, s1, MODEL)
    await populate(stack, f"{ns}/2", n=8)
    s2 = await settled(stack)
    # the second one through the command line, from the running projector
    proc = await asyncio.create_subprocess_exec(MNEME, "snapshot", "--data-dir", str(core.data_dir), "--nats-url",
                                                stack.url, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    m2 = json.loads(out.splitlines()[-1])
    assert m2["ok"] is True and m2["seq"] == s2, m2
    assert sorted(p.name for p in snaps.iterdir()) == [f"snap-{s1:012d}", f"snap-{s2:012d}"]
    await populate(stack, f"{ns}/3", n=8)
    head = await settled(stack)

    full = await replay(core, ps, output=tmp_path / "full", use_snapshots=False)
    assert (full["snapshot_seq"], full["resumed_from"], full["events"]) == (None, 0, head)
    from_snap = await replay(core, ps, output=tmp_path / "snap")
    assert (from_snap["snapshot_seq"], from_snap["resumed_from"], from_snap["events"]) == (s2, s2, head - s2)
    assert from_snap["events"] < full["events"]
    assert from_snap["digest"] == full["digest"] == stack.projector.view.canonical_digest()
    assert from_snap["verify"] == full["verify"] and full["verify"]["ok"]
    # a frozen copy before the newest snapshot starts from the one before it
    # (the replays from here on build no vector index: which snapshot they start from does not depend on it)
    upto = await replay(core, NO_VECTORS, upto=str(s2 - 1), output=tmp_path / "upto")
    assert (upto["snapshot_seq"], upto["target_seq"]) == (s1, s2 - 1)

    # which snapshot a replay may start from
    assert newest_snapshot(snaps, upto=head, model=MODEL)[0].name == f"snap-{s2:012d}"  # type: ignore[index]
    assert newest_snapshot(snaps, upto=s2 - 1, model=MODEL)[0].name == f"snap-{s1:012d}"  # type: ignore[index]
    assert newest_snapshot(snaps, upto=s1 - 1, model=MODEL) is None
    assert newest_snapshot(snaps, upto=head, model="another-model") is None
    assert newest_snapshot(snaps, upto=head, model=None) is not None  # a replay without vectors takes any

    # a corrupted snapshot is skipped: the older one is used, and the replay still gives the same tables
    flip_a_byte(snaps / f"snap-{s2:012d}" / m2["db"])
    found = newest_snapshot(snaps, upto=head, model=MODEL)
    assert found is not None and found[1]["seq"] == s1
    older = await replay(core, NO_VECTORS, output=tmp_path / "older")
    assert (older["snapshot_seq"], older["events"], older["digest"]) == (s1, head - s1, full["digest"])
    # a damaged vector shard counts too
    shard = next(p for p in (snaps / f"snap-{s1:012d}" / m1["vectors"]).rglob("*") if p.is_file() and p.stat().st_size)
    flip_a_byte(shard)
    assert newest_snapshot(snaps, upto=head, model=MODEL) is None
    none = await replay(core, NO_VECTORS, output=tmp_path / "none")
    assert (none["snapshot_seq"], none["events"], none["digest"]) == (None, head, full["digest"])


# -- 10. upcasting in a replay ---------------------------------------------------------------------------------


async def test_a_schema_1_move_is_upcast_live_and_in_a_replay(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    stack = await start_stack(tmp_path / "data", nats_server)
    try:
        ns = "acme/research"
        a = await stack.call(
            "memory_add",
            namespace=ns,
            content="Use NATS JetStream as the event log",
            store="main",
            path="projects/mneme/decisions/event-log",
        )
        mid = a["id"]
        # the shape of tests/corpus/events_v1.jsonl: "memory_moved" without to_store, schema_version 1
        raw = {
            "event_id": str(uuid.uuid4()),
            "schema_version": 1,
            "namespace": ns,
            "aggregate_id": mid,
            "occurred_at": "2025-03-14T09:04:53.589793Z",
            "actor": {"agent_id": "agent-alpha", "role": "agent"},
            "request_id": "req-0004",
            "correlation_id": None,
            "event": {
                "type": "memory_moved",
                "memory_id": mid,
                "version": 2,
                "from_path": "projects/mneme/decisions/event-log",
                "to_path": "projects/mneme/adr/0001-event-log",
            },
        }
        ack = await stack.nc.jetstream().publish(S.memory_subject(ns, "main", mid), json.dumps(raw).encode())
        assert ack.seq == a["seq"] + 1
        assert await stack.projector.follower.wait_for(ack.seq, 10, committed=True)

        # live: the memory is at the new path, in its store
        got = await stack.call("memory_get", namespace=ns, id="main:projects/mneme/adr/0001-event-log")
        assert (got["id"], got["store"], got["version"], got["updated_by"]) == (mid, "main", 2, "agent-alpha")
        with pytest.raises(ToolFailure):
            await stack.call("memory_get", namespace=ns, id="main:projects/mneme/decisions/event-log")
        h = await stack.call("memory_history", id=mid, namespace=ns)
        assert [
            (v["version"], v["event"], v["seq"], v["agent_id"], v["request_id"], v["changed"]) for v in h["results"]
        ] == [
            (1, "memory_created", a["seq"], "local-agent", h["results"][0]["request_id"], ["created"]),
            (2, "memory_moved", ack.seq, "agent-alpha", "req-0004", ["path"]),
        ]
        # the next write decides on the upcast state (version 3)
        up = await stack.call("memory_update", id=mid, namespace=ns, content="Use NATS JetStream as the event log.")
        assert (up["version"], up["path"]) == (3, "projects/mneme/adr/0001-event-log")
        head = await settled(stack)

        # a replay (with vectors, which fold the upcast event too) gives the same tables
        r = await replay(core_of(stack), ProjectorSettings(), output=tmp_path / "out", use_snapshots=False)
        assert r["verify"]["ok"] and r["verify"]["points"] == head, r["verify"]
        assert r["digest"] == stack.projector.view.canonical_digest()
        db = tmp_path / "out" / "projector.duckdb"
        assert table(db, f"SELECT store, path, version FROM memories WHERE id = '{mid}'") == [
            ("main", "projects/mneme/adr/0001-event-log", 3)
        ]
        assert table(
            db,
            f"SELECT version, event_type, store, path, seq, seq_to FROM memory_versions WHERE id = "
            f"'{mid}' ORDER BY version",
        ) == [
            (1, "memory_created", "main", "projects/mneme/decisions/event-log", a["seq"], ack.seq),
            (2, "memory_moved", "main", "projects/mneme/adr/0001-event-log", ack.seq, head),
            (3, "memory_updated", "main", "projects/mneme/adr/0001-event-log", head, None),
        ]
        # as_of the upcast move, through the gateway
        then = await stack.call("memory_get", id=mid, namespace=ns, as_of=ack.seq)
        assert (then["path"], then["version"]) == ("projects/mneme/adr/0001-event-log", 2)
    finally:
        await stack.close()


async def test_replay_with_another_model_re_embeds_and_serves_it_after_a_restart(stack: Stack) -> None:
    """`mneme replay --model M`: the new generation is embedded with M, the live projector swaps to it only
    once M answers, and a restart keeps serving M (the generation's model, not the setting's)."""
    from mneme.app.generations import serving_settings

    ns = "replay/model"
    a = await stack.call("memory_add", namespace=ns, content="The user drinks green tea every morning")
    await stack.call("memory_add", namespace=ns, content="The build server runs on Fridays")
    before = await stack.call(
        "memory_search", mode="semantic", namespace=ns, query="favourite morning drink", limit=1, detail="full"
    )
    assert before["model"] == "paraphrase-MiniLM-L3-v2"
    core = core_of(stack)
    result = await replay(core, ProjectorSettings(), model="minilm-l6-int8")
    assert result["verify"]["ok"] and result["model"] == "minilm-l6-int8" and result["swap"]["live"], result
    assert result["embedded"] >= 2  # nothing of this model was cached: it ran
    after = await stack.call(
        "memory_search", mode="semantic", namespace=ns, query="favourite morning drink", limit=1, detail="full"
    )  # no sleep
    assert after["model"] == "all-MiniLM-L6-v2-int8" and after["results"][0]["id"] == a["id"], after
    assert serving_settings(core, ProjectorSettings()).embedding_model == "minilm-l6-int8"
    assert (projection_dir(core) / "vectors-minilm-l6-int8").is_dir()
