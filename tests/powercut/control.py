"""The test side of the power-cut filesystem: mount it in a child process, cut, read its counters, unmount.

    with PowerCutFS(tmp_path / "mnt") as fs:
        ...  # run programs with their data under fs.path; SIGKILL every one of them
        lost = fs.cut()  # drop what was not synced; the mount comes back as after a reboot
        ...  # start them again on fs.path and check what survived

The filesystem runs in its own process (`python -m tests.powercut.fusefs`): a FUSE call from the test process
can then never wait on a FUSE handler that needs the test process's GIL or threads.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]  # the repository: `tests.powercut` imports from here


class PowerCutError(RuntimeError):
    pass


def is_mounted(path: str | os.PathLike[str]) -> bool:
    """From /proc/self/mountinfo (a stat of a dead FUSE mount fails, so os.path.ismount says False)."""
    target = os.path.realpath(path)
    try:
        with open("/proc/self/mountinfo") as f:
            return any(line.split()[4].replace("\\040", " ") == target for line in f)
    except OSError:
        return False


def _lazy_umount(path: Path) -> None:
    for cmd in (["fusermount3", "-uz", str(path)], ["umount", "-l", str(path)]):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0:
                return


class PowerCutFS:
    """A mounted power-cut filesystem. `names`: "ext4" (fsync of a file also makes its name durable) or "posix"
    (only fsync of the directory does); see tests/powercut/model.py."""

    def __init__(self, mountpoint: str | os.PathLike[str], *, names: str = "ext4", allow_other: bool | None = None,
                 debug: bool = False, timeout: float = 30.0) -> None:  # fmt: skip
        self.path = Path(mountpoint)
        self.names = names
        self.allow_other = os.geteuid() == 0 if allow_other is None else allow_other
        self.debug = debug
        self.timeout = timeout
        self.log_file = self.path.parent / f"{self.path.name}.powercut.log"
        self.proc: subprocess.Popen[str] | None = None
        self.pid: int | None = None
        self.conn: dict[str, int] = {}

    # -- life cycle
    def mount(self) -> PowerCutFS:
        if is_mounted(self.path):  # a stale mount left by a filesystem process that died
            _lazy_umount(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "tests.powercut.fusefs", str(self.path), "--names", self.names]
        if self.allow_other:
            args.append("--allow-other")
        if self.debug:
            args.append("--debug")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        env["FUSE_LIBRARY_NAME"] = "fuse3"  # mfusepy would take libfuse 2 first where both are installed
        with open(self.log_file, "a") as log:
            self.proc = subprocess.Popen(
                args, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                start_new_session=True,  # a test's killpg of its own children never reaches the filesystem
            )  # fmt: skip
        first = self._read(self.timeout)
        if not first.get("ok"):
            self._reap()
            raise PowerCutError(f"power-cut filesystem did not mount: {first.get('error')}; log:\n{self.log()}")
        self.pid = first.get("pid")
        self.conn = first.get("conn", {})
        return self

    def close(self) -> None:
        """Unmount and end the filesystem process (what was written is gone with it)."""
        p = self.proc
        if p is None:
            return
        if p.poll() is None:
            with contextlib.suppress(Exception):
                self._call("quit", timeout=self.timeout)
        self._reap()
        if is_mounted(self.path):  # the process died without unmounting: lazily, so the tree can go
            _lazy_umount(self.path)

    def __enter__(self) -> PowerCutFS:
        return self.mount()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- commands
    def cut(self) -> dict[str, int]:
        """The power cut: unmount, drop everything not synced (see model.py), mount again.

        Every process that wrote to the mount must be dead (SIGKILLed and reaped) and nothing may hold a file or
        a working directory under it. Returns what was dropped: lost_write_bytes (bytes written since their
        file's last sync), lost_files (files whose content reverted), lost_names (directory entries reverted)."""
        return self._call("cut")

    def sync(self) -> dict[str, Any]:
        """sync(1): make everything durable now (a baseline before the part under test)."""
        return self._call("sync")

    def remount(self) -> None:
        """Unmount and mount again, nothing lost: a clean reboot (drops the kernel's caches)."""
        self._call("remount")

    def stats(self) -> dict[str, Any]:
        """Counters: bytes (current) and durable_bytes, unsynced_write_bytes / unsynced_files / unsynced_names
        (what a cut would drop now), writes, write_bytes, fsyncs, fdatasyncs, fsyncdirs, synced_bytes, cuts and
        the lost_* totals of past cuts, open_handles."""
        return self._call("stats")

    def log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    # -- plumbing
    def _call(self, op: str, timeout: float | None = None, **kw: Any) -> dict[str, Any]:
        p = self.proc
        if p is None or p.poll() is not None or p.stdin is None:
            raise PowerCutError(f"power-cut filesystem is not running; log:\n{self.log()}")
        p.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        p.stdin.flush()
        res = self._read(timeout or self.timeout)
        if not res.pop("ok", False):
            raise PowerCutError(f"{op}: {res.get('error')}")
        return res

    def _read(self, timeout: float) -> dict[str, Any]:
        p = self.proc
        assert p is not None and p.stdout is not None
        out: IO[str] = p.stdout
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PowerCutError(f"no answer from the power-cut filesystem in {timeout} s; log:\n{self.log()}")
            ready, _, _ = select.select([out], [], [], min(left, 0.5))
            if ready:
                line = out.readline()
                if not line:
                    raise PowerCutError(f"the power-cut filesystem exited; log:\n{self.log()}")
                return dict(json.loads(line))
            if p.poll() is not None:
                raise PowerCutError(f"the power-cut filesystem exited ({p.returncode}); log:\n{self.log()}")

    def _reap(self) -> None:
        p = self.proc
        if p is None:
            return
        for stream in (p.stdin, p.stdout):
            with contextlib.suppress(Exception):
                if stream is not None:
                    stream.close()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        self.proc = None
