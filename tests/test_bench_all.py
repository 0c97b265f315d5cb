"""bench.all's regression guard: the headline table flags what got worse than the baseline, and only that."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from bench import all as bench_all


def run(c_ratio: float, d_ms: float, floor: float) -> dict:
    return {
        "spine": {
            "machine": {"git_commit": "abc", "date": "2026-11-26", "nproc": 2},
            "c_stdio": {"add_vs_noop": c_ratio, "noop": {"rate_per_s": floor}},
            "targets": {"d_stdio_p50": {"p50_ms": d_ms}},
        },
        "locomo": {"hybrid": {"mrr": 0.5}},
    }


def test_flags_a_ratio_that_fell_and_a_latency_that_rose_beyond_tolerance() -> None:
    base = bench_all.headline_figures(run(0.50, 10.0, 500))
    table, flagged = bench_all.headline_table(bench_all.headline_figures(run(0.40, 12.0, 100)), base, 0.15)
    assert flagged == ["(c) memory_add over stdio / no-op tool", "(d) add -> get over stdio, p50 ms"]
    assert "| (c) memory_add over stdio / no-op tool | >= 0.45 | 0.5 | 0.4 | -20% **worse** |" in table
    assert "floor: no-op MCP tool over stdio" in table  # a floor is shown, never flagged (it is the machine)


def test_within_tolerance_or_better_is_not_flagged() -> None:
    base = bench_all.headline_figures(run(0.50, 10.0, 500))
    _, flagged = bench_all.headline_table(bench_all.headline_figures(run(0.45, 11.4, 500)), base, 0.15)
    assert flagged == []
    _, flagged = bench_all.headline_table(bench_all.headline_figures(run(0.90, 2.0, 500)), base, 0.15)
    assert flagged == []


def test_the_committed_baseline_names_its_commit_machine_and_every_headline_it_has() -> None:
    accepted = json.loads(Path(bench_all.BASELINE).read_text())
    quick = accepted["quick"]
    assert quick["machine"]["git_commit"] and quick["machine"]["nproc"]
    labels = {h[0] for h in bench_all.HEADLINES}
    assert set(quick["figures"]) <= labels and len(quick["figures"]) >= 20


BENCH = Path(bench_all.__file__).resolve().parent


def test_no_benchmark_module_is_over_400_lines() -> None:
    sizes = {str(p.relative_to(BENCH)): len(p.read_text().splitlines()) for p in BENCH.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > 400} == {}


def test_every_projector_in_bench_is_built_by_the_composition_root() -> None:
    """No benchmark calls the Projector or Auditor constructor itself: bench/fixtures.py builds them through
    mneme.app.compose, the one place to change when a constructor changes (prose in backticks does not count)."""
    builders = sorted(
        str(p.relative_to(BENCH))
        for p in BENCH.rglob("*.py")
        if re.search(r"(?<![\w`.])(Projector|Auditor)\(", p.read_text())
    )
    assert builders == []
    assert "compose.projector(" in (BENCH / "fixtures.py").read_text()


@pytest.mark.parametrize("name", [b for b in bench_all.BENCHES if (BENCH / b).is_dir()])
def test_each_benchmark_package_imports_its_entry_point(name: str) -> None:
    assert callable(importlib.import_module(f"bench.{name}.__main__").main)
