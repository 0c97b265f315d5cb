"""`mneme` command line: serve (everything embedded), gateway, projector, auditor, rebuild, replay, snapshot,
status, audit verify/export, import/export, hash-token.

The arguments are mneme/app/cli_parser.py; the commands that run no service, mneme/app/cli_commands.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import sys
from typing import Any

from mneme.app.cli_commands import cluster_command, graph_file_command, hash_token_command, status_command
from mneme.app.cli_parser import parser as parser
from mneme.app.preflight import Refused, bind, check_http, require_log, require_no_serve
from mneme.app.progress import Progress
from mneme.errors import MnemeError


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
    if args.command in ("import", "export"):
        return graph_file_command(args, s["core"], s["gs"], s["ps"])
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
