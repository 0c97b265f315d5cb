"""The commands of `mneme` that run no service of their own: hash-token (a principal's token as the principals
file keeps it), cluster (a local cluster without Docker, its accounts and streams), status (every service,
stream and consumer of a running mneme, or why nothing answers) and import/export (the knowledge graph from and
to another MCP memory server's file: mneme/app/graph_import.py). mneme/app/cli.py dispatches to them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from mneme.app.preflight import Refused


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


def graph_file_command(args: argparse.Namespace, core: Any, gs: Any, ps: Any) -> int:
    """`mneme import --from server-memory PATH` and `mneme export --to server-memory PATH`: the summary on stdout
    as one JSON line (import's progress on stderr); a file with bad lines is refused, each named, nothing written."""
    from mneme.app import graph_file, graph_import

    if args.command == "import":
        try:
            out = asyncio.run(graph_import.import_file(core, gs, ps, args.path, args.namespace))
        except graph_file.BadLines as bad:
            for n, why in bad.problems[: graph_file.SHOWN]:
                sys.stderr.write(f"mneme: import: {args.path}: line {n}: {why}\n")
            if len(bad.problems) > graph_file.SHOWN:
                sys.stderr.write(f"mneme: import: {args.path}: {len(bad.problems) - graph_file.SHOWN} more\n")
            raise
    else:
        out = asyncio.run(graph_import.export_file(core, gs, ps, args.path, args.namespace))
    print(json.dumps(out, ensure_ascii=False))
    return 0
