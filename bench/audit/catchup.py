"""bench.audit (2): catch-up from a backlog, beside two raw ordered consumers receiving and decoding it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS

from bench import fixtures
from bench.audit.auditor import audit_ask, until_total, wait_auditor_ready
from bench.audit.config import TRAIL_FILE, Config
from bench.audit.trail import TimedTrail, check_trail, verify_trail
from bench.common import cpu_seconds, log, median, rnd, spawn
from bench.fixtures import MNEME, REPO, stop_child, until
from bench.floors import receive_all
from bench.synthetic import history, publish, publish_windowed
from mneme.app import compose
from mneme.app.settings import AuditorSettings
from mneme.ids import event_id_for, new_id
from schemas import subjects as S
from schemas.access import ReadRecorded, decode_access, encode_access
from schemas.events import decode_envelope

# -- phase 2: catch-up from a backlog ----------------------------------------------------------------------


async def load_backlog(js: Any, cfg: Config) -> tuple[int, int, float]:
    t = time.perf_counter()
    last_evt = await publish(js, history(cfg.backlog_events, namespaces=4, seed=11))
    last_acc = await publish_windowed(js, read_records(cfg.backlog_access, datetime.now(UTC)))
    return last_evt, last_acc, time.perf_counter() - t


def read_records(n: int, now: datetime) -> Iterator[tuple[str, bytes, dict[str, str]]]:
    """`n` read records (memory_get) over 4 namespaces and 3 agents, as (subject, data, headers)."""
    for i in range(n):
        ns = f"ns{i % 4}"
        rec = ReadRecorded(
            record_id=event_id_for(f"access:bench-{i}:memory_get"),
            at=now,
            agent_id=f"agent-{i % 3}",
            role="agent",
            request_id=f"bench-{i}",
            namespace=ns,
            operation="memory_get",
            memory_ids=(new_id(),),
        )
        yield S.access_subject("read", ns), encode_access(rec), {S.HDR_MSG_ID: rec.record_id}


async def floor_catchup(js: Any, last_evt: int, last_acc: int) -> float:
    """Two raw ordered consumers (as the auditor's followers are) receive every message from the start,
    read its metadata and decode it. Seconds until both have the last one."""
    secs, _ = await receive_all(
        js,
        [
            (S.EVENTS_STREAM, S.EVENTS_SUBJECTS, decode_envelope, last_evt),
            (S.ACCESS_STREAM, S.ACCESS_SUBJECTS, decode_access, last_acc),
        ],
        timeout=300,
    )
    return secs


async def inproc_catchup(nc: NATS, path: Path, last_evt: int, last_acc: int) -> dict[str, Any]:
    """The Auditor's followers (AuditorSettings) into a fresh trail in this process: start → all committed."""
    trail = fixtures.trail(path, TimedTrail)
    aus = AuditorSettings()
    aud = compose.auditor(nc, trail, aus)
    cpu0 = time.process_time()
    try:
        t0 = time.perf_counter()
        for f in aud.followers:
            await f.start()
        ev, ac = aud.followers
        await until(
            lambda: ev.committed >= last_evt and ac.committed >= last_acc, 600, "the in-process auditor to catch up"
        )
        secs = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        await aud.stop()
        return {
            "seconds": secs,
            "cpu_s": cpu,
            "stage_s": trail.stage_s,
            "commit_s": sum(c[3] for c in trail.commits),
            "commits": len(trail.commits),
            "verify": verify_trail(trail, last_evt, last_acc),
        }
    finally:
        await aud.stop()
        trail.close()


async def subprocess_catchup(
    nc: NATS, url: str, data_dir: Path, log_path: Path, last_evt: int, last_acc: int
) -> dict[str, Any]:
    """The real `mneme auditor` on a fresh data dir: from its first answer (followers running) until an
    audit query shows every event and every read record committed."""
    data_dir.mkdir(parents=True)
    t_spawn = time.perf_counter()
    proc = spawn([MNEME, "auditor", "--nats-url", url, "--data-dir", str(data_dir)], log_path=log_path, cwd=REPO)
    try:
        t_ready, cpu0 = await wait_auditor_ready(nc, proc, log_path)
        while True:
            applied, _ = await audit_ask(nc, min_seq=last_evt, timeout=60)
            if applied >= last_evt:
                break
        await until_total(nc, last_acc, timeout=300)
        t_done = time.perf_counter()
        cpu = cpu_seconds(proc.pid) - cpu0
    finally:
        code = await stop_child(proc)
    return {
        "seconds": t_done - t_ready,
        "from_spawn_s": t_done - t_spawn,
        "startup_s": t_ready - t_spawn,
        "cpu_s": cpu,
        "exit_code": code,
        "verify": check_trail(data_dir / TRAIL_FILE, last_evt, last_acc),
    }


def _median_of(runs: list[dict[str, Any]], key: str) -> float:
    return median([x[key] for x in runs])


def catchup_figures(
    total: int, floor_s: list[float], inproc: list[dict[str, Any]], sub: list[dict[str, Any]]
) -> dict[str, Any]:
    """Records/s per round and their median, each beside the floor of the same round; CPU per record."""
    f_rates = [total / s for s in floor_s]
    i_rates = [total / x["seconds"] for x in inproc]
    s_rates = [total / x["seconds"] for x in sub]

    def rates(r: list[float]) -> dict[str, Any]:
        return {"records_per_s": rnd(median(r), 1), "per_round": [rnd(x, 1) for x in r],
                "vs_floor": rnd(median([a / b for a, b in zip(r, f_rates, strict=False)]), 3)}  # fmt: skip

    floor = rates(f_rates)
    del floor["vs_floor"]
    return {
        "floor": {**floor, "seconds": [rnd(x, 3) for x in floor_s]},
        "inproc_auditor": {
            **rates(i_rates),
            "cpu_ms_per_record": rnd(_median_of(inproc, "cpu_s") * 1000 / total, 4),
            "seconds": rnd(_median_of(inproc, "seconds"), 3),
            "stage_us_per_record": rnd(_median_of(inproc, "stage_s") * 1e6 / total, 2),
            "commit_us_per_record": rnd(_median_of(inproc, "commit_s") * 1e6 / total, 2),
            "commits": int(_median_of(inproc, "commits")),
            "verify": [x["verify"] for x in inproc],
        },
        "mneme_auditor": {
            **rates(s_rates),
            "seconds": rnd(_median_of(sub, "seconds"), 3),
            "from_spawn_s": rnd(_median_of(sub, "from_spawn_s"), 3),
            "startup_s": rnd(_median_of(sub, "startup_s"), 3),
            "cpu_ms_per_record": rnd(_median_of(sub, "cpu_s") * 1000 / total, 4),
            "exit_codes": [x["exit_code"] for x in sub],
            "verify": [x["verify"] for x in sub],
        },
    }


async def phase_catchup(cfg: Config, root: Path) -> dict[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    async with AsyncExitStack() as stack:
        srv = await fixtures.start_nats(stack, root / "nats", "bench-audit-catchup")
        url, nc, js = srv.url, srv.nc, srv.js
        log(f"(2) loading a backlog of {cfg.backlog_events:,} events and {cfg.backlog_access:,} read records")
        last_evt, last_acc, load_s = await load_backlog(js, cfg)
        total = last_evt + last_acc
        log(f"(2) loaded {total:,} messages in {load_s:.2f} s")

        floor_s: list[float] = []
        inproc: list[dict[str, Any]] = []
        sub: list[dict[str, Any]] = []

        async def do_floor(r: int) -> None:
            floor_s.append(await floor_catchup(js, last_evt, last_acc))
            log(f"(2) round {r + 1}: floor {total / floor_s[-1]:,.0f} records/s")

        async def do_inproc(r: int) -> None:
            inproc.append(await inproc_catchup(nc, root / f"inproc-{r}.duckdb", last_evt, last_acc))
            log(f"(2) round {r + 1}: in-process auditor {total / inproc[-1]['seconds']:,.0f} records/s")

        async def do_sub(r: int) -> None:
            sub.append(
                await subprocess_catchup(nc, url, root / f"auditor-{r}", root / f"auditor-{r}.log", last_evt, last_acc)
            )
            log(
                f"(2) round {r + 1}: `mneme auditor` {total / sub[-1]['seconds']:,.0f} records/s "
                f"(startup {sub[-1]['startup_s']:.2f} s)"
            )

        steps = [do_floor, do_inproc, do_sub]
        for r in range(cfg.rounds):
            k = r % len(steps)
            for step in steps[k:] + steps[:k]:
                await asyncio.sleep(0.5)  # the previous consumer's deliveries settle
                await step(r)
        return {
            "backlog_events": last_evt,
            "backlog_access": last_acc,
            "records": total,
            "load_seconds": rnd(load_s, 3),
            "load_rate_per_s": rnd(total / load_s, 1),
            **catchup_figures(total, floor_s, inproc, sub),
        }
