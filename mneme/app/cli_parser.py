"""The `mneme` command line's arguments: every command with its flags and help (`parser`), the flags the
processes share (data directory, NATS, logging) and those of the MCP gateway's. mneme/app/cli.py parses them
and runs the command.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mneme import __version__
from mneme.app.settings import DEFAULT_TOOL_GROUPS, TOOL_GROUPS


def _graph_file(p: argparse.ArgumentParser, flag: str, dest: str, path_help: str, ns_help: str) -> None:
    """The arguments `mneme import` and `mneme export` share: the file's format, its path, the namespace."""
    _common(p)
    fmt = "the file's format: server-memory (@modelcontextprotocol/server-memory's memory.jsonl)"
    p.add_argument(flag, dest=dest, required=True, choices=["server-memory"], help=fmt)
    p.add_argument("path", type=Path, help=path_help)
    p.add_argument("--namespace", help=f"{ns_help} (default: MNEME_GATEWAY_NAMESPACE, or default)")


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
        "import",
        help="load another MCP memory server's file into the knowledge graph, as events: every line checked "
        "first (nothing is written if one is bad), idempotent (a second import adds nothing)",
        description="Beside a running mneme serve on --data-dir (or with --nats-url) through it; with nothing "
        "running, it starts the embedded NATS and a projector on the data directory itself. A relation to an "
        "entity neither the file nor the memory has gets that entity, of type 'unknown'. Progress on stderr, a "
        "one-line JSON summary on stdout.",
    )
    _graph_file(p, "--from", "source", "the file to import", "the namespace to import into")
    p = sub.add_parser(
        "export",
        help="write a namespace's knowledge graph as another MCP memory server's file (entities, then relations, "
        "by name)",
        description="Beside a running mneme serve on --data-dir (or with --nats-url) through it; with nothing "
        "running, it starts the embedded NATS and a projector on the data directory (whose log must exist).",
    )
    _graph_file(p, "--to", "target", "the file to write (replaced whole)", "the namespace to export")
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
