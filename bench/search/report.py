"""bench.search's tables and its JSON object."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from bench.common import header, print_table, ratio, rnd, verdict
from bench.search.corpus import MODES, P95_SEED_MS, P95_TARGET_MS, RATIO_TARGET, TARGET_NS, Config
from mneme.app.settings import ProjectorSettings
from mneme.embedding import MODELS
from services.projector.search import FETCH_MIN


def lat_row(name: str, s: dict[str, Any], target: bool = False) -> list[Any]:
    ok = s["p95_ms"] is not None and s["failures"] == 0 and s["p95_ms"] < P95_TARGET_MS
    return [name, s["n"], s["p50_ms"], s["p95_ms"], s["p99_ms"], s["max_ms"], s.get("mean_hits"),
            s.get("top_hit_names_a_query_entity"), s["failures"],
            (f"p95 < {P95_TARGET_MS:.0f} ms" if target else ""), (verdict(ok) if target else "")]  # fmt: skip


LAT_HEADERS = ["series", "n", "p50", "p95", "p99", "max", "hits", "top names entity", "failed", "target", ""]


def latency_json(lat: dict[str, Any]) -> dict[str, Any]:
    ser = lat["series"]
    return {
        "nats_cold": {m: ser[f"nats_cold {m}"].summary() for m in MODES},
        "nats_warm": {m: ser[f"nats_warm {m}"].summary() for m in MODES},
        "inprocess_cold": {m: ser[f"inproc_cold {m}"].summary() for m in MODES},
        "inprocess_warm": {m: ser[f"inproc_warm {m}"].summary() for m in MODES},
        "raw_edge": {k: v.summary() for k, v in lat["raw"].items()},
        "embed_one_query": lat["embed_one"].summary(),
        "nats_echo": lat["echo"].summary(),
        "seconds": rnd(lat["seconds"], 2),
        "others_cores": lat["others_cores"],
    }


def latency_rows(lj: dict[str, Any], target: bool) -> list[list[Any]]:
    rows = [lat_row(f"(3) NATS -> projector, {m}, cold query text", lj["nats_cold"][m], target) for m in MODES]
    rows += [lat_row(f"    NATS -> projector, {m}, warm (vector cached)", lj["nats_warm"][m]) for m in MODES]
    rows += [lat_row(f"    Searcher in-process, {m}, cold", lj["inprocess_cold"][m]) for m in MODES]
    rows += [lat_row(f"    Searcher in-process, {m}, warm", lj["inprocess_warm"][m]) for m in MODES]
    rows += [lat_row(f"    raw Edge query: {k} (limit {FETCH_MIN}, same filter)", v) for k, v in lj["raw_edge"].items()]
    rows.append(lat_row("    embed one query (OnnxEmbedder.embed)", lj["embed_one_query"]))
    rows.append(lat_row("    core NATS request/reply echo", lj["nats_echo"]))
    return rows


def parts_table(lj: dict[str, Any], title: str = "(3) Where a query's time goes (mean ms per query)") -> None:
    rows = []
    for key, label in (
        ("nats_cold", "NATS, cold"),
        ("nats_warm", "NATS, warm"),
        ("inprocess_cold", "in-process, cold"),
        ("inprocess_warm", "in-process, warm"),
    ):
        for m in MODES:
            s = lj[key][m]
            p = s.get("mean_ms_by_part", {})
            if not s["n"]:
                continue
            inside = sum(p.values())
            rows.append([f"{label}, {m}", s["mean_ms"], p.get("model.embed"), p.get("edge.search"),
                         rnd(p.get("cache.get_many", 0) + p.get("cache.put_many", 0), 3), p.get("bm25.query"),
                         rnd(s["mean_ms"] - inside, 3)])  # fmt: skip
    print_table(title, ["series", "mean", "embed query", "Edge search", "cache", "BM25 query", "the rest"], rows)


@dataclass
class SearchRun:
    """What one run measured: the corpus, the raw model before and after the catch-up, the catch-up, the
    latency rounds (and again after EdgeShard.optimize(), if asked), and what was found wrong."""

    cfg: Config
    machine: dict[str, Any]
    corpus_info: dict[str, Any]
    raw: tuple[dict[str, Any], dict[str, Any]]  # before, after
    cu: dict[str, Any]
    lat: dict[str, Any]
    optimized: dict[str, Any] | None
    problems: list[str]

    @property
    def raw_mean(self) -> float:
        return (self.raw[0]["per_s"] + self.raw[1]["per_s"]) / 2

    def model(self) -> tuple[float, int, float | None]:
        """The model inside the catch-up: its seconds, its texts, its rate."""
        m = self.cu["parts"].get("model.embed", {})
        model_s, items = m.get("seconds", 0.0), m.get("items", 0)
        return model_s, items, items / model_s if model_s else None


def intro(run: SearchRun, mode: str) -> None:
    ps, cfg, ci = ProjectorSettings(), run.cfg, run.corpus_info
    header("search", mode, run.machine)
    print(
        f"corpus: {cfg.target:,} memories in {TARGET_NS} + {cfg.others} x {cfg.per_other:,} in other namespaces = "
        f"{cfg.total:,} events; {ci['words_mean']} words per text ({ci['words_min']}-{ci['words_max']}); "
        f"model {ps.embedding_model} ({MODELS[ps.embedding_model].id}); vector_batch_max {ps.vector_batch_max}, "
        f"linger {ps.linger} s; Edge shard {ci['shard']}"
    )
    sel = ci["filter_selectivity"]
    shares = [f"{k} {v:.0%}" for k, v in sel.items() if k != "namespace_points" and v is not None]
    print("filter selectivity in the target namespace: " + ", ".join(shares))


def throughput_table(run: SearchRun) -> float | None:
    """(1)+(2): the raw model against the catch-up; the ratio (the headline)."""
    cu, raw_mean = run.cu, run.raw_mean
    ratio_ = ratio(cu["memories_per_s"], raw_mean)
    model_s, model_items, model_rate = run.model()

    def raw_row(label: str, r: dict[str, Any]) -> list[Any]:
        return [label, r["texts"], r["seconds"], r["per_s"], ratio(r["per_s"], raw_mean), r["cpu_cores_used"],
                r["others_cores"], "", ""]  # fmt: skip

    print_table("(1)+(2) Embedding throughput: raw model vs the projector catching up",
                ["measure", "texts", "seconds", "texts/s", "ratio to raw", "our cores", "others' cores", "target", ""],
                [raw_row("(1) raw: OnnxEmbedder.embed, batch 64, before", run.raw[0]),
                 raw_row("(1) raw: the same, after", run.raw[1]),
                 ["(2) catch-up: start -> vector follower committed the head", cu["embedded"], cu["seconds"],
                  cu["memories_per_s"], rnd(ratio_, 3), cu["cpu_cores"].get("bench"), cu["others_cores"],
                  f">= {RATIO_TARGET:.2f}", verdict(ratio_ is not None and ratio_ >= RATIO_TARGET)],
                 ["  the model alone inside the catch-up (texts / its own seconds)", model_items, rnd(model_s, 2),
                  rnd(model_rate, 1), rnd(ratio(model_rate, raw_mean), 3), None, None, "", ""]])  # fmt: skip
    return ratio_


CATCHUP_PARTS = (
    ("view.stage", "stage: decode -> evolve, payload, BM25 (event loop, or a thread if it reads)"),
    ("bm25.document", "  of which BM25 sparse vectors"),
    ("edge.retrieve", "  of which reading previous versions from Edge"),
    ("view.commit", "commit (worker thread; the follower waits for it)"),
    ("view._vectors", "  dense vectors: cache + model"),
    ("model.embed", "    of which the model (OnnxEmbedder.embed)"),
    ("cache.get_many", "    of which cache lookups (SQLite)"),
    ("cache.put_many", "    of which cache writes (SQLite)"),
    ("edge.upsert", "  Edge upsert (points with payload, dense + sparse)"),
    ("edge.set_payload", "  Edge set_payload (closing old versions)"),
    ("edge.flush+checkpoint", "  Edge flush + checkpoint file"),
)


def catchup_table(run: SearchRun) -> None:
    """(2): where the catch-up's wall time went, part by part; then the model's share and the commits."""
    cu, parts = run.cu, run.cu["parts"]
    cw, n = cu["seconds"], cu["embedded"]

    def secs(name: str) -> float:
        return parts.get(name, {}).get("seconds", 0.0)

    def row(label: str, calls: Any, items: Any, s: float) -> list[Any]:
        return [label, calls, items, rnd(s, 2), rnd(s * 1e6 / n, 1) if n else None, rnd(s / cw, 3)]

    rows = [row(label, parts.get(k, {}).get("calls", 0), parts.get(k, {}).get("items", 0), secs(k))
            for k, label in CATCHUP_PARTS]  # fmt: skip
    edge_s = sum(secs(k) for k in ("edge.upsert", "edge.set_payload", "edge.flush+checkpoint"))
    rows.append(row("  the rest of commit (points, lists, tolist)", None, None,
                    secs("view.commit") - secs("view._vectors") - edge_s))  # fmt: skip
    rows.append(row("neither staging nor committing (delivery, waits, start)", None, None,
                    cw - secs("view.stage") - secs("view.commit")))  # fmt: skip
    print_table(f"(2) Where the catch-up's {cw:.1f} s went (per embedded text; share of the wall time)",
                ["part", "calls", "items", "seconds", "µs/text", "share"], rows)  # fmt: skip
    model_s, _, model_rate = run.model()
    print(
        f"The model was busy {model_s / cw:.0%} of the catch-up's wall time, at "
        f"{rnd(ratio(model_rate, run.raw_mean), 3)} of its raw speed. {cu['commits']} commits of "
        f"{cu['texts_per_commit']} texts on average; the first began {cu['first_commit_at_s']} s after start, "
        f"{cu['between_commits_s']} s passed between commits, {cu['after_last_commit_s']} s after the last one; the "
        f"DuckDB follower had folded the log after {cu['rows_follower_done_s']} s. CPU cores used: bench process "
        f"{cu['cpu_cores'].get('bench')}, nats-server {cu['cpu_cores'].get('nats')}, other processes "
        f"{cu['others_cores']}."
    )


def latency_targets(lj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    targets = {}
    for m in MODES:
        s = lj["nats_cold"][m]
        ok = s["p95_ms"] is not None and s["failures"] == 0
        targets[f"{m}_p95"] = {
            "p95_ms": s["p95_ms"],
            "target_ms": P95_TARGET_MS,
            "seed_ms": P95_SEED_MS,
            "pass": ok and s["p95_ms"] < P95_TARGET_MS,
            "pass_seed": ok and s["p95_ms"] < P95_SEED_MS,
        }
    return targets


def latency_tables(run: SearchRun, lj: dict[str, Any]) -> None:
    cfg, optimized = run.cfg, run.optimized
    parts_table(lj)
    print_table(
        f"(3) Search latency at {cfg.target:,} memories in {TARGET_NS} ({cfg.total:,} points), limit 10, "
        f"a payload filter on every query (ms); other processes used {run.lat['others_cores']} cores meanwhile",
        LAT_HEADERS,
        latency_rows(lj, True),
    )
    if optimized:
        parts_table(optimized, "Diagnostic, after EdgeShard.optimize(): where a query's time goes (mean ms)")
        print_table(
            f"Diagnostic: the same after EdgeShard.optimize() ({optimized['seconds']} s; shard "
            f"{optimized['shard']}); other processes used {optimized['others_cores']} cores",
            LAT_HEADERS,
            latency_rows(optimized, False),
        )


def notes_of(run: SearchRun) -> list[str]:
    """What to keep in mind reading the figures: a noisy floor, a contended machine, a reconnected projector."""
    before, after = run.raw
    notes = []
    spread = ratio(abs(before["per_s"] - after["per_s"]), run.raw_mean)
    if spread is not None and spread > 0.15:
        notes.append(f"the two raw-rate runs differ by {spread:.0%}: the ratio is no better than that")
    for what, cores in (
        ("the raw runs", max(before["others_cores"] or 0, after["others_cores"] or 0)),
        ("the catch-up", run.cu["others_cores"] or 0),
        ("the latency rounds", run.lat["others_cores"] or 0),
    ):
        if cores > 0.25:
            notes.append(f"other processes used {cores:.2f} cores during {what} (contended)")
    if run.cu.get("projector_nats_reconnects"):
        notes.append(
            f"the projector's NATS connection was re-established {run.cu['projector_nats_reconnects']} time(s) "
            "during the catch-up (see nats-server.log with --keep: slow consumer, max_pending)"
        )
    return notes


def report(run: SearchRun, mode: str, wall: float) -> tuple[dict[str, Any], list[str]]:
    ps, cu, problems = ProjectorSettings(), run.cu, run.problems
    intro(run, mode)
    ratio_ = throughput_table(run)
    catchup_table(run)
    ok = ratio_ is not None and ratio_ >= RATIO_TARGET
    targets: dict[str, dict[str, Any]] = {
        "embedding_catchup_vs_raw": {"ratio": rnd(ratio_, 3), "target": f">= {RATIO_TARGET}", "pass": ok},
    }
    lj = latency_json(run.lat)
    targets.update(latency_targets(lj))
    latency_tables(run, lj)
    for p in problems:
        print(f"PROBLEM: {p}")
    targets["checks"] = {"pass": not problems, "problems": problems}
    notes = notes_of(run)
    for n in notes:
        print(f"NOTE: {n}")
    seeds = ", ".join(f"{m} {verdict(targets[f'{m}_p95']['pass_seed'])}" for m in MODES)
    print("\nTargets: " + ", ".join(f"{k} {verdict(v['pass'])}" for k, v in targets.items()))
    print(f"Seed targets (p95 < {P95_SEED_MS:.0f} ms): {seeds}")
    print(f"wall time {wall:.1f} s")
    model_s, _, model_rate = run.model()
    result = {
        "bench": "search",
        "mode": mode,
        "machine": run.machine,
        "config": dataclasses.asdict(run.cfg),
        "settings": {
            "model": ps.embedding_model,
            "model_id": MODELS[ps.embedding_model].id,
            "embedding_threads": ps.embedding_threads,
            "vector_batch_max": ps.vector_batch_max,
            "batch_max": ps.batch_max,
            "linger_s": ps.linger,
            "embed_batch": 64,
        },
        "corpus": run.corpus_info,
        "raw_model": {"before": run.raw[0], "after": run.raw[1], "mean_per_s": rnd(run.raw_mean, 1)},
        "catchup": {
            **cu,
            "ratio_to_raw": rnd(ratio_, 3),
            "model_alone_per_s": rnd(model_rate, 1),
            "model_busy_share": rnd(model_s / cu["seconds"], 3),
        },
        "latency": lj,
        "optimized": run.optimized,
        "targets": targets,
        "notes": notes,
    }
    return result, problems
