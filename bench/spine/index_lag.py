"""bench.spine: the vector index's lag behind memory_add flat out over stdio."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from mcp import ClientSession

from bench.common import log, rnd
from bench.spine.config import call_args
from bench.stdio import first_text, structured


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
        last = structured(await mneme.call_tool("memory_add", call_args("memory_add", text)))["id"]
    acked = time.perf_counter()
    answers: dict[str, int] = {}
    found = None
    while found is None and time.perf_counter() - acked < 300:
        res = await mneme.call_tool("memory_search", {"query": texts[-1], "mode": "semantic", "limit": 10})
        if res.is_error:
            code = str(json.loads(first_text(res)).get("error", {}).get("code", "?"))
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
