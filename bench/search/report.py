"""bench.search's tables and its JSON object."""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.common import print_table, ratio, rnd, verdict
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


def report(
    cfg: Config,
    mode: str,
    machine: dict[str, Any],
    corpus_info: dict[str, Any],
    raw_before: dict[str, Any],
    raw_after: dict[str, Any],
    raw_mean: float,
    cu: dict[str, Any],
    lat: dict[str, Any],
    optimized: dict[str, Any] | None,
    problems: list[str],
    wall: float,
) -> tuple[dict[str, Any], list[str]]:
    ps = ProjectorSettings()
    print(
        f"mneme bench.search ({mode}) — {machine['nproc']} cores, {machine['cpu_model']}, "
        f"{machine['ram_gb']} GB RAM, Python {machine['python']}, {machine['date']}"
    )
    sel = corpus_info["filter_selectivity"]
    print(
        f"corpus: {cfg.target:,} memories in {TARGET_NS} + {cfg.others} x {cfg.per_other:,} in other namespaces = "
        f"{cfg.total:,} events; {corpus_info['words_mean']} words per text ({corpus_info['words_min']}-"
        f"{corpus_info['words_max']}); model {ps.embedding_model} ({MODELS[ps.embedding_model].id}); "
        f"vector_batch_max {ps.vector_batch_max}, "
        f"linger {ps.linger} s; Edge shard {corpus_info['shard']}"
    )
    shares = [f"{k} {v:.0%}" for k, v in sel.items() if k != "namespace_points" and v is not None]
    print("filter selectivity in the target namespace: " + ", ".join(shares))

    ratio_ = ratio(cu["memories_per_s"], raw_mean)
    parts = cu["parts"]
    model_s = parts.get("model.embed", {}).get("seconds", 0.0)
    model_items = parts.get("model.embed", {}).get("items", 0)
    model_rate = model_items / model_s if model_s else None
    ratio_ok = ratio_ is not None and ratio_ >= RATIO_TARGET
    print_table("(1)+(2) Embedding throughput: raw model vs the projector catching up",
                ["measure", "texts", "seconds", "texts/s", "ratio to raw", "our cores", "others' cores", "target", ""],
                [["(1) raw: OnnxEmbedder.embed, batch 64, before", raw_before["texts"], raw_before["seconds"],
                  raw_before["per_s"], ratio(raw_before["per_s"], raw_mean), raw_before["cpu_cores_used"],
                  raw_before["others_cores"], "", ""],
                 ["(1) raw: the same, after", raw_after["texts"], raw_after["seconds"], raw_after["per_s"],
                  ratio(raw_after["per_s"], raw_mean), raw_after["cpu_cores_used"], raw_after["others_cores"], "", ""],
                 ["(2) catch-up: start -> vector follower committed the head", cu["embedded"], cu["seconds"],
                  cu["memories_per_s"], rnd(ratio_, 3), cu["cpu_cores"].get("bench"), cu["others_cores"],
                  f">= {RATIO_TARGET:.2f}", verdict(ratio_ok)],
                 ["  the model alone inside the catch-up (texts / its own seconds)", model_items, rnd(model_s, 2),
                  rnd(model_rate, 1), rnd(ratio(model_rate, raw_mean), 3), None, None, "", ""]])  # fmt: skip

    cw = cu["seconds"]

    def part(name: str, label: str) -> list[Any]:
        p = parts.get(name, {"seconds": 0.0, "calls": 0, "items": 0})
        us = p["seconds"] * 1e6 / cu["embedded"] if cu["embedded"] else None
        return [label, p["calls"], p["items"], rnd(p["seconds"], 2), rnd(us, 1), rnd(p["seconds"] / cw, 3)]

    commit_s = parts.get("view.commit", {}).get("seconds", 0.0)
    stage_s = parts.get("view.stage", {}).get("seconds", 0.0)
    edge_s = sum(
        parts.get(k, {}).get("seconds", 0.0) for k in ("edge.upsert", "edge.set_payload", "edge.flush+checkpoint")
    )
    rest = commit_s - parts.get("view._vectors", {}).get("seconds", 0.0) - edge_s
    print_table(f"(2) Where the catch-up's {cw:.1f} s went (per embedded text; share of the wall time)",
                ["part", "calls", "items", "seconds", "µs/text", "share"],
                [part("view.stage", "stage: decode -> evolve, payload, BM25 (event loop, or a thread if it reads)"),
                 part("bm25.document", "  of which BM25 sparse vectors"),
                 part("edge.retrieve", "  of which reading previous versions from Edge"),
                 part("view.commit", "commit (worker thread; the follower waits for it)"),
                 part("view._vectors", "  dense vectors: cache + model"),
                 part("model.embed", "    of which the model (OnnxEmbedder.embed)"),
                 part("cache.get_many", "    of which cache lookups (SQLite)"),
                 part("cache.put_many", "    of which cache writes (SQLite)"),
                 part("edge.upsert", "  Edge upsert (points with payload, dense + sparse)"),
                 part("edge.set_payload", "  Edge set_payload (closing old versions)"),
                 part("edge.flush+checkpoint", "  Edge flush + checkpoint file"),
                 ["  the rest of commit (points, lists, tolist)", None, None, rnd(rest, 2),
                  rnd(rest * 1e6 / cu["embedded"], 1) if cu["embedded"] else None, rnd(rest / cw, 3)],
                 ["neither staging nor committing (delivery, waits, start)", None, None,
                  rnd(cw - stage_s - commit_s, 2), rnd((cw - stage_s - commit_s) * 1e6 / cu["embedded"], 1),
                  rnd((cw - stage_s - commit_s) / cw, 3)]])  # fmt: skip
    print(
        f"The model was busy {model_s / cw:.0%} of the catch-up's wall time, at {rnd(ratio(model_rate, raw_mean), 3)}"
        f" of its raw speed. {cu['commits']} commits of {cu['texts_per_commit']} texts on average; the first began "
        f"{cu['first_commit_at_s']} s after start, {cu['between_commits_s']} s passed between commits, "
        f"{cu['after_last_commit_s']} s after the last one; the DuckDB follower had folded the log after "
        f"{cu['rows_follower_done_s']} s. CPU cores used: bench process {cu['cpu_cores'].get('bench')}, nats-server "
        f"{cu['cpu_cores'].get('nats')}, other processes {cu['others_cores']}."
    )

    targets: dict[str, dict[str, Any]] = {
        "embedding_catchup_vs_raw": {"ratio": rnd(ratio_, 3), "target": f">= {RATIO_TARGET}", "pass": ratio_ok},
    }
    lj = latency_json(lat)
    for m in MODES:
        s = lj["nats_cold"][m]
        targets[f"{m}_p95"] = {
            "p95_ms": s["p95_ms"],
            "target_ms": P95_TARGET_MS,
            "seed_ms": P95_SEED_MS,
            "pass": s["p95_ms"] is not None and s["failures"] == 0 and s["p95_ms"] < P95_TARGET_MS,
            "pass_seed": s["p95_ms"] is not None and s["failures"] == 0 and s["p95_ms"] < P95_SEED_MS,
        }
    parts_table(lj)
    print_table(
        f"(3) Search latency at {cfg.target:,} memories in {TARGET_NS} ({cfg.total:,} points), limit 10, "
        f"a payload filter on every query (ms); other processes used {lat['others_cores']} cores meanwhile",
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

    for p in problems:
        print(f"PROBLEM: {p}")
    targets["checks"] = {"pass": not problems, "problems": problems}
    notes = []
    spread = ratio(abs(raw_before["per_s"] - raw_after["per_s"]), raw_mean)
    if spread is not None and spread > 0.15:
        notes.append(f"the two raw-rate runs differ by {spread:.0%}: the ratio is no better than that")
    for what, cores in (
        ("the raw runs", max(raw_before["others_cores"] or 0, raw_after["others_cores"] or 0)),
        ("the catch-up", cu["others_cores"] or 0),
        ("the latency rounds", lat["others_cores"] or 0),
    ):
        if cores > 0.25:
            notes.append(f"other processes used {cores:.2f} cores during {what} (contended)")
    if cu.get("projector_nats_reconnects"):
        notes.append(
            f"the projector's NATS connection was re-established {cu['projector_nats_reconnects']} time(s) "
            "during the catch-up (see nats-server.log with --keep: slow consumer, max_pending)"
        )
    for n in notes:
        print(f"NOTE: {n}")
    seeds = ", ".join(f"{m} {verdict(targets[f'{m}_p95']['pass_seed'])}" for m in MODES)
    print("\nTargets: " + ", ".join(f"{k} {verdict(v['pass'])}" for k, v in targets.items()))
    print(f"Seed targets (p95 < {P95_SEED_MS:.0f} ms): {seeds}")
    print(f"wall time {wall:.1f} s")
    result = {
        "bench": "search",
        "mode": mode,
        "machine": machine,
        "config": dataclasses.asdict(cfg),
        "settings": {
            "model": ps.embedding_model,
            "model_id": MODELS[ps.embedding_model].id,
            "embedding_threads": ps.embedding_threads,
            "vector_batch_max": ps.vector_batch_max,
            "batch_max": ps.batch_max,
            "linger_s": ps.linger,
            "embed_batch": 64,
        },
        "corpus": corpus_info,
        "raw_model": {"before": raw_before, "after": raw_after, "mean_per_s": rnd(raw_mean, 1)},
        "catchup": {
            **cu,
            "ratio_to_raw": rnd(ratio_, 3),
            "model_alone_per_s": rnd(model_rate, 1),
            "model_busy_share": rnd(model_s / cw, 3),
        },
        "latency": lj,
        "optimized": optimized,
        "targets": targets,
        "notes": notes,
    }
    return result, problems
