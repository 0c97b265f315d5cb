"""A copy of an audit trail that a running process holds, fetched through its auditor.

DuckDB allows one process per file, even read-only: while `mneme serve` (or `mneme auditor`) runs, its trail
cannot be opened by `mneme audit verify|export`. Its auditor answers the control plane's `trail` requests
(services/auditor/service.py) instead: pages of the records with their hashes, oldest first, up to the last
record committed when the first page was asked. They are written into a DuckDB file of this command's own, of
the trail's very schema, on which `verify` walks the chain and `export` writes its file with the same code as
on a trail at rest: one chain logic, and the serve's process never writes a file where the operator asked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import msgspec
import nats.errors

from mneme.app.preflight import Refused
from mneme.app.settings import CoreSettings
from schemas import control
from schemas import subjects as S
from schemas.control import TrailReply, TrailRequest
from services.auditor.trail import SCHEMA

PAGE = 5000  # records asked per request (the auditor sends fewer when they would not fit one NATS message)
PAGE_TIMEOUT_S = 60.0


async def fetch_trail(
    core: CoreSettings, url: str, dest: Path, filters: dict[str, Any], *, held: str
) -> tuple[duckdb.DuckDBPyConnection, int]:
    """The records (matching `filters`: agent_id, memory_id, action, since, until) of the trail the auditor of
    `core.data_dir` holds, reached at `url`, in a new DuckDB file `dest`; and how many. `held`: what the
    refusal says when no auditor answers (the file is held, by whom)."""
    from mneme.app.compose import control_id, nats_connection

    con = duckdb.connect(str(dest))
    con.execute(SCHEMA)
    subject = S.control_subject(control_id(core), "trail")
    after = upto = n = 0
    try:
        async with nats_connection(core.model_copy(update={"nats_url": url}), "mneme-audit", False) as nc:
            while True:
                req = TrailRequest(after=after, upto=upto, limit=PAGE, **filters)
                try:
                    msg = await nc.request(subject, control.encode(req), timeout=PAGE_TIMEOUT_S)
                except nats.errors.NoRespondersError:
                    raise Refused(f"{held}, and no auditor answers for {core.data_dir} at {url}") from None
                except nats.errors.TimeoutError:
                    raise Refused(
                        f"the auditor holding the trail of {core.data_dir} did not answer within {PAGE_TIMEOUT_S:g} s"
                    ) from None
                reply = control.decode_as(msg.data, TrailReply)
                if not reply.ok:
                    raise Refused(f"the auditor holding the trail of {core.data_dir} could not read it: {reply.error}")
                upto = upto or reply.head
                if not reply.records:
                    break
                appender = con.appender("audit_trail")
                appender.append_rows([msgspec.structs.astuple(r) for r in reply.records])
                appender.flush()
                n += len(reply.records)
                after = reply.records[-1].trail_seq
                if after >= upto:
                    break
    except BaseException:
        con.close()
        raise
    return con, n
