"""`mneme` command line: serve (everything embedded), gateway, projector, auditor, rebuild, replay, snapshot,
audit verify/export, hash-token."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from mneme import __version__
from mneme.errors import MnemeError
from mneme.preflight import Refused, bind, check_http, require_log


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", type=Path, help="data directory (default: the user's data dir; MNEME_DATA_DIR)")
    p.add_argument("--nats-url", help="NATS server URL(s), comma-separated (MNEME_NATS_URL); serve: unset = embedded")
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def _mcp(p: argparse.ArgumentParser) -> None:
    p.add_argument("--transport", choices=["stdio", "http"], help="MCP transport (default stdio)")
    p.add_argument("--host", help="HTTP host (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="HTTP port (default 8765)")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="mneme", description="Event-sourced shared memory for AI agents, over MCP.")
    ap.add_argument("--version", action="version", version=f"mneme {__version__}")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="everything in one process: embedded NATS, projector, auditor, MCP gateway")
    _common(p)
    _mcp(p)
    p = sub.add_parser("gateway", help="the MCP gateway alone, against --nats-url")
    _common(p)
    _mcp(p)
    p = sub.add_parser("projector", help="a projector replica, against --nats-url")
    _common(p)
    p.add_argument("--rebuild", action="store_true", help="delete this replica's DuckDB file and rebuild from the log")
    p = sub.add_parser("auditor", help="the auditor, against --nats-url")
    _common(p)
    p = sub.add_parser("rebuild", help="fold the whole log into a fresh projection file, then swap it in")
    _common(p)
    p.add_argument("--output", type=Path, help="write the rebuilt file here instead of replacing the live one")
    p = sub.add_parser("replay", help="rebuild every read model from the log into a new generation, verify it, "
                       "and swap it in while the live projector keeps serving (blue/green)")
    _common(p)
    p.add_argument("--upto", help="a frozen copy: only the log up to this sequence or ISO 8601 time (no swap)")
    p.add_argument("--output", type=Path, help="build a frozen copy in this directory (no swap)")
    p.add_argument("--model", help="embedding model for the new generation (re-embeds; default: the setting)")
    p.add_argument("--no-snapshot", action="store_true", help="fold from the start of the log, not a snapshot")
    p = sub.add_parser("snapshot", help="snapshot the read models (the running projector's, or the files at rest)")
    _common(p)
    p = sub.add_parser("hash-token", help="print the SHA-256 of a bearer token, for the principals file")
    p.add_argument("token")
    p = sub.add_parser("audit", help="the compliance trail: verify the hash chain, or export records")
    _common(p)
    p.add_argument("action", choices=["verify", "export"])
    p.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl", help="export: file format")
    p.add_argument("--out", type=Path, help="export: the file to write")
    for name in ("since", "until", "agent", "memory", "action-prefix"):
        p.add_argument(f"--{name}", help=f"export: only records matching this {name} (times ISO 8601)")
    return ap


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    from mneme.settings import AuditorSettings, CoreSettings, GatewaySettings, ProjectorSettings

    core_over = {k: v for k, v in (("data_dir", args.data_dir), ("nats_url", args.nats_url),
                                   ("log_level", args.log_level)) if v is not None}  # fmt: skip
    gw_over = {k: getattr(args, k) for k in ("transport", "host", "port") if getattr(args, k, None) is not None}
    return {
        "core": CoreSettings(**core_over),
        "gs": GatewaySettings(**gw_over),
        "ps": ProjectorSettings(),
        "aus": AuditorSettings(),
    }


_last_progress: list[tuple[int, int]] = []


def _progress(done: int, total: int, seconds: float) -> None:
    if _last_progress and _last_progress[-1] == (done, total) and done >= total:
        return  # the final line is printed once
    _last_progress[:] = [(done, total)]
    rate = done / seconds if seconds > 0 else 0.0
    eta = (total - done) / rate if rate > 0 else 0.0
    width = 30
    filled = int(width * done / total) if total else width
    sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} events  {rate:,.0f}/s  "
                     f"ETA {eta:,.0f}s")  # fmt: skip
    sys.stderr.flush()
    if done >= total:
        sys.stderr.write("\n")


def run(args: argparse.Namespace) -> int:
    if args.command == "hash-token":
        from mneme.principals import hash_token

        print(hash_token(args.token))
        return 0
    s = _settings(args)
    logging.basicConfig(level=s["core"].log_level, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    listener = None
    if args.command in ("serve", "gateway") and s["gs"].transport == "http":
        check_http(s["gs"])  # before NATS, the projector or even the heavy imports: a refusal is quick
        listener = bind(s["gs"])
    elif args.command in ("rebuild", "replay"):
        require_log(s["core"])  # (they check again, but this is before the heavy imports)
    from mneme import runtime

    if args.command == "serve":
        asyncio.run(runtime.serve(s["core"], s["gs"], s["ps"], s["aus"], listener))
    elif args.command == "gateway":
        asyncio.run(runtime.gateway(s["core"], s["gs"], listener))
    elif args.command == "projector":
        asyncio.run(runtime.projector(s["core"], s["ps"], rebuild=args.rebuild))
    elif args.command == "auditor":
        asyncio.run(runtime.auditor(s["core"], s["aus"]))
    elif args.command == "rebuild":
        from mneme.maintenance import rebuild

        print(json.dumps(asyncio.run(rebuild(s["core"], s["ps"], output=args.output, progress=_progress))))
    elif args.command == "replay":
        from mneme.replay import ReplayFailed, replay

        try:
            out = asyncio.run(replay(s["core"], s["ps"], upto=args.upto, output=args.output, model=args.model,
                                     use_snapshots=not args.no_snapshot, progress=_progress))  # fmt: skip
        except ReplayFailed as exc:
            print(json.dumps(exc.result, default=str))
            return 1
        print(json.dumps(out, default=str))
    elif args.command == "snapshot":
        from mneme.maintenance import snapshot

        out = asyncio.run(snapshot(s["core"], s["ps"]))
        print(json.dumps(out, default=str))
        return 0 if out.get("ok", True) else 1
    elif args.command == "audit":
        from services.auditor.trail import Trail

        trail = Trail(str(s["core"].data_dir / s["aus"].db_name))
        try:
            if args.action == "verify":
                checked, broken = trail.verify()
                print(json.dumps({"records": checked, "ok": broken is None, "first_broken_seq": broken}))
                return 0 if broken is None else 1
            from services.auditor.trail_queries import export

            if args.out is None:
                raise Refused("audit export needs --out FILE")
            filters = {"since": args.since, "until": args.until, "agent_id": args.agent,
                       "memory_id": args.memory, "action": args.action_prefix}  # fmt: skip
            n = export(trail, args.out, args.format, filters)
            print(json.dumps({"records": n, "format": args.format, "path": str(args.out)}))
        finally:
            trail.close()
    return 0


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        code = run(args)
    except Refused as exc:
        sys.stderr.write(f"mneme: {exc}\n")
        code = 1
    except MnemeError as exc:  # e.g. an embedding model that failed to load during a replay
        sys.stderr.write(f"mneme: {exc.message}\n")
        code = 1
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:  # noqa: BLE001 - one line for the operator; the traceback for whoever debugs
        logging.getLogger("mneme").debug("%s failed", args.command, exc_info=True)
        text = " ".join(str(exc).split())
        sys.stderr.write(f"mneme: {args.command} failed: {type(exc).__name__}: {text} "
                         "(--log-level DEBUG shows where)\n")  # fmt: skip
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # The stdio transport reads stdin on a worker thread that cannot be interrupted;
    # everything is closed by now, so leave without waiting for it.
    os._exit(code)


if __name__ == "__main__":
    main()
