"""Test harness: real nats-server from the wheel, real DuckDB files, the real gateway.

`Stack` runs projector, auditor and gateway in this process against a nats-server
child on a random loopback port; `call` drives the gateway through an in-process
MCP client. Subprocess helpers run the `mneme` command itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent, Tool, ToolAnnotations
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from mneme.app import compose
from mneme.app.cluster import free_port  # noqa: F401 - the tests import it from here
from mneme.app.compose import close_nats, connect
from mneme.app.settings import CoreSettings, GatewaySettings, ProjectorSettings
from mneme.embed_cache import EmbeddingCache
from mneme.embedded_nats import EmbeddedNats, is_alive
from mneme.embedding import DEFAULT_MODEL, ModelHandle
from mneme.eventlog import ensure_streams
from schemas.events import Actor, Envelope
from services.auditor.service import Auditor
from services.auditor.trail import Trail
from services.gateway.gateway import Gateway
from services.gateway.server import build_server
from services.projector.generation import close_generation
from services.projector.memories_view import MemoriesView
from services.projector.service import Projector
from services.projector.vector_index import EdgeIndex
from services.projector.vector_view import VectorView

MNEME = str(Path(sys.executable).parent / "mneme")


def nats_pid(data_dir: Path) -> int:
    return int((data_dir / "nats" / "nats-server.pid").read_text().strip())


def wait_dead(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return True
        try:  # reap if it is our child's zombie
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.05)
    return not is_alive(pid)


class ToolFailure(Exception):
    def __init__(self, text: str):
        super().__init__(text)
        try:
            self.error: dict[str, Any] = json.loads(text)["error"]
        except (ValueError, KeyError, TypeError):
            self.error = {"code": "UNSTRUCTURED", "message": text}

    @property
    def code(self) -> str:
        return self.error.get("code", "")

    @property
    def field(self) -> str | None:
        return self.error.get("field")


def text_of(res: CallToolResult) -> str:
    """The text of a tool result's first content block (every tool here answers with one text block)."""
    block = res.content[0]
    assert isinstance(block, TextContent), block
    return block.text


def hints_of(tool: Tool) -> ToolAnnotations:
    """A listed tool's annotations (every mneme tool has them)."""
    assert tool.annotations is not None, tool.name
    return tool.annotations


def result_of(res: Any) -> dict[str, Any]:
    """The structured result of a tool call, or ToolFailure with the parsed error."""
    if res.is_error:
        raise ToolFailure(res.content[0].text)
    return res.structured_content


def serve_params(data_dir: Path, *extra: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(command=MNEME, args=["serve", "--data-dir", str(data_dir), *extra], env=env)


def gateway_params(nats_url: str, *extra: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(command=MNEME, args=["gateway", "--nats-url", nats_url, *extra], env=env)


@dataclass
class Stack:
    data_dir: Path
    nats: EmbeddedNats
    nc: NATS
    view: MemoriesView
    projector: Projector
    trail: Trail
    auditor: Auditor
    gateway: Gateway
    client: Client
    _stack: AsyncExitStack = field(repr=False, default_factory=AsyncExitStack)

    @property
    def url(self) -> str:
        assert self.nats.url
        return self.nats.url

    async def call(self, tool: str, **args: Any) -> dict[str, Any]:
        return result_of(await self.client.call_tool(tool, args))

    async def settle(self) -> None:
        """Wait until every access record is published and both trail sources have committed it all."""
        await self.gateway.access.flush()
        for f in self.auditor.followers:
            head = (await self.nc.jetstream().stream_info(f.stream)).state.last_seq
            assert await f.wait_for(head, 10, committed=True), f"trail did not commit {f.stream} up to {head}"

    async def last_seq(self) -> int:
        return (await self.nc.jetstream().stream_info("MNEME_EVENTS")).state.last_seq

    async def close(self) -> None:
        await self._stack.aclose()


_MODEL: ModelHandle | None = None


def shared_model() -> ModelHandle:
    """The real embedding model, loaded once per test process (0.2-0.5 s)."""
    global _MODEL
    if _MODEL is None:
        _MODEL = ModelHandle(DEFAULT_MODEL).start()
    return _MODEL


class SlowEmbedder:
    """The real model, `delay` seconds a text slower: a busy machine's rate, so a backlog takes long to embed.
    With `held=True` every call but the warm-up also waits until `release()`: a test builds its backlog first,
    whatever the machine's speed, instead of racing the embedder."""

    def __init__(self, delay: float, *, held: bool = False) -> None:
        model = shared_model()
        assert model.wait(60), "the embedding model did not load"
        self.real, self.delay = model.get(), delay
        self.model_id, self.dim = self.real.model_id, self.real.dim
        self.gate = threading.Event()
        if not held:
            self.gate.set()

    def release(self) -> None:
        self.gate.set()

    def embed(self, texts: list[str]) -> np.ndarray:
        if texts != ["warm up"]:
            assert self.gate.wait(120), "the test never released the embedder"
        time.sleep(self.delay * len(texts))
        return self.real.embed(texts)


class Gated:
    """The real embedder; every call but the warm-up waits until the gate opens."""

    def __init__(self) -> None:
        model = shared_model()
        assert model.wait(60), "the embedding model did not load"
        self.real = model.get()
        self.model_id, self.dim = self.real.model_id, self.real.dim
        self.gate = threading.Event()
        self.texts = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        if texts != ["warm up"]:
            assert self.gate.wait(60), "the test never opened the gate"
            self.texts += len(texts)
        return self.real.embed(texts)


def model_of(embedder: Any) -> ModelHandle:
    """A loaded ModelHandle over a test embedder (SlowEmbedder, Gated...)."""
    handle = ModelHandle(DEFAULT_MODEL, factory=lambda: embedder).start()
    assert handle.wait(60), "the embedding model did not load"
    return handle


def open_vectors(data_dir: Path, model: ModelHandle | None = None, *, background: bool = True) -> VectorView:
    """Real Qdrant Edge under data_dir and the real model (or the handle given, e.g. one still loading),
    embedding in the background as a live projector does (background=False: as replay does)."""
    model = model or shared_model()
    return VectorView(
        EdgeIndex(data_dir / f"vectors-{model.name}", model.dim or 384),
        model,
        EmbeddingCache(data_dir / "embeddings.sqlite"),
        background=background,
    )


async def start_stack(
    data_dir: Path,
    nats: EmbeddedNats,
    gs: GatewaySettings | None = None,
    *,
    vectors: VectorView | bool | None = None,
    replayable: bool = False,
    local: bool = False,
    paced: bool = False,
) -> Stack:
    """`replayable`: the projector listens for `mneme replay`'s swap and snapshot requests, as `mneme serve`
    does (its data directory is `data_dir`, the embedded server is `nats`). `local`: the gateway asks the
    projector in process, as in `mneme serve` (default: over NATS, as a gateway of its own does). `paced`:
    writes wait for the projector's vector backlog, as in `mneme serve`."""
    s = AsyncExitStack()
    data_dir.mkdir(parents=True, exist_ok=True)
    nc = await connect(nats.url or "", "test")
    s.push_async_callback(close_nats, nc)
    await ensure_streams(nc.jetstream())
    view = compose.open_view(CoreSettings(data_dir=data_dir), ProjectorSettings(), base=data_dir)
    if vectors is True:
        vectors = open_vectors(data_dir)
        assert await asyncio.to_thread(vectors.model.wait, 60), "the embedding model did not load"
    live = CoreSettings(data_dir=data_dir, nats_url=nats.url) if replayable else None
    code = compose.open_code(CoreSettings(data_dir=data_dir), vectors or None)
    if code is not None:
        s.callback(code.close)
    projector = compose.projector(nc, view, vectors=vectors or None, live=live, code=code)
    s.callback(lambda: close_generation(projector.gen))  # the serving generation (a replay may swap it)
    await projector.start()
    s.push_async_callback(projector.stop)
    trail = compose.trail(CoreSettings(data_dir=data_dir))
    s.callback(trail.close)
    auditor = compose.auditor(nc, trail)
    await auditor.start()
    s.push_async_callback(auditor.stop)
    gw = compose.gateway(
        nc,
        gs or GatewaySettings(),
        local=projector.answer_here if local else None,
        paced_by=projector.pace if paced else None,
    )
    client = await s.enter_async_context(Client(build_server(gw)))
    await projector.serving.wait()
    return Stack(data_dir, nats, nc, view, projector, trail, auditor, gw, client, s)


def wait_listening(proc: Any, port: int, timeout: float = 30.0, errlog: Path | None = None) -> None:
    """Wait until the server child listens on loopback `port`; fail with its stderr if it exits first."""
    import socket

    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if proc.poll() is not None:
                text = errlog.read_text() if errlog else (proc.stderr.read() if proc.stderr else "")
                raise AssertionError(f"the server exited ({proc.returncode}) before listening: {text!r}") from None
            assert time.monotonic() < deadline, f"the server did not listen on port {port} within {timeout} s"
            time.sleep(0.05)


@asynccontextmanager
async def log_writer(server: EmbeddedNats) -> AsyncIterator[JetStreamContext]:
    """A JetStream context on `server` with mneme's streams in place (a test writing a log directly), closed after."""
    nc = await connect(server.url or "", "test")
    try:
        await ensure_streams(nc.jetstream())
        yield nc.jetstream()
    finally:
        await close_nats(nc)


def forged_envelope(event: Any, aggregate_id: str, namespace: str = "default") -> Envelope:
    """An envelope around `event` as a writer that bypasses the gateway would make one (tests of poison)."""
    return Envelope(
        event_id=str(uuid.uuid4()),
        schema_version=1,
        namespace=namespace,
        aggregate_id=aggregate_id,
        occurred_at=datetime.now(UTC),
        actor=Actor(agent_id="forger"),
        request_id=str(uuid.uuid4()),
        event=event,
    )
