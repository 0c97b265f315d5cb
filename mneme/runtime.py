"""Wiring: connect to NATS and run the gateway, projector and auditor, alone or together.

`serve` runs all three in one process against an embedded nats-server; the others
run one part against `--nats-url`. Everything shuts down in order on Ctrl-C,
SIGTERM, or (stdio) the client closing stdin: stop taking calls, fold what has
arrived, close the files, drain NATS, stop the child server.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import shutil
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path

import nats
from nats.aio.client import Client as NATS

from mneme.embed_cache import EmbeddingCache
from mneme.embedded_nats import EmbeddedNats, running_url
from mneme.embedding import ModelHandle
from mneme.eventlog import EventLog, ensure_streams
from mneme.mcp_serve import Mcp, until_stopped
from mneme.preflight import Refused, bind, check_http, check_model
from mneme.principals import Directory, Principal
from mneme.settings import AuditorSettings, CoreSettings, GatewaySettings, ProjectorSettings
from services.auditor.service import Auditor
from services.auditor.trail import ACCESS, EVENTS, Trail
from services.gateway.access_log import AccessLog
from services.gateway.commands import CommandService
from services.gateway.gateway import Gateway
from services.gateway.queries import QueryClient
from services.projector.memories_view import MemoriesView
from services.projector.service import Projector, close_generation
from services.projector.vector_index import ClientIndex, EdgeIndex, VectorIndex
from services.projector.vector_view import VectorView

log = logging.getLogger("mneme")


async def connect(url: str, name: str) -> NATS:
    async def quiet(exc: Exception) -> None:
        log.warning("nats (%s): %s", name, exc)

    return await nats.connect(
        servers=url.split(","),
        name=name,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
        connect_timeout=3,
        error_cb=quiet,
        allow_reconnect=True,
    )


@contextlib.asynccontextmanager
async def nats_connection(core: CoreSettings, name: str, stack_embedded: bool | str) -> AsyncIterator[NATS]:
    """A NATS connection; with `stack_embedded` and no URL, also the embedded server behind it."""
    async with AsyncExitStack() as stack:
        url = core.nats_url
        if url is None and stack_embedded == "attach":  # beside a running `mneme serve`: use its server
            url = running_url(core.data_dir / "nats")
        if url is None:
            if not stack_embedded:
                raise Refused("--nats-url (or MNEME_NATS_URL) is required for this command")
            server = EmbeddedNats(core.data_dir / "nats")
            url = await server.start()
            stack.push_async_callback(server.stop)
            log.info("embedded nats-server at %s (data %s)", url, server.store_dir)
        nc = await connect(url, name)
        stack.push_async_callback(close_nats, nc)
        await ensure_streams(nc.jetstream(), replicas=core.stream_replicas)
        yield nc


async def close_nats(nc: NATS) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.drain(), 5)
    with contextlib.suppress(Exception):
        await nc.close()


CURRENT = "CURRENT"


def projections_root(core: CoreSettings) -> Path:
    return core.data_dir / "projections"


def projection_dir(core: CoreSettings) -> Path:
    """Where the serving generation's read models live: the one `projections/CURRENT` names (after a
    `mneme replay`), else the data directory itself."""
    ptr = projections_root(core) / CURRENT
    if ptr.exists():
        name = ptr.read_text().strip()
        if name and (projections_root(core) / name).is_dir():
            return projections_root(core) / name
    return core.data_dir


def set_current(core: CoreSettings, gen_dir: Path) -> None:
    """Point `projections/CURRENT` at `gen_dir`, atomically (a crash leaves the old or the new pointer)."""
    root = projections_root(core)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{CURRENT}.tmp"
    tmp.write_text(gen_dir.name + "\n")
    os.replace(tmp, root / CURRENT)


def serving_settings(core: CoreSettings, ps: ProjectorSettings) -> ProjectorSettings:
    """The settings the serving generation was built with: after `mneme replay --model M`, its model."""
    meta = projection_dir(core) / "generation.json"
    if meta.exists():
        model = json.loads(meta.read_text()).get("model")
        if model and model != ps.embedding_model:
            log.info("the serving generation was embedded with %s: using it (not %s)", model, ps.embedding_model)
            return ps.model_copy(update={"embedding_model": model})
    return ps


def checked(ps: ProjectorSettings) -> ProjectorSettings:
    """Settings whose embedding model is a known one (refused before anything starts otherwise)."""
    if ps.vectors != "off":
        check_model(ps.embedding_model, "MNEME_PROJECTOR_EMBEDDING_MODEL", installed=False)
    return ps


def control_id(core: CoreSettings) -> str:
    """The name a projector listens on for operator requests: derived from its data directory."""
    return hashlib.sha256(str(core.data_dir.resolve()).encode()).hexdigest()[:16]


def open_view(
    core: CoreSettings, ps: ProjectorSettings, *, fresh: bool = False, base: Path | None = None
) -> MemoriesView:
    base = base or projection_dir(core)
    base.mkdir(parents=True, exist_ok=True)
    path = base / ps.db_name
    if fresh:
        for f in (path, Path(str(path) + ".wal")):
            f.unlink(missing_ok=True)
    return MemoriesView(str(path))


def open_vectors(
    core: CoreSettings,
    ps: ProjectorSettings,
    *,
    fresh: bool = False,
    base: Path | None = None,
    model: ModelHandle | None = None,
    cache: EmbeddingCache | None = None,
    background: bool = False,
) -> VectorView | None:
    """The vector projection: one shard (or collection) per embedding model, so a new model folds anew.
    `background`: a live projector's (dense vectors embedded by a filler thread; keyword search never waits)."""
    if ps.vectors == "off":
        return None
    base = base or projection_dir(core)
    base.mkdir(parents=True, exist_ok=True)
    if model is None or model.name != ps.embedding_model:
        model = ModelHandle(ps.embedding_model, threads=ps.embedding_threads).start()
    cache = cache or EmbeddingCache(core.data_dir / ps.embedding_cache)
    index: VectorIndex
    if ps.vectors == "qdrant":
        if not ps.qdrant_url:
            raise Refused("MNEME_PROJECTOR_QDRANT_URL is required with MNEME_PROJECTOR_VECTORS=qdrant")
        gen = "" if base == core.data_dir else f"-{base.name}"
        name = f"{ps.qdrant_collection}-{ps.embedding_model}{gen}"
        index = ClientIndex(name, model.dim, url=ps.qdrant_url, api_key=ps.qdrant_api_key)
    else:
        path = base / f"vectors-{ps.embedding_model}"
        if fresh:
            shutil.rmtree(path, ignore_errors=True)
            Path(f"{path}.checkpoint.json").unlink(missing_ok=True)
        index = EdgeIndex(path, model.dim)
    return VectorView(index, model, cache, background=background)


def opener(
    core: CoreSettings, ps: ProjectorSettings, current: VectorView | None
) -> Callable[[Path], tuple[MemoriesView, VectorView | None]]:
    """How a live projector opens a generation `mneme replay` built (sharing its model and cache)."""

    def open_generation(path: Path) -> tuple[MemoriesView, VectorView | None]:
        model = (
            json.loads((path / "generation.json").read_text()).get("model")
            if (path / "generation.json").exists()
            else None
        )
        gps = ps.model_copy(update={"embedding_model": model}) if model else ps
        view = open_view(core, gps, base=path)
        vectors = open_vectors(
            core,
            gps,
            base=path,
            model=current.model if current else None,
            cache=current.cache if current else None,
            background=True,
        )
        return view, vectors

    return open_generation


def make_gateway(nc: NATS, gs: GatewaySettings) -> Gateway:
    elog = EventLog(nc.jetstream(), timeout=gs.publish_timeout, connected=lambda: nc.is_connected)
    queries = QueryClient(nc, timeout=gs.query_timeout)
    commands = CommandService(elog, queries, max_content=gs.max_content_chars)
    principal = Principal(
        agent_id=gs.agent_id,
        role=gs.role,
        organization=gs.organization,
        namespaces=tuple(gs.namespaces),
        read_only=tuple(gs.read_only),
        default_namespace=gs.namespace,
    )
    directory = Directory.load(gs.principals_file) if gs.principals_file else None
    return Gateway(
        commands=commands,
        queries=queries,
        log=elog,
        access=AccessLog(nc.jetstream()),
        principal=principal,
        directory=directory,
        require_context=gs.require_context,
        trim_for_agents=gs.trim_for_agents,
        native_context="required" if gs.require_context else gs.context,
        tool_groups=tuple(gs.tools) if gs.tools is not None else None,
        consistency=gs.consistency,
        stores=dict(gs.stores),
    )


async def serve(
    core: CoreSettings,
    gs: GatewaySettings,
    ps: ProjectorSettings,
    aus: AuditorSettings,
    listener: socket.socket | None = None,
) -> None:
    listener = http_listener(gs, listener)
    ps = checked(serving_settings(core, ps))
    async with AsyncExitStack() as stack:
        nc = await stack.enter_async_context(nats_connection(core, "mneme-serve", stack_embedded=True))
        log_nc = await connect(
            str(nc.connected_url.geturl()) if nc.connected_url else core.nats_url or "", "mneme-serve-log"
        )
        stack.push_async_callback(close_nats, log_nc)
        trail = Trail(str(core.data_dir / aus.db_name))
        stack.callback(trail.close)
        view = open_view(core, ps)
        vectors = open_vectors(core, ps, background=True)
        # the projector's followers also feed the audit trail: one delivery, one decode per message
        projector = Projector(
            nc,
            view,
            batch_max=ps.batch_max,
            wait_timeout=ps.wait_timeout,
            linger=ps.linger,
            also=(trail.source(EVENTS),),
            also_access=(trail.source(ACCESS),),
            vectors=vectors,
            vector_batch_max=ps.vector_batch_max,
            control_id=control_id(core),
            opener=opener(core, ps, vectors),
            snapshots=core.data_dir / "snapshots",
            snapshot_every=ps.snapshot_every,
            log_nc=log_nc,
        )
        stack.callback(lambda: close_generation(projector.gen))  # (the serving one: a replay may have swapped it)
        await projector.start()
        stack.push_async_callback(projector.stop)
        auditor = Auditor(nc, trail, fed_by=[projector.follower, projector.access_follower])  # audit queries
        await auditor.start()
        stack.push_async_callback(auditor.stop)
        mcp = Mcp(make_gateway(nc, gs), gs, listener)
        await until_stopped(mcp.run(), graceful=mcp.stop)


async def gateway(core: CoreSettings, gs: GatewaySettings, listener: socket.socket | None = None) -> None:
    listener = http_listener(gs, listener)
    async with nats_connection(core, "mneme-gateway", stack_embedded=False) as nc:
        mcp = Mcp(make_gateway(nc, gs), gs, listener)
        await until_stopped(mcp.run(), graceful=mcp.stop)


def http_listener(gs: GatewaySettings, listener: socket.socket | None) -> socket.socket | None:
    """The HTTP socket, bound before anything starts (the command line binds it before it even imports
    this module, so that a refusal is quick)."""
    if gs.transport != "http" or listener is not None:
        return listener
    check_http(gs)
    return bind(gs)


async def projector(
    core: CoreSettings,
    ps: ProjectorSettings,
    *,
    rebuild: bool = False,
    progress: Callable[[int, int, float], None] | None = None,
) -> None:
    ps = checked(serving_settings(core, ps))
    async with AsyncExitStack() as stack:
        nc = await stack.enter_async_context(nats_connection(core, "mneme-projector", stack_embedded=False))
        log_nc = await connect(core.nats_url or "", "mneme-projector-log")
        stack.push_async_callback(close_nats, log_nc)
        view = open_view(core, ps, fresh=rebuild)
        vectors = open_vectors(core, ps, fresh=rebuild, background=True)
        proj = Projector(
            nc,
            view,
            batch_max=ps.batch_max,
            wait_timeout=ps.wait_timeout,
            linger=ps.linger,
            vectors=vectors,
            vector_batch_max=ps.vector_batch_max,
            control_id=control_id(core),
            opener=opener(core, ps, vectors),
            snapshots=core.data_dir / "snapshots",
            snapshot_every=ps.snapshot_every,
            log_nc=log_nc,
        )
        stack.callback(lambda: close_generation(proj.gen))
        await proj.start()
        stack.push_async_callback(proj.stop)
        await until_stopped(_forever())


async def auditor(core: CoreSettings, aus: AuditorSettings) -> None:
    async with AsyncExitStack() as stack:
        nc = await stack.enter_async_context(nats_connection(core, "mneme-auditor", stack_embedded=False))
        core.data_dir.mkdir(parents=True, exist_ok=True)
        trail = Trail(str(core.data_dir / aus.db_name))
        stack.callback(trail.close)
        aud = Auditor(nc, trail, batch_max=aus.batch_max, linger=aus.linger)
        await aud.start()
        stack.push_async_callback(aud.stop)
        await until_stopped(_forever())


async def _forever() -> None:
    await asyncio.Event().wait()
