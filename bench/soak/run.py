"""One soak run: bring the target up, warm it, measure the floors, run the clients with the samplers beside them,
then verify every acknowledged write and sum it all up (`soak(Config(...))` -> the result dict)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NATS

from bench.common import latency_summary, log, machine_info, rnd, spawn, stop_process
from bench.fixtures import REPO
from bench.floors import echo_responder
from bench.soak import targets
from bench.soak.config import Config, Samples, now, poll
from bench.soak.figures import call_figures, checks, cpu_cores, errors_by_code, floor_ratios, lag_figures, rss_figures
from bench.soak.memory import memory_figures
from bench.soak.targets import NAMESPACE, Target
from bench.soak.verify import verify
from bench.soak.workload import MIX, Client, Err, Mem, Session, Shared, Tally, Version, token
from mneme.app.cluster import free_port
from mneme.errors import MnemeError
from schemas.queries import AuditQuery, GetMemory, ProjectorStatus
from services.gateway.queries import QueryClient

# -- warm-up ------------------------------------------------------------------------------------------------


async def ready(target: Target, tally: Tally, timeout: float = 180) -> dict[str, Any]:
    """Until semantic search answers through every gateway (the model loaded in every projector) and the code
    project is indexed and embedded. (One session at a time: an MCP session is opened and closed in one task,
    in order; the SDK's cancel scopes nest.)"""
    t = time.perf_counter()
    try:
        for url in target.urls:
            s = Session(url, tally)
            try:
                ok = 0
                while ok < 4 * len(target.urls):
                    args = {"query": "warm up", "mode": "semantic"}
                    r = await s.call("warmup", "memory_search", args, expect=("EMBEDDING_MODEL_LOADING", "INDEXING"))
                    if isinstance(r, Err):
                        ok = 0
                        if time.perf_counter() - t > timeout:
                            raise RuntimeError(f"semantic search did not answer within {timeout} s: {r.text}")
                        await asyncio.sleep(0.2)
                    else:
                        ok += 1
            finally:
                await s.close()
        model_s = time.perf_counter() - t
        s = Session(target.urls[0], tally)
        try:
            r = await s.call("warmup", "code_index", {"path": str(target.project)})
            if isinstance(r, Err):
                raise RuntimeError(f"code_index failed: {r.text}")

            async def indexed() -> bool:
                st = await s.call("warmup", "code_status", {"project": target.project.name})
                return not isinstance(st, Err) and bool(st["results"]) and st["results"][0]["status"] == "completed"

            code_s = await poll("the code project indexed", indexed, 120, 0.1)
        finally:
            await s.close()
        return {"model_ready_s": rnd(model_s, 2), "code_indexed_s": rnd(code_s, 2), "code_chunks": r.get("chunks")}
    finally:
        tally.errors.clear()  # loading answers while warming are not the soak's errors
        tally.calls.clear()


# -- floors -------------------------------------------------------------------------------------------------


async def floors(cfg: Config, root: Path, nc: NATS) -> dict[str, Any]:
    """A no-op MCPServer tool over streamable HTTP (bench/noop_server.py served over HTTP) from the same number
    of clients for `floor_s`, and a core NATS request/reply echo on the target's NATS."""
    port = free_port()
    errlog = root / "noop.log"
    code = f"from bench.noop_server import server; server.run('streamable-http', host='127.0.0.1', port={port})"
    proc = spawn([sys.executable, "-c", code], log_path=errlog, cwd=REPO)
    out: dict[str, Any] = {}
    try:
        await targets._wait_port(port, proc, errlog)
        tally = Tally()
        lat: list[float] = []
        warm = asyncio.Barrier(cfg.clients + 1)
        go = asyncio.Event()
        span: list[float] = []

        async def noop() -> None:  # each session in its own task: opened and closed there
            s = Session(f"http://127.0.0.1:{port}/mcp", tally)
            try:
                await s.call("noop", "noop", {"text": "warm"})
                await warm.wait()
                await go.wait()
                while time.perf_counter() < span[1]:
                    t1 = time.perf_counter()
                    r = await s.call("noop", "noop", {"text": "x" * 100})
                    if not isinstance(r, Err):
                        lat.append(time.perf_counter() - t1)
            finally:
                await s.close()

        tasks = [asyncio.create_task(noop()) for _ in range(cfg.clients)]
        await warm.wait()
        t = time.perf_counter()
        span[:] = [t, t + cfg.floor_s]
        go.set()
        await asyncio.gather(*tasks)
        secs = cfg.floor_s
        out["noop_http"] = {"per_s": rnd(len(lat) / secs), "errors": tally.unexpected(), **latency_summary(lat)}
    finally:
        await asyncio.to_thread(stop_process, proc)
    sub = await echo_responder(nc, "soak.floor.echo")
    try:
        lat2: list[float] = []

        async def echo(until: float) -> None:
            while time.perf_counter() < until:
                t1 = time.perf_counter()
                await nc.request("soak.floor.echo", b"x" * 100, timeout=5)
                lat2.append(time.perf_counter() - t1)

        t = time.perf_counter()
        await asyncio.gather(*(echo(t + cfg.floor_s) for _ in range(cfg.clients)))
        out["nats_echo"] = {"per_s": rnd(len(lat2) / (time.perf_counter() - t)), **latency_summary(lat2)}
    finally:
        await sub.unsubscribe()
    return out


# -- samplers beside the load ----------------------------------------------------------------------------------


async def sampler(target: Target, qc: QueryClient, tally: Tally, shared: Shared, smp: Samples, cfg: Config) -> None:
    """Every period: the projection's lag (ProjectorStatus, min_seq 0), every process's RSS, and a probe: one
    write, then the seconds until its row answers a get and until its record is in the audit trail; every
    `detail_every`: smaps_rollup and the data directories' parts."""
    s = Session(target.urls[0], tally)
    loop = asyncio.get_running_loop()
    i, next_detail = 0, loop.time() + cfg.detail_every
    try:
        while loop.time() < shared.stop_at:
            t_next = loop.time() + cfg.period
            smp.rss.append((time.perf_counter() - smp.t0, smp.snapshot(target)))
            if loop.time() >= next_detail:
                next_detail += cfg.detail_every
                smp.series.append(smp.details(target))
            i += 1
            try:
                st = await qc.ask(ProjectorStatus(namespace=NAMESPACE, now=now()))
                # (the head is read before the vectors' position: clamp a write that landed in between)
                vec = max(0, st.head_seq - st.vectors_applied) if st.vectors_applied is not None else None
                smp.lag.append(
                    {
                        "t": time.perf_counter() - smp.t0,
                        "events": st.lag_events,
                        "seconds": st.lag_seconds,
                        "vector_events": vec,
                        "memories": st.memories,
                        "head": st.head_seq,
                    }
                )
                if not (shared.reads_only and shared.measuring):
                    await probe(s, qc, shared, smp, i)
            except (MnemeError, RuntimeError) as exc:  # a status query over NATS failed: counted, not fatal
                tally.error("sampler", getattr(exc, "code", type(exc).__name__), "unexpected", str(exc))
            await asyncio.sleep(max(0.0, t_next - loop.time()))
    finally:
        await s.close()


async def probe(s: Session, qc: QueryClient, shared: Shared, smp: Samples, i: int) -> None:
    tok = token(999, i)
    content = f"probe {i}; marker {tok}."
    rid = f"{shared.run}-probe-{i}"
    r = await s.call("probe_add", "memory_add", {"content": content, "request_id": rid})
    if isinstance(r, Err):
        return
    t_ack = time.perf_counter()
    shared.ledger[r["id"]] = Mem(r["id"], -1, tok, [Version(r["seq"], r["version"], content, rid)])

    async def visible() -> bool:
        try:
            await qc.ask(GetMemory(namespace=NAMESPACE, now=now(), memory_id=r["id"]))
            return True
        except MnemeError as exc:
            if exc.code != "MEMORY_NOT_FOUND":
                raise
            return False

    async def audited() -> bool:
        got = await qc.ask(AuditQuery(namespace=NAMESPACE, now=now(), memory_id=r["id"], limit=5))
        return bool(got.records)

    async def timed(attempt: Callable[[], Awaitable[bool]], into: list[float]) -> None:
        await poll(f"probe {i}", attempt, 60, step=0.01)
        into.append(time.perf_counter() - t_ack)

    await asyncio.gather(timed(visible, smp.visible_s), timed(audited, smp.audited_s))
    if shared.steady:  # the live working set stays fixed: the probe's memory goes once measured
        args = {"id": r["id"], "mode": "delete", "request_id": f"{rid}-del"}
        d = await s.call("probe_delete", "memory_retire", args)
        mem = shared.ledger[r["id"]]
        if isinstance(d, Err):
            mem.in_doubt = True
        else:
            mem.versions.append(Version(d["seq"], d["version"], None, args["request_id"]))


async def at_mark(target: Target, smp: Samples, name: str, when: float) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, when - loop.time()))
    smp.mark(target, name)


# -- the run ------------------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def nats_conn(target: Target) -> AsyncIterator[NATS]:
    async def quiet(exc: Exception) -> None:
        pass

    nc = await nats.connect(servers=target.nats_url.split(","), error_cb=quiet, name="bench-soak", **target.nats_auth)
    try:
        yield nc
    finally:
        await nc.close()


@dataclass
class Load:
    """The measured part of a soak: the clients with the sampler beside them, marks along the window."""

    cfg: Config
    target: Target
    qc: QueryClient
    shared: Shared = field(init=False)
    tally: Tally = field(default_factory=Tally)
    smp: Samples = field(init=False)

    def __post_init__(self) -> None:
        self.shared = Shared(run=f"soak{int(time.time())}", project=self.target.project)
        self.smp = Samples(t0=self.tally.t0, signal=self.cfg.signal_marks)
        self.shared.steady, self.shared.reads_only = self.cfg.steady, self.cfg.reads_only

    def clients(self) -> list[Client]:
        cfg, urls = self.cfg, self.target.urls
        return [
            Client(k, urls[k % len(urls)], cfg.seed, self.shared, self.tally,
                   reindex_every=cfg.reindex_every if k == 0 else 0)
            for k in range(cfg.clients)
        ]  # fmt: skip

    async def run(self) -> tuple[float, float]:
        """Warm-up (with --steady: until the live set is filled), then `duration` s of load: the window (lo, hi)
        in seconds since the tally's start."""
        cfg, shared, smp, target = self.cfg, self.shared, self.smp, self.target
        loop = asyncio.get_running_loop()
        start = loop.time()
        running = [asyncio.create_task(c.run()) for c in self.clients()]  # until shared.stop_at, set below
        running.append(asyncio.create_task(sampler(target, self.qc, self.tally, shared, smp, cfg)))
        fill = f" (and until {cfg.steady:,} live memories)" if cfg.steady else ""
        log(f"{cfg.clients} clients for {cfg.warm:.0f} s warm-up{fill}")
        await asyncio.sleep(cfg.warm)
        while cfg.steady and not shared.filled and not all(t.done() for t in running):
            await asyncio.sleep(0.2)
        warm_end = loop.time()
        shared.stop_at, shared.measuring = warm_end + cfg.duration, True
        log(f"warm after {warm_end - start:.0f} s ({shared.live:,} live); {cfg.duration:.0f} s of load")
        marks = [asyncio.create_task(at_mark(target, smp, name, warm_end + cfg.duration * frac))
                 for name, frac in (("start", 0), ("third1", 1 / 3), ("middle", 1 / 2), ("third2", 2 / 3))]  # fmt: skip
        await asyncio.gather(*running, *marks)
        smp.mark(target, "end")
        return warm_end - start, time.perf_counter() - self.tally.t0


async def final_status(qc: QueryClient, root: Path) -> dict[str, Any]:
    st = await qc.ask(ProjectorStatus(namespace=NAMESPACE, now=now()))
    data_mb = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) / 2**20
    return {"data_dir_mb": rnd(data_mb, 1), "memories": st.memories, "entities": st.entities,
            "relations": st.relations, "code_chunks": st.code_chunks, "log_head": st.head_seq}  # fmt: skip


async def soak(cfg: Config, root: Path) -> dict[str, Any]:
    """Run the soak under `root` (a fresh directory); the result, with `ok` and `checks`."""
    up = targets.cluster(root) if cfg.cluster else targets.serve(root)
    t_up = time.perf_counter()
    out: dict[str, Any] = {"mode": "cluster" if cfg.cluster else "single", "clients": cfg.clients,
                           "duration_s": cfg.duration, "warmup_s": cfg.warm, "seed": cfg.seed,
                           "transport": "streamable HTTP, mcp ClientSession", "mix": MIX}  # fmt: skip
    async with up as target, nats_conn(target) as nc:
        qc = QueryClient(nc, timeout=30)
        out["up_s"] = rnd(time.perf_counter() - t_up, 2)
        log(f"{target.mode}: {len(target.urls)} gateway(s), processes {sorted(target.processes())}")
        out["ready"] = await ready(target, Tally())
        if cfg.floor_s > 0:
            log("floors: a no-op MCP tool over HTTP, a NATS echo")
            out["floors"] = await floors(cfg, root, nc)
        sizes = target.log_sizes()
        load = Load(cfg, target, qc)
        lo, hi = await load.run()
        exited = target.alive()
        log_errors = target.log_errors(sizes)
        log(f"load stopped after {hi:.0f} s; verifying {len(load.shared.ledger):,} memories")
        out["verify"] = await verify(target, cfg, qc, load.shared, load.tally)
        out["final_status"] = await final_status(qc, root)
    tally, smp = load.tally, load.smp
    out.update(call_figures(tally, smp, lo, hi))
    out["errors_by_code"] = errors_by_code(tally)
    out["errors_by_kind"] = {f"{kind}:{code}:{cls}": n for (kind, code, cls), n in sorted(tally.errors.items())}
    out["rss"] = rss_figures(smp)
    out["memory"] = memory_figures(smp.detail, smp.series)
    out["steady"], out["reads_only"] = cfg.steady, cfg.reads_only
    out["cpu_cores"] = cpu_cores(smp, lo, hi)
    out["lag"] = lag_figures(smp, lo)
    if out.get("floors"):
        out["ratios"] = floor_ratios(out)
    out["checks"] = checks(out["verify"], tally, log_errors, exited)
    out["failed_checks"] = dict(tally.failures)
    out["failure_samples"] = tally.samples[:20]
    out["log_error_samples"] = log_errors[:10]
    out["exited"] = exited
    out["ok"] = all(n == 0 for n in out["checks"].values())
    out["machine"] = machine_info()
    return out
