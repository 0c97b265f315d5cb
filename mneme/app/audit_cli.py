"""`mneme audit verify|export`: the trail, read-only; `mneme audit reads|reread`: the debugger's view, asked of
the running mneme.

The trail file is opened read-only: a missing file is an error (nothing is created). While a running `mneme
serve` or `mneme auditor` holds it (DuckDB allows one process per file, even read-only), the records are
fetched through that process's auditor instead, over its NATS (the serve's, found under the data directory, or
`--nats-url`), into a copy of this command's own, and verified or exported by the same code
(mneme/app/trail_copy.py); the output says `"live": true`.

`reads` lists recorded reads (of `--agent`, between `--since` and `--until`) and `reread N` asks read N
again as of the log position it was answered at (services/gateway/reread.py): both need the running
system (its auditor, a projector and the access stream), through `--nats-url` or the `mneme serve` running
on `--data-dir`, and act as the operator (every namespace). `reread` exits 0 on a match, 1 on a mismatch,
3 when the read cannot be asked again.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import duckdb

from mneme.app.preflight import Refused, holder, parse_time, serve_url
from mneme.app.settings import AuditorSettings, CoreSettings

NOT_RERUNNABLE = 3  # `mneme audit reread`: the read cannot be asked again (0: the same answer, 1: another one)


class TrailHeld(Refused):
    """The trail file is held by a running process."""


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
        raise TrailHeld(f"{path} is held by a running mneme process ({who})") from None
    con.execute("SET TimeZone = 'UTC'")  # (times read as the auditor chained them, whatever this machine's zone)
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
    from services.auditor.trail import lost_from_log, verify_chain
    from services.auditor.trail_queries import export

    if args.action in ("reads", "reread"):
        return debug(args, core)
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
    with contextlib.ExitStack() as stack:
        con, live = _trail(stack, core, aus, filters if args.action == "export" else {})
        stack.callback(con.close)
        shown = {"live": True} if live else {}
        if args.action == "verify":
            checked, broken = verify_chain(con)
            # records kept as evidence of events the log lost (services/auditor/realign.py): the chain holds
            lost = lost_from_log(con)
            first = min((x["first_record"] for x in lost), default=None)  # each source's realignment is noted apart
            gone = {"first_lost_record": first, "lost_from_log": lost} if lost else {}
            for x in lost:
                print(f"trail records #{x['first_record']}..#{x['last_record']} hold events the log no longer has "
                      f"(noted in record #{x['noted_in_record']} at {x['noted_at']})", file=sys.stderr)  # fmt: skip
            print(json.dumps({"records": checked, "ok": broken is None, "first_broken_seq": broken} | gone | shown))
            return 0 if broken is None else 1
        try:
            n = export(con, args.out, args.format, filters)
        except (duckdb.IOException, OSError) as exc:
            raise Refused(f"--out {args.out}: {exc}") from None
        print(json.dumps({"records": n, "format": args.format, "path": str(args.out)} | shown))
        return 0


def _trail(
    stack: contextlib.ExitStack, core: CoreSettings, aus: AuditorSettings, filters: dict[str, Any]
) -> tuple[duckdb.DuckDBPyConnection, bool]:
    """The trail file, read-only; or, while a running process holds it, a copy of its records (those matching
    `filters`) fetched through that process's auditor (True: live)."""
    try:
        return open_trail(core, aus), False
    except TrailHeld as held:
        url = core.nats_url or serve_url(core)
        if url is None:
            raise Refused(
                f"{held}: DuckDB allows one process per file; give --nats-url to ask its auditor, or stop it"
            ) from None
        from mneme.app.trail_copy import fetch_trail

        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mneme-trail-")))
        con, _ = asyncio.run(fetch_trail(core, url, tmp / aus.db_name, filters, held=str(held)))
        return con, True


def debug(args: argparse.Namespace, core: CoreSettings) -> int:
    """`reads` and `reread`, asked of the running mneme over NATS."""
    if args.action == "reread" and args.record is None:
        raise Refused("audit reread needs the read's trail_seq (mneme audit reads lists them)")
    if args.action == "reads" and not (1 <= args.limit <= 1000 and args.offset >= 0):
        raise Refused("--limit is 1 to 1000 and --offset 0 or more")
    since, until = parse_time(args.since, "--since"), parse_time(args.until, "--until")
    if core.nats_url is None and serve_url(core) is None:
        raise Refused(
            f"audit {args.action} asks the running mneme (its auditor and a projector): no mneme serve runs on "
            f"{core.data_dir}; start one, or give --nats-url"
        )
    out = asyncio.run(_ask(args, core, since, until))
    if args.json:
        print(out.model_dump_json(exclude_none=True))
    elif args.action == "reads":
        print(format_reads(out))
    else:
        print(format_reread(out))
    if args.action == "reads" or out.match:
        return 0
    return NOT_RERUNNABLE if out.match is None else 1


async def _ask(args: argparse.Namespace, core: CoreSettings, since: Any, until: Any) -> Any:
    from datetime import UTC, datetime

    from mneme.app.compose import nats_connection
    from services.gateway.queries import QueryClient
    from services.gateway.reread import find_reads, reread

    async with nats_connection(core, "mneme-audit", "attach") as nc:
        queries, js, now = QueryClient(nc), nc.jetstream(), datetime.now(UTC)
        if args.action == "reads":
            return await find_reads(queries, js, namespace="*", namespaces=("*",), now=now, agent_id=args.agent,
                                    since=since, until=until, limit=args.limit, offset=args.offset)  # fmt: skip
        return await reread(queries, js, trail_seq=args.record, namespace="*", namespaces=("*",), now=now,
                            can_read=lambda ns: True)  # fmt: skip


def _short(value: Any, width: int) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _args(arguments: dict[str, Any] | None) -> str:
    if arguments is None:
        return "(no query kept: cannot be re-run)"
    shown = {k: v for k, v in arguments.items() if k not in ("namespace", "now", "min_seq")}
    return " ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in shown.items()) or "(defaults)"


def format_reads(page: Any) -> str:
    """One line per read: trail_seq, time, agent, tool, log position, results, the query's arguments."""
    lines = [f"{page.total} read(s){'' if not page.has_more else ' (more: --offset)'}"]
    lines.append(f"{'trail':>6}  {'at':<20}  {'agent':<12}  {'operation':<14}  {'seq':>6}  {'ids':>4}  arguments")
    for r in page.results:
        at = r.at.strftime("%Y-%m-%dT%H:%M:%SZ")
        seq = "-" if r.seq is None else str(r.seq)
        lines.append(
            f"{r.trail_seq:>6}  {at:<20}  {_short(r.agent_id, 12):<12}  {_short(r.operation, 14):<14}  {seq:>6}  "
            f"{len(r.memory_ids):>4}  {_short(_args(r.arguments), 100)}"
        )
    return "\n".join(lines)


def format_reread(x: Any) -> str:
    """The read, the re-run's position, each result beside what was recorded, the verdict and the differences."""
    r = x.read
    lines = [
        f"read {r.trail_seq}: {r.operation} by {r.agent_id} ({r.role}) in {r.namespace} at "
        f"{r.at.strftime('%Y-%m-%dT%H:%M:%S.%fZ')} (request {r.request_id})",
        f"asked: {_args(r.arguments)}",
    ]
    where = f"as of log position {x.as_of.seq}" if x.as_of is not None else "as asked"
    answered = f"answered at log position {r.seq}" if r.seq is not None else "answered at an unrecorded position"
    if not x.rerunnable:
        verdict = "NOT RE-RUNNABLE" + ("; MISMATCH" if x.match is False else "")
        lines.append(f"{answered}; {verdict}: {x.reason}")
    else:
        lines.append(f"{answered}; re-run {where}: {'MATCH' if x.match else 'MISMATCH'}")
    if x.figures is not None:
        shown = {k: v for k, v in x.figures.items() if v not in ({}, [], None)}
        lines.append("figures: " + " ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in shown.items()))
    if x.results:
        lines.append(
            f"{'rank':>9}  {'id':<36}  {'version':>9}  {'score':>15}  {'semantic':>8}  {'keyword':>8}  content"
        )
        for i in x.results:
            rank = f"{i.recorded_rank or '-'}→{i.rank or '-'}"
            ver = f"{i.recorded_version or '?'}→{i.version or '-'}"
            score = "" if i.score is None and i.recorded_score is None else (
                f"{_num(i.recorded_score)}→{_num(i.score)}")  # fmt: skip
            lines.append(
                f"{rank:>9}  {i.id:<36}  {ver:>9}  {score:>15}  {_num(i.semantic_score):>8}  "
                f"{_num(i.keyword_score):>8}  {_short(i.content or '', 60)}"
            )
    for d in x.differences:
        lines.append(f"difference: {d}")
    if x.score_drift:
        lines.append(f"largest score change: {x.score_drift}")
    if x.note:
        lines.append(f"note: {x.note}")
    return "\n".join(lines)


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"
