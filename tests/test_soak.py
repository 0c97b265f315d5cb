"""bench.soak for 30 seconds: 4 MCP clients over streamable HTTP against a real `mneme serve --transport http`
(every tool group), a mixed workload of writes, updates, deletes, gets, as_of reads, the three searches, graph
and code calls. Every acknowledged write must read back as acknowledged (deleted ones gone), no call may fail
with an error the workload did not provoke, and no process may grow much between the middle and the end.

The RSS bound: each process may grow by at most 64 MB + 25% of its RSS at the middle in the second half
(15 s). Growth there that is not a leak comes from caches filling (DuckDB's buffer pool, the embedding cache,
the Python allocator's arenas, JetStream's file-store buffers in nats-server) and from when the collector
runs: 10 MB for `mneme serve` (~480 MB) and 2 MB for its nats-server (~25 MB) in this test's setting, up to
30 MB and 8 MB with 8 clients (bench.soak --quick). The bound (~180 MB for serve, ~70 MB for nats-server) is
several times that, so the test does not flake on a busy machine, yet a leak of ~300 KB per call (about 550
calls in those 15 s) breaks it. bench.soak runs the same code for 10 minutes, and reports the drift.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak.run import Config, soak

pytestmark = pytest.mark.anyio

RSS_SLACK_MB = 64.0
RSS_SLACK_FRACTION = 0.25


async def test_soak_for_30_seconds(tmp_path: Path) -> None:
    cfg = Config(duration=30, clients=4, warmup=3, period=0.5, floor_s=0, reindex_every=10)
    out = await soak(cfg, tmp_path)
    v, checks = out["verify"], out["checks"]
    why = f"{checks}; {out['failure_samples']}; {out['log_error_samples']}"
    assert v["acknowledged_writes"] > 100 and v["deleted_checked"] > 0, f"the workload hardly ran: {v}"
    assert v["lost_total"] == 0, f"acknowledged writes lost: {v['lost']}; {why}"
    assert checks["deleted_still_readable"] == 0 and checks["writes_missing_from_audit"] == 0, why
    assert checks["unexpected_errors"] == 0, f"errors: {out['errors_by_code']}; {why}"
    assert all(n == 0 for n in checks.values()) and out["ok"], why
    assert out["kinds"]["search_semantic"]["n"] > 0 and out["kinds"]["code_search"]["n"] > 0
    assert out["kinds"]["get_as_of"]["n"] > 0 and out["kinds"]["graph_relate"]["n"] > 0
    rr = v["reread"]  # recorded reads asked again as of their own positions: gets and lists match exactly
    assert rr["rerun"] >= 5 and sum(rr["matched"].values()) > 0, rr
    assert not [op for op in rr["mismatched"] if not op.startswith("memory_search")], rr
    for name, r in out["rss"].items():
        if name == "total":
            continue
        bound = RSS_SLACK_MB + RSS_SLACK_FRACTION * r["middle_mb"]
        assert r["middle_to_end_mb"] < bound, f"{name} grew {r['middle_to_end_mb']} MB from the middle: {r}"
