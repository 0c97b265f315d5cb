"""What a command checks before it touches anything, and the one error an operator sees.

A command that acts on existing data (replay, rebuild, snapshot, audit) refuses a data directory
that holds none, rather than creating an empty store and reporting success; one that would
replace a file another process holds refuses rather than swapping it underneath; `serve
--transport http` checks its configuration and binds its port before it starts NATS and the
projector. Each refusal is a `Refused`: the command line prints its message as one line and
exits 1. This module imports little, so that a refusal is quick.
"""

from __future__ import annotations

import errno
import ipaddress
import re
import socket
from datetime import UTC, datetime
from pathlib import Path

from mneme.app.settings import CoreSettings, GatewaySettings
from mneme.embedded_nats import running_url


class Refused(Exception):
    """A command that cannot go ahead, for a reason the operator can act on (one line, exit 1)."""


def embedded_log(core: CoreSettings) -> Path:
    return core.data_dir / "nats"


def serve_url(core: CoreSettings) -> str | None:
    """The NATS URL of a `mneme serve` running on this data directory, if one is."""
    return running_url(embedded_log(core))


def require_no_serve(core: CoreSettings) -> None:
    """One embedded NATS server per data directory: a second `mneme serve` (or anything that would start the
    embedded server) on a directory a running one serves is refused before it touches the store. (A second
    nats-server on one JetStream store, and the running one's `client-url` overwritten, broke `mneme status`,
    `snapshot` and `replay` for the running serve.)"""
    if core.nats_url is None and (url := serve_url(core)) is not None:
        try:
            pid = (embedded_log(core) / "client-url").read_text().split()[0]
        except (OSError, IndexError):  # (it stopped meanwhile)
            pid = "?"
        raise Refused(
            f"mneme serve is already running on {core.data_dir} (pid {pid}, NATS at {url}): one per data directory; "
            "give this one another --data-dir, or let your MCP clients share the running one over HTTP"
        )


def require_directory(core: CoreSettings) -> None:
    if not core.data_dir.is_dir():
        raise Refused(f"data directory {core.data_dir} does not exist: check --data-dir (or MNEME_DATA_DIR)")


def require_log(core: CoreSettings) -> None:
    """The log this command reads must exist: behind --nats-url, in a running `mneme serve`, or in the
    embedded store under the data directory. (With --nats-url the data directory may be new: a replica's
    read models can be built anywhere; without it, a directory with no log would get a new, empty one.)"""
    if core.nats_url is not None or serve_url(core) is not None:
        return
    require_directory(core)
    if not (embedded_log(core) / "jetstream").is_dir():
        raise Refused(
            f"{core.data_dir} holds no mneme data (no event log in {embedded_log(core)}): "
            "check --data-dir, or give --nats-url"
        )


def holder(exc: Exception) -> str | None:
    """Who holds a DuckDB file, from the error DuckDB gives a second process; None if it is another error."""
    text = str(exc)
    if "lock" not in text.lower():
        return None
    pid = re.search(r"PID (\d+)", text)
    return f"process {pid.group(1)}" if pid else "another process"


def held_message(path: Path, who: str, core: CoreSettings) -> str:
    running = "a running mneme serve" if serve_url(core) else "a running mneme process"
    return f"{path} is held by {running} ({who}); DuckDB allows one process per file: stop it first"


def parse_time(value: str | None, flag: str) -> datetime | None:
    """An ISO 8601 time from the command line (no offset means UTC)."""
    if value is None:
        return None
    try:
        t = datetime.fromisoformat(value.strip())
    except ValueError:
        raise Refused(f"{flag}: {value!r} is not an ISO 8601 time (e.g. 2026-11-26T14:02:00Z or 2026-11-26)") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def check_model(name: str, flag: str, *, installed: bool = True) -> None:
    """An embedding model that exists (and, with `installed`, whose package is installed), checked before
    anything is built with it. A server only needs a known name: with the package missing it serves,
    and semantic search answers EMBEDDING_MODEL_UNAVAILABLE while keyword search works."""
    from mneme.embedding import MODELS, ModelUnavailable, installed_model_file

    if name not in MODELS:
        raise Refused(f"{flag}: unknown embedding model {name!r}; known: {', '.join(sorted(MODELS))}")
    if installed:
        try:
            installed_model_file(name)
        except ModelUnavailable as exc:
            raise Refused(f"{flag}: {exc.message}") from None


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
        raise Refused(
            "refusing to serve HTTP without bearer tokens: set MNEME_GATEWAY_PRINCIPALS_FILE "
            "(or MNEME_GATEWAY_HTTP_ANONYMOUS=true, loopback only, for local development)"
        )
    if not is_loopback(gs.host):
        raise Refused(
            f"MNEME_GATEWAY_HTTP_ANONYMOUS serves without bearer tokens and only on loopback: "
            f"--host {gs.host} is not a loopback address; use --host 127.0.0.1, or serve {gs.host} "
            "with tokens (MNEME_GATEWAY_PRINCIPALS_FILE)"
        )


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
