"""`mneme audit verify|export`: the trail file read-only, beside nothing that holds it.

The trail is opened read-only: a missing file is an error (nothing is created), and a trail a
running `mneme serve` or `mneme auditor` holds is refused with one line (DuckDB allows one
process per file; admins can ask the running server with the `audit_query` tool).
"""

from __future__ import annotations

import argparse
import json

import duckdb

from mneme.preflight import Refused, held_message, holder, parse_time
from mneme.settings import AuditorSettings, CoreSettings


def open_trail(core: CoreSettings, aus: AuditorSettings) -> duckdb.DuckDBPyConnection:
    path = core.data_dir / aus.db_name
    if not path.is_file():
        where = "data directory does not exist" if not core.data_dir.is_dir() else f"no {aus.db_name} in it"
        raise Refused(f"no audit trail at {path} ({where}): check --data-dir")
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        who = holder(exc)
        if who is None:
            raise Refused(f"cannot open the audit trail {path}: {exc}") from None
        raise Refused(held_message(path, who, core) + " (or ask it: the audit_query tool)") from None
    cols = {
        r[0]
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'audit_trail'"
        ).fetchall()
    }
    if "trail_seq" not in cols:
        con.close()
        raise Refused(f"{path} holds no audit trail of this version (start mneme serve or mneme auditor on it once)")
    return con


def audit(args: argparse.Namespace, core: CoreSettings, aus: AuditorSettings) -> int:
    from services.auditor.trail import verify_chain
    from services.auditor.trail_queries import export

    filters = {
        "since": parse_time(args.since, "--since"),
        "until": parse_time(args.until, "--until"),
        "agent_id": args.agent,
        "memory_id": args.memory,
        "action": args.action_prefix,
    }
    if args.action == "export":
        if args.out is None:
            raise Refused("audit export needs --out FILE")
        if not args.out.parent.is_dir():
            raise Refused(f"--out {args.out}: the directory {args.out.parent} does not exist")
    con = open_trail(core, aus)
    try:
        if args.action == "verify":
            checked, broken = verify_chain(con)
            print(json.dumps({"records": checked, "ok": broken is None, "first_broken_seq": broken}))
            return 0 if broken is None else 1
        try:
            n = export(con, args.out, args.format, filters)
        except (duckdb.IOException, OSError) as exc:
            raise Refused(f"--out {args.out}: {exc}") from None
        print(json.dumps({"records": n, "format": args.format, "path": str(args.out)}))
        return 0
    finally:
        con.close()
