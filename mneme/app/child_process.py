"""A build's helper process (`python -m mneme.app.vector_build`): the settings its parent hands it, and its death
with the parent."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from typing import Any

from mneme.app.settings import CoreSettings


def settings_for_child(core: CoreSettings) -> dict[str, Any]:
    """`core` as JSON for a child's request line, the NATS password included: pydantic writes a SecretStr as
    `**********`, and a child connecting with that was refused by a server with users."""
    out: dict[str, Any] = core.model_dump(mode="json")
    if core.nats_password is not None:
        out["nats_password"] = core.nats_password.get_secret_value()
    return out


def die_with_parent(parent: int) -> None:
    """Killed when the parent dies: PR_SET_PDEATHSIG where the kernel has it, and stdin's end everywhere."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:  # (os.read, not sys.stdin: a daemon thread blocked in the buffered reader made every
        while os.read(0, 4096):  # child's exit print "Fatal Python error: _enter_buffered_busy")
            pass
        os._exit(1)  # the parent closed stdin or died: nothing waits for this child any more

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()
