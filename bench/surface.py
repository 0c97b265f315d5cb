"""bench.surface — what an agent pays in context for mneme: tool definitions and result sizes.

    python -m bench.surface            # also part of bench.spine's report ("surface")

An agent carries every tool definition in its context window and reads every byte a tool returns.
(1) tools/list per profile: the compact JSON of each profile's tool list as a client receives it
    (names, descriptions, input and output schemas, annotations), with its input/output schema split,
    beside the reference knowledge-graph server's list (../shared/seeds/server-memory-tools.json) when
    that file is there: the floor a memory server's tool list can be.
(2) results: a real `mneme serve` over stdio with 30 memories; the bytes of one 10-result
    memory_search (brief, the default; and detail="full") and memory_list response as the client
    receives it (the whole CallToolResult, text and structured content), per result, and how much of it
    is memory content. The budgets of issue 10 (native tool list <= 40 KB, 10 results in brief <= 3 KB)
    are checked in `within_budget`.
Last stdout line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from mcp.types import CallToolResult

from bench.runner import Bench
from bench.stdio import mcp_session, serve_params

FACTS = [
    "Alice prefers dark roast coffee in the morning",
    "The build server runs on Debian 13 with Python 3.11",
    "Bob is allergic to peanuts",
    "The API gateway must require OAuth tokens on every route",
    "Ruff is the linter used for Python code in this repository",
    "Deployments happen on Tuesdays after 14:00",
    "The staging database is PostgreSQL 17 on port 5433",
    "Carol leads the payments team",
    "Our on-call rotation changes every Monday at 09:00 UTC",
    "The frontend uses React 19 with Vite",
    "Dan likes hiking in the Alps during summer",
    "Invoices are archived for ten years by law",
    "The mobile app supports iOS 17 and Android 14",
    "Error budgets are reviewed monthly",
    "Eve speaks German, French and Japanese",
    "The data warehouse refreshes every night at 02:00",
    "Feature flags live in LaunchDarkly",
    "Frank prefers tea over coffee",
    "All services log JSON to stdout",
    "The CI pipeline must finish within 15 minutes",
    "Grace is the security champion for the web team",
    "Customer PII is encrypted at rest with AES-256",
    "The search index is rebuilt after every schema change",
    "Heidi works remotely from Lisbon",
    "Pull requests need two approvals",
    "The cache TTL for product pages is five minutes",
    "Ivan maintains the Terraform modules",
    "Backups are tested by restoring them every quarter",
    "The style guide forbids abbreviations in public APIs",
    "Judy's birthday is on 3 March",
]


BUDGET_TOOLS = 40_000  # issue 10: the native tool list, compact JSON
BUDGET_RESULTS = 3_000  # issue 10: one 10-result search or list in brief (the whole CallToolResult)


def compact(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode())


async def tool_lists() -> dict[str, Any]:
    from mcp import Client

    from services.gateway import profiles
    from services.gateway.server import build_server

    out: dict[str, Any] = {}
    for name in profiles.names():
        async with Client(build_server(None, profile=name)) as c:
            tools = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in (await c.list_tools()).tools]
        out[name] = {
            "tools": len(tools),
            "bytes": compact(tools),
            "input_schema_bytes": sum(compact(t.get("inputSchema", {})) for t in tools),
            "output_schema_bytes": sum(compact(t.get("outputSchema", {})) for t in tools),
        }
    ref = Path(__file__).resolve().parents[2] / "shared" / "seeds" / "server-memory-tools.json"
    if ref.exists():
        data = json.loads(ref.read_text())
        tools = data.get("tools", data) if isinstance(data, dict) else data
        out["reference_server_memory"] = {"tools": len(tools), "bytes": compact(tools)}
    return out


QUERY = "what do people drink in the morning"
CALLS: dict[str, tuple[str, dict[str, Any]]] = {  # label -> (tool, arguments); threshold 0: 10 results each
    "memory_search": ("memory_search", {"query": QUERY, "limit": 10, "threshold": 0}),
    "memory_search_full": ("memory_search", {"query": QUERY, "limit": 10, "threshold": 0, "detail": "full"}),
    "memory_list": ("memory_list", {"limit": 10}),
}


def size_of(res: CallToolResult) -> dict[str, Any]:
    """The bytes of one response as the client receives it, per result, and how much is memory content."""
    whole = res.model_dump(mode="json", by_alias=True, exclude_none=True)
    sc = res.structured_content or {}
    items = next((v for v in sc.values() if isinstance(v, list)), [])
    content = sum(len(str(m.get("content", "")).encode()) for m in items if isinstance(m, dict))
    return {
        "results": len(items),
        "bytes": compact(whole),
        "structured_bytes": compact(sc),
        "bytes_per_result": round(compact(whole) / max(len(items), 1)),
        "content_bytes": content,
        "error": res.is_error,
    }


async def result_sizes(root: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with open(os.devnull, "w") as devnull:
        async with mcp_session(serve_params(root, MNEME_LOG_LEVEL="ERROR"), devnull) as s:
            for i, fact in enumerate(FACTS):
                await s.call_tool("memory_add", {"content": fact, "tags": ["bench", f"t{i % 3}"], "subject": "team"})
            for label, (tool, args) in CALLS.items():
                for _ in range(50):  # the model loads in the background: semantic tools answer once it is ready
                    res = await s.call_tool(tool, args)
                    if not res.is_error:
                        break
                    await asyncio.sleep(0.2)
                out[label] = size_of(res)
    return out


async def measure() -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="mneme-bench-surface-"))
    try:
        lists, results = await tool_lists(), await result_sizes(root / "d")
        budget = {"native_tool_list_bytes": BUDGET_TOOLS, "ten_results_bytes": BUDGET_RESULTS}
        within = {
            "native_tool_list": lists["native"]["bytes"] <= BUDGET_TOOLS,
            "ten_results": all(r["bytes"] <= BUDGET_RESULTS for k, r in results.items() if not k.endswith("_full")),
        }
        return {"tool_lists": lists, "results": results, "budget": budget, "within_budget": within}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def report(fig: dict[str, Any]) -> None:
    print("\nWhat an agent carries: tools/list per profile (compact JSON)")
    for name, t in fig["tool_lists"].items():
        extra = (
            f" (input {t['input_schema_bytes']:,}, output {t['output_schema_bytes']:,})"
            if "input_schema_bytes" in t
            else ""
        )
        print(f"  {name:<26} {t['tools']:>3} tools {t['bytes']:>9,} B{extra}")
    print("What it reads: one 10-result response over stdio")
    for tool, r in fig["results"].items():
        print(
            f"  {tool:<26} {r['results']:>3} results {r['bytes']:>9,} B (structured {r['structured_bytes']:,})  "
            f"{r['bytes_per_result']:>6,} B/result  content {r['content_bytes']:,} B"
        )
    print(
        f"Budgets: native tool list <= {BUDGET_TOOLS:,} B, 10 results in brief <= {BUDGET_RESULTS:,} B: "
        f"{fig['within_budget']}"
    )


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    fig = await measure()
    report(fig)
    return {"bench": "surface", **fig}


BENCH = Bench("surface", __doc__, quick="the same run (it is short)", keep=None)


def main(argv: list[str] | None = None) -> None:
    BENCH.main(amain, argv)


if __name__ == "__main__":
    main()
