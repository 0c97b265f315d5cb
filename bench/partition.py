"""bench.partition — the namespace-sharding plan (docs/architecture.md, "Partitioning") in figures.

    python -m bench.partition [--quick]

(1) Balance, simulated: namespaces whose event counts follow a Zipf law (a few busy tenants, a long tail),
    placed on S shards by NATS's deterministic subject partitioning (FNV-1a of the namespace token, mod S)
    or by a directory that puts each namespace on the least-loaded shard (busiest first): the busiest
    shard's load over the mean, per S. (2) Measured on the local three-node cluster: pipelined publishes
    into one replicas=3 stream, and spread over three shard streams whose leaders sit on three nodes
    (placement by leader choice), from one client: events/s each, in the same run.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path
from typing import Any

import nats
from nats.js.api import StorageType, StreamConfig

from bench.common import log, machine_info, print_table, rnd, rows
from bench.fixtures import run_dir
from bench.runner import Bench, mode_of
from bench.synthetic import publish_windowed
from mneme.app.cluster import LocalCluster


def fnv1a(token: str) -> int:
    h = 0x811C9DC5
    for b in token.encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def balance(namespaces: int, shards: int, zipf_s: float, seed: int) -> dict[str, float | None]:
    rng = random.Random(seed)
    names = [f"tenant-{rng.getrandbits(40):010x}" for _ in range(namespaces)]
    load = {n: 1.0 / (rank + 1) ** zipf_s for rank, n in enumerate(names)}
    total = sum(load.values())
    hashed = [0.0] * shards
    for n, x in load.items():
        hashed[fnv1a(n) % shards] += x
    placed = [0.0] * shards
    for x in sorted(load.values(), reverse=True):
        placed[placed.index(min(placed))] += x
    mean = total / shards
    return {
        "hash_max_over_mean": rnd(max(hashed) / mean, 3),
        "directory_max_over_mean": rnd(max(placed) / mean, 3),
        "busiest_namespace_share": rnd(max(load.values()) / total, 3),
    }


async def publish_rate(nc: Any, streams: list[str], n: int, size: int = 512) -> float:
    body = b"x" * size
    t = time.perf_counter()
    await publish_windowed(nc.jetstream(), ((f"{streams[i % len(streams)]}.e", body, None) for i in range(n)), 256, 10)
    return n / (time.perf_counter() - t)


async def measured(root: Path, n: int) -> dict[str, Any]:
    c = LocalCluster(root / "cluster", nodes=3, gateways=0, projectors=0, auditors=0)
    await c.up()
    try:
        nc = await nats.connect(servers=c.layout.nats_url.split(","), **c.credentials("admin"))
        js = nc.jetstream(timeout=10)
        names = ["part.one"] + [f"part.s{k}" for k in range(3)]
        for name in names:
            stream = name.replace(".", "_").upper()
            await js.add_stream(
                StreamConfig(name=stream, subjects=[f"{name}.>"], storage=StorageType.FILE, num_replicas=3)
            )
        leaders = [(await js.stream_info(f"PART_S{k}")).cluster.leader for k in range(3)]  # type: ignore[union-attr]
        one = await publish_rate(nc, ["part.one"], n)
        three = await publish_rate(nc, [f"part.s{k}" for k in range(3)], n)
        await nc.close()
        return {"one_stream_per_s": rnd(one), "three_shards_per_s": rnd(three), "ratio": rnd(three / one, 3),
                "shard_leaders": leaders}  # fmt: skip
    finally:
        await c.down()


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": mode_of(args)}
    sims = {str(shards): balance(2000 if args.quick else 20000, shards, 1.1, 7) for shards in (4, 8, 16)}
    out["balance_zipf_1.1"] = sims
    print_table(
        "(1) busiest shard / mean, namespaces with Zipf(1.1) load",
        ["shards", "hash partition", "directory (least loaded)", "busiest namespace share"],
        rows(sims.items(), "hash_max_over_mean", "directory_max_over_mean", "busiest_namespace_share"),
    )
    async with run_dir("partition", args.keep) as root:
        log("(2) pipelined publishes: one stream vs three shard streams, replicas=3, local three-node cluster")
        out["publish"] = await measured(root, 5000 if args.quick else 30000)
    p = out["publish"]
    print_table(
        "(2) events/s, one client, pipelined",
        ["one stream", "three shards", "ratio"],
        [[p["one_stream_per_s"], p["three_shards_per_s"], p["ratio"]]],
    )
    out["machine"] = machine_info()
    return out


BENCH = Bench("partition", __doc__, quick="2,000 namespaces simulated, 5,000 publishes measured")


def main(argv: list[str] | None = None) -> None:
    BENCH.main(amain, argv)


if __name__ == "__main__":
    main()
