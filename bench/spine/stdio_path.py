"""bench.spine (c) and (d) over stdio: memory_add against the no-op MCP tool, read-your-writes, and the
diagnostic `mneme serve` variants with a log consumer switched off.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters

from bench import fixtures
from bench.common import CpuMeter, find_child, log, rnd
from bench.fixtures import REPO
from bench.spine.config import Config, Series, call_args, paired_ratio, read_your_writes
from bench.spine.index_lag import index_lag, search_while_adding
from bench.stdio import NOOP_SERVER, call, mcp_block, mcp_session, noop_params, serve_child, serve_params, server_pids
from bench.workload import Corpus
from services.projector.memories_view import MemoriesView

Server = tuple[str, ClientSession, str, "int | None"]  # (name, session, tool, its pid)


async def start_servers(stack: AsyncExitStack, root: Path, errlog: Any, breakdown: bool) -> list[Server]:
    """The no-op MCPServer and `mneme serve`; with `breakdown`, the no-op tool that also awaits one JetStream
    publish (the floor of a tool that awaits a durable write) and the diagnostic `mneme serve` variants."""
    me = os.getpid()
    log("starting the no-op MCP server and `mneme serve` over stdio")
    noop = await stack.enter_async_context(mcp_session(noop_params(), errlog))
    mneme = await stack.enter_async_context(mcp_session(serve_params(root / "serve"), errlog))
    servers: list[Server] = [
        ("noop", noop, "noop", find_child(me, "noop_server.py")),
        ("shipped", mneme, "memory_add", serve_child(root / "serve")),
    ]
    if breakdown:
        pub_url = (await fixtures.start_server(stack, root / "noop-publish-nats")).url
        assert pub_url is not None
        pub_params = StdioServerParameters(command=sys.executable, args=[NOOP_SERVER, "--nats-url", pub_url])
        session = await stack.enter_async_context(mcp_session(pub_params, errlog))
        servers.append(("noop+publish", session, "noop", find_child(me, "noop_server.py", "--nats-url")))
        for variant in ("no-auditor", "no-auditor-no-fold"):
            log(f"starting diagnostic `mneme serve` variant {variant}")
            vdir = root / variant
            session = await stack.enter_async_context(mcp_session(variant_params(vdir, variant), errlog))
            servers.append((variant, session, "memory_add", find_child(me, "--serve-variant", str(vdir))))
    return servers


async def warm_up(cfg: Config, corpus: Corpus, servers: list[Server], mneme: ClientSession) -> None:
    log("warming up (stdio)")
    for _name, session, tool, _ in servers:
        await mcp_block(session, tool, [call_args(tool, t) for t in corpus.texts(cfg.warmup)])
    w = await call(mneme, "memory_add", call_args("memory_add", corpus.text(0)))
    for _ in range(cfg.warmup // 2):
        await call(mneme, "memory_get", {"id": w["id"]})


async def stdio_rounds(
    cfg: Config, corpus: Corpus, servers: list[Server], meters: dict[str, CpuMeter]
) -> dict[str, Series]:
    """Every round one block on each server, in a rotating order; the idle servers wait."""
    series = {name: Series(name) for name, *_ in servers}
    for r in range(cfg.rounds):
        log(f"round {r + 1}/{cfg.rounds}: " + ", ".join(name for name, *_ in servers) + " over stdio")
        texts = corpus.texts(cfg.mcp_n)
        k = r % len(servers)
        for name, session, tool, _ in servers[k:] + servers[:k]:
            await asyncio.sleep(0.3)  # let the previous server's consumers finish folding its block
            args = [call_args(tool, t) for t in texts]
            meters[name].start()
            secs, lat = await mcp_block(session, tool, args)
            series[name].add(len(args), secs, lat, meters[name].stop())
    return series


async def stdio_read_your_writes(cfg: Config, corpus: Corpus, mneme: ClientSession, meter: CpuMeter) -> Series:
    """(d) over stdio: memory_add, then memory_get of the same id."""
    log(f"(d) stdio add-then-get x{cfg.rw_stdio_n}")
    texts = corpus.texts(cfg.rw_stdio_n)
    await asyncio.sleep(0.3)
    pairs: list[tuple[float, float, bool]] = []
    meter.start()
    t_start = time.perf_counter()
    for text in texts:
        t = time.perf_counter()
        added = await call(mneme, "memory_add", call_args("memory_add", text))
        t1 = time.perf_counter()
        mid = added["id"]
        res = await mneme.call_tool("memory_get", {"id": mid})
        t2 = time.perf_counter()
        sc = res.structured_content or {}
        pairs.append((t1 - t, t2 - t1, not res.is_error and sc.get("id") == mid and sc.get("content") == text))
    return read_your_writes("d_stdio", pairs, time.perf_counter() - t_start, meter.stop())


async def phase_stdio(cfg: Config, root: Path, corpus: Corpus, breakdown: bool) -> dict[str, Any]:
    """(c) and (d) over stdio: `mneme serve` (fresh data dir) beside the no-op MCPServer.

    With `breakdown`, two diagnostic servers run in the same rounds: `mneme serve` with the auditor off,
    and with the auditor off and the projector's DuckDB fold skipped (events still delivered). Every
    round runs one block on each server, in a rotating order; the idle servers wait. The differences
    say what each log consumer costs a write.
    """
    out: dict[str, Any] = {}
    root.mkdir(parents=True, exist_ok=True)
    errlog = open(root / "servers-stderr.log", "w")  # noqa: SIM115 - closed by the exit stack
    async with AsyncExitStack() as stack:
        stack.callback(errlog.close)
        servers = await start_servers(stack, root, errlog, breakdown)
        mneme = servers[1][1]
        meters = {name: CpuMeter(server_pids(pid, client=os.getpid())) for name, _, _, pid in servers}
        out["pids_found"] = {name: sorted(m.pids) for name, m in meters.items()}
        await warm_up(cfg, corpus, servers, mneme)
        series = await stdio_rounds(cfg, corpus, servers, meters)
        d = await stdio_read_your_writes(cfg, corpus, mneme, meters["shipped"])
        out["index_lag"] = await index_lag(mneme, corpus.texts(cfg.lag_n))
        out["search_while_adding"] = await search_while_adding(mneme, corpus.texts(cfg.lag_n), corpus.texts(50))
        s_noop, s_add = series["noop"], series["shipped"]
        out.update(c_noop_stdio=s_noop.summary(), c_add_stdio=s_add.summary(), d_stdio=d.summary(), _noop=s_noop,
                   _add=s_add)  # fmt: skip
        out["breakdown"] = {
            name: {"memory_add": series[name].summary(), "add_vs_noop": rnd(paired_ratio(series[name], s_noop), 3)}
            for name, *_ in servers
            if name not in ("noop", "shipped")
        }
        log("stopping the stdio servers")
    return out


def variant_params(data_dir: Path, variant: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        cwd=str(REPO),
        args=["-m", "bench.spine", "--serve-variant", str(data_dir), "--variant", variant],
    )


def serve_variant(data_dir: Path, variant: str) -> None:
    """`mneme serve` with a log consumer switched off, for the breakdown only (never a product mode).

    no-auditor: the audit trail (fed by the projector's follower) neither chains nor writes records.
    no-auditor-no-fold: also, the projector still receives every event and stages it but skips its DuckDB
    transaction (so reads are wrong: adds only).
    """
    import logging

    from mneme.app import runtime
    from mneme.app.settings import AuditorSettings, CoreSettings, GatewaySettings, ProjectorSettings

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)

    from mneme.sink import Positioned
    from services.auditor.trail import Trail

    # Trail's own signatures (its sources call trail.stage(name, batch, upto), then trail.commit()): no record
    # is hashed or written, but each source's staged position and checkpoint move as they would, so the
    # followers feeding the trail go on.
    def no_stage(self: Trail, source: str, batch: list[Positioned], upto: int | None) -> None:
        with self._lock:
            self.staged[source] = max(self.staged[source], batch[-1].seq if batch else 0, upto or 0)

    def no_commit(self: Trail) -> None:
        with self._lock:
            self.checkpoints = dict(self.staged)

    Trail.stage = no_stage  # type: ignore[method-assign]
    Trail.commit = no_commit  # type: ignore[method-assign]
    if variant == "no-auditor-no-fold":

        def skip_commit(self: MemoriesView) -> int:
            self.checkpoint = self.staged
            return self.checkpoint

        MemoriesView.commit = skip_commit  # type: ignore[method-assign]
    try:
        asyncio.run(
            runtime.serve(CoreSettings(data_dir=data_dir), GatewaySettings(), ProjectorSettings(), AuditorSettings())
        )
    finally:
        sys.stderr.flush()
        os._exit(0)  # like `mneme`: the stdio reader thread cannot be interrupted
