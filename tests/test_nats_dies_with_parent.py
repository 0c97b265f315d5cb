"""The embedded nats-server dies with the process that started it, even one killed with SIGKILL (no
cleanup ran): PR_SET_PDEATHSIG, set between fork and exec with one C call resolved in the parent (no dlopen
in the child, where another thread's lock held at the fork would block it for ever)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

STARTER = textwrap.dedent(
    """
    import asyncio, sys, threading
    from pathlib import Path
    from mneme.embedded_nats import EmbeddedNats

    def busy():  # threads that allocate while the server is forked, as a serve's embedder does
        while True:
            bytearray(1 << 16)

    async def main():
        for _ in range(4):
            threading.Thread(target=busy, daemon=True).start()
        server = EmbeddedNats(Path(sys.argv[1]))
        await server.start()
        print(server.proc.pid, flush=True)
        await asyncio.sleep(120)

    asyncio.run(main())
    """
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead for this purpose
        return f.read().split(") ", 1)[1][0] != "Z"


def test_the_nats_child_dies_when_its_parent_is_killed(tmp_path: Path) -> None:
    starter = subprocess.Popen([sys.executable, "-c", STARTER, str(tmp_path / "nats")], stdout=subprocess.PIPE)
    try:
        assert starter.stdout is not None
        child = int(starter.stdout.readline())
        assert alive(child)
        starter.send_signal(signal.SIGKILL)
        starter.wait(10)
        deadline = time.monotonic() + 15
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child), "nats-server outlived the process that started it"
    finally:
        if starter.poll() is None:
            starter.kill()
