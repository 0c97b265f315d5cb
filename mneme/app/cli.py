"""`mneme` command line: serve (everything embedded), gateway, projector, auditor, rebuild, replay, snapshot,
status, audit verify/export, hash-token."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

from mneme import __version__
from mneme.app.preflight import Refused, bind, check_http, require_log, require_no_serve
from mneme.app.progress import Progress
from mneme.app.settings import DEFAULT_TOOL_GROUPS, TOOL_GROUPS
from mneme.errors import MnemeError


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", type=Path, help="data directory (default: the user's data dir; MNEME_DATA_DIR)")
    p.add_argument("--nats-url", help="NATS server URL(s), comma-separated (MNEME_NATS_URL); serve: unset = embedded")
    p.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.add_argument("--log-format", choices=["text", "json"], help="log lines on stderr (MNEME_LOG_FORMAT)")


def _mcp(p: argparse.ArgumentParser) -> None:
    p.add_argument("--transport", choices=["stdio", "http"], help="MCP transport (default stdio)")
    p.add_argument("--host", help="HTTP host (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="HTTP port (default 8765)")
    p.add_argument(
        "--profile",
        help="the tool surface over stdio: native (default) or a seed contract's profile "
        "(MNEME_GATEWAY_PROFILE); HTTP serves every profile at once, /mcp and /mcp/<profile>",
    )
    p.add_argument(
        "--store",
        action="append",
        metavar="NAME[=NAMESPACE]",
        help="register a store for the cortex profile (repeatable; MNEME_GATEWAY_STORES)",
    )
    p.add_argument(
        "--tools",
        metavar="GROUPS",
        help=f"the groups of native tools served, comma-separated: {', '.join(DEFAULT_TOOL_GROUPS)} (the default), "
        f"{', '.join(g for g in TOOL_GROUPS if g not in DEFAULT_TOOL_GROUPS)} (MNEME_GATEWAY_TOOLS)",
    )
    p.add_argument(
        "--context",
        choices=["never", "optional", "required"],
        help="the native tools' context argument (default never; MNEME_GATEWAY_CONTEXT)",
    )


AUDIT_EXIT_STATUS = """exit status:
  verify   0 the chain holds; 1 it is broken (first_broken_seq names where)
  reread   0 MATCH: the same ids, in the same order, with the same versions (stats: the same figures)
           1 MISMATCH: the answer differs from the recorded one (or a refusal: one line on stderr)
           3 NOT RE-RUNNABLE: the read cannot be asked again (a status, a record kept without its query)
  others   0 done; 1 refused (one line on stderr)"""


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
    p = sub.add_parser(
        "replay",
        help="rebuild every read model from the log into a new generation, verify it, "
        "and swap it in while the live projector keeps serving (blue/green)",
    )
    _common(p)
    p.add_argument("--upto", help="a frozen copy: only the log up to this sequence or ISO 8601 time (no swap)")
    p.add_argument("--output", type=Path, help="build a frozen copy in this directory (no swap)")
    p.add_argument("--model", help="embedding model for the new generation (re-embeds; default: the setting)")
    p.add_argument("--no-snapshot", action="store_true", help="fold from the start of the log, not a snapshot")
    p = sub.add_parser("snapshot", help="snapshot the read models (the running projector's, or the files at rest)")
    _common(p)
    p = sub.add_parser(
        "hash-token",
        help="print the SHA-256 of a bearer token, for the principals file; the token "
        "is read from stdin (or asked for, on a terminal)",
    )
    p.add_argument(
        "token", nargs="?", help="the token itself: works, but is visible in the process list and the shell history"
    )
    p = sub.add_parser(
        "cluster",
        help="a local cluster without Docker: NATS nodes routed into one JetStream cluster, gateways over HTTP, "
        "projector replicas and an auditor, each its own process",
    )
    p.add_argument(
        "action",
        choices=["up", "down", "status", "accounts", "streams"],
        help="up/down/status: the local cluster in --dir; accounts: write --dir/accounts.conf (nats-server) and "
        "--dir/.env (each role's password, for compose.yaml); streams: create the streams on --nats-url (admin)",
    )
    p.add_argument("--nats-url", help="streams: the NATS servers (MNEME_NATS_URL), as the admin user")
    p.add_argument("--replicas", type=int, default=3, help="streams: replicas of each stream (default 3)")
    p.add_argument("--dir", type=Path, default=Path("mneme-cluster"), help="where the processes keep their data")
    p.add_argument("--nodes", type=int, default=3, help="nats-server nodes (default 3)")
    p.add_argument("--gateways", type=int, default=2, help="MCP gateways over streamable HTTP (default 2)")
    p.add_argument("--projectors", type=int, default=2, help="projector replicas (default 2)")
    p.add_argument("--auditors", type=int, default=1, help="auditors (default 1)")
    p = sub.add_parser(
        "status",
        help="every service, stream and consumer, lags, dead letters, the model, data sizes "
        "(of the serve on --data-dir, or of --nats-url)",
    )
    _common(p)
    p.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for NATS and each answer")
    p = sub.add_parser(
        "audit",
        help="the compliance trail: verify the hash chain, export records, list reads, re-run one read",
        description="verify, export: the trail file under --data-dir; while a mneme serve (or mneme auditor) "
        "holds it, through that process's auditor, over its NATS. reads, reread: asked of the running mneme "
        "(--nats-url, or the mneme serve on --data-dir), as the operator.",
        epilog=AUDIT_EXIT_STATUS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _common(p)
    p.add_argument("action", choices=["verify", "export", "reads", "reread"])
    p.add_argument("record", nargs="?", type=int, help="reread: the read's trail_seq (from `mneme audit reads`)")
    p.add_argument("--json", action="store_true", help="reads, reread: JSON instead of lines")
    p.add_argument("--limit", type=int, default=20, help="reads: at most this many (default 20)")
    p.add_argument("--offset", type=int, default=0, help="reads: skip this many")
    p.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl", help="export: file format")
    p.add_argument("--out", type=Path, help="export: the file to write")
    p.add_argument(
        "--since",
        help="export: only records from this time on (ISO 8601, e.g. 2026-11-26T14:02:00Z; no offset means UTC)",
    )
    p.add_argument("--until", help="export: only records before this time (ISO 8601)")
    p.add_argument("--agent", help="export, reads: only records of this agent id")
    p.add_argument("--memory", help="export: only records that touch this memory id")
    p.add_argument(
        "--action-prefix",
        help="export: only records whose action starts with this, e.g. memory_ "
        "(changes), read: (reads), denied: (refused attempts)",
    )
    return ap


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    from pydantic import ValidationError
    from pydantic_settings import SettingsError

    from mneme.app.settings import AuditorSettings, CoreSettings, GatewaySettings, ProjectorSettings

    core_over = {
        k: v
        for k, v in (
            ("data_dir", args.data_dir),
            ("nats_url", args.nats_url),
            ("log_level", args.log_level),
            ("log_format", getattr(args, "log_format", None)),
        )
        if v is not None
    }
    gw_over: dict[str, Any] = {
        k: getattr(args, k)
        for k in ("transport", "host", "port", "profile", "tools", "context")
        if getattr(args, k, None) is not None
    }
    if getattr(args, "store", None):
        gw_over["stores"] = _stores(args.store)
    try:
        return {
            "core": CoreSettings(**core_over),
            "gs": GatewaySettings(**gw_over),
            "ps": ProjectorSettings(),
            "aus": AuditorSettings(),
        }
    except ValidationError as exc:  # a bad environment variable (or flag): name it, on one line
        prefix = {
            "CoreSettings": "MNEME_",
            "GatewaySettings": "MNEME_GATEWAY_",
            "ProjectorSettings": "MNEME_PROJECTOR_",
            "AuditorSettings": "MNEME_AUDITOR_",
        }.get(exc.title, "")
        flags = {**core_over, **gw_over} if exc.title in ("CoreSettings", "GatewaySettings") else {}
        raise Refused("; ".join(_setting_problem(e, prefix, flags) for e in exc.errors())) from None
    except SettingsError as exc:  # a list or mapping variable that is not JSON: name the variable
        found = re.search(r'field "(\w+)"', str(exc))
        field = found.group(1) if found else "?"
        names = [f"{p}{field.upper()}" for p in ("MNEME_GATEWAY_", "MNEME_PROJECTOR_", "MNEME_AUDITOR_", "MNEME_")]
        name = next((n for n in names if n in os.environ), names[0])
        raise Refused(f"{name}: not valid JSON ({os.environ.get(name, '')[:80]!r})") from None


def _setting_problem(e: Any, prefix: str, flags: dict[str, Any]) -> str:
    """One invalid setting, named as the operator gave it (the flag, else the variable; never the index of a
    list item, `MNEME_GATEWAY_TOOLS_1`), with the value and what is allowed, in words."""
    from services.gateway.arg_errors import problem

    field = str(e["loc"][0]) if e["loc"] else "?"
    name = f"--{field.replace('_', '-')}" if field in flags else f"{prefix}{field.upper()}"
    value = e.get("input")
    given = f"{value!r} " if isinstance(value, str | int | float) and len(e["loc"]) > 1 else ""
    return f"{name}: {given}{problem(dict(e))}"


def _stores(given: list[str]) -> dict[str, str]:
    """`--store NAME[=NAMESPACE]`, repeated, on top of MNEME_GATEWAY_STORES. Without a namespace a store lives
    in the default namespace (the cortex profile's rule, resolved when the store is used)."""
    from mneme.errors import InvalidInput
    from services.gateway.profiles.cortex_support import parse_store_option

    stores: dict[str, str] = {}
    if os.environ.get("MNEME_GATEWAY_STORES"):
        try:
            stores.update(json.loads(os.environ["MNEME_GATEWAY_STORES"]))
        except ValueError:
            raise Refused("MNEME_GATEWAY_STORES: not a JSON object of store name -> namespace") from None
    for item in given:
        try:
            name, namespace = parse_store_option(item, default_namespace="")
        except InvalidInput as exc:
            raise Refused(f"--store {item!r}: {exc.message}") from None
        stores[name] = namespace
    return stores


def _check_profile(gs: Any) -> None:
    from services.gateway import profiles

    if gs.profile not in profiles.names():
        raise Refused(f"--profile {gs.profile!r}: unknown; known: {', '.join(profiles.names())}")


def hash_token_command(token: str | None) -> int:
    from mneme.principals import hash_token

    given = token is not None
    if token is None and sys.stdin is not None and sys.stdin.isatty():
        import getpass

        token = getpass.getpass("token: ")
    elif token is None:
        token = sys.stdin.read() if sys.stdin is not None else ""
    token = token.strip()
    if not token:
        raise Refused("hash-token: the token is empty")
    if "\n" in token or "\r" in token:
        raise Refused("hash-token: the token holds more than one line")
    if given:
        sys.stderr.write(
            "mneme: warning: a token on the command line is visible in the process list and the shell "
            "history; give it on stdin instead (mneme hash-token < file)\n"
        )
    print(hash_token(token))
    return 0


def cluster_command(args: argparse.Namespace) -> int:
    from mneme.app import cluster

    if args.action == "up":
        from mneme import durability
        from mneme.app.settings import CoreSettings

        if cluster.read_state(args.dir) is not None:
            sys.stderr.write(f"mneme: a cluster is recorded in {args.dir}; run `mneme cluster down --dir {args.dir}`\n")
            return 1
        sync = CoreSettings().nats_sync
        if (warn := durability.warning(sync)) is not None:
            sys.stderr.write(warn + "\n")
        c = cluster.LocalCluster(
            args.dir,
            nodes=args.nodes,
            gateways=args.gateways,
            projectors=args.projectors,
            auditors=args.auditors,
            detach=True,
            sync=sync,
        )
        asyncio.run(c.up())
        print(json.dumps(cluster.status_from_state(args.dir)))
    elif args.action == "accounts":
        print(json.dumps(cluster.write_accounts(args.dir)))
    elif args.action == "streams":
        from mneme.app.settings import CoreSettings

        core = CoreSettings(**({"nats_url": args.nats_url} if args.nats_url else {}))
        if core.nats_url is None:
            raise Refused("--nats-url (or MNEME_NATS_URL) is required for `cluster streams`")
        print(json.dumps(asyncio.run(cluster.create_streams(core, args.replicas))))
    elif args.action == "down":
        stopped = asyncio.run(cluster.down_from_state(args.dir))
        print(json.dumps({"stopped": stopped}))
    else:
        state = cluster.status_from_state(args.dir)
        print(json.dumps(state if state is not None else {"running": False}))
        return 0 if state is not None else 1
    return 0


def status_command(args: argparse.Namespace, core: Any) -> int:
    """Exit 0 when healthy, 1 when not, 2 when nothing answers (no NATS at the URL, no serve on the data dir)."""
    from mneme.app import compose, status
    from mneme.embedded_nats import running_url

    url = core.nats_url or running_url(core.data_dir / "nats")
    local = core.data_dir if core.data_dir.is_dir() else None

    async def gather() -> dict[str, Any] | None:
        import nats

        errors: list[str] = []

        async def noted(exc: Exception) -> None:  # (said once below, not logged per attempt)
            errors.append(f"{type(exc).__name__}: {exc}".rstrip(": "))

        try:
            async with asyncio.timeout(args.timeout):
                nc = await nats.connect(
                    servers=(url or "").split(","),
                    name="mneme-status",
                    allow_reconnect=False,
                    connect_timeout=min(3.0, args.timeout),
                    error_cb=noted,
                    **compose.auth_options(core),
                )
        except Exception as exc:  # noqa: BLE001 - reported as not running
            why = errors[-1] if errors else f"{type(exc).__name__}: {exc}".rstrip(": ")
            if why == "TimeoutError":
                why = f"no answer within {args.timeout:g} s"
            sys.stderr.write(f"mneme status: cannot reach NATS at {url}: {why}\n")
            return None
        try:
            return await status.gather(nc, local, timeout=args.timeout)
        finally:
            await compose.close_nats(nc)

    if url is None:
        out: dict[str, Any] | None = None
        sys.stderr.write(f"mneme status: no mneme serve is running on {core.data_dir} (or give --nats-url)\n")
    else:
        out = asyncio.run(gather())
    if out is None:
        out = {"healthy": False, "running": False, "data_dir": str(core.data_dir)}
        if local is not None:
            out["data_bytes"] = status.data_sizes(local)
        where = f"NATS at {core.nats_url}" if core.nats_url else str(core.data_dir)
        print(json.dumps(out) if args.json else f"mneme: not running ({where})")
        return 2
    print(json.dumps(out, default=str) if args.json else status.render(out))
    return 0 if out["healthy"] else 1


def run(args: argparse.Namespace) -> int:
    if args.command == "hash-token":
        return hash_token_command(args.token)
    if args.command == "cluster":
        return cluster_command(args)
    s = _settings(args)
    from mneme.logs import setup

    setup(s["core"].log_level, s["core"].log_format, args.command)
    if args.command == "status":
        return status_command(args, s["core"])
    if args.command == "audit":
        from mneme.app.audit_cli import audit

        return audit(args, s["core"], s["aus"])
    listener = None
    if args.command == "serve":
        require_no_serve(s["core"])
    if args.command in ("serve", "gateway"):
        _check_profile(s["gs"])
    if args.command in ("serve", "gateway") and s["gs"].transport == "http":
        check_http(s["gs"])  # before NATS, the projector or even the heavy imports: a refusal is quick
        listener = bind(s["gs"])
    elif args.command in ("rebuild", "replay"):
        require_log(s["core"])  # (they check again, but this is before the heavy imports)
    from mneme.app import gc_policy, runtime

    gc_policy.tune()  # (after the heavy imports: see mneme/app/gc_policy.py)
    if args.command == "serve":
        asyncio.run(runtime.serve(s["core"], s["gs"], s["ps"], s["aus"], listener))
    elif args.command == "gateway":
        asyncio.run(runtime.gateway(s["core"], s["gs"], listener))
    elif args.command == "projector":
        asyncio.run(runtime.projector(s["core"], s["ps"], rebuild=args.rebuild))
    elif args.command == "auditor":
        asyncio.run(runtime.auditor(s["core"], s["aus"]))
    elif args.command == "rebuild":
        from mneme.app.maintenance import rebuild

        print(json.dumps(asyncio.run(rebuild(s["core"], s["ps"], output=args.output, progress=Progress()))))
    elif args.command == "replay":
        from mneme.app.replay import ReplayFailed, replay

        try:
            out = asyncio.run(
                replay(
                    s["core"],
                    s["ps"],
                    upto=args.upto,
                    output=args.output,
                    model=args.model,
                    use_snapshots=not args.no_snapshot,
                    progress=Progress(),
                )
            )
        except ReplayFailed as exc:
            print(json.dumps(exc.result, default=str))
            return 1
        print(json.dumps(out, default=str))
    elif args.command == "snapshot":
        from mneme.app.maintenance import snapshot

        out = asyncio.run(snapshot(s["core"], s["ps"]))
        print(json.dumps(out, default=str))
        return 0 if out.get("ok", True) else 1
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
    except Exception as exc:  # one line for the operator; the traceback for whoever debugs
        logging.getLogger("mneme").debug("%s failed", args.command, exc_info=True)
        text = " ".join(str(exc).split())
        sys.stderr.write(
            f"mneme: {args.command} failed: {type(exc).__name__}: {text} (--log-level DEBUG shows where)\n"
        )
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # The stdio transport reads stdin on a worker thread that cannot be interrupted;
    # everything is closed by now, so leave without waiting for it.
    os._exit(code)


if __name__ == "__main__":
    main()
