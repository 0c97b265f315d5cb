"""The floors the benchmarks set their figures beside, measured in the same run: raw JetStream publishes
(awaited and pipelined), raw ordered consumers receiving and decoding a whole stream, a core NATS
request/reply echo, and the embedding model's raw batch rate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.subscription import Subscription
from nats.js.api import ConsumerConfig, DeliverPolicy

from bench.common import rnd, system_cpu_seconds, timed_each
from bench.workload import PreEncoded
from mneme.embedding import OnnxEmbedder
from schemas import subjects as S

# -- raw publishes ------------------------------------------------------------------------------------


async def publish_awaited(js: Any, msgs: list[PreEncoded], *, headers: bool = False) -> tuple[float, list[float]]:
    """One publish awaited at a time (with `headers`: the ones the domain path sends, the dedupe id and the
    expected subject sequence): (seconds for all, seconds of each)."""

    async def one(m: PreEncoded) -> None:
        hdrs = {S.HDR_MSG_ID: m.msg_id, S.HDR_EXPECTED_LAST_SUBJECT_SEQ: "0"} if headers else None
        await js.publish(m.subject, m.data, timeout=5.0, headers=hdrs)

    return await timed_each(msgs, one)


async def publish_pipelined(js: Any, msgs: list[PreEncoded]) -> float:
    """Many in flight: js.publish_async (bounded by its pending semaphore), then wait for every ack."""
    t0 = time.perf_counter()
    futs = [await js.publish_async(m.subject, m.data) for m in msgs]
    acks = await asyncio.gather(*futs)
    elapsed = time.perf_counter() - t0
    bad = [a for a in acks if getattr(a, "seq", None) is None]
    if bad:
        raise RuntimeError(f"{len(bad)} pipelined publishes were not acknowledged")
    return elapsed


async def load_log(js: Any, msgs: list[PreEncoded], chunk: int = 20000) -> float:
    t0 = time.perf_counter()
    for i in range(0, len(msgs), chunk):
        await publish_pipelined(js, msgs[i : i + chunk])
    return time.perf_counter() - t0


# -- raw ordered consumers: receive and decode a whole stream --------------------------------------------


async def ordered_subscribe(
    js: Any, stream: str, subjects: str, cb: Callable[[Any], Awaitable[None]], policy: DeliverPolicy = DeliverPolicy.ALL
) -> Any:
    """An ordered push consumer with a callback (what LogFollower uses), from `policy` on."""
    return await js.subscribe(
        subjects,
        stream=stream,
        cb=cb,
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=policy),
        idle_heartbeat=1.0,
    )


async def receive_all(
    js: Any, streams: Sequence[tuple[str, str, Callable[[bytes], Any], int]], timeout: float
) -> tuple[float, list[int]]:
    """Per (stream, subjects, decode, target): an ordered push consumer with a callback (what LogFollower
    uses) from the start of the stream, reading each message's stream sequence and decoding it. Seconds
    until every consumer has reached its target sequence, and how many messages each received."""
    done = [asyncio.Event() for _ in streams]
    counts = [0] * len(streams)
    subs = []
    t0 = time.perf_counter()
    try:
        for k, (stream, subjects, decode, target) in enumerate(streams):

            async def cb(m: Any, k: int = k, decode: Any = decode, target: int = target) -> None:
                seq = m.metadata.sequence.stream
                decode(m.data)
                counts[k] += 1
                if seq >= target:
                    done[k].set()

            subs.append(await ordered_subscribe(js, stream, subjects, cb))
        await asyncio.wait_for(asyncio.gather(*(ev.wait() for ev in done)), timeout)
        return time.perf_counter() - t0, counts
    finally:
        for s in subs:
            try:
                await s.unsubscribe()
            except Exception:  # noqa: BLE001 - the connection may be gone
                pass


# -- core NATS request/reply ------------------------------------------------------------------------------


async def echo_responder(nc: NATS, subject: str) -> Subscription:
    """A responder in this process that answers every request with its own payload: the request/reply floor
    of a query path. Unsubscribe it when done."""

    async def echo(msg: Any) -> None:
        await msg.respond(msg.data)

    return await nc.subscribe(subject, cb=echo)


async def echo_once(nc: NATS, subject: str, payload: bytes) -> float:
    """Seconds of one request to an echo responder."""
    t = time.perf_counter()
    await nc.request(subject, payload, timeout=5)
    return time.perf_counter() - t


# -- the model ---------------------------------------------------------------------------------------------


def raw_rate(embedder: OnnxEmbedder, texts: list[str]) -> dict[str, Any]:
    cpu0, sys0 = time.process_time(), system_cpu_seconds()
    t = time.perf_counter()
    embedder.embed(texts)
    secs = time.perf_counter() - t
    ours = time.process_time() - cpu0
    others = max(0.0, system_cpu_seconds() - sys0 - ours)
    return {
        "texts": len(texts),
        "seconds": rnd(secs, 3),
        "per_s": rnd(len(texts) / secs, 1),
        "cpu_cores_used": rnd(ours / secs, 2),
        "others_cores": rnd(others / secs, 2),
    }
