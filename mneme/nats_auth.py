"""Least privilege on NATS: one account for mneme, one user per service role, each allowed only what it does.

- gateway: publishes events (`mneme.evt.>`), access records (`mneme.audit.>`) and queries (`mneme.qry.>`), and
  calls the JetStream API to publish and read messages; subscribes to its own inboxes only.
- projector: replies, and calls the JetStream API to follow the streams; subscribes to queries, the control
  plane (`mneme.ctl.>`) and its inboxes; publishes dead letters (`mneme.dlq.>`). It cannot publish an event.
- every role puts its heartbeat in the MNEME_SERVICES bucket (`$KV.MNEME_SERVICES.>`).
- auditor: as a projector; on the control plane it answers `mneme audit verify|export` (pages of its trail).
- admin (`mneme replay`, `mneme snapshot`, operators): everything.

No service role may create, update, purge or delete a stream, or delete a consumer other than through
the API calls its own consumers make: the admin creates the streams (`mneme cluster up` does). The
server enforces it: a refused publish is a permissions violation, and the request it carried times out.
`server_config` renders the `accounts` block of a nats-server configuration file (NATS's format accepts
JSON); the services take their user and password from MNEME_NATS_USER / MNEME_NATS_PASSWORD.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

ACCOUNT = "MNEME"
ROLES = ("admin", "gateway", "projector", "auditor")

_STREAM_ADMIN = [
    "$JS.API.STREAM.CREATE.>",
    "$JS.API.STREAM.UPDATE.>",
    "$JS.API.STREAM.DELETE.>",
    "$JS.API.STREAM.PURGE.>",
    "$JS.API.STREAM.MSG.DELETE.>",
    "$JS.API.STREAM.RESTORE.>",
    "$JS.API.STREAM.SNAPSHOT.>",
]
_INBOX = "_INBOX.>"
_HEARTBEAT = "$KV.MNEME_SERVICES.>"  # mneme/heartbeat.py: each service's line in `mneme status`


def permissions(role: str) -> dict[str, Any] | None:
    """The nats-server permissions of a role (None: everything, the admin)."""
    if role == "admin":
        return None
    if role == "gateway":
        return {
            "publish": {
                "allow": ["mneme.evt.>", "mneme.audit.>", "mneme.qry.>", "$JS.API.>", _HEARTBEAT, _INBOX],
                "deny": _STREAM_ADMIN,
            },
            "subscribe": {"allow": [_INBOX]},
        }
    if role in ("projector", "auditor"):
        listens = ["mneme.qry.>", "mneme.ctl.>", _INBOX]
        return {
            "publish": {
                "allow": ["mneme.dlq.>", "$JS.API.>", "$JS.FC.>", "$JS.ACK.>", _HEARTBEAT, _INBOX],
                "deny": _STREAM_ADMIN,
            },
            "subscribe": {"allow": listens},
            "allow_responses": True,
        }
    raise ValueError(f"unknown role {role!r}; known: {', '.join(ROLES)}")


def passwords() -> dict[str, str]:
    """A fresh random password per role."""
    return {role: secrets.token_urlsafe(24) for role in ROLES}


def server_config(secrets_by_role: dict[str, str]) -> str:
    """The `accounts` block (and the system account) for a nats-server configuration file."""
    users = []
    for role in ROLES:
        user: dict[str, Any] = {"user": role, "password": secrets_by_role[role]}
        perms = permissions(role)
        if perms is not None:
            user["permissions"] = perms
        users.append(user)
    return json.dumps({"accounts": {ACCOUNT: {"jetstream": "enabled", "users": users}}}, indent=1) + "\n"
