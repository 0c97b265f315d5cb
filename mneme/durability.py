"""When JetStream syncs the log to disk: before it acknowledges a write (the default), or on a timer.

nats-server's own default is a sync every two minutes while publishes are acknowledged at once: an OS crash
or a power cut then loses acknowledged writes, even on a single node (the Jepsen analysis of NATS 2.12.1,
nats-server issue #7564). mneme runs every nats-server it starts (the embedded one, every node of
`mneme cluster`, compose.yaml's through the generated accounts.conf) with `sync_interval: always`: each
write is fsynced before its acknowledgement. `MNEME_NATS_SYNC` set to a duration (e.g. `1s`, `2m`) trades
that back for throughput, with one warning line at start.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ALWAYS = "always"
_DURATION = re.compile(r"^[1-9][0-9]*(ms|s|m|h)$")


def check(value: str) -> str:
    """`always`, or a duration nats-server reads (`100ms`, `1s`, `2m`, `1h`); ValueError otherwise."""
    value = value.strip().lower()
    if value == ALWAYS or _DURATION.match(value):
        return value
    raise ValueError(f"{value!r}: use 'always' (sync before acknowledging) or a duration such as 1s or 2m")


def jetstream_block(sync: str) -> dict[str, Any]:
    """The nats-server configuration that sets it (merged with the command line's -js -sd)."""
    return {"jetstream": {"sync_interval": check(sync)}}


def write_config(path: Path, sync: str, extra: dict[str, Any] | None = None) -> Path:
    """A nats-server configuration file (JSON is valid nats-server syntax) with the sync setting and `extra`
    blocks (accounts); written mode 0600, since accounts carry passwords."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(json.dumps({**(extra or {}), **jetstream_block(sync)}, indent=1) + "\n")
    return path


def warning(sync: str) -> str | None:
    """The one line said at start when writes are acknowledged before they are on disk."""
    if check(sync) == ALWAYS:
        return None
    return (
        f"mneme: MNEME_NATS_SYNC={sync}: JetStream acknowledges writes before they are on disk; an OS crash or "
        f"a power cut can lose up to {sync} of acknowledged writes (set it to 'always' to sync before acknowledging)"
    )
