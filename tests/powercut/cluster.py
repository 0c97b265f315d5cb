"""Three machines, each with its own power: a `mneme cluster` (mneme/app/cluster.py) whose NATS node i and the
stateful services placed on machine i keep their data on power-cut filesystem i (tests/powercut).

    mounts = [PowerCutFS(tmp / f"m{i}").mount() for i in range(3)]
    c = PowerCutCluster(tmp / "cluster", mounts)
    await c.up()
    ...
    c.power_off([0, 1, 2])   # SIGKILL every process of those machines (nodes first), then drop what was not synced
    await c.power_on([0, 1, 2])

Placement: node n<i+1> on machine i; projector and auditor replicas round-robin over the machines (projector1 on
machine 0, projector2 on 1, auditor1 on 2), their data directories on that machine's mount; gateways are
stateless client-side processes, off the machines (their data directories on the ordinary disk), and live on
through a cut. Every process's stderr goes to `<root>/logs/<name>.log` on the ordinary disk, so a cut never
takes the evidence. Processes are started from the calling thread: nats-server and the services die with the
thread that forked them (PR_SET_PDEATHSIG), so call these from the event loop's thread, never from a worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nats
import nats.errors
from nats.js.errors import NotFoundError

from mneme.app.cluster import LocalCluster, Service
from mneme.embedded_nats import is_alive
from schemas import subjects as S
from schemas.events import Envelope, decode_envelope
from tests.powercut.control import PowerCutFS

ROOT = Path(__file__).resolve().parents[2]


class PowerCutCluster(LocalCluster):
    def __init__(
        self,
        root: Path,
        mounts: list[PowerCutFS] | None,
        *,
        nodes: int = 3,
        gateways: int = 2,
        projectors: int = 2,
        auditors: int = 1,
        sync: str = "always",
        env: dict[str, str] | None = None,
    ) -> None:
        base = {"MNEME_LOG_LEVEL": "INFO"}
        n = len(mounts) if mounts is not None else nodes
        super().__init__(
            root, nodes=n, gateways=gateways, projectors=projectors, auditors=auditors,
            env={**base, **(env or {})}, sync=sync,
        )  # fmt: skip
        self.mounts = mounts
        # each machine's disk: its power-cut filesystem, or (without FUSE) a directory whose power never fails
        self.disks = [fs.path for fs in mounts] if mounts is not None else [self.root / f"m{i}" for i in range(n)]
        self.logs = Path(root) / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.home: dict[str, int | None] = {}  # process name -> machine index (None: off the machines)
        for i, node in enumerate(self.layout.nodes):
            node.store = str(self.disks[i] / "nats" / node.name)
            self.home[node.name] = i
        self.paused: set[str] = set()
        self.stopped: set[str] = set()  # processes killed on purpose, not started again yet
        self.restarts: list[str] = []  # services the supervisor started again after they exited on their own
        self._supervisor: asyncio.Task[None] | None = None

    # -- placement and logs --------------------------------------------------------------------------------
    async def start_services(self, timeout: float = 120) -> None:
        k = 0
        for role in ("projector", "auditor", "gateway"):
            for i in range(self.counts[role]):
                name = f"{role}{i + 1}"
                if role == "gateway":
                    s = Service(role, name, str(self.root / name), _free_port())
                    self.home[name] = None
                else:
                    m = k % len(self.disks)
                    k += 1
                    s = Service(role, name, str(self.disks[m] / name))
                    self.home[name] = m
                self.layout.services.append(s)
                self.start_service(s)
        await self.wait_gateways(timeout)

    # -- a supervisor, as compose.yaml's `restart: unless-stopped` --------------------------------------------
    async def up(self) -> Any:
        layout = await super().up()
        self._supervisor = asyncio.create_task(self._supervise())
        return layout

    async def _supervise(self) -> None:
        """A service that exits without being killed on purpose is started again (and noted in `restarts`):
        e.g. a projector started while JetStream elects a leader exits on its first request's timeout."""
        t0 = time.monotonic()
        while True:
            await asyncio.sleep(0.5)
            for s in self.layout.services:
                p = self.procs.get(s.name)
                if p is not None and p.poll() is not None and s.name not in self.stopped:
                    self.restarts.append(f"{s.name} exited with {p.returncode} at t={time.monotonic() - t0:.1f} s")
                    self.start_service(s)

    def start_node(self, node: Any) -> None:
        self.stopped.discard(node.name)
        super().start_node(node)

    def start_service(self, s: Service) -> None:
        self.stopped.discard(s.name)
        super().start_service(s)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        self.stopped.add(name)
        super().kill(name, sig)

    def _spawn(self, args: list[str], errlog: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return super()._spawn(args, self.log_of(errlog.parent.name), env)

    def _node_args(self, node: Any) -> list[str]:
        args = super()._node_args(node)
        args[args.index("-l") + 1] = str(self.logs / f"{node.name}.nats-server.log")  # (off the cut disk)
        return args

    def log_of(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def logged(self, name: str, text: str) -> int:
        p = self.log_of(name)
        return p.read_text(errors="replace").count(text) if p.exists() else 0

    async def wait_logged(self, name: str, text: str, *, count: int = 1, timeout: float = 120) -> float:
        t0 = time.monotonic()
        while self.logged(name, text) < count:
            self.check_alive(name)
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"{name} did not log {text!r} {count} times within {timeout:.0f} s")
            await asyncio.sleep(0.1)
        return time.monotonic() - t0

    def on_machine(self, m: int) -> list[str]:
        """The processes of machine m, its node first."""
        return [name for name, home in self.home.items() if home == m]

    def pid(self, name: str) -> int | None:
        p = self.procs.get(name)
        return p.pid if p is not None and p.poll() is None else None

    # -- faults ----------------------------------------------------------------------------------------------
    def sigkill(self, names: list[str]) -> None:
        """SIGKILL the named processes at once (each signalled before any is waited for), then reap them."""
        procs = [self.procs[n] for n in names if n in self.procs]
        self.stopped.update(names)
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
        for n in names:
            self.paused.discard(n)
        for p in procs:
            p.wait()

    def pause(self, name: str) -> None:
        os.kill(self.procs[name].pid, signal.SIGSTOP)
        self.paused.add(name)

    def resume(self, name: str) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.procs[name].pid, signal.SIGCONT)
        self.paused.discard(name)

    def power_off(self, machines: list[int]) -> list[dict[str, int]]:
        """The power of these machines fails at once: every process on them is SIGKILLed (the nodes first, so
        none can flush on a SIGTERM from a parent's death), then each filesystem drops what was not synced.
        Returns what each cut dropped (without power-cut filesystems: a crash of every process, nothing dropped).
        """
        names = [n for m in machines for n in self.on_machine(m)]
        nodes = [n for n in names if n in {x.name for x in self.layout.nodes}]
        self.sigkill(nodes)
        self.sigkill([n for n in names if n not in nodes])
        return [self.mounts[m].cut() if self.mounts is not None else {} for m in machines]

    async def power_on(self, machines: list[int], timeout: float = 120, *, services: bool = True) -> None:
        """Start the node of each machine again (same ports, same store), then, once JetStream answers with a
        stream leader, the machine's services (a projector exits when NATS does not answer at its start: its
        supervisor, here this, starts it when the cluster is back)."""
        for m in machines:
            self.start_node(self.layout.nodes[m])
        with contextlib.suppress(NotFoundError):  # (JetStream answers; the cut took the stream itself)
            await self.stream_info(timeout)
        for m in machines if services else []:
            for s in self.layout.services:
                if self.home.get(s.name) == m:
                    self.start_service(s)

    def sync_disks(self) -> None:
        """sync(1) on every machine: what was written so far is durable (a baseline: the cluster has run a while)."""
        for fs in self.mounts or []:
            fs.sync()

    async def heal(self, timeout: float = 120) -> list[str]:
        """Every paused process continued, every dead node, then every dead service, started again; the names
        started."""
        self.resume_all()
        started = []
        for node in self.layout.nodes:
            p = self.procs.get(node.name)
            if p is None or p.poll() is not None:
                self.start_node(node)
                started.append(node.name)
        if started:
            await self.stream_info(timeout)
        for s in self.layout.services:
            p = self.procs.get(s.name)
            if p is None or p.poll() is not None:
                self.start_service(s)
                started.append(s.name)
        return started

    def resume_all(self) -> None:
        for name in list(self.paused):
            self.resume(name)

    async def down(self, timeout: float = 10) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
            self._supervisor = None
        self.stopped.update(self.procs)
        self.resume_all()  # a stopped process does not act on SIGTERM
        await super().down(timeout)

    # -- the log ---------------------------------------------------------------------------------------------
    async def admin(self) -> nats.NATS:
        return await nats.connect(
            servers=self.layout.nats_url.split(","), connect_timeout=2, max_reconnect_attempts=-1,
            error_cb=_quiet, **self.credentials("admin"),
        )  # fmt: skip

    async def stream_info(self, timeout: float = 60) -> Any:
        """MNEME_EVENTS's info, once a leader answers (retried through elections)."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                nc = await self.admin()
                try:
                    info = await nc.jetstream(timeout=3).stream_info(S.EVENTS_STREAM)
                    if info.cluster is None or info.cluster.leader:
                        return info
                finally:
                    await nc.close()
            except NotFoundError:
                raise
            except Exception as exc:  # noqa: BLE001 - an election, a node still starting
                last = exc
            await asyncio.sleep(0.25)
        raise RuntimeError(f"no stream leader within {timeout:.0f} s: {last!r}")

    async def leader(self, timeout: float = 60) -> str:
        info = await self.stream_info(timeout)
        return str(info.cluster.leader)

    async def replicas_current(self, timeout: float = 120) -> Any:
        """Until every replica of MNEME_EVENTS is current (none offline or behind); the stream's info."""
        deadline = time.monotonic() + timeout
        while True:
            info = await self.stream_info(max(1.0, deadline - time.monotonic()))
            peers = info.cluster.replicas or []
            if len(peers) == len(self.layout.nodes) - 1 and all(p.current and not p.offline for p in peers):
                return info
            if time.monotonic() > deadline:
                raise RuntimeError(f"replicas not current within {timeout:.0f} s: {info.cluster}")
            await asyncio.sleep(0.25)

    async def read_log(self, timeout: float = 120) -> list[tuple[int, str | None, Envelope]]:
        """Every event in MNEME_EVENTS, in order: (stream sequence, Nats-Msg-Id, envelope)."""
        try:
            info = await self.stream_info(timeout)
        except NotFoundError:  # a cut took the stream itself
            return []
        last = int(info.state.last_seq)
        out: list[tuple[int, str | None, Envelope]] = []
        if info.state.messages == 0:
            return out
        nc = await self.admin()
        try:
            js = nc.jetstream(timeout=10)
            done = asyncio.Event()

            async def on(msg: Any) -> None:
                seq = msg.metadata.sequence.stream
                out.append((seq, (msg.headers or {}).get(S.HDR_MSG_ID), decode_envelope(msg.data)))
                if seq >= last:
                    done.set()

            deadline = asyncio.get_running_loop().time() + timeout
            while True:  # after a restart of every node the meta leader may still be elected: a create times out
                try:
                    sub = await js.subscribe(f"{S.EVENTS_PREFIX}.>", stream=S.EVENTS_STREAM, ordered_consumer=True,
                                             cb=on)  # fmt: skip
                    break
                except nats.errors.TimeoutError:
                    if asyncio.get_running_loop().time() > deadline:
                        raise
                    await asyncio.sleep(1)
            try:
                await asyncio.wait_for(done.wait(), timeout)
            finally:
                await sub.unsubscribe()
        finally:
            await nc.close()
        return out

    # -- read models -----------------------------------------------------------------------------------------
    def projectors(self) -> list[Service]:
        return [s for s in self.layout.services if s.role == "projector"]

    async def wait_projectors(self, head: int, timeout: float = 180) -> None:
        """Until every projector replica serves queries and has applied `head` on each of its followers of the
        event log (from its heartbeat in the MNEME_SERVICES bucket, every 5 s: what `mneme status` shows)."""
        deadline = time.monotonic() + timeout
        pending = {s.name for s in self.projectors()}
        while pending:
            beats = await self.heartbeats()
            for s in self.projectors():
                if self._supervisor is None:
                    self.check_alive(s.name)
                fig = beats.get(self.procs[s.name].pid, {}).get("projector", {})
                applied = [f["applied"] for f in fig.values() if f.get("stream") == S.EVENTS_STREAM]
                serving = self.logged(s.name, "projector serving queries")
                if s.name in pending and serving and applied and min(applied) >= head:
                    pending.discard(s.name)
            if pending and time.monotonic() > deadline:
                now = time.time()
                seen = {n: beats.get(self.procs[n].pid) for n in sorted(pending)}
                said = {n: (round(now - b["at"], 1), b.get("projector")) if b else None for n, b in seen.items()}
                raise RuntimeError(f"{sorted(pending)} did not apply {head} within {timeout:.0f} s; their last "
                                   f"heartbeats (age in s, figures): {said}")  # fmt: skip
            if pending:
                await asyncio.sleep(0.5)

    async def heartbeats(self) -> dict[int, dict[str, Any]]:
        """Every service's last heartbeat (mneme/heartbeat.py), by pid."""
        from nats.js.errors import KeyNotFoundError, NoKeysError

        from mneme.heartbeat import BUCKET

        out: dict[int, dict[str, Any]] = {}
        nc = await self.admin()
        try:
            kv = await nc.jetstream(timeout=5).key_value(BUCKET)
            try:
                keys = await kv.keys()
            except NoKeysError:
                return out
            for k in keys:
                with contextlib.suppress(KeyNotFoundError):
                    entry = await kv.get(k)
                    if entry.value:
                        v = json.loads(entry.value)
                        out[int(v["pid"])] = v
        except Exception:  # noqa: BLE001 - an election: nothing known this time
            return out
        finally:
            await nc.close()
        return out

    def replay(self, out: Path, timeout: float = 300) -> dict[str, Any]:
        """A fresh replay of the whole log (`mneme replay --output --no-snapshot`, as admin): its report, with
        the canonical digest of the memories view it folded."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
        env.update(self.env)
        env.update(MNEME_NATS_URL=self.layout.nats_url, MNEME_DATA_DIR=str(out.parent / f"{out.name}-data"))
        if self.passwords is not None:
            env.update(MNEME_NATS_USER="admin", MNEME_NATS_PASSWORD=self.passwords["admin"])
        cmd = [sys.executable, "-m", "mneme", "replay", "--output", str(out), "--no-snapshot"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
        if r.returncode != 0:
            raise RuntimeError(f"replay failed ({r.returncode}): {r.stdout[-2000:]} {r.stderr[-3000:]}")
        report: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
        return report


async def _quiet(exc: Exception) -> None:  # a node down or paused: expected here, and retried
    pass


def _free_port() -> int:
    from mneme.app.cluster import free_port

    return free_port()


def alive(pid: int | None) -> bool:
    return pid is not None and is_alive(pid)
