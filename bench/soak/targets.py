"""What the soak runs against: one `mneme serve --transport http`, or the local cluster; their processes, RSS,
logs, and a small code project to index."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import children_of, cmdline, log, spawn, stop_process
from bench.fixtures import MNEME, REPO, tail
from mneme.app.cluster import LocalCluster, free_port

TOOLS = "core,time,governance,audit,graph,code,system,debug"
NAMESPACE = "soak"
ENV = {
    "MNEME_GATEWAY_HTTP_ANONYMOUS": "true",  # loopback only
    "MNEME_GATEWAY_NAMESPACE": NAMESPACE,
    "MNEME_GATEWAY_TOOLS": TOOLS,
    "MNEME_GATEWAY_AGENT_ID": "soak",
    "MNEME_GATEWAY_ROLE": "admin",  # (audit_reads / audit_reread at the end re-run recorded reads)
}


@dataclass
class Target:
    """Where the clients go: MCP URLs (client k uses urls[k % len]), NATS for the status probes, the processes."""

    mode: str
    urls: list[str]
    nats_url: str
    nats_auth: dict[str, str]
    roots: dict[str, int]  # name -> pid of each process started (their children are found at each sample)
    logs: dict[str, Path]
    project: Path
    alive: Any = None  # () -> list of names of processes that exited
    extra: dict[str, Any] = field(default_factory=dict)

    def processes(self) -> dict[str, int]:
        """Every process of the target: each started one and its descendants (e.g. serve's nats-server)."""
        out: dict[str, int] = {}
        for name, pid in self.roots.items():
            out[name] = pid
            todo = [pid]
            while todo:
                for child in children_of(todo.pop()):
                    exe = os.path.basename(cmdline(child)[0]) if cmdline(child) else str(child)
                    out[f"{name}/{exe}"] = child
                    todo.append(child)
        return out

    def log_errors(self, offsets: dict[str, int] | None = None) -> list[str]:
        """ERROR and Traceback lines the processes logged (after `offsets`, bytes per log, if given)."""
        bad = []
        for name, path in self.logs.items():
            try:
                with open(path, "rb") as f:
                    f.seek((offsets or {}).get(name, 0))
                    text = f.read().decode(errors="replace")
            except OSError:
                continue
            bad += [f"{name}: {ln.strip()[:300]}" for ln in text.splitlines() if ERROR_LINE.search(ln)]
        return bad

    def log_sizes(self) -> dict[str, int]:
        return {n: p.stat().st_size if p.exists() else 0 for n, p in self.logs.items()}


ERROR_LINE = re.compile(r"\bERROR\b|Traceback|\bCRITICAL\b")


def rss_mb(pid: int) -> float | None:
    """Resident set size of a process in MB (VmRSS), None if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


# -- a small code project ---------------------------------------------------------------------------------

_MODULES = {
    "inventory": ("stock", "take parts out of stock and reorder when the shelf runs low"),
    "billing": ("invoice", "compute an invoice total with taxes and discounts"),
    "auth": ("token", "check a bearer token and the user's role"),
    "search": ("query", "rank documents for a query by the words they share"),
    "scheduler": ("job", "run jobs at their time and retry the failed ones"),
    "geometry": ("shape", "area and perimeter of circles and rectangles"),
}


def module_text(name: str, revision: int = 0) -> str:
    noun, what = _MODULES[name]
    parts = [f'"""{name}: {what}."""\n\n']
    for i in range(5):
        parts.append(
            f"def {noun}_{i}(items: list[int], limit: int = {10 + i}) -> int:\n"
            f'    """{what.capitalize()} (step {i}, revision {revision})."""\n'
            f"    total = 0\n    for x in items:\n        if x > limit:\n            total += x - limit\n"
            f"    return total * {i + 1}\n\n\n"
        )
    return "".join(parts)


def write_project(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name in _MODULES:
        (root / f"{name}.py").write_text(module_text(name))
    return root


def touch_module(root: Path, revision: int) -> str:
    """Change one module (a new revision): the next code_index re-indexes that file only."""
    name = list(_MODULES)[revision % len(_MODULES)]
    (root / f"{name}.py").write_text(module_text(name, revision))
    return name


CODE_QUERIES = [q for _, q in _MODULES.values()] + ["retry a failed job", "apply a discount", "role check"]


# -- single node ------------------------------------------------------------------------------------------


@asynccontextmanager
async def serve(root: Path) -> AsyncIterator[Target]:
    """`mneme serve --transport http` on a free loopback port, every tool group, data under `root`."""
    data, port = root / "serve", free_port()
    data.mkdir(parents=True)
    errlog = root / "serve.log"
    env = {**os.environ, **ENV}
    argv = [MNEME, "serve", "--data-dir", str(data), "--transport", "http", "--port", str(port), "--tools", TOOLS]
    proc = spawn(argv, log_path=errlog, cwd=REPO, env=env)
    try:
        await _wait_port(port, proc, errlog)
        url_file = data / "nats" / "client-url"
        while not url_file.exists():
            await asyncio.sleep(0.05)
        nats_url = url_file.read_text().split()[1]
        yield Target(
            "single",
            [f"http://127.0.0.1:{port}/mcp"],
            nats_url,
            {},
            {"serve": proc.pid},
            {"serve": errlog},
            write_project(root / "project"),
            alive=lambda: [] if proc.poll() is None else ["serve"],
            extra={"proc": proc, "data": {"serve": data}},
        )
    finally:
        code = await asyncio.to_thread(stop_process, proc, 20)
        if code not in (0, None):
            log(f"mneme serve exited with {code}: {tail(errlog)}")


def _state(pid: int) -> str:
    """A stuck process's state and where it waits, for the error message."""
    try:
        state = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("State"))
        return f"{state.split(':', 1)[1].strip()}, wchan {Path(f'/proc/{pid}/wchan').read_text()}"
    except (OSError, StopIteration):
        return "gone"


async def _wait_port(port: int, proc: subprocess.Popen[bytes], errlog: Path, timeout: float = 120) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"mneme serve exited ({proc.returncode}) before listening: {tail(errlog)}") from None
            if loop.time() > deadline:
                raise RuntimeError(
                    f"mneme serve did not listen within {timeout} s ({_state(proc.pid)}): {tail(errlog)}"
                ) from None
            await asyncio.sleep(0.05)


# -- the local cluster ----------------------------------------------------------------------------------


@asynccontextmanager
async def cluster(root: Path) -> AsyncIterator[Target]:
    """The local cluster: 3 nodes (replicas=3 streams), 2 gateways over HTTP, 2 projectors, 1 auditor."""
    env = {**ENV, "MNEME_LOG_LEVEL": "INFO"}  # a projector says when it serves queries
    c = LocalCluster(root / "cluster", nodes=3, gateways=2, projectors=2, auditors=1, env=env)
    await c.up()
    try:
        for s in c.layout.services:
            if s.role == "projector":
                await c.wait_logged(s.name, "projector serving queries", timeout=180)
        roots = {name: p.pid for name, p in c.procs.items()}
        logs = {s.name: Path(s.data_dir) / "stderr.log" for s in c.layout.services}
        logs.update({n.name: Path(n.store) / "nats-server.log" for n in c.layout.nodes})

        def alive() -> list[str]:
            return [name for name, p in c.procs.items() if p.poll() is not None]

        yield Target(
            "cluster",
            [s.url for s in c.layout.services if s.url],
            c.layout.nats_url,
            c.credentials("admin"),
            roots,
            logs,
            write_project(root / "project"),
            alive=alive,
            extra={
                "cluster": c,
                "data": {s.name: Path(s.data_dir) for s in c.layout.services if s.role in ("projector", "auditor")},
            },
        )
    finally:
        await c.down()
