"""The composition root: every part of every process, built from its settings in one place.

`mneme serve`, `mneme gateway|projector|auditor`, `mneme replay|rebuild|snapshot`, the test harness and
the benchmarks all build their connections, read models, projectors, trails, auditors and gateways with
these factories, so a constructor changes in one place. The processes themselves (what runs, in which
order, how it stops) are in mneme/app/runtime.py; generations of read models in mneme/app/generations.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NATS

from mneme import durability
from mneme.app.generations import projection_dir, with_model_of
from mneme.app.preflight import Refused, check_model, require_no_serve
from mneme.app.settings import AuditorSettings, CoreSettings, GatewaySettings, ProjectorSettings
from mneme.embed_cache import EmbeddingCache
from mneme.embedded_nats import EmbeddedNats, running_url
from mneme.embedding import ModelHandle
from mneme.eventlog import EventLog, ensure_streams
from mneme.principals import Directory, Principal
from mneme.sink import Sink
from services.auditor.service import Auditor
from services.auditor.trail import Trail
from services.gateway.access_log import AccessLog
from services.gateway.commands import CommandService
from services.gateway.gateway import Gateway
from services.gateway.pacing import IndexPacer, LocalIndex
from services.gateway.queries import Local, Progress, QueryClient
from services.gateway.rate_limits import Limits
from services.projector.code_view import CodeView
from services.projector.memories_view import MemoriesView
from services.projector.options import Control, Tuning
from services.projector.service import Projector
from services.projector.vector_index import ClientIndex, EdgeIndex, VectorIndex
from services.projector.vector_view import VectorView

log = logging.getLogger("mneme")

# ---- connections


async def connect(url: str, name: str, core: CoreSettings | None = None) -> NATS:
    """A connection that reconnects forever (to any of the URLs); with `core`, its credentials and TLS."""

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
        **(auth_options(core) if core is not None else {}),
    )


def auth_options(core: CoreSettings) -> dict[str, Any]:
    """nats.connect's keyword arguments for the settings' user and password (or creds file) and TLS."""
    out: dict[str, Any] = {}
    if core.nats_user:
        out["user"] = core.nats_user
        out["password"] = core.nats_password.get_secret_value() if core.nats_password else ""
    if core.nats_creds:
        out["user_credentials"] = str(core.nats_creds)
    if core.nats_tls_ca or core.nats_tls_cert:
        import ssl

        tls = ssl.create_default_context(cafile=str(core.nats_tls_ca) if core.nats_tls_ca else None)
        if core.nats_tls_cert:
            tls.load_cert_chain(str(core.nats_tls_cert), str(core.nats_tls_key) if core.nats_tls_key else None)
        out["tls"] = tls
    return out


async def close_nats(nc: NATS) -> None:
    with contextlib.suppress(Exception):
        async with asyncio.timeout(5):
            await nc.drain()
    with contextlib.suppress(Exception):
        await nc.close()


@contextlib.asynccontextmanager
async def nats_connection(core: CoreSettings, name: str, stack_embedded: bool | str) -> AsyncIterator[NATS]:
    """A NATS connection with the streams in place. `stack_embedded`: with no URL, start the embedded server
    behind it (True), or use the one a running `mneme serve` started on the data directory ("attach")."""
    async with AsyncExitStack() as stack:
        url = core.nats_url
        if url is None and stack_embedded == "attach":
            url = running_url(core.data_dir / "nats")
        if url is None:
            if not stack_embedded:
                raise Refused("--nats-url (or MNEME_NATS_URL) is required for this command")
            require_no_serve(core)  # (a second nats-server on one store: see preflight.require_no_serve)
            server = EmbeddedNats(core.data_dir / "nats", sync=core.nats_sync)
            if (warn := durability.warning(core.nats_sync)) is not None:
                log.warning("%s", warn)
            url = await server.start()
            server.supervise()
            stack.push_async_callback(server.stop)
            log.info("embedded nats-server at %s (data %s)", url, server.store_dir)
        nc = await connect(url, name, core)
        stack.push_async_callback(close_nats, nc)
        await ensure_streams(nc.jetstream(), replicas=core.stream_replicas)
        yield nc


def snapshot_dir(core: CoreSettings, ps: ProjectorSettings) -> Path:
    """Where this projector's snapshots go (and a new replica looks for one): shared, or its own."""
    return ps.snapshot_dir or core.data_dir / "snapshots"


def url_of(nc: NATS) -> str:
    """The URL a connection reached (the embedded server's, when it started one)."""
    return str(nc.connected_url.geturl()) if nc.connected_url else ""


# ---- read models


def checked(ps: ProjectorSettings) -> ProjectorSettings:
    """Settings whose embedding model is a known one (refused before anything starts otherwise)."""
    if ps.vectors != "off":
        check_model(ps.embedding_model, "MNEME_PROJECTOR_EMBEDDING_MODEL", installed=False)
    return ps


def control_id(core: CoreSettings) -> str:
    """The name a projector (and an auditor) listens on for operator requests: derived from its data directory."""
    return control_id_of(core.data_dir)


def control_id_of(data_dir: Path) -> str:
    return hashlib.sha256(str(data_dir.resolve()).encode()).hexdigest()[:16]


def open_view(
    core: CoreSettings, ps: ProjectorSettings, *, fresh: bool = False, base: Path | None = None
) -> MemoriesView:
    """The DuckDB read models of the serving generation (or of `base`); `fresh`: an empty file."""
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
        model = ModelHandle(ps.embedding_model, threads=ps.embedding_threads, nice=ps.embedding_nice).start()
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


def open_code(core: CoreSettings, vectors: VectorView | None) -> CodeView | None:
    """The code index, beside the data directory's other files (one per data directory, not per generation: a
    replay leaves it; deleting code.duckdb folds it again from the log). It embeds with the vectors' model and
    cache; without vectors (MNEME_PROJECTOR_VECTORS=off) there is no code index."""
    if vectors is None:
        return None
    core.data_dir.mkdir(parents=True, exist_ok=True)
    return CodeView(str(core.data_dir / "code.duckdb"), vectors.model, vectors.cache)


def opener(
    core: CoreSettings, ps: ProjectorSettings, current: VectorView | None
) -> Callable[[Path], tuple[MemoriesView, VectorView | None]]:
    """How a live projector opens a generation `mneme replay` built (sharing its model and cache)."""

    def open_generation(path: Path) -> tuple[MemoriesView, VectorView | None]:
        gps = with_model_of(path, ps)
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


# ---- processes' parts


def projector(
    nc: NATS,
    view: MemoriesView,
    ps: ProjectorSettings | None = None,
    *,
    vectors: VectorView | None = None,
    live: CoreSettings | None = None,
    log_nc: NATS | None = None,
    stop_at: int | None = None,
    access: bool = True,
    also: tuple[Sink, ...] = (),
    also_access: tuple[Sink, ...] = (),
    code: CodeView | None = None,
) -> Projector:
    """A projector folding the log into `view` (and `vectors`), tuned by `ps` (defaults: ProjectorSettings()).

    `live`: the data directory's settings of a serving projector: it listens for `mneme replay`'s swap and
    `mneme snapshot`'s requests and writes periodic snapshots there. `also`/`also_access`: more sinks its
    followers feed (one delivery, one decode). `stop_at`/`access=False`: a frozen copy's fold.
    """
    ps = ps or ProjectorSettings()
    control = None
    if live is not None:
        control = Control(control_id(live), opener(live, ps, vectors), snapshot_dir(live, ps), ps.snapshot_every)
    tuning = Tuning(batch_max=ps.batch_max, catch_up_batch=ps.catch_up_batch_max, wait_timeout=ps.wait_timeout,
                    linger=ps.linger, access_linger=ps.access_linger, vector_batch_max=ps.vector_batch_max,
                    stop_at=stop_at, fold_access=access)  # fmt: skip
    return Projector(nc, view, vectors=vectors, code=code, also=also, also_access=also_access, tuning=tuning,
                     control=control, log_nc=log_nc)  # fmt: skip


def trail(core: CoreSettings, aus: AuditorSettings | None = None) -> Trail:
    """The auditor's hash-chained trail under the data directory."""
    core.data_dir.mkdir(parents=True, exist_ok=True)
    return Trail(str(core.data_dir / (aus or AuditorSettings()).db_name))


def auditor(nc: NATS, trail: Trail, aus: AuditorSettings | None = None) -> Auditor:
    """The auditor: its own followers of the event log and the access stream fold into `trail` (in
    `mneme serve` too: a trail commit never waits for the projection's), and it answers audit queries, and the
    operator's requests for the trail of its data directory (the trail file's: `mneme audit verify|export`)."""
    aus = aus or AuditorSettings()
    return Auditor(
        nc,
        trail,
        batch_max=aus.batch_max,
        linger=aus.linger,
        access_linger=aus.access_linger,
        control_id=control_id_of(Path(trail.path).parent),
    )


def gateway(
    nc: NATS,
    gs: GatewaySettings | None = None,
    *,
    local: Local | None = None,
    catching_up: Progress | None = None,
    paced_by: LocalIndex | None = None,
) -> Gateway:
    """The MCP gateway's core (tools are served over it by services.gateway.server / mneme.app.mcp_serve).
    `local`: the projector of this process, asked without a NATS round trip; `catching_up`: its progress
    through the log while it does not serve yet; `paced_by`: that projector, whose vector index's backlog
    writes are paced against (`mneme serve`)."""
    gs = gs or GatewaySettings()
    elog = EventLog(nc.jetstream(), timeout=gs.publish_timeout, connected=lambda: nc.is_connected)
    queries = QueryClient(nc, timeout=gs.query_timeout, local=local, catching_up=catching_up, model_wait=gs.model_wait)
    pacer = None
    if paced_by is not None and gs.index_backlog_max > 0:
        pacer = IndexPacer(
            paced_by.index_backlog,
            nudge=paced_by.index_nudge,
            backlog_max=gs.index_backlog_max,
            max_wait=gs.index_backlog_wait,
        )
    commands = CommandService(elog, queries, max_content=gs.max_content_chars, pacer=pacer)
    principal = Principal(
        agent_id=gs.agent_id,
        role=gs.role,
        organization=gs.organization,
        namespaces=tuple(gs.namespaces),
        read_only=tuple(gs.read_only),
        default_namespace=gs.namespace,
    )
    directory = Directory.load(gs.principals_file) if gs.principals_file else None
    gw = Gateway(
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
        code_roots=tuple(gs.code_roots) if gs.code_roots is not None else None,
        limits=Limits(rate=gs.rate_limit, burst=gs.rate_burst, max_in_flight=gs.max_in_flight),
    )
    queries.log_head, queries.log_behind = elog.last_seq, gw.log_went_back  # (the log lost what it wrote)
    return gw
