"""One soak run: bring the target up, warm it, measure the floors, run the clients with the samplers beside them,
then verify every acknowledged write and sum it all up (`soak(Config(...))` -> the result dict)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client as NATS

from bench.common import (
    cpu_seconds,
    latency_summary,
    log,
    machine_info,
    percentile,
    ratio,
    rnd,
    spawn,
    stop_process,
    system_cpu_seconds,
)
from bench.fixtures import REPO
from bench.floors import echo_responder
from bench.soak import targets
from bench.soak.targets import NAMESPACE, Target, rss_mb
from bench.soak.workload import MIX, Client, Err, Mem, Session, Shared, Tally, Version, token
from mneme.cluster import free_port
from mneme.errors import MnemeError
from schemas.queries import AuditQuery, GetMemory, ProjectorStatus
from services.gateway.queries import QueryClient


@dataclass
class Config:
    duration: float = 600.0  # seconds of measured load, after the warm-up
    clients: int = 8
    seed: int = 1
    cluster: bool = False
    warmup: float | None = None  # default: 10% of the duration, 3-30 s
    period: float = 1.0  # seconds between samples (lag, probes, RSS)
    floor_s: float = 3.0  # seconds per floor (0: no floors)
    reindex_every: float = 60.0  # client 0 changes one file of the code project and re-indexes it
    keep: bool = False

    @property
    def warm(self) -> float:
        return self.warmup if self.warmup is not None else min(30.0, max(3.0, self.duration * 0.1))


@dataclass
class Samples:
    t0: float
    lag: list[dict[str, Any]] = field(default_factory=list)
    visible_s: list[float] = field(default_factory=list)
    audited_s: list[float] = field(default_factory=list)
    rss: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    marks: dict[str, dict[str, float]] = field(default_factory=dict)
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)

    def snapshot(self, target: Target) -> dict[str, float]:
        got = {name: rss_mb(pid) for name, pid in target.processes().items()}
        return {name: mb for name, mb in got.items() if mb is not None}

    def mark(self, target: Target, name: str) -> None:
        """RSS of every process, and CPU seconds so far (this process: the clients)."""
        self.marks[name] = self.snapshot(target)
        self.cpu[name] = {n: cpu_seconds(pid) for n, pid in target.processes().items()}
        self.cpu[name]["bench (the clients)"] = time.process_time()
        self.cpu[name]["machine (every process)"] = system_cpu_seconds()


def now() -> datetime:
    return datetime.now(UTC)


async def poll(what: str, attempt: Callable[[], Awaitable[bool]], timeout: float, step: float = 0.005) -> float:
    """Call `attempt` until it says True; the seconds it took (RuntimeError after `timeout`)."""
    t = time.perf_counter()
    while not await attempt():
        if time.perf_counter() - t > timeout:
            raise RuntimeError(f"{what} not within {timeout} s")
        await asyncio.sleep(step)
    return time.perf_counter() - t


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


async def sampler(
    target: Target, qc: QueryClient, tally: Tally, shared: Shared, smp: Samples, stop_at: float, period: float
) -> None:
    """Every `period`: the projection's lag (ProjectorStatus, min_seq 0), every process's RSS, and a probe: one
    write, then the seconds until its row answers a get and until its record is in the audit trail."""
    s = Session(target.urls[0], tally)
    loop = asyncio.get_running_loop()
    i = 0
    try:
        while loop.time() < stop_at:
            t_next = loop.time() + period
            smp.rss.append((time.perf_counter() - smp.t0, smp.snapshot(target)))
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
                    }
                )
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


async def at_mark(target: Target, smp: Samples, name: str, when: float) -> None:
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, when - loop.time()))
    smp.mark(target, name)


# -- verification -----------------------------------------------------------------------------------------


async def list_all(url: str, tally: Tally) -> dict[str, tuple[str, int]]:
    """Every memory of the namespace (status any, detail full), paged: id -> (content, version)."""
    s = Session(url, tally)
    seen: dict[str, tuple[str, int]] = {}
    try:
        while True:
            args = {"status": "any", "detail": "full", "sort_by": "created_at", "sort_order": "asc", "limit": 500}
            page = await s.call("verify_list", "memory_list", {**args, "offset": len(seen)})
            if isinstance(page, Err):
                raise RuntimeError(f"memory_list failed while verifying: {page.text}")
            seen.update({m["id"]: (m["content"], m["version"]) for m in page["results"]})
            if not page["has_more"] or not page["results"]:
                return seen
    finally:
        await s.close()


async def verify(target: Target, cfg: Config, qc: QueryClient, shared: Shared, tally: Tally) -> dict[str, Any]:
    """Every acknowledged write read back: live ones with their last acknowledged version and content (paged
    memory_list), deleted ones MEMORY_NOT_FOUND (memory_get), each acknowledged write's request_id in the
    audit trail. A write through every gateway first, so that each one's reads wait for everything (read your
    writes: a gateway's reads wait for the highest sequence it wrote)."""
    t = time.perf_counter()
    out: dict[str, Any] = {}
    head = 0
    for k, url in enumerate(target.urls):
        s = Session(url, tally)
        rid = f"{shared.run}-settle-{k}"
        try:
            r = await s.call("settle", "memory_add", {"content": f"settle {k}", "request_id": rid})
        finally:
            await s.close()
        if isinstance(r, Err):
            raise RuntimeError(f"the settling write failed: {r.text}")
        shared.ledger[r["id"]] = Mem(r["id"], -2, "", [Version(r["seq"], r["version"], f"settle {k}", rid)])
        head = max(head, r["seq"])

    async def caught_up() -> bool:
        st = await qc.ask(ProjectorStatus(namespace=NAMESPACE, now=now(), min_seq=head))
        return st.lag_events == 0 and (st.vectors_applied is None or st.vectors_applied >= head)

    out["settle_s"] = rnd(await poll("the projection caught up", caught_up, 300, 0.05), 2)
    seen = await list_all(target.urls[0], tally)
    lost = {"missing": 0, "stale": 0, "wrong_content": 0, "resurrected": 0}
    in_doubt = 0
    deleted: list[Mem] = []
    for mem in shared.ledger.values():
        if mem.in_doubt:
            in_doubt += 1
            continue
        got = seen.get(mem.id)
        if mem.deleted:
            deleted.append(mem)
            if got is not None:
                lost["resurrected"] += 1
                tally.fail("lost_resurrected", f"{mem.id} deleted at seq {mem.last.seq}, listed: {got}")
        elif got is None:
            lost["missing"] += 1
            tally.fail("lost_missing", f"{mem.id} acked {mem.last} is not listed")
        elif got != (mem.last.content, mem.last.version):
            key = "stale" if got[1] < mem.last.version else "wrong_content"
            lost[key] += 1
            tally.fail(f"lost_{key}", f"{mem.id}: listed v{got[1]} {got[0]!r}, acked {mem.last}")
    gone: list[str] = []

    async def check_deleted(url: str, mems: list[Mem]) -> None:
        s = Session(url, tally)
        try:
            for mem in mems:
                r = await s.call("verify_get", "memory_get", {"id": mem.id}, expect=("MEMORY_NOT_FOUND",))
                if isinstance(r, Err) and r.code == "MEMORY_NOT_FOUND":
                    gone.append(mem.id)
                elif not isinstance(r, Err):
                    lost["resurrected"] += 1
                    tally.fail("lost_resurrected", f"{mem.id} deleted, yet memory_get answers v{r['version']}")
        finally:
            await s.close()

    n = cfg.clients
    await asyncio.gather(*(check_deleted(target.urls[k % len(target.urls)], deleted[k::n]) for k in range(n)))
    out["audit"] = await audit_check(qc, shared, tally, head)
    out.update(
        acknowledged_memories=len(shared.ledger),
        acknowledged_writes=sum(len(m.versions) for m in shared.ledger.values()),
        live_checked=sum(1 for m in shared.ledger.values() if not m.deleted and not m.in_doubt),
        deleted_checked=len(deleted),
        deleted_not_found=len(gone),
        in_doubt=in_doubt,
        listed=len(seen),
        listed_not_acknowledged=len(set(seen) - set(shared.ledger)),
        lost=lost,
        lost_total=sum(lost.values()),
        seconds=rnd(time.perf_counter() - t, 2),
    )
    return out


async def audit_check(qc: QueryClient, shared: Shared, tally: Tally, head: int) -> dict[str, Any]:
    """Every acknowledged memory write's request_id is in the audit trail (AuditQuery over NATS, once the
    trail has committed the log up to `head`)."""
    rids: set[str] = set()
    offset, t = 0, time.perf_counter()
    while True:
        q = AuditQuery(namespace=NAMESPACE, now=now(), min_seq=head, action="memory_", limit=1000, offset=offset)
        try:
            got = await qc.ask(q)
        except MnemeError as exc:
            if exc.code != "PROJECTION_LAG" or time.perf_counter() - t > 120:
                raise
            continue
        rids.update(r.request_id for r in got.records)
        offset += len(got.records)
        if not got.records or offset >= got.total:
            break
    acked = [v.request_id for m in shared.ledger.values() for v in m.versions]
    missing = [rid for rid in acked if rid not in rids]
    for rid in missing[:5]:
        tally.fail("audit_missing", f"no trail record for acknowledged write {rid}")
    if len(missing) > 5:
        tally.failures["audit_missing"] += len(missing) - 5
    return {"memory_records": offset, "acknowledged_writes": len(acked), "missing": len(missing)}


# -- figures -----------------------------------------------------------------------------------------------


def per_kind(tally: Tally, lo: float, hi: float) -> dict[str, Any]:
    secs = hi - lo
    by: dict[str, list[float]] = {}
    for t, kind, lat in tally.calls:
        if lo <= t < hi:
            by.setdefault(kind, []).append(lat)
    out = {}
    for kind in sorted(by, key=lambda k: -len(by[k])):
        s = latency_summary(by[kind])
        out[kind] = {
            "n": len(by[kind]),
            "per_s": rnd(len(by[kind]) / secs, 2),
            "p50_ms": s["p50_ms"],
            "p99_ms": s["p99_ms"],
            "max_ms": s["max_ms"],
        }
    return out


def thirds(tally: Tally, smp: Samples, lo: float, hi: float) -> list[dict[str, Any]]:
    """All calls' rate and latency in each third of the measured window (drift over the run), with the CPU
    the target's processes spent per call and the cores other processes of the machine took meanwhile (a rate
    that falls while the CPU per call holds is the machine, not the product)."""
    out = []
    step = (hi - lo) / 3
    bounds = ["start", "third1", "third2", "end"]
    for i in range(3):
        a, b = lo + i * step, lo + (i + 1) * step
        lat = [c[2] for c in tally.calls if a <= c[0] < b]
        s = latency_summary(lat)
        row: dict[str, Any] = {"per_s": rnd(len(lat) / step, 1), "p50_ms": s["p50_ms"], "p99_ms": s["p99_ms"]}
        c0, c1 = smp.cpu.get(bounds[i], {}), smp.cpu.get(bounds[i + 1], {})
        if c0 and c1:
            d = {n: c1[n] - c0[n] for n in c1 if n in c0}
            bench, machine = d.pop("bench (the clients)", 0.0), d.pop("machine (every process)", 0.0)
            target = sum(d.values())
            row["target_cpu_ms_per_call"] = rnd(1000 * target / len(lat), 2) if lat else None
            row["others_cores"] = rnd((machine - target - bench) / step, 2)
        out.append(row)
    return out


def rss_figures(smp: Samples) -> dict[str, Any]:
    start, mid, end = (smp.marks.get(k, {}) for k in ("start", "middle", "end"))
    out: dict[str, Any] = {}
    for name in sorted(set(start) | set(mid) | set(end)):
        a, m, e = start.get(name), mid.get(name), end.get(name)
        peak = max((snap.get(name, 0.0) for _, snap in smp.rss), default=0.0)
        out[name] = {
            "start_mb": rnd(a),
            "middle_mb": rnd(m),
            "end_mb": rnd(e),
            "max_mb": rnd(max(peak, a or 0, m or 0, e or 0)),
            "start_to_end_mb": rnd(e - a) if a is not None and e is not None else None,
            "middle_to_end_mb": rnd(e - m) if m is not None and e is not None else None,
            "middle_to_end_pct": rnd(100 * (e - m) / m, 1) if m and e is not None else None,
        }
    tot = {k: sum(snap.values()) for k, snap in (("start", start), ("middle", mid), ("end", end))}
    out["total"] = {
        "start_mb": rnd(tot["start"]),
        "middle_mb": rnd(tot["middle"]),
        "end_mb": rnd(tot["end"]),
        "start_to_end_mb": rnd(tot["end"] - tot["start"]),
        "middle_to_end_mb": rnd(tot["end"] - tot["middle"]),
        "middle_to_end_pct": rnd(100 * (tot["end"] - tot["middle"]) / tot["middle"], 1) if tot["middle"] else None,
    }
    return out


def dist(xs: list[float], scale: float = 1.0, digits: int = 1) -> dict[str, Any]:
    v = [x * scale for x in xs if x is not None]
    return {
        "n": len(v),
        "p50": rnd(percentile(v, 50), digits),
        "p99": rnd(percentile(v, 99), digits),
        "max": rnd(max(v), digits) if v else None,
    }


def errors_by_code(tally: Tally) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (_kind, code, cls), n in sorted(tally.errors.items()):
        d = out.setdefault(code, {"expected": 0, "retried": 0, "unexpected": 0, "kinds": 0})
        d[cls] += n
        d["kinds"] += 1
    return out


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


async def soak(cfg: Config, root: Path) -> dict[str, Any]:
    """Run the soak under `root` (a fresh directory); the result, with `ok` and `checks`."""
    up = targets.cluster(root) if cfg.cluster else targets.serve(root)
    t_up = time.perf_counter()
    out: dict[str, Any] = {
        "mode": "cluster" if cfg.cluster else "single",
        "clients": cfg.clients,
        "duration_s": cfg.duration,
        "warmup_s": cfg.warm,
        "seed": cfg.seed,
        "transport": "streamable HTTP, mcp ClientSession",
        "mix": MIX,
    }
    async with up as target, nats_conn(target) as nc:
        qc = QueryClient(nc, timeout=30)
        out["up_s"] = rnd(time.perf_counter() - t_up, 2)
        log(f"{target.mode}: {len(target.urls)} gateway(s), processes {sorted(target.processes())}")
        tally = Tally()
        out["ready"] = await ready(target, tally)
        if cfg.floor_s > 0:
            log("floors: a no-op MCP tool over HTTP, a NATS echo")
            out["floors"] = await floors(cfg, root, nc)
        sizes = target.log_sizes()
        shared = Shared(run=f"soak{int(time.time())}", project=target.project)
        tally = Tally()
        smp = Samples(t0=tally.t0)
        clients = [
            Client(
                k,
                target.urls[k % len(target.urls)],
                cfg.seed,
                shared,
                tally,
                reindex_every=cfg.reindex_every if k == 0 else 0,
            )
            for k in range(cfg.clients)
        ]
        loop = asyncio.get_running_loop()
        start = loop.time()
        warm_end, end = start + cfg.warm, start + cfg.warm + cfg.duration
        log(f"{cfg.clients} clients for {cfg.warm:.0f} s warm-up + {cfg.duration:.0f} s")
        marks = [
            asyncio.create_task(at_mark(target, smp, "start", warm_end)),
            asyncio.create_task(at_mark(target, smp, "third1", warm_end + cfg.duration / 3)),
            asyncio.create_task(at_mark(target, smp, "middle", warm_end + cfg.duration / 2)),
            asyncio.create_task(at_mark(target, smp, "third2", warm_end + cfg.duration * 2 / 3)),
        ]
        await asyncio.gather(
            *(c.run(end) for c in clients), sampler(target, qc, tally, shared, smp, end, cfg.period), *marks
        )
        smp.mark(target, "end")
        lo, hi = cfg.warm, time.perf_counter() - tally.t0
        exited = target.alive()
        log_errors = target.log_errors(sizes)
        log(f"load stopped after {hi:.0f} s; verifying {len(shared.ledger):,} memories")
        out["verify"] = await verify(target, cfg, qc, shared, tally)
        st = await qc.ask(ProjectorStatus(namespace=NAMESPACE, now=now()))
        data_mb = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) / 2**20
        out["final_status"] = {
            "data_dir_mb": rnd(data_mb, 1),
            "memories": st.memories,
            "entities": st.entities,
            "relations": st.relations,
            "code_chunks": st.code_chunks,
            "log_head": st.head_seq,
        }

    window = hi - lo
    kinds = per_kind(tally, lo, hi)
    total = sum(k["n"] for k in kinds.values())
    out["calls"] = {"total": total, "per_s": rnd(total / window, 1), "window_s": rnd(window, 1)}
    out["kinds"] = kinds
    out["thirds"] = thirds(tally, smp, lo, hi)
    step = window / 3
    first, last = per_kind(tally, lo, lo + step), per_kind(tally, hi - step, hi)
    out["p50_ms_first_vs_last_third"] = {
        k: [first[k]["p50_ms"], last[k]["p50_ms"], rnd(ratio(last[k]["p50_ms"], first[k]["p50_ms"]), 2)]
        for k in kinds
        if k in first and k in last
    }
    out["errors_by_code"] = errors_by_code(tally)
    out["errors_by_kind"] = {f"{kind}:{code}:{cls}": n for (kind, code, cls), n in sorted(tally.errors.items())}
    out["rss"] = rss_figures(smp)
    a, b = smp.cpu.get("start", {}), smp.cpu.get("end", {})
    cores = {n: (b[n] - a[n]) / (hi - lo) for n in b if n in a}  # over the measured window
    cores["others (not this run)"] = cores.get("machine (every process)", 0.0) - sum(
        v for n, v in cores.items() if n != "machine (every process)"
    )
    out["cpu_cores"] = {n: rnd(v, 2) for n, v in cores.items()}
    in_window = [x for x in smp.lag if x["t"] >= lo]
    out["lag"] = {
        "samples": len(in_window),
        "projection_events": dist([x["events"] for x in in_window], digits=0),
        "projection_s": dist([x["seconds"] for x in in_window], digits=3),
        "vector_events": dist([x["vector_events"] for x in in_window if x["vector_events"] is not None], digits=0),
        "probe_visible_ms": dist(smp.visible_s, 1000),
        "probe_audited_ms": dist(smp.audited_s, 1000),
        "projection_lag_p99_ms": rnd(percentile(smp.visible_s, 99) * 1000, 1),
        "audit_lag_p99_ms": rnd(percentile(smp.audited_s, 99) * 1000, 1),
    }
    fl = out.get("floors")
    if fl:
        noop = fl["noop_http"]
        get = kinds.get("get", {})
        add = kinds.get("add", {})
        out["ratios"] = {
            "all_calls_per_s_over_noop_per_s": rnd(ratio(out["calls"]["per_s"], noop["per_s"]), 3),
            "get_p50_over_noop_p50": rnd(ratio(get.get("p50_ms"), noop["p50_ms"]), 2),
            "add_p50_over_noop_p50": rnd(ratio(add.get("p50_ms"), noop["p50_ms"]), 2),
        }
    unexpected = tally.unexpected()
    v = out["verify"]
    checks = {
        "lost_acknowledged_writes": v["lost_total"],
        "deleted_still_readable": v["deleted_checked"] - v["deleted_not_found"],
        "writes_missing_from_audit": v["audit"]["missing"],
        "unexpected_errors": unexpected,
        "failed_checks": sum(tally.failures.values()),
        "dead_letters": tally.dead_letters,
        "server_log_errors": len(log_errors),
        "processes_exited": len(exited),
    }
    out["checks"] = checks
    out["failed_checks"] = dict(tally.failures)
    out["failure_samples"] = tally.samples[:20]
    out["log_error_samples"] = log_errors[:10]
    out["exited"] = exited
    out["ok"] = all(n == 0 for n in checks.values())
    out["machine"] = machine_info()
    return out
