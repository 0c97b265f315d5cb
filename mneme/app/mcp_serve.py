"""MCP over stdio or streamable HTTP, and stopping on a signal.

HTTP: the socket is bound before anything else starts (`preflight.bind`); uvicorn serves on it
and prints one line to stderr once it listens; bearer tokens are checked before a request
reaches MCP. SIGINT/SIGTERM are handled here only (not by uvicorn as well): HTTP then shuts
down gracefully (open requests finish, the MCP sessions close), stdio is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import uvicorn
from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

from mneme.app.preflight import urls
from mneme.app.settings import GatewaySettings
from mneme.principals import Directory
from services.gateway import profiles
from services.gateway.gateway import Gateway
from services.gateway.http_protocol import protocol_version_guard
from services.gateway.server import build_server

GRACE = 10.0  # seconds a graceful HTTP stop may take before it is cancelled


def bearer_auth(app: ASGIApp, directory: Directory) -> ASGIApp:
    """Refuse HTTP requests without a known bearer token (401) before they reach MCP."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
            if directory.for_headers(headers) is None:
                body = b'{"error": {"code": "UNAUTHORIZED", "message": "a valid bearer token is required"}}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="mneme"'),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


class _Uvicorn(uvicorn.Server):
    """uvicorn, minus its own signal handling (`until_stopped` has it), plus the line saying where it listens."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and sockets:
            sys.stderr.write(f"mneme: listening on {urls(sockets[0])}\n")
            sys.stderr.flush()


def every_profile_app(gw: Gateway, host: str) -> ASGIApp:
    """One HTTP app serving every profile at once, each at its own path (/mcp native, /mcp/<profile>), each
    with its own tool list, all over the one gateway (the same principals, the same memory). A request naming
    a protocol version none of them speaks is refused before it reaches one (http_protocol.py)."""
    apps = [
        build_server(gw, profile=name).streamable_http_app(streamable_http_path=profiles.http_path(name), host=host)
        for name in profiles.names()
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:  # each profile's MCP session manager
            for a in apps:
                await stack.enter_async_context(a.router.lifespan_context(a))
            yield

    return protocol_version_guard(Starlette(routes=[route for a in apps for route in a.routes], lifespan=lifespan))


class Mcp:
    """One MCP server for a gateway: `run()` serves until the client leaves (stdio) or `stop()` (HTTP)."""

    def __init__(self, gw: Gateway, gs: GatewaySettings, listener: socket.socket | None = None):
        """`listener`: for HTTP, the socket `preflight.bind` bound before anything started."""
        self.gw, self.gs = gw, gs
        self.listener = listener
        self._http: _Uvicorn | None = None

    def hint(self) -> str | None:
        """The line a person who started the server by hand in a terminal reads (an MCP client, which owns
        stdin, never sees it: None unless stdin is a terminal, or for HTTP, stderr is)."""
        if self.gs.transport == "stdio":
            if not sys.stdin.isatty():
                return None
            return (
                f"mneme: ready, serving MCP ({self.gs.profile} profile) over stdio: it waits for an MCP client on "
                "stdin, not for typing. Configure your agent to run `mneme serve`, or add --transport http; "
                "Ctrl-C stops; `mneme status` shows how it is doing."
            )
        if not sys.stderr.isatty() or self.listener is None:
            return None
        host, port = self.listener.getsockname()[:2]
        return f"mneme: ready, serving MCP over streamable HTTP at http://{host}:{port}/mcp (Ctrl-C stops)"

    async def run(self) -> None:
        if (line := self.hint()) is not None:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        try:
            if self.gs.transport == "stdio":
                await build_server(self.gw, profile=self.gs.profile).run_stdio_async()
                return
            assert self.listener is not None, "HTTP needs the socket bound before anything started"
            app: ASGIApp = every_profile_app(self.gw, self.gs.host)
            if self.gw.directory is not None:
                app = bearer_auth(app, self.gw.directory)
            self._http = _Uvicorn(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=3))
            await self._http.serve(sockets=[self.listener])
        finally:
            if self.listener is not None:
                self.listener.close()
            await self.gw.access.flush()

    @property
    def stop(self) -> Callable[[], None] | None:
        """How to end `run()` gracefully, where there is a way (HTTP); None: cancel it (stdio)."""
        if self.gs.transport != "http":
            return None

        def stop() -> None:
            if self._http is not None:
                self._http.should_exit = True

        return stop


async def until_stopped(main: Awaitable[None], *, graceful: Callable[[], None] | None = None) -> None:
    """Run `main` until it ends or SIGINT/SIGTERM arrives, whichever is first. On a signal, `graceful`
    (if any) asks `main` to finish, and it gets GRACE seconds to do so; otherwise it is cancelled."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    main_task = asyncio.ensure_future(main)
    stop_task = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({main_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
    if main_task not in done and graceful is not None:
        graceful()
        finished, _ = await asyncio.wait({main_task}, timeout=GRACE)
        done |= finished
    for t in (main_task, stop_task):
        if t not in done:
            t.cancel()
            # Bounded: the stdio transport reads stdin on a thread that a cancel cannot
            # interrupt, so never wait on it for long; the process exits after cleanup.
            await asyncio.wait({t}, timeout=2)
    if main_task in done and main_task.exception() is not None:
        raise main_task.exception()  # type: ignore[misc]
