"""The processes: `mneme serve`, `gateway`, `projector` and `auditor`, each a main built from its settings.

Every part comes from the composition root (mneme/app/compose.py); this module only says what runs in which
process, in which order, and how it stops. `serve` runs all three against an embedded nats-server; the
others run one part against `--nats-url`. Everything shuts down in order on Ctrl-C, SIGTERM, or (stdio)
the client closing stdin: stop taking calls, fold what has arrived, close the files, drain NATS, stop the
child server.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

from nats.aio.client import Client as NATS

from mneme.app import compose
from mneme.app.ahead import start_checked
from mneme.app.generations import serving_settings
from mneme.app.mcp_serve import Mcp, until_stopped
from mneme.app.preflight import bind, check_http
from mneme.app.settings import AuditorSettings, CoreSettings, GatewaySettings, ProjectorSettings
from mneme.follow import LogFollower
from mneme.heartbeat import Heartbeat
from services.auditor.service import Auditor
from services.gateway.gateway import Gateway
from services.projector.service import Projector

log = logging.getLogger("mneme")
Figures = Callable[[], dict[str, Any]]


async def serve(
    core: CoreSettings,
    gs: GatewaySettings,
    ps: ProjectorSettings,
    aus: AuditorSettings,
    listener: socket.socket | None = None,
) -> None:
    """Everything in one process: embedded NATS, the projector, the auditor (following the log into the trail
    on followers of its own, so a trail commit never waits for the projection's), and the MCP gateway."""
    listener = http_listener(gs, listener)
    ps = compose.checked(serving_settings(core, ps))
    async with AsyncExitStack() as stack:
        nc = await stack.enter_async_context(compose.nats_connection(core, "mneme-serve", stack_embedded=True))
        log_nc = await compose.connect(compose.url_of(nc) or core.nats_url or "", "mneme-serve-log", core)
        stack.push_async_callback(compose.close_nats, log_nc)
        trail = compose.trail(core, aus)
        stack.callback(trail.close)
        projector = await start_projector(stack, core, ps, nc, log_nc=log_nc)
        auditor = compose.auditor(nc, trail, aus)
        await auditor.start(after=projector.serving)  # a cold start folds the rows first (Auditor.start)
        stack.push_async_callback(auditor.stop)
        gw = compose.gateway(
            nc, gs, local=projector.answer_here, catching_up=projector.catch_up_progress, paced_by=projector.pace
        )
        await beat(stack, nc, "serve", core, lambda: projector_figures(projector) | auditor_figures(auditor)
                   | gateway_figures(gw))  # fmt: skip
        mcp = Mcp(gw, gs, listener)
        await until_stopped(mcp.run(), graceful=mcp.stop)


async def gateway(core: CoreSettings, gs: GatewaySettings, listener: socket.socket | None = None) -> None:
    listener = http_listener(gs, listener)
    async with AsyncExitStack() as stack:
        nc = await stack.enter_async_context(compose.nats_connection(core, "mneme-gateway", stack_embedded=False))
        gw = compose.gateway(nc, gs)
        await beat(stack, nc, "gateway", core, lambda: gateway_figures(gw))
        mcp = Mcp(gw, gs, listener)
        await until_stopped(mcp.run(), graceful=mcp.stop)


async def projector(
    core: CoreSettings,
    ps: ProjectorSettings,
    *,
    rebuild: bool = False,
    progress: Callable[[int, int, float], None] | None = None,
) -> None:
    """A projector replica. `rebuild`: first rebuild its read models from the log (the replay path, in
    batches, vectors in a process of their own) and move them over the old ones, then serve."""
    ps = compose.checked(serving_settings(core, ps))
    async with AsyncExitStack() as stack:
        nc = await stack.enter_async_context(compose.nats_connection(core, "mneme-projector", stack_embedded=False))
        if rebuild:
            from mneme.app.maintenance import rebuild as rebuild_read_models

            await rebuild_read_models(core, ps, vectors=True, nc=nc, progress=progress)
        else:
            from mneme.app.build import seed_from_snapshot

            await seed_from_snapshot(core, ps, nc)
        log_nc = await compose.connect(core.nats_url or "", "mneme-projector-log", core)
        stack.push_async_callback(compose.close_nats, log_nc)
        proj = await start_projector(stack, core, ps, nc, log_nc=log_nc)
        await beat(stack, nc, "projector", core, lambda: projector_figures(proj))
        await until_stopped(_forever())


async def auditor(core: CoreSettings, aus: AuditorSettings) -> None:
    async with AsyncExitStack() as stack:
        nc = await stack.enter_async_context(compose.nats_connection(core, "mneme-auditor", stack_embedded=False))
        trail = compose.trail(core, aus)
        stack.callback(trail.close)
        aud = compose.auditor(nc, trail, aus)
        await aud.start()
        stack.push_async_callback(aud.stop)
        await beat(stack, nc, "auditor", core, lambda: auditor_figures(aud))
        await until_stopped(_forever())


async def start_projector(
    stack: AsyncExitStack,
    core: CoreSettings,
    ps: ProjectorSettings,
    nc: NATS,
    *,
    log_nc: NATS | None = None,
) -> Projector:
    """Open the serving generation's read models and start a live projector on them (stopped, then closed,
    when `stack` unwinds: the generation it serves then, since a replay may have swapped it). Read models
    ahead of the log are rebuilt first, or when that is found while it runs (mneme/app/ahead.py)."""
    return await start_checked(stack, core, ps, nc, log_nc)


async def beat(stack: AsyncExitStack, nc: NATS, role: str, core: CoreSettings, figures: Figures) -> None:
    """Start this process's heartbeat (mneme status lists it), stopped when `stack` unwinds."""
    hb = Heartbeat(nc, role, lambda: {"data_dir": str(core.data_dir)} | figures())
    await hb.start()
    stack.push_async_callback(hb.stop)


def _follower(f: LogFollower) -> dict[str, Any]:
    out = {"stream": f.stream, "applied": f.applied, "committed": f.committed, "dead_letters": f.dead_letters}
    return out | ({"stalled": f.stalled} if f.stalled else {})


def projector_figures(p: Projector) -> dict[str, Any]:
    own: dict[str, Any] = {f.consumer or "?": _follower(f) for f in p.gen.followers}
    if p.rebuilding is not None:
        own["rebuilding"] = p.rebuilding
    if p.rebuilds:  # read models found ahead of the log and rebuilt (mneme/app/ahead.py)
        own["rebuilds"] = p.rebuilds[-5:]
    return {"projector": own}


def auditor_figures(a: Auditor) -> dict[str, Any]:
    own: dict[str, Any] = {f.consumer or "?": _follower(f) for f in a.followers}
    if a.realigned:  # the trail found ahead of the log: records kept as evidence (services/auditor/realign.py)
        own["realigned"] = a.realigned[-5:]
    return {"auditor": own | {"trail_records": a.trail.last_seq}}


def gateway_figures(gw: Gateway) -> dict[str, Any]:
    lim, pacer = gw.limits, gw.commands.pacer
    out: dict[str, Any] = {"calls": lim.calls, "rate_limited": lim.refused, "in_flight": lim.in_flight}
    if pacer is not None:  # writes that waited for the vector index, and how long in all
        out |= {"paced_writes": pacer.paced, "paced_wait_s": round(pacer.waited_s, 3)}
    return {"gateway": out}


def http_listener(gs: GatewaySettings, listener: socket.socket | None) -> socket.socket | None:
    """The HTTP socket, bound before anything starts (the command line binds it before it even imports
    this module, so that a refusal is quick)."""
    if gs.transport != "http" or listener is not None:
        return listener
    check_http(gs)
    return bind(gs)


async def _forever() -> None:
    await asyncio.Event().wait()
