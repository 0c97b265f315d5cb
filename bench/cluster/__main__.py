"""bench.cluster's entry point (see bench/cluster/__init__.py)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

import bench.cluster
from bench.common import latency_summary, log, machine_info, print_table, ratio, rnd, rows
from bench.fixtures import run_dir
from bench.runner import Bench, mode_of
from bench.synthetic import history, publish
from mneme.app.cluster import LocalCluster, Service
from mneme.app.settings import CoreSettings
from schemas import subjects as S

WRITERS = 4
ENV = {"MNEME_LOG_LEVEL": "INFO"}
SYNC = CoreSettings().nats_sync


@contextlib.asynccontextmanager
async def session(url: str) -> AsyncIterator[ClientSession]:
    """A ClientSession over streamable HTTP. (mcp.Client, which negotiates the 2026-07-28 protocol, answered a
    no-op tool in 44 ms p50 where this session answers it in 4 ms, against the same server: its latency is
    the client's, so the figures here use the session.)"""
    async with streamable_http_client(url) as streams, ClientSession(streams[0], streams[1]) as cs:
        await cs.initialize()
        yield cs


async def calls(urls: list[str], n: int, tool: str, args_of: Any) -> dict[str, Any]:
    """`n` calls of `tool` from WRITERS clients spread over `urls`: rate, latency, errors and the results."""
    todo: Iterator[int] = iter(range(n))
    lat: list[float] = []
    errors = 0
    out: dict[int, Any] = {}

    async def one(k: int) -> None:
        nonlocal errors
        async with session(urls[k % len(urls)]) as c:
            for i in todo:
                t = time.perf_counter()
                res = await c.call_tool(tool, args_of(i))
                lat.append(time.perf_counter() - t)
                if res.is_error:
                    errors += 1
                else:
                    out[i] = res.structured_content

    t0 = time.perf_counter()
    await asyncio.gather(*(one(k) for k in range(WRITERS)))
    secs = time.perf_counter() - t0
    return {"per_s": rnd(n / secs, 1), "errors": errors, **latency_summary(lat), "results": out}


def adds(tag: str) -> Any:
    return lambda i: {"content": f"{tag} memory {i}: the cluster benchmark writes this", "request_id": f"{tag}-{i}"}


async def write_and_read(c: LocalCluster, n: int, label: str) -> dict[str, Any]:
    urls = [s.url for s in c.layout.services if s.url]
    got: dict[str, Any] = {}
    one = await calls(urls[:1], n, "memory_add", adds(f"{label}-g1"))
    got["writes_one_gateway"] = {k: v for k, v in one.items() if k != "results"}
    if len(urls) > 1:
        two = await calls(urls, n, "memory_add", adds(f"{label}-g2"))
        got["writes_two_gateways"] = {k: v for k, v in two.items() if k != "results"}
    ids = [r["id"] for r in one["results"].values()]
    reads = await calls(urls, n, "memory_get", lambda i: {"id": ids[i % len(ids)]})
    got["reads"] = {k: v for k, v in reads.items() if k != "results"}
    return got


async def leader_kill_window(c: LocalCluster, pace_s: float = 0.01) -> dict[str, Any]:
    nc = await nats.connect(servers=c.layout.nats_url.split(","), **c.credentials("admin"))
    js = nc.jetstream(timeout=2)
    leader = (await js.stream_info(S.EVENTS_STREAM)).cluster.leader  # type: ignore[union-attr]
    assert leader is not None
    before = (await js.stream_info(S.EVENTS_STREAM)).state.messages
    acked: set[str] = set()
    failures: list[float] = []
    recovered: float | None = None
    killed_at: float | None = None
    t0 = time.monotonic()
    i = 0
    while time.monotonic() - t0 < 25:
        if killed_at is None and time.monotonic() - t0 > 2:
            c.kill(leader)
            killed_at = time.monotonic()
        mid = f"leader-kill-{i}"
        try:
            await js.publish(S.memory_subject("bench", None, mid), b"{}", headers={S.HDR_MSG_ID: mid})
            acked.add(mid)
            if failures and recovered is None:
                recovered = time.monotonic()
        except Exception:  # noqa: BLE001 - counting what an election costs a publisher
            failures.append(time.monotonic())
        if recovered is not None and time.monotonic() - recovered > 2:
            break
        i += 1
        await asyncio.sleep(pace_s)
    c.start_node(c.node(leader))
    info = await js.stream_info(S.EVENTS_STREAM)
    await nc.close()
    window = (recovered - failures[0]) if failures and recovered else None
    return {
        "killed": leader,
        "publishes": i,
        "failed": len(failures),
        "window_s": rnd(window, 2),
        "kill_to_recovered_s": rnd(recovered - killed_at, 2) if recovered and killed_at else None,
        "acked": len(acked),
        "stream_gained": info.state.messages - before,
        "none_lost_none_duplicated": info.state.messages - before >= len(acked),
    }


async def catch_up(c: LocalCluster, events: int) -> dict[str, Any]:
    nc = await nats.connect(servers=c.layout.nats_url.split(","), **c.credentials("admin"))
    t = time.monotonic()
    await publish(nc.jetstream(timeout=10), history(events, namespaces=4, seed=3))
    published_s = time.monotonic() - t
    head = (await nc.jetstream().stream_info(S.EVENTS_STREAM)).state.last_seq
    await nc.close()
    s = Service("projector", "projector-new", str(c.root / "projector-new"))
    c.layout.services.append(s)
    c.start_service(s)
    secs = await c.wait_logged(s.name, "projector serving queries", timeout=3600)
    return {
        "events": head,
        "published_s": rnd(published_s, 2),
        "join_s": rnd(secs, 2),
        "events_per_s": rnd(head / secs),
    }


async def single_node(root: Path, n: int) -> dict[str, Any]:
    log("single node: 1 NATS, 1 gateway, 1 projector")
    single = LocalCluster(root / "single", nodes=1, gateways=1, projectors=1, auditors=0, env=ENV, sync=SYNC)
    await single.up()
    try:
        return await write_and_read(single, n, "single")
    finally:
        await single.down()


async def three_nodes(root: Path, n: int, events: int, out: dict[str, Any]) -> None:
    """The cluster's writes and reads, with one replica, a new replica's catch-up, a leader killed."""
    log("cluster: 3 NATS nodes (replicas=3), 2 gateways, 2 projectors, 1 auditor")
    c = LocalCluster(root / "cluster", nodes=3, gateways=2, projectors=2, auditors=1, env=ENV, sync=SYNC)
    t = time.monotonic()
    await c.up()
    out["cluster_up_s"] = rnd(time.monotonic() - t, 2)
    try:
        out["cluster"] = await write_and_read(c, n, "cluster")
        log("reads with one projector replica (the other stopped)")
        c.kill("projector2", 15)
        urls = [s.url for s in c.layout.services if s.url]
        first = await calls(urls, 1, "memory_add", adds("one-replica"))
        ids = [r["id"] for r in first["results"].values()]
        one = await calls(urls, n, "memory_get", lambda i: {"id": ids[0]})
        out["cluster"]["reads_one_replica"] = {k: v for k, v in one.items() if k != "results"}
        log(f"catch-up of a new replica on a log of {events:,} events")
        out["catch_up"] = await catch_up(c, events)
        log("the failed-publish window when the stream leader is killed")
        out["leader_kill"] = await leader_kill_window(c)
    finally:
        await c.down()


def report(out: dict[str, Any]) -> None:
    cl, si = out["cluster"], out["single"]
    out["ratios"] = {
        "writes_cluster_vs_single": ratio(cl["writes_one_gateway"]["per_s"], si["writes_one_gateway"]["per_s"]),
        "writes_two_vs_one_gateway": ratio(cl["writes_two_gateways"]["per_s"], cl["writes_one_gateway"]["per_s"]),
        "reads_cluster_vs_single": ratio(cl["reads"]["per_s"], si["reads"]["per_s"]),
        "reads_two_vs_one_replica": ratio(cl["reads"]["per_s"], cl["reads_one_replica"]["per_s"]),
    }
    labelled = (
        ("single: writes, 1 gateway", si["writes_one_gateway"]),
        ("single: reads", si["reads"]),
        ("cluster: writes, 1 gateway", cl["writes_one_gateway"]),
        ("cluster: writes, 2 gateways", cl["writes_two_gateways"]),
        ("cluster: reads, 2 replicas", cl["reads"]),
        ("cluster: reads, 1 replica", cl["reads_one_replica"]),
    )
    print_table(
        "bench.cluster: calls from 4 MCP clients over streamable HTTP",
        ["", "calls/s", "p50 ms", "p99 ms", "errors"],
        rows(labelled, "per_s", "p50_ms", "p99_ms", "errors"),
    )


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    n = 200 if args.quick else 1000
    events = 10_000 if args.quick else 100_000
    out: dict[str, Any] = {"mode": mode_of(args), "writers": WRITERS, "calls": n}
    async with run_dir("cluster", args.keep) as root:
        out["single"] = await single_node(root, n)
        await three_nodes(root, n, events, out)
    report(out)
    out["machine"] = machine_info()
    return out


BENCH = Bench("cluster", bench.cluster.__doc__, quick="200 calls per figure, catch-up at 10,000 events",
              keep="keep the temporary directory (every process's log)")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    BENCH.main(amain, argv)


if __name__ == "__main__":
    main()
