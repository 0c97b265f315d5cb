"""bench.search (0) and (2): the log of memory_created envelopes, and a fresh projector with vectors catching up
on it, timed part by part.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import CpuMeter, log, rnd, system_cpu_seconds
from bench.search.corpus import TARGET_NS, Config, Memory, corpus
from bench.search.timing import TimedVectorView, Timers
from bench.synthetic import envelope, publish_windowed
from mneme.ids import event_id_for, memory_id_for
from schemas import subjects as S
from schemas.events import Actor, MemoryCreated, encode_envelope
from services.projector.service import Projector


@dataclass(frozen=True, slots=True)
class Encoded:
    subject: str
    data: bytes
    msg_id: str


def build_log(cfg: Config) -> tuple[list[Encoded], list[Memory], dict[str, int]]:
    """Every memory_created envelope, encoded, in one shuffled order; and the target namespace's memories."""
    taken: set[str] = set()
    per_ns = {TARGET_NS: corpus(cfg.target, cfg.seed, taken)}
    for k in range(1, cfg.others + 1):
        per_ns[f"team-{k}"] = corpus(cfg.per_other, cfg.seed + k, taken)
    order = [(ns, i) for ns, mems in per_ns.items() for i in range(len(mems))]
    random.Random(cfg.seed - 1).shuffle(order)
    t0 = datetime.now(UTC) - timedelta(days=120)
    actor = Actor(agent_id="bench-search")
    out = []
    for j, (ns, i) in enumerate(order):
        m = per_ns[ns][i]
        request_id = f"bench-search-{ns}-{i}"
        mid = memory_id_for(ns, request_id)
        msg_id = f"{request_id}:{mid}"
        ev = MemoryCreated(
            memory_id=mid,
            version=1,
            content=m.text,
            kind=m.kind,
            category=m.category,
            subject=m.subject,
            tags=m.tags,
            importance=m.importance,
        )
        env = envelope(ns, mid, ev, (event_id_for(msg_id), request_id), t0 + timedelta(seconds=j * 60), actor)
        out.append(Encoded(S.memory_subject(ns, None, mid), encode_envelope(env), msg_id))
    return out, per_ns[TARGET_NS], {ns: len(v) for ns, v in per_ns.items()}


async def publish_log(js: Any, msgs: list[Encoded], window: int = 1000) -> int:
    """Pipelined appends with the gateway's headers (dedupe id, expected last subject sequence 0)."""
    headed = ((m.subject, m.data, {S.HDR_MSG_ID: m.msg_id, S.HDR_EXPECTED_LAST_SUBJECT_SEQ: "0"}) for m in msgs)
    return await publish_windowed(js, headed, window, timeout=60)


async def catch_up(
    projector: Projector, vectors: TimedVectorView, head: int, meter: CpuMeter, timers: Timers
) -> dict[str, Any]:
    rows_done: float | None = None
    assert projector.vector_follower is not None
    timers.reset()
    vectors.embedded = 0
    vectors.commits.clear()
    meter.start()
    sys0 = system_cpu_seconds()
    t0 = time.perf_counter()
    await projector.start()
    last_log = t0
    while projector.vector_follower.committed < head:
        await asyncio.sleep(0.05)
        now = time.perf_counter()
        if rows_done is None and projector.follower.committed >= head:
            rows_done = now - t0
        if now - last_log >= 15:
            last_log = now
            log(
                f"  catch-up: {vectors.embedded:,} embedded, vector follower at {projector.vector_follower.committed:,}"
                f" of {head:,}, {vectors.embedded / (now - t0):,.0f}/s"
            )
    secs = time.perf_counter() - t0
    cpu = meter.stop()
    others = max(0.0, system_cpu_seconds() - sys0 - sum(cpu.values()))
    embedded = vectors.embedded
    commits = [(a - t0, b - t0, n) for a, b, n in vectors.commits if n]
    first = commits[0][0] if commits else None
    gaps = sum(commits[k + 1][0] - commits[k][1] for k in range(len(commits) - 1))
    return {
        "events": head,
        "seconds": rnd(secs, 3),
        "embedded": embedded,
        "memories_per_s": rnd(embedded / secs, 1),
        "rows_follower_done_s": rnd(rows_done if rows_done is not None else secs, 2),
        "commits": len(commits),
        "texts_per_commit": rnd(sum(c[2] for c in commits) / len(commits), 1) if commits else None,
        "first_commit_at_s": rnd(first, 3),
        "between_commits_s": rnd(gaps, 3),
        "after_last_commit_s": rnd(secs - commits[-1][1], 3) if commits else None,
        "cpu_seconds": {k: rnd(v, 2) for k, v in cpu.items()},
        "cpu_cores": {k: rnd(v / secs, 2) for k, v in cpu.items()},
        "others_cores": rnd(others / secs, 2),
        "parts": timers.snapshot(),
        "cache": {"hits": vectors.cache.hits, "misses": vectors.cache.misses},
    }
