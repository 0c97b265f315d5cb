"""After the load: every acknowledged write read back, every one in the audit trail, a sample of the recorded
reads asked again as of their own position."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from typing import Any

from bench.common import rnd
from bench.soak.config import Config, now, poll
from bench.soak.targets import NAMESPACE, Target
from bench.soak.workload import Err, Mem, Session, Shared, Tally, Version
from mneme.errors import MnemeError
from schemas.queries import AuditQuery, ProjectorStatus
from services.gateway.queries import QueryClient

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


async def settle(target: Target, qc: QueryClient, shared: Shared, tally: Tally) -> tuple[int, float]:
    """A write through every gateway, so that each one's reads wait for everything (read your writes: a
    gateway's reads wait for the highest sequence it wrote); then until the projection has caught up with them.
    The highest sequence written, and the seconds it took to catch up."""
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

    return head, await poll("the projection caught up", caught_up, 300, 0.05)


def check_listed(
    shared: Shared, seen: dict[str, tuple[str, int]], tally: Tally, lost: dict[str, int]
) -> tuple[list[Mem], int]:
    """Every acknowledged memory against the listing: live ones with their last version and content, deleted
    ones absent. The deleted ones (to ask for again), and how many are in doubt (not checked)."""
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
    return deleted, in_doubt


async def check_deleted(url: str, mems: list[Mem], tally: Tally, lost: dict[str, int]) -> list[str]:
    """memory_get of each deleted memory must answer MEMORY_NOT_FOUND: the ids that did."""
    gone = []
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
    return gone


async def verify(target: Target, cfg: Config, qc: QueryClient, shared: Shared, tally: Tally) -> dict[str, Any]:
    """Every acknowledged write read back: live ones with their last acknowledged version and content (paged
    memory_list), deleted ones MEMORY_NOT_FOUND (memory_get), each acknowledged write's request_id in the
    audit trail."""
    t = time.perf_counter()
    head, settle_s = await settle(target, qc, shared, tally)
    out: dict[str, Any] = {"settle_s": rnd(settle_s, 2)}
    seen = await list_all(target.urls[0], tally)
    lost = {"missing": 0, "stale": 0, "wrong_content": 0, "resurrected": 0}
    deleted, in_doubt = check_listed(shared, seen, tally, lost)
    n, urls = cfg.clients, target.urls
    got = await asyncio.gather(*(check_deleted(urls[k % len(urls)], deleted[k::n], tally, lost) for k in range(n)))
    gone = [mid for ids in got for mid in ids]
    out["audit"] = await audit_check(qc, shared, tally, head)
    out["reread"] = await reread_check(target.urls[0], tally, cfg.seed, sample=40 if cfg.duration < 60 else 200)
    ledger = shared.ledger.values()
    out.update(
        acknowledged_memories=len(shared.ledger),
        acknowledged_writes=sum(len(m.versions) for m in ledger),
        live_checked=sum(1 for m in ledger if not m.deleted and not m.in_doubt),
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


REREAD = ("memory_get", "memory_list", "memory_search")  # the reads whose record keeps the query to ask again


async def reread_check(url: str, tally: Tally, seed: int, sample: int = 60) -> dict[str, Any]:
    """The debugger's view under load: a sample of the reads the trail recorded, each asked again as of its own
    log position (audit_reread). A get or a list must match (same ids, order and versions); a search may come
    back in another order, because its keyword scores use today's word statistics, and is counted apart."""
    s = Session(url, tally)
    try:
        page = await s.call("reread", "audit_reads", {"agent_id": "soak", "limit": 1})
        if isinstance(page, Err):
            return {"error": page.text}
        total = int(page["total"])
        rng = random.Random(seed)
        offsets = sorted(rng.sample(range(total), min(sample, total)))
        out: dict[str, Counter[str]] = {"matched": Counter(), "mismatched": Counter(), "not_rerunnable": Counter()}
        samples: list[str] = []
        for offset in offsets:
            got = await s.call("reread", "audit_reads", {"agent_id": "soak", "limit": 1, "offset": offset})
            if isinstance(got, Err) or not got["results"]:
                continue
            read = got["results"][0]
            op = read["operation"]
            if op not in REREAD:  # (graph, code, history, stats, status reads keep no single query to re-run)
                out["not_rerunnable"][op] += 1
                continue
            again = await s.call("reread", "audit_reread", {"trail_seq": read["trail_seq"]})
            if isinstance(again, Err):
                out["mismatched"][f"{op}:error"] += 1
                continue
            out["matched" if again["match"] else "mismatched"][op] += 1
            if not again["match"] and len(samples) < 5:
                samples.append(f"{op} #{read['trail_seq']}: {again['differences'][:2]}")
        bad = sum(n for op, n in out["mismatched"].items() if not op.startswith("memory_search"))
        if bad:
            tally.fail("reread_mismatch", "; ".join(samples))
        rerun = sum(out["matched"].values()) + sum(out["mismatched"].values())
        return {"recorded_reads": total, "sampled": len(offsets), "rerun": rerun, "matched": dict(out["matched"]),
                "mismatched": dict(out["mismatched"]), "not_rerunnable": dict(out["not_rerunnable"]),
                "mismatch_samples": samples}  # fmt: skip
    finally:
        await s.close()
