"""A run of the history checker: writers through two gateways of a three-node cluster (three machines, each
with its own power-cut filesystem when FUSE is here: tests/powercut/cluster.py) while a nemesis injects faults
for a bounded time; afterwards every process is healed, the log is read, every projector replica is caught up
and stopped, a fresh replay of the log is made, and `checker.check` says what went wrong.

Faults (one at a time, round-robin in the order given, each for `fault_s` seconds, then healed, then the
replicas of the log allowed to catch up before the next):

- kill: SIGKILL of one nats-server node (the stream leader every other time), then started again;
- pause: SIGSTOP of the stream leader, then SIGCONT;
- powercut: one machine's power cut (its node and its services SIGKILLed, what was not fsynced dropped), then
  started again;
- pause+powercut: SIGSTOP of the stream leader; once another leads, the power of a machine following it cut
  and the machine started again; then SIGCONT of the old leader.

Writers: `clients` tasks, alternately on the two gateways (streamable HTTP), each a loop of memory_add (a new
memory) and memory_update (new content for a memory some writer created, picked among the newest, so writers
contend), each with a unique request id and content; an attempt whose outcome is unknown is retried with the
same request id (up to `retries` times), as the product asks.

    python -m tests.history.run --duration 600 --out /tmp/history   # the long run (root, /dev/fuse: power cuts)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp import Client

from tests.history.checker import (
    ADD,
    FAIL,
    OK,
    UPDATE,
    History,
    Report,
    check,
    log_events,
    outcome_of_error,
    read_replica,
)
from tests.powercut.cluster import PowerCutCluster
from tests.powercut.control import PowerCutFS

FAULTS = ("kill", "pause", "powercut", "pause+powercut")


@dataclass
class Config:
    duration: float = 20.0  # seconds during which the nemesis starts faults (each kind at least once)
    clients: int = 4
    faults: tuple[str, ...] = ("kill", "pause", "powercut")
    fault_s: float = 4.0  # how long each fault lasts before it is healed
    calm_s: float = 2.0  # after the heal and the catch-up, before the next fault
    warmup_s: float = 2.0  # writes before the first fault
    seed: int = 1
    sync: str = "always"
    update_ratio: float = 0.5
    call_timeout: float = 20.0
    retries: int = 3
    verbose: bool = False  # each fault on stderr as it starts
    catch_up_s: float = 120.0  # for the replicas to apply the head of the log once writes end


@dataclass
class Result:
    report: Report
    history: History
    faults: Counter[str] = field(default_factory=Counter)
    fault_log: list[dict[str, Any]] = field(default_factory=list)
    crashed: list[str] = field(default_factory=list)  # processes that died without the nemesis killing them
    seconds: dict[str, float] = field(default_factory=dict)
    replay: dict[str, Any] = field(default_factory=dict)
    stalled: str | None = None  # replicas that did not apply the head of the log in time, and their heartbeats

    def summary(self) -> dict[str, Any]:
        return {
            **self.report.summary(),
            "faults": dict(self.faults),
            "crashed": self.crashed,
            "stalled": self.stalled,
            "seconds": {k: round(v, 1) for k, v in self.seconds.items()},
        }


class Writers:
    def __init__(self, c: PowerCutCluster, history: History, cfg: Config) -> None:
        self.c, self.h, self.cfg = c, history, cfg
        self.urls = [s.url for s in c.layout.services if s.role == "gateway" and s.url]
        assert len(self.urls) >= 1
        self.known: list[str] = []  # memories some writer created (acknowledged)
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self.tasks = [asyncio.create_task(self.client(k)) for k in range(self.cfg.clients)]

    async def finish(self, grace: float | None = None) -> None:
        self.stop.set()
        _, pending = await asyncio.wait(self.tasks, timeout=grace or self.cfg.call_timeout + 5)
        for t in pending:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.h.close()

    async def client(self, k: int) -> None:
        rng = random.Random(self.cfg.seed * 1000 + k)
        gw = f"gateway{k % len(self.urls) + 1}"
        url = self.urls[k % len(self.urls)]
        mcp: Client | None = None
        i = 0
        try:
            while not self.stop.is_set():
                rid = f"c{k}-{i}"
                i += 1
                if self.known and rng.random() < self.cfg.update_ratio:
                    kind, target = UPDATE, rng.choice(self.known[-8:])
                    args: dict[str, Any] = {"id": target, "content": f"{rid} updates {target}", "request_id": rid}
                else:
                    kind, target = ADD, None
                    args = {"content": f"{rid} remembers", "request_id": rid}
                tool = "memory_add" if kind == ADD else "memory_update"
                for attempt in range(self.cfg.retries + 1):
                    if attempt and self.stop.is_set():
                        break
                    if mcp is None:
                        try:
                            mcp = await self._open(url)
                        except Exception:  # noqa: BLE001 - the gateway is away: try again shortly
                            await asyncio.sleep(0.5)
                            continue
                    op = self.h.invoke(f"c{k}", gw, kind, rid, args["content"], target)
                    try:
                        res = await mcp.call_tool(tool, args, read_timeout_seconds=self.cfg.call_timeout)
                    except Exception as exc:  # noqa: BLE001 - a timeout, a dropped connection: indeterminate
                        self.h.unknown(op, f"{type(exc).__name__}: {exc}"[:300])
                        await self._close(mcp)
                        mcp = None
                        await asyncio.sleep(0.2 + rng.random() * 0.3)
                        continue
                    if not res.is_error:
                        sc = res.structured_content or {}
                        dup = bool(sc.get("duplicate")) if kind == ADD else not sc.get("changed", True)
                        self.h.ok(op, memory_id=sc["id"], version=sc.get("version"), seq=sc.get("seq"), duplicate=dup)
                        if kind == ADD:
                            self.known.append(sc["id"])
                        break
                    error = _error_of(res)
                    if outcome_of_error(error) == FAIL:
                        self.h.fail(op, f"{error.get('code')}: {error.get('message', '')}"[:300])
                        break
                    self.h.unknown(op, f"{error.get('code')}: {error.get('message', '')}"[:300])
                    await asyncio.sleep(0.2 + rng.random() * 0.3)
        finally:
            if mcp is not None:
                await self._close(mcp)

    @staticmethod
    async def _open(url: str) -> Client:
        mcp = Client(url)
        await mcp.__aenter__()
        return mcp

    @staticmethod
    async def _close(mcp: Client) -> None:
        with contextlib.suppress(BaseException):
            async with asyncio.timeout(5):
                await mcp.__aexit__(None, None, None)


def _error_of(res: Any) -> dict[str, Any]:
    try:
        err: dict[str, Any] = json.loads(res.content[0].text)["error"]
        return err
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return {"code": "UNSTRUCTURED", "message": str(res.content)[:300]}


class Nemesis:
    def __init__(self, c: PowerCutCluster, cfg: Config, result: Result, history: History) -> None:
        self.c, self.cfg, self.result, self.history, self.t0 = c, cfg, result, history, history.t0
        self.rng = random.Random(cfg.seed)
        self.killed: set[str] = set()  # processes the nemesis killed and has not started again
        self.kills = 0

    def note(self, kind: str, **detail: Any) -> None:
        entry = {"t": round(time.monotonic() - self.t0, 2), "fault": kind, **detail}
        self.result.fault_log.append(entry)
        if self.cfg.verbose:
            print(f"nemesis: {json.dumps(entry)}", file=sys.stderr, flush=True)

    async def run(self, until: float) -> None:
        n = 0
        while time.monotonic() < until or n < len(self.cfg.faults):  # (each kind at least once)
            kind = self.cfg.faults[n % len(self.cfg.faults)]
            await getattr(self, kind.replace("+", "_"))(n)
            self.result.faults[kind] += 1
            n += 1
            await self.settle()
            await asyncio.sleep(self.cfg.calm_s)

    async def settle(self) -> None:
        self.crashes()
        try:
            await self.c.replicas_current(timeout=90)
        except RuntimeError as exc:
            self.note("not-settled", error=str(exc)[:300])

    def crashes(self) -> None:
        """A node that died without the nemesis: noted, and started again (services: the cluster's supervisor)."""
        for node in self.c.layout.nodes:
            p = self.c.procs.get(node.name)
            if p is not None and p.poll() is not None and node.name not in self.killed:
                self.result.crashed.append(f"{node.name} exited with {p.returncode} at "
                                           f"t={time.monotonic() - self.t0:.1f} s")  # fmt: skip
                self.c.start_node(node)

    async def kill(self, n: int) -> None:
        leader = await self.c.leader()
        nodes = [x.name for x in self.c.layout.nodes]
        self.kills += 1
        target = leader if self.kills % 2 == 1 else self.rng.choice([x for x in nodes if x != leader])
        self.note("kill", node=target, leader=leader)
        self.killed.add(target)
        self.c.sigkill([target])
        await asyncio.sleep(self.cfg.fault_s)
        self.c.start_node(self.c.node(target))
        self.killed.discard(target)

    async def pause(self, n: int) -> None:
        leader = await self.c.leader()
        self.note("pause", node=leader)
        self.c.pause(leader)
        await asyncio.sleep(self.cfg.fault_s)
        self.c.resume(leader)

    async def powercut(self, n: int) -> None:
        m = self.rng.randrange(len(self.c.layout.nodes))
        await self._cut(m, "powercut")

    async def _cut(self, m: int, kind: str, **detail: Any) -> None:
        names = self.c.on_machine(m)
        self.killed.update(names)
        lost = self.c.power_off([m])[0]
        self.note(kind, machine=m, processes=names, dropped=lost, **detail)
        await asyncio.sleep(self.cfg.fault_s)
        await self.c.power_on([m])
        self.killed.difference_update(names)

    async def pause_powercut(self, n: int) -> None:
        old = await self.c.leader()
        self.c.pause(old)
        self.note("pause", node=old, part_of="pause+powercut")
        try:
            deadline = time.monotonic() + 30
            new = old
            while new == old and time.monotonic() < deadline:
                with contextlib.suppress(RuntimeError):
                    new = await self.c.leader(timeout=5)
                await asyncio.sleep(0.2)
            # writes acknowledged under the new leader (then the cut follower holds data the old leader lacks)
            t_pause = self.result.fault_log[-1]["t"]
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and sum(
                op.outcome == OK and op.invoked > t_pause for op in self.history.ops[-200:]
            ) < 3:  # fmt: skip
                await asyncio.sleep(0.1)
            nodes = [x.name for x in self.c.layout.nodes]
            follower = next(x for x in nodes if x not in (old, new))
            await self._cut(nodes.index(follower), "powercut", part_of="pause+powercut", new_leader=new)
        finally:
            self.c.resume(old)


async def run(root: Path, cfg: Config, mounts: list[PowerCutFS] | None) -> Result:
    """One run on a cluster under `root` (node stores and replicas' data on `mounts`, one per machine, when
    given; a power cut needs them). The cluster is down when this returns."""
    if mounts is None and any("powercut" in f for f in cfg.faults):
        raise ValueError("power-cut faults need the power-cut filesystems")
    t_start = time.monotonic()
    c = PowerCutCluster(root / "cluster", mounts, sync=cfg.sync)
    h = History()
    result = Result(Report(), h)
    try:
        await c.up()
        c.sync_disks()
        result.seconds["up"] = time.monotonic() - t_start
        writers = Writers(c, h, cfg)
        nemesis = Nemesis(c, cfg, result, h)
        t0 = time.monotonic()
        writers.start()
        await asyncio.sleep(cfg.warmup_s)
        try:
            await nemesis.run(t0 + cfg.warmup_s + cfg.duration)
        finally:
            nemesis.crashes()
            await c.heal()
        await asyncio.sleep(cfg.calm_s)  # writes on the healed cluster
        await writers.finish()
        result.seconds["writing"] = time.monotonic() - t0
        # quiesce: no gateway writes any more; the log's replicas agree; every projector has applied the head
        t1 = time.monotonic()
        for s in c.layout.services:
            if s.role == "gateway":
                c.kill(s.name, 15)
        info = await c.replicas_current(timeout=120)
        head = int(info.state.last_seq)
        entries = await c.read_log()
        try:
            await c.wait_projectors(head, timeout=cfg.catch_up_s)
        except RuntimeError as exc:  # a replica stuck behind the log: the check reports it (divergent)
            result.stalled = str(exc)
        result.replay = await asyncio.to_thread(c.replay, root / "replay")
        result.seconds["quiesce+replay"] = time.monotonic() - t1
    finally:
        await c.down()
        result.crashed += c.restarts
    replicas = [read_replica(s.name, Path(s.data_dir) / "projector.duckdb") for s in c.projectors()]
    result.report = check(h, log_events(entries), replicas, replay_digest=result.replay["digest"], head=head)
    result.seconds["total"] = time.monotonic() - t_start
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.history.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=600.0, help="seconds of faults (default 600)")
    p.add_argument("--clients", type=int, default=6)
    p.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}")
    p.add_argument("--fault-s", type=float, default=5.0)
    p.add_argument("--calm-s", type=float, default=3.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sync", default="always")
    p.add_argument("--verbose", action="store_true", help="each fault on stderr as it starts")
    p.add_argument("--out", type=Path, default=None, help="keep history.jsonl, faults.json and report.json here")
    a = p.parse_args(argv)
    faults = tuple(f for f in a.faults.split(",") if f)
    cfg = Config(duration=a.duration, clients=a.clients, faults=faults, fault_s=a.fault_s, calm_s=a.calm_s,
                 seed=a.seed, sync=a.sync, verbose=a.verbose)  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="mneme-history-"))
    mounts: list[PowerCutFS] | None = None
    try:
        if any("powercut" in f for f in faults):
            from tests.powercut.fixtures import unavailable

            why = unavailable()
            if why is not None:
                sys.exit(f"power cuts need the power-cut filesystem: {why}")
            mounts = [PowerCutFS(work / f"m{i}").mount() for i in range(3)]
        res = asyncio.run(run(work, cfg, mounts))
    finally:
        for fs in mounts or []:
            fs.close()
    summary = res.summary()
    print(json.dumps(summary, indent=1))
    if not res.report.valid:
        print(res.report.explain(), file=sys.stderr)
    if a.out is not None:
        a.out.mkdir(parents=True, exist_ok=True)
        res.history.save(a.out / "history.jsonl")
        (a.out / "faults.json").write_text(json.dumps(res.fault_log, indent=1) + "\n")
        (a.out / "report.json").write_text(json.dumps({**summary, "explain": res.report.explain(50)}, indent=1))
        shutil.copytree(work / "cluster" / "logs", a.out / "logs", dirs_exist_ok=True)
    shutil.rmtree(work, ignore_errors=True)
    return 0 if res.report.valid else 1


if __name__ == "__main__":
    sys.exit(main())
