"""bench.code's entry point: `python -m bench.code [--quick] [--files N] [--queries N] [--raw N] [--keep]`."""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp import ClientSession

import bench.code
from bench.code.corpus import Corpus, build, queries
from bench.common import CpuMeter, latency_summary, log, machine_info, percentile, print_table, rnd, rows, verdict
from bench.fixtures import run_dir
from bench.floors import raw_rate
from bench.runner import Bench, Size, mode_of
from bench.stdio import ToolFailed, call, mcp_session, noop_params, serve_child, serve_params, server_pids
from mneme.app.settings import ProjectorSettings
from mneme.embedding import OnnxEmbedder
from services.projector.code_view import FILL

TARGET_RATIO = 0.70
TARGET_P95_MS = 50.0
STATUS_TIMEOUT = 3600.0  # seconds of indexing after which a failing status call ends the run


async def model_ready(session: ClientSession, timeout: float = 180) -> float:
    """Until a search_code on the empty index answers (the server's model has loaded); the seconds it took."""
    t0 = time.perf_counter()
    while True:
        try:
            await call(session, "search_code", {"query": "warm up the model", "limit": 1})
            return time.perf_counter() - t0
        except ToolFailed:
            if time.perf_counter() - t0 > timeout:
                raise
            await asyncio.sleep(0.2)


async def index_run(session: ClientSession, corpus: Corpus, meter: CpuMeter) -> dict[str, Any]:
    """From index_project until get_index_status says completed; the status seen on the way."""
    meter.start()
    t0 = time.perf_counter()
    got = await call(session, "index_project", {"path": str(corpus.root)})
    answered = time.perf_counter() - t0
    project = got["project_id"]
    seen: list[tuple[float, float, float | None]] = []  # (seconds, percent, eta)
    errors: list[tuple[float, str]] = []  # status calls that failed ("... Please try again": so it is tried again)
    while True:
        try:
            s = await call(session, "get_index_status", {"project_id": project})
        except ToolFailed as exc:
            errors.append((time.perf_counter() - t0, str(exc)))
            if time.perf_counter() - t0 > STATUS_TIMEOUT:
                raise
            await asyncio.sleep(0.5)
            continue
        now = time.perf_counter() - t0
        seen.append((now, s["progress_percent"], s["eta_seconds"]))
        if s["status"] in ("completed", "failed"):
            break
        await asyncio.sleep(0.1)
    secs = time.perf_counter() - t0
    cpu = meter.stop()
    # how good the ETA was: at 25/50/75% of the run, the ETA shown against the time that was actually left
    eta = {}
    for frac in (0.25, 0.5, 0.75):
        at = next((x for x in seen if x[0] >= frac * secs and x[2] is not None), None)
        if at is not None and at[2] is not None:
            eta[f"at_{int(frac * 100)}pct"] = {"eta_s": rnd(at[2], 1), "actual_left_s": rnd(secs - at[0], 1)}
    return {
        "status": s["status"],
        "error": s.get("error"),
        "project_id": project,
        "index_project_answered_s": rnd(answered, 3),
        "index_project_files": got["files_indexed"],
        "index_project_chunks": got["chunks_created"],
        "seconds": rnd(secs, 2),
        "total_files": s["total_files"],
        "total_chunks": s["total_chunks"],
        "files_per_s": rnd(s["total_files"] / secs, 1),
        "chunks_per_s": rnd(s["total_chunks"] / secs, 1),
        "status_polls": len(seen),
        "status_errors": len(errors),
        "status_first_error": {"at_s": rnd(errors[0][0], 1), "message": errors[0][1]} if errors else None,
        "eta": eta,
        "cpu_seconds": {k: rnd(v, 2) for k, v in cpu.items()},
    }


async def search_rounds(
    mneme: ClientSession, noop: ClientSession, qs: list[tuple[str, str]]
) -> tuple[list[float], list[float], float]:
    """Each search_code paired with one no-op call (alternating which goes first); and the share of queries
    whose source file is among the 10 results."""
    for text, _ in qs[:10]:  # warm-up: connections and code paths (these texts are measured again below)
        await call(mneme, "search_code", {"query": f"warm {text}", "limit": 10})
        await call(noop, "noop", {"text": text})
    lat_s, lat_n, found = [], [], 0
    for k, (text, path) in enumerate(qs):
        for which in ("search", "noop") if k % 2 == 0 else ("noop", "search"):
            t = time.perf_counter()
            if which == "search":
                res = await call(mneme, "search_code", {"query": text, "limit": 10})
                lat_s.append(time.perf_counter() - t)
                found += any(r["file_path"] == path for r in res["results"])
            else:
                await call(noop, "noop", {"text": text})
                lat_n.append(time.perf_counter() - t)
    return lat_s, lat_n, found / len(qs)


def filler_order_rate(onnx: OnnxEmbedder, texts: list[str], n: int) -> dict[str, Any]:
    """The model on `n` consecutive chunk texts (file order), one call per FILL (256): what the filler asks of it."""
    start = len(texts) // 3
    part = texts[start : start + n]
    t = time.perf_counter()
    for i in range(0, len(part), FILL):
        onnx.embed(part[i : i + FILL])
    secs = time.perf_counter() - t
    return {"texts": len(part), "seconds": rnd(secs, 3), "per_s": rnd(len(part) / secs, 1)}


@dataclass(frozen=True)
class Config:
    files: int | None  # a seeded sample of this many files (None: all)
    queries: int  # search_code queries
    raw: int  # chunk texts per raw-rate floor run

    @staticmethod
    def full() -> Config:
        return Config(files=None, queries=200, raw=2000)

    @staticmethod
    def quick() -> Config:
        return Config(files=100, queries=100, raw=800)


BENCH = Bench(
    "code",
    bench.code.__doc__,
    quick="a sample of 100 stdlib files",
    sizes={
        "files": Size("--files", int, "a seeded sample of N files (default: all; quick 100)"),
        "queries": Size("--queries", int, "search_code queries (default 200; quick 100)"),
        "raw": Size("--raw", int, "chunk texts per raw-rate floor run (default 2,000; quick 800)"),
    },
    wall=True,
    problems_key=True,
)


@dataclass
class Served:
    """What the server did: its model's load, the indexing, the searches beside the no-op tool."""

    loaded: float
    idx: dict[str, Any]
    lat_s: list[float]
    lat_n: list[float]
    found: float


def index_problems(idx: dict[str, Any], corpus: Corpus) -> list[str]:
    problems = []
    if idx["status"] != "completed":
        problems.append(f"indexing ended {idx['status']}: {idx['error']}")
    if idx["total_files"] != len(corpus.files):
        problems.append(f"the server indexed {idx['total_files']} files, the scan here {len(corpus.files)}")
    if idx["total_chunks"] != len(corpus.texts):  # every chunk, pieces of one long line too (since cb5f52b)
        problems.append(f"the server holds {idx['total_chunks']} chunks, the Chunker here {len(corpus.texts)}")
    return problems


async def serve(tmp: Path, corpus: Corpus, n_queries: int, problems: list[str]) -> Served:
    """`mneme serve` (memory-mcp) beside the no-op server: its model loaded, the corpus indexed, then searched."""
    errlog = open(tmp / "servers-stderr.log", "w")  # noqa: SIM115 - closed by the exit stack
    async with AsyncExitStack() as stack:
        stack.callback(errlog.close)
        noop = await stack.enter_async_context(mcp_session(noop_params(), errlog))
        mneme = await stack.enter_async_context(mcp_session(serve_params(tmp / "serve", "memory-mcp"), errlog))
        pids = server_pids(serve_child(tmp / "serve"), bench=os.getpid())
        loaded = await model_ready(mneme)
        log(f"(2) the server's model answered after {loaded:.1f} s; indexing {corpus.root}")
        idx = await index_run(mneme, corpus, CpuMeter(pids))
        log(f"    {idx['status']} in {idx['seconds']:.1f} s: {idx['files_per_s']} files/s, "
            f"{idx['chunks_per_s']} chunks/s")  # fmt: skip
        if idx["status_errors"]:
            log(f"    get_index_status failed {idx['status_errors']} times: {idx['status_first_error']}")
        problems += index_problems(idx, corpus)
        qs = queries(corpus, n_queries, 13)
        log(f"(3) search_code: {len(qs)} queries, each beside a no-op call")
        lat_s, lat_n, found = await search_rounds(mneme, noop, qs)
    return Served(loaded, idx, lat_s, lat_n, found)


def cpu_per_text(raw: tuple[dict[str, Any], dict[str, Any]], idx: dict[str, Any]) -> dict[str, Any]:
    """CPU per text, which other work on a shared machine moves less than wall-clock rates: the model's own in
    the floor runs against the server's (its model, fold, gateway and MCP) per chunk while it indexed."""
    raw_cpu_ms = [r["cpu_cores_used"] * r["seconds"] / r["texts"] * 1000 for r in raw]
    server_cpu_ms = idx["cpu_seconds"].get("server", 0) / max(1, idx["total_chunks"]) * 1000
    return {
        "raw_model_ms_per_text": rnd(sum(raw_cpu_ms) / 2, 2),
        "server_ms_per_chunk": rnd(server_cpu_ms, 2),
        "raw_vs_server": rnd(sum(raw_cpu_ms) / 2 / server_cpu_ms, 3) if server_cpu_ms else None,
    }


def tables(corpus: Corpus, sv: Served, figures: dict[str, Any]) -> None:
    idx, search, noop_s, ratio = sv.idx, figures["search_code"], figures["noop"], figures["targets"]["chunks_vs_raw"]
    print_table(
        f"Indexing {len(corpus.files)} stdlib files ({corpus.bytes / 1e6:.1f} MB, {idx['total_chunks']:,} chunks)",
        ["figure", "value", "target", "verdict"],
        [
            ["seconds, index_project -> completed", idx["seconds"], "", ""],
            ["files/s", idx["files_per_s"], "", ""],
            ["chunks/s", idx["chunks_per_s"], "", ""],
            ["raw model rate, texts/s (mean of 2)", figures["raw_per_s"], "", ""],
            ["chunks/s / raw model rate", ratio["ratio"], f">= {TARGET_RATIO}", verdict(ratio["pass"])],
            ["CPU ms per text: raw model / server per chunk", figures["cpu_per_text"]["raw_vs_server"], "", ""],
        ],
    )  # fmt: skip
    print_table(
        "search_code over stdio (limit 10) beside the no-op tool",
        ["series", "n", "p50 ms", "p95 ms", "p99 ms", "target", "verdict"],
        [
            [*rows([("search_code", search)], "n", "p50_ms", "p95_ms", "p99_ms")[0], "p95 < 50",
             verdict(figures["targets"]["search_code_p95"]["pass"])],
            [*rows([("no-op tool", noop_s)], "n", "p50_ms", "p95_ms", "p99_ms")[0], "", ""],
        ],
    )  # fmt: skip


def corpus_figures(corpus: Corpus, chunk_s: float) -> dict[str, Any]:
    return {
        "source": "stdlib Lib (.py; tests, idlelib, tkinter, turtledemo, lib2to3, ensurepip left out)",
        "files": len(corpus.files),
        "bytes": corpus.bytes,
        "chunks": len(corpus.texts),
        "chunk_line_ranges": corpus.line_ranges,  # distinct (file, start, end): fewer than chunks on long lines
        "chunk_chars_mean": rnd(sum(map(len, corpus.texts)) / max(1, len(corpus.texts)), 0),
        "scan_skipped": corpus.skipped,
        "chunked_here_s": rnd(chunk_s, 2),
    }


def figures(raw: tuple[dict[str, Any], dict[str, Any]], sv: Served) -> dict[str, Any]:
    """The headline figures: indexing against the raw model, search_code against the no-op tool."""
    raw_mean = (raw[0]["per_s"] + raw[1]["per_s"]) / 2
    ratio = sv.idx["chunks_per_s"] / raw_mean if raw_mean else None
    search = {**latency_summary(sv.lat_s, (50, 90, 95, 99)), "source_file_in_top10": rnd(sv.found, 3)}
    noop_s = latency_summary(sv.lat_n, (50, 90, 95, 99))
    targets = {
        "chunks_vs_raw": {"ratio": rnd(ratio, 3), "target": f">= {TARGET_RATIO}",
                          "pass": ratio is not None and ratio >= TARGET_RATIO},
        "search_code_p95": {"p95_ms": search["p95_ms"], "target": f"< {TARGET_P95_MS:.0f}",
                            "pass": percentile(sv.lat_s, 95) * 1000 < TARGET_P95_MS},
    }  # fmt: skip
    return {"targets": targets, "raw_per_s": rnd(raw_mean, 1), "cpu_per_text": cpu_per_text(raw, sv.idx),
            "search_code": search, "noop": noop_s}  # fmt: skip


async def amain(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    cfg = BENCH.config(args, Config.quick, Config.full)
    machine = machine_info()
    ps = ProjectorSettings()
    problems: list[str] = []
    async with run_dir("code", args.keep) as tmp:
        t = time.perf_counter()
        corpus = await asyncio.to_thread(build, tmp / "lib", 7, cfg.files)
        chunk_s = time.perf_counter() - t
        log(f"{len(corpus.files)} files, {corpus.bytes / 1e6:.1f} MB, {len(corpus.texts):,} chunks (chunked here in "
            f"{chunk_s:.1f} s)")  # fmt: skip
        onnx = OnnxEmbedder(ps.embedding_model, threads=ps.embedding_threads)
        sample = random.Random(11).sample(corpus.texts, min(cfg.raw, len(corpus.texts)))
        onnx.embed(sample[:64])  # warm up
        raw_before = await raw_model(onnx, sample, "(1) raw model rate on {n} chunk texts (before)")
        sv = await serve(tmp, corpus, cfg.queries, problems)
        raw_after = await raw_model(onnx, sample, "(1) raw model rate again (after)")
        log("(1') diagnostic: the same model on consecutive chunks, 256 per call (as CodeView's filler takes them)")
        in_order = await asyncio.to_thread(filler_order_rate, onnx, corpus.texts, len(sample))
        log(f"    {in_order['per_s']:.1f} texts/s")
    fig = figures((raw_before, raw_after), sv)
    tables(corpus, sv, fig)
    result = {
        "mode": mode_of(args),
        "targets": fig["targets"],
        "corpus": corpus_figures(corpus, chunk_s),
        "model": {"id": ps.embedding_model, "threads": ps.embedding_threads, "server_ready_s": rnd(sv.loaded, 2)},
        "raw_before": raw_before,
        "raw_after": raw_after,
        "raw_per_s": fig["raw_per_s"],
        "raw_filler_order": in_order,  # diagnostic: no sorting by length across the whole sample
        "index": sv.idx,
        "cpu_per_text": fig["cpu_per_text"],
        "search_code": fig["search_code"],
        "noop": fig["noop"],
        "search_vs_noop_p50_ms": rnd((fig["search_code"]["p50_ms"] or 0) - (fig["noop"]["p50_ms"] or 0), 3),
        "machine": machine,
    }
    return result, problems


async def raw_model(onnx: OnnxEmbedder, sample: list[str], what: str) -> dict[str, Any]:
    log(what.format(n=len(sample)))
    got = await asyncio.to_thread(raw_rate, onnx, sample)
    log(f"    {got['per_s']:.1f} texts/s")
    return got


def main(argv: list[str] | None = None) -> None:
    BENCH.main(amain, argv)


if __name__ == "__main__":
    main()
