"""The local cluster (`mneme cluster`, mneme/app/cluster.py): three nats-server nodes routed into one JetStream
cluster with replicas=3 streams, two gateways over streamable HTTP, two projector replicas and an auditor,
each its own process.

Writes spread over both gateways while the event stream's leader is killed with SIGKILL and later
restarted: every acknowledged write is in both replicas' read models afterwards, none lost, none
duplicated, and a call during the election answers (a retryable error at worst) within its timeout.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import nats
import pytest
from mcp import Client

from mneme.app.cluster import LocalCluster, read_state
from schemas import subjects as S
from tests.harness import ToolFailure, text_of

pytestmark = pytest.mark.anyio

WRITES = 240
WRITERS = 4
CALL_LIMIT_S = 15.0  # the gateway's publish timeout (3 s) and query wait, with room for two shared cores


async def stream_leader(c: LocalCluster) -> str:
    nc = await nats.connect(servers=c.layout.nats_url.split(","), **c.credentials("admin"))
    try:
        info = await nc.jetstream(timeout=5).stream_info(S.EVENTS_STREAM)
        assert info.cluster is not None and info.config.num_replicas == 3
        assert info.cluster.leader is not None
        return info.cluster.leader
    finally:
        await nc.close()


def memories(db: Path) -> list[tuple[str, str]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return [(r[0], r[1]) for r in con.execute("SELECT id, content FROM memories").fetchall()]


async def test_writes_survive_a_killed_stream_leader_and_reach_both_replicas(tmp_path: Path) -> None:
    await leader_killed_under_writes(tmp_path, WRITES)


@pytest.mark.slow
async def test_5000_writes_survive_a_killed_stream_leader(tmp_path: Path) -> None:
    """The issue's size: 5,000 writes over two gateways (python -m pytest -m slow)."""
    await leader_killed_under_writes(tmp_path, 5000)


async def leader_killed_under_writes(tmp_path: Path, writes: int) -> None:
    c = LocalCluster(tmp_path / "cluster", nodes=3, gateways=2, projectors=2, auditors=1)
    await c.up()
    try:
        urls = [s.url for s in c.layout.services if s.url]
        assert len(urls) == 2
        acked: dict[int, str] = {}
        slowest = 0.0
        errors: list[str] = []
        killed: list[str] = []
        next_i = iter(range(writes))

        async def writer(k: int) -> None:
            nonlocal slowest
            async with Client(urls[k % 2]) as mcp:
                for i in next_i:
                    if i == writes // 3 and not killed:
                        killed.append(await stream_leader(c))
                        c.kill(killed[0])
                    if i == 2 * writes // 3 and killed and len(killed) == 1:
                        killed.append("restarted")
                        c.start_node(c.node(killed[0]))
                    args = {"content": f"cluster write {i}", "request_id": f"w-{i}"}
                    deadline = time.monotonic() + 60
                    while True:
                        t = time.monotonic()
                        res = await mcp.call_tool("memory_add", args)
                        slowest = max(slowest, time.monotonic() - t)
                        if not res.is_error:
                            acked[i] = res.structured_content["id"]
                            break
                        err = ToolFailure(text_of(res)).error
                        errors.append(err["code"])
                        assert err.get("retryable") or err["code"] in ("UNAVAILABLE", "PROJECTION_LAG"), err
                        assert time.monotonic() < deadline, f"write {i} kept failing: {err}"
                        await asyncio.sleep(0.2)

        await asyncio.gather(*(writer(k) for k in range(WRITERS)))
        assert len(acked) == writes and killed[1] == "restarted"
        assert slowest < CALL_LIMIT_S, f"a call took {slowest:.1f} s"

        # read your writes through either gateway, then both replicas hold exactly the acknowledged writes
        async with Client(urls[1]) as mcp:
            got = await mcp.call_tool("memory_get", {"id": acked[writes - 1]})
            assert not got.is_error and got.structured_content["content"] == f"cluster write {writes - 1}"
        nc = await nats.connect(servers=c.layout.nats_url.split(","), **c.credentials("admin"))
        head = (await nc.jetstream(timeout=10).stream_info(S.EVENTS_STREAM)).state.last_seq
        await nc.close()
        assert head == writes, "one event per acknowledged write: no duplicate from a retried publish"
    finally:
        await c.down()
    expected = {(mid, f"cluster write {i}") for i, mid in acked.items()}
    for s in c.layout.services:
        if s.role == "projector":
            got_rows = memories(Path(s.data_dir) / "projector.duckdb")
            assert len(got_rows) == writes and set(got_rows) == expected, s.name


async def test_a_killed_projector_replica_rejoins_and_ends_identical(tmp_path: Path) -> None:
    """One replica of two killed with SIGKILL while an agent writes and reads its writes back: the other keeps
    answering (a query in flight to the dead one may fail, retryably); restarted, it catches up from its own
    checkpoint before it joins the queue group again, and both fold the log to the same canonical digest."""
    from services.projector.memories_view import MemoriesView

    c = LocalCluster(
        tmp_path / "cluster", nodes=3, gateways=1, projectors=2, auditors=0, env={"MNEME_LOG_LEVEL": "INFO"}
    )
    await c.up()
    failures: list[str] = []
    n = 150
    try:
        url = c.layout.services[-1].url
        assert url is not None
        async with Client(url) as mcp:
            for i in range(n):
                if i == n // 3:
                    c.kill("projector1")
                if i == 2 * n // 3:
                    c.start_service(c.service("projector1"))
                added = await mcp.call_tool("memory_add", {"content": f"replica write {i}", "request_id": f"r-{i}"})
                assert not added.is_error, added.content
                got = await mcp.call_tool("memory_get", {"id": added.structured_content["id"]})
                if got.is_error:
                    err = ToolFailure(text_of(got)).error
                    assert err["code"] in ("PROJECTION_LAG", "UNAVAILABLE"), err
                    failures.append(err["code"])
                else:
                    assert got.structured_content["content"] == f"replica write {i}"
            # the restarted replica serves again: wait until it says so, then every read still answers
            await c.wait_logged("projector1", "projector serving queries", count=2, timeout=60)
            for _ in range(20):
                listed = await mcp.call_tool("memory_list", {"limit": 1})
                assert not listed.is_error and listed.structured_content["total"] == n
    finally:
        await c.down()
    assert len(failures) <= 1, failures  # at most the one query in flight when the replica died
    digests = []
    for s in c.layout.services:
        if s.role == "projector":
            view = MemoriesView(str(Path(s.data_dir) / "projector.duckdb"))
            digests.append(view.canonical_digest())
            view.close()
    assert len(digests) == 2 and digests[0] == digests[1]


def test_cluster_up_status_and_down_from_the_command_line(tmp_path: Path) -> None:
    """`mneme cluster up` returns with every process running and recorded; `down` stops them all."""
    root = tmp_path / "c"
    cli = [sys.executable, "-m", "mneme", "cluster"]
    args = ["--dir", str(root), "--nodes", "3", "--gateways", "1", "--projectors", "1", "--auditors", "0"]
    up = subprocess.run([*cli, "up", *args], capture_output=True, text=True, timeout=180)
    state: dict[str, Any] | None = read_state(root)
    try:
        assert up.returncode == 0, up.stderr[-2000:]
        assert state is not None
        status = json.loads(subprocess.run([*cli, "status", "--dir", str(root)], capture_output=True, text=True).stdout)
        assert [n["alive"] for n in status["nodes"]] == [True, True, True]
        assert [(s["role"], s["alive"]) for s in status["services"]] == [("projector", True), ("gateway", True)]
        again = subprocess.run([*cli, "up", *args], capture_output=True, text=True, timeout=60)
        assert again.returncode == 1 and "cluster down" in again.stderr
    finally:
        down = subprocess.run([*cli, "down", "--dir", str(root)], capture_output=True, text=True, timeout=120)
    assert down.returncode == 0 and json.loads(down.stdout) == {"stopped": 5}
    assert read_state(root) is None
    from mneme.embedded_nats import is_alive

    assert state is not None
    assert not any(is_alive(p["pid"]) for p in (*state["nodes"], *state["services"]))


async def test_least_privilege_is_enforced_by_the_server(tmp_path: Path) -> None:
    """Each service connects as its role (mneme/nats_auth.py): a gateway publishes events but cannot delete,
    purge or create a stream; a projector follows the log but cannot publish an event; the server refuses
    each with a permissions violation, and the stream is as it was."""
    c = LocalCluster(tmp_path / "c", nodes=1, gateways=0, projectors=0, auditors=0)
    await c.up()
    try:
        url = c.layout.nats_url
        violations: list[str] = []

        async def seen(exc: Exception) -> None:
            violations.append(str(exc))

        async def as_role(role: str) -> Any:
            return await nats.connect(servers=[url], error_cb=seen, **c.credentials(role))

        admin, gateway, projector = await as_role("admin"), await as_role("gateway"), await as_role("projector")
        try:
            subject = S.memory_subject("default", None, "m-1")
            ack = await gateway.jetstream(timeout=3).publish(subject, b"{}")
            assert ack.seq == 1, "a gateway appends events"

            for attempt in (
                gateway.jetstream(timeout=2).delete_stream(S.EVENTS_STREAM),
                gateway.jetstream(timeout=2).purge_stream(S.EVENTS_STREAM),
                projector.jetstream(timeout=2).publish(subject, b"{}"),
                projector.jetstream(timeout=2).delete_stream(S.ACCESS_STREAM),
            ):
                with pytest.raises((nats.errors.Error, TimeoutError)):
                    await attempt
            await asyncio.sleep(0.2)
            assert sum("permissions violation" in v.lower() for v in violations) >= 4, violations
            info = await admin.jetstream(timeout=3).stream_info(S.EVENTS_STREAM)
            assert (info.state.messages, info.state.last_seq) == (1, 1), "nothing deleted, purged or added"
            assert (await admin.jetstream(timeout=3).stream_info(S.ACCESS_STREAM)).config.name == S.ACCESS_STREAM
            # and what a projector does is allowed: read the log
            msg = await projector.jetstream(timeout=3).get_msg(S.EVENTS_STREAM, seq=1, direct=True)
            assert msg.data == b"{}"
        finally:
            for nc in (admin, gateway, projector):
                await nc.close()
    finally:
        await c.down()


async def test_a_new_replica_joins_only_when_caught_up_and_never_answers_stale(tmp_path: Path) -> None:
    """A projector replica started on a log of 10,000 events is the only one: until it has folded the log as
    it stood at its start it is not in the queue group, so a reader that asks with no log position of its
    own (min_seq 0, another gateway) gets 'no projector yet', never a count from half the log; once it
    answers, it answers with everything."""
    await new_replica_never_stale(tmp_path, 10_000)


@pytest.mark.slow
async def test_a_new_replica_on_100000_events_never_answers_stale(tmp_path: Path) -> None:
    """The issue's size: the same on a log of 100,000 events (python -m pytest -m slow)."""
    await new_replica_never_stale(tmp_path, 100_000)


async def new_replica_never_stale(tmp_path: Path, events: int) -> None:
    from bench.synthetic import history, publish

    c = LocalCluster(
        tmp_path / "cluster", nodes=3, gateways=1, projectors=0, auditors=0, env={"MNEME_LOG_LEVEL": "INFO"}
    )
    await c.up()
    try:
        nc = await nats.connect(servers=c.layout.nats_url.split(","), **c.credentials("admin"))
        await publish(nc.jetstream(timeout=10), history(events, namespaces=1, seed=5, store=None))
        await nc.close()
        url = c.layout.services[0].url
        assert url is not None
        from mneme.app.cluster import Service

        s = Service("projector", "projector-late", str(tmp_path / "cluster" / "projector-late"))
        c.layout.services.append(s)
        answers: list[int] = []
        refusals = 0
        async with Client(url) as mcp:
            c.start_service(s)  # the first ask below goes out while the process is still starting
            deadline = time.monotonic() + 120 + events / 1000
            while len(answers) < 5:
                assert time.monotonic() < deadline, (refusals, answers)
                got = await mcp.call_tool("memory_list", {"namespace": "ns0", "limit": 1, "status": "any"})
                if got.is_error:  # no projector yet, past the gateway's query timeout
                    assert ToolFailure(text_of(got)).code in ("UNAVAILABLE", "PROJECTION_LAG"), text_of(got)
                    refusals += 1
                else:
                    answers.append(got.structured_content["total"])
        log = (Path(s.data_dir) / "stderr.log").read_text()
        assert f"projector serving queries at sequence {events}" in log, log[-2000:]
        assert len(set(answers)) == 1 and answers[0] > 1000, (refusals, answers)
    finally:
        await c.down()


async def test_a_new_replica_starts_from_a_shared_snapshot(tmp_path: Path) -> None:
    """Replicas that share MNEME_PROJECTOR_SNAPSHOT_DIR: one writes a snapshot every 3,000 events; a new one
    starts from the newest (not from the log's first event), folds the rest, and ends with the same canonical
    digest as the one that folded everything."""
    from bench.synthetic import history, publish
    from mneme.app.cluster import Service
    from services.projector.memories_view import MemoriesView

    shared = tmp_path / "snapshots"
    env = {
        "MNEME_LOG_LEVEL": "INFO",
        "MNEME_PROJECTOR_SNAPSHOT_DIR": str(shared),
        "MNEME_PROJECTOR_SNAPSHOT_EVERY": "3000",
        "MNEME_PROJECTOR_VECTORS": "off",
    }
    c = LocalCluster(tmp_path / "cluster", nodes=1, gateways=0, projectors=1, auditors=0, env=env)
    await c.up()
    try:
        nc = await nats.connect(servers=c.layout.nats_url.split(","), **c.credentials("admin"))
        await publish(nc.jetstream(timeout=10), history(10_000, namespaces=2, seed=11))
        await nc.close()
        deadline = time.monotonic() + 90
        while not any(json.loads(m.read_text())["seq"] >= 9000 for m in shared.glob("snap-*/manifest.json")):
            assert time.monotonic() < deadline, sorted(p.name for p in shared.glob("*"))
            await asyncio.sleep(0.2)
        late = Service("projector", "projector-late", str(tmp_path / "cluster" / "projector-late"))
        c.layout.services.append(late)
        c.start_service(late)
        await c.wait_logged(late.name, "projector serving queries", timeout=120)
        assert "starting from snapshot" in (Path(late.data_dir) / "stderr.log").read_text()
        await asyncio.sleep(1)  # (both fold the same log; the first has long caught up)
    finally:
        await c.down()
    digests = []
    for s in c.layout.services:
        view = MemoriesView(str(Path(s.data_dir) / "projector.duckdb"))
        digests.append((view.checkpoint, view.canonical_digest()))
        view.close()
    assert digests[0] == digests[1] and digests[0][0] == 10_000
