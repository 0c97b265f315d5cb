"""What a command checks before it touches anything, and the one error an operator sees.

`serve --transport http` checks its configuration and binds its port before it starts NATS and
the projector. Each refusal is a `Refused`: the command line prints its message as one line and
exits 1. This module imports little, so that a refusal is quick.
"""

from __future__ import annotations

import errno
import ipaddress
import socket

from mneme.settings import CoreSettings, GatewaySettings


class Refused(Exception):
    """A command that cannot go ahead, for a reason the operator can act on (one line, exit 1)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_http(gs: GatewaySettings) -> None:
    """HTTP serves only with bearer tokens, or anonymously on loopback: decided before anything starts."""
    if gs.transport != "http":
        return
    if gs.principals_file is not None:
        from mneme.principals import Directory

        try:
            Directory.load(gs.principals_file)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise Refused(f"MNEME_GATEWAY_PRINCIPALS_FILE {gs.principals_file}: {exc}") from None
        return
    if not gs.http_anonymous:
        raise Refused("refusing to serve HTTP without bearer tokens: set MNEME_GATEWAY_PRINCIPALS_FILE "
                      "(or MNEME_GATEWAY_HTTP_ANONYMOUS=true, loopback only, for local development)")  # fmt: skip
    if not is_loopback(gs.host):
        raise Refused(f"MNEME_GATEWAY_HTTP_ANONYMOUS serves without bearer tokens and only on loopback: "
                      f"--host {gs.host} is not a loopback address; use --host 127.0.0.1, or serve {gs.host} "
                      "with tokens (MNEME_GATEWAY_PRINCIPALS_FILE)")  # fmt: skip


def bind(gs: GatewaySettings) -> socket.socket:
    """The HTTP listening socket, bound now (uvicorn listens on it later): a port in use is a refusal
    before NATS or the projector start."""
    host = gs.host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, gs.port))
    except OSError as exc:
        sock.close()
        hint = ": another process listens there; choose another --port" if exc.errno == errno.EADDRINUSE else ""
        raise Refused(f"cannot listen on {gs.host}:{gs.port}: {exc.strerror or exc}{hint}") from None
    return sock


def urls(sock: socket.socket) -> str:
    """Where a bound socket serves MCP, for the one line `serve` prints when it listens."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/mcp"
    if host in ("0.0.0.0", "::"):
        here = "127.0.0.1" if host == "0.0.0.0" else "[::1]"
        return f"{url} (every interface; on this machine http://{here}:{port}/mcp)"
    return url
