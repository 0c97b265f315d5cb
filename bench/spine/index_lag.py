"""bench.spine: the vector index's lag behind memory_add flat out over stdio."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from mcp import ClientSession

from bench.common import log, percentiles_ms, rnd
from bench.spine.config import call_args
from bench.stdio import call, error_code


async def index_lag(mneme: ClientSession, texts: list[str]) -> dict[str, Any]:
    """memory_add flat out (one after the other, as an agent does), then a semantic search for the last text
    until it finds the last memory: the vector index's lag behind the acknowledged writes when they stop
    (the backlog only grows while adds outrun the embedding, so this is the largest lag of the burst), and
    memories made searchable per second against writes acknowledged per second."""
    log(f"index lag: {len(texts)} memory_add flat out over stdio, then a semantic search for the last")
    await asyncio.sleep(0.3)
    t0 = time.perf_counter()
    last = ""
    for text in texts:
        last = (await call(mneme, "memory_add", call_args("memory_add", text)))["id"]
    acked = time.perf_counter()
    answers: dict[str, int] = {}
    found = None
    while found is None and time.perf_counter() - acked < 300:
        res = await mneme.call_tool("memory_search", {"query": texts[-1], "mode": "semantic", "limit": 10})
        if res.is_error:
            code = error_code(res)
            answers[code] = answers.get(code, 0) + 1
            await asyncio.sleep(0.05)
        elif last in [r["id"] for r in (res.structured_content or {}).get("results", [])]:
            found = time.perf_counter()
        else:
            answers["not found yet"] = answers.get("not found yet", 0) + 1
            await asyncio.sleep(0.05)
    n = len(texts)
    acked_rate = n / (acked - t0)
    out: dict[str, Any] = {"adds": n, "acked_per_s": rnd(acked_rate, 1), "search_answers_before": answers}
    if found is None:
        out["failed"] = "the last memory was not found by semantic search within 300 s"
        return out
    searchable_rate = n / (found - t0)
    out.update(searchable_per_s=rnd(searchable_rate, 1), searchable_vs_acked=rnd(searchable_rate / acked_rate, 3),
               lag_at_end_s=rnd(found - acked, 3))  # fmt: skip
    return out


async def search_while_adding(mneme: ClientSession, texts: list[str], queries: list[str]) -> dict[str, Any]:
    """An agent that writes and searches at once, in one session: memory_add flat out, and beside it a semantic
    search every 50 ms until the adds end. A search waits for the index to hold the session's writes
    (read-your-writes), so its latency is the index's lag as a caller meets it; an `INDEXING` answer means
    it fell further behind than the projector's wait allows."""
    log(f"search while adding: {len(texts)} memory_add flat out, a semantic search every 50 ms beside them")
    await asyncio.sleep(0.3)
    done = asyncio.Event()
    lat: list[float] = []
    errors: dict[str, int] = {}

    async def searcher() -> None:
        i = 0
        while not done.is_set():
            t = time.perf_counter()
            res = await mneme.call_tool("memory_search", {"query": queries[i % len(queries)], "mode": "semantic"})
            if res.is_error:
                code = error_code(res)
                errors[code] = errors.get(code, 0) + 1
            else:
                lat.append(time.perf_counter() - t)
            i += 1
            await asyncio.sleep(0.05)

    task = asyncio.create_task(searcher())
    t0 = time.perf_counter()
    try:
        for text in texts:
            await call(mneme, "memory_add", call_args("memory_add", text))
    finally:
        done.set()
        await task
    secs = time.perf_counter() - t0
    out: dict[str, Any] = {"adds": len(texts), "acked_per_s": rnd(len(texts) / secs, 1), "searches": len(lat)}
    out["search_errors"] = errors
    if lat:
        out.update(percentiles_ms(lat, (50, 95, 99), 1, key="search_p{}_ms"))
    return out
