"""Where the target's memory goes, sampled beside RSS: /proc/PID/smaps_rollup of every process (resident,
anonymous, file-backed) and the on-disk size of each part of the data directories (the DuckDB files and their
WALs, the vector shard, the embedding cache, JetStream's store), with the projection's memory count and log head
at each sample; the figures per mark and the growth per 1,000 events of the log."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from bench.common import rnd

# /proc/PID/smaps_rollup fields kept (kB -> MB); file-backed = Rss - Anonymous (mapped files and shared memory)
SMAPS = ("Rss", "Anonymous", "Pss_File", "Pss_Shmem", "Private_Dirty")


def smaps(pid: int) -> dict[str, float] | None:
    """Resident, anonymous and file-backed MB of a process (None if it is gone or /proc hides it)."""
    got: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in SMAPS:
                    got[key] = int(rest.split()[0]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    if "Rss" not in got:
        return None
    out = {"rss": got["Rss"], "anon": got.get("Anonymous", 0.0), "file": got["Rss"] - got.get("Anonymous", 0.0)}
    out["pss_file"] = got.get("Pss_File", 0.0)
    out["private_dirty"] = got.get("Private_Dirty", 0.0)
    return {k: round(v, 1) for k, v in out.items()}


def part_of(rel: Path) -> str:
    """The part of a data directory a file belongs to: a vector shard, JetStream's store and the snapshots are
    one part each (the directory); every other file is its own (a DuckDB file and its WAL are two)."""
    parts = rel.parts
    for i, p in enumerate(parts):
        if p.startswith("vectors-") and i < len(parts) - 1:
            return "/".join(parts[: i + 1]) + "/"
    if parts[0] in ("nats", "snapshots") and len(parts) > 1:
        return parts[0] + "/"
    return str(rel)


def disk_parts(data: Path) -> dict[str, float]:
    """MB on disk (allocated blocks, as `du`) of each part of a data directory."""
    out: dict[str, float] = {}
    for dirpath, _, files in os.walk(data):
        for name in files:
            path = Path(dirpath) / name
            try:
                size = path.stat().st_blocks * 512  # allocated, not apparent: the vector shard preallocates
            except OSError:  # removed meanwhile (a WAL checkpointed, a temporary file)
                continue
            key = part_of(path.relative_to(data))
            out[key] = out.get(key, 0.0) + size / 2**20
    return {k: round(v, 2) for k, v in sorted(out.items())}


def detail(processes: dict[str, int], data_dirs: dict[str, Path]) -> dict[str, Any]:
    """smaps_rollup of every process and the on-disk parts of every data directory."""
    procs = {name: s for name, pid in processes.items() if (s := smaps(pid)) is not None}
    disk = {name: disk_parts(d) for name, d in data_dirs.items() if d.exists()}
    return {"procs": procs, "disk": disk}


def signal_roots(roots: dict[str, int], sig: int = signal.SIGUSR1) -> None:
    """Send `sig` to each started process (opt-in: a diagnostic build dumps its object counts on SIGUSR1; an
    unpatched one would die of it)."""
    for pid in roots.values():
        try:
            os.kill(pid, sig)
        except OSError:
            pass


# -- figures ------------------------------------------------------------------------------------------------


def at(lag: list[dict[str, Any]], t: float, key: str) -> Any:
    """The value of `key` in the status sample nearest to time `t` (None without samples)."""
    got = [x for x in lag if x.get(key) is not None]
    if not got:
        return None
    return min(got, key=lambda x: abs(x["t"] - t))[key]


def memory_figures(marks: dict[str, dict[str, Any]], series: list[dict[str, Any]]) -> dict[str, Any]:
    """Per mark (start, middle, end): time, memories, log head, each process's rss/anon/file, each data part's
    MB; and between start and end (and middle and end) the growth of each per 1,000 events of the log."""
    names = [n for n in ("start", "third1", "middle", "third2", "end") if n in marks]
    out: dict[str, Any] = {"marks": {n: marks[n] for n in names}, "series": series}
    growth: dict[str, Any] = {}
    for a, b in (("start", "end"), ("middle", "end")):
        if a not in marks or b not in marks:
            continue
        ma, mb = marks[a], marks[b]
        events = (mb.get("log_head") or 0) - (ma.get("log_head") or 0)
        per = 1000 / events if events > 0 else None
        row: dict[str, Any] = {
            "seconds": rnd(mb["t"] - ma["t"]),
            "events": events,
            "memories": (mb.get("memories") or 0) - (ma.get("memories") or 0),
        }
        for proc, s in mb["procs"].items():
            s0 = ma["procs"].get(proc)
            if s0:
                row[proc] = {k: _per(s[k] - s0[k], per) for k in ("rss", "anon", "file")}
        for dname, parts in mb["disk"].items():
            p0 = ma["disk"].get(dname, {})
            row[f"disk {dname}"] = {k: _per(v - p0.get(k, 0.0), per) for k, v in parts.items()}
        growth[f"{a}_to_{b}"] = row
    out["growth"] = growth
    return out


def _per(delta: float, per: float | None) -> dict[str, float | None]:
    return {"mb": rnd(delta, 1), "mb_per_1000_events": rnd(delta * per, 2) if per is not None else None}


def report_rows(mem: dict[str, Any], proc: str) -> tuple[list[str], list[list[Any]]]:
    """A table of one process's memory and its data directory's parts per mark (for the printed report)."""
    marks = mem["marks"]
    parts: list[str] = sorted({p for m in marks.values() for d in m["disk"].values() for p in d})
    headers = ["mark", "s", "memories", "log head", "rss", "anon", "file", *parts]
    rows = []
    for name, m in marks.items():
        s = m["procs"].get(proc, {})
        disk = {p: v for d in m["disk"].values() for p, v in d.items()}
        rows.append(
            [name, rnd(m["t"]), m.get("memories"), m.get("log_head"), s.get("rss"), s.get("anon"), s.get("file")]
            + [disk.get(p) for p in parts]
        )
    return headers, rows
