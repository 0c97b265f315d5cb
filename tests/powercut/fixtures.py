"""pytest fixtures for the power-cut filesystem, and the check that decides whether it can run here.

Register them in a conftest (tests/conftest.py) with

    from tests.powercut.fixtures import powercut_fs, powercut_fs_posix  # noqa: F401 - fixtures

It needs Linux, /dev/fuse usable, the mfusepy package (the `test` extra) and libfuse 3 (Debian: fuse3, which
brings libfuse3-3 and fusermount3). As root, with apt-get, a missing libfuse 3 is installed once per run
(`apt-get install -y fuse3`; set MNEME_POWERCUT_APT=0 to skip instead). Otherwise the tests skip, saying why.
"""

from __future__ import annotations

import ctypes.util
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.powercut.control import PowerCutFS


def _libfuse3() -> bool:
    return ctypes.util.find_library("fuse3") is not None


def _apt_install_fuse3() -> str | None:
    """Install Debian's fuse3 (as root, where apt-get exists); None on success, else why not."""
    if os.environ.get("MNEME_POWERCUT_APT", "1") == "0":
        return "MNEME_POWERCUT_APT=0"
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "not root with apt-get"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "fuse3"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        if r.returncode != 0:  # an old or missing package list: update it once and try again
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, timeout=300, env=env)
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"apt-get failed: {exc}"
    if r.returncode != 0:
        return f"apt-get install fuse3 failed: {(r.stderr or r.stdout).strip()[-300:]}"
    return None


@functools.cache
def unavailable() -> str | None:
    """Why the power-cut filesystem cannot run here, or None when it can."""
    if not sys.platform.startswith("linux"):
        return "the power-cut filesystem needs Linux FUSE"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine"
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError as exc:
        return f"/dev/fuse is not usable here: {exc}"
    if not _libfuse3():
        why = _apt_install_fuse3()
        if why is not None or not _libfuse3():
            return f"libfuse 3 is missing (Debian: apt-get install fuse3) and was not installed: {why}"
    if os.geteuid() != 0 and shutil.which("fusermount3") is None:
        return "fusermount3 is missing (Debian: apt-get install fuse3), needed to mount as a user"
    try:
        import mfusepy  # type: ignore[import-untyped]  # noqa: F401 - loads libfuse
    except ImportError as exc:
        return f"the mfusepy package is missing (pip install -e '.[test]'): {exc}"
    except OSError as exc:  # (mfusepy raises EnvironmentError, an OSError, when libfuse will not load)
        return f"mfusepy cannot load libfuse: {exc}"
    return None


def require_powercut() -> None:
    reason = unavailable()
    if reason is not None:
        pytest.skip(f"power-cut filesystem unavailable: {reason}")


def _mounted(tmp_path: Path, names: str) -> Iterator[PowerCutFS]:
    require_powercut()
    fs = PowerCutFS(tmp_path / "powercut", names=names)
    fs.mount()
    try:
        yield fs
    finally:
        fs.close()


@pytest.fixture
def powercut_fs(tmp_path: Path) -> Iterator[PowerCutFS]:
    """A power-cut filesystem mounted at tmp_path/powercut (fs.path), ext4's name model; unmounted after."""
    yield from _mounted(tmp_path, "ext4")


@pytest.fixture
def powercut_fs_posix(tmp_path: Path) -> Iterator[PowerCutFS]:
    """The same with the strict name model: only fsync of a directory makes names in it durable."""
    yield from _mounted(tmp_path, "posix")


def mounted_machines(tmp_path: Path, n: int = 3) -> Iterator[list[PowerCutFS]]:
    """`n` power-cut filesystems (ext4's name model), one per machine of a cluster (tests/powercut/cluster.py),
    at tmp_path/machine0..; unmounted after. Skips where FUSE cannot be had. For a test module's own fixture:
    `yield from mounted_machines(tmp_path)` (tests/test_powercut_cluster.py)."""
    require_powercut()
    mounts: list[PowerCutFS] = []
    try:
        for i in range(n):
            mounts.append(PowerCutFS(tmp_path / f"machine{i}", names="ext4").mount())
        yield mounts
    finally:
        for fs in mounts:
            fs.close()
