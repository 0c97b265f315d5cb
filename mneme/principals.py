"""Who is calling, and which namespaces they may read and write.

A principal is an agent or a human admin (role "admin", optionally with a title such as
architect or manager), bound to an organization and to namespace patterns:
`acme/web` (exactly that), `acme/web/*` (it and everything below), `*` (everything).
`read_only` patterns may be read but not written. The organization's system scope,
`<org>/_system`, holds organization-wide rules: everyone in the organization may read
it; only admins may write it (never agents).

Over streamable HTTP a principal comes from a bearer token: the principals file keeps
only SHA-256 hashes of tokens (`mneme hash-token TOKEN` prints one). Over stdio it
comes from settings.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from schemas.events import Actor

SYSTEM_SEGMENT = "_system"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _matches(pattern: str, ns: str) -> bool:
    if pattern == "*":
        return True
    if pattern.endswith("/*"):
        base = pattern[:-2]
        return ns == base or ns.startswith(base + "/")
    return ns == pattern


@dataclass(frozen=True)
class Principal:
    agent_id: str
    role: str = "agent"
    title: str | None = None
    organization: str | None = None
    namespaces: tuple[str, ...] = ("*",)
    read_only: tuple[str, ...] = ()
    default_namespace: str = "default"

    @property
    def actor(self) -> Actor:
        return Actor(agent_id=self.agent_id, role=self.role)

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def system_namespace(self) -> str | None:
        return f"{self.organization}/{SYSTEM_SEGMENT}" if self.organization else None

    def can_read(self, ns: str) -> bool:
        if ns == self.system_namespace:
            return True
        return any(_matches(p, ns) for p in (*self.namespaces, *self.read_only))

    def can_write(self, ns: str) -> bool:
        if ns.split("/")[-1] == SYSTEM_SEGMENT:  # organization rules: admins of that organization only
            return self.is_admin and ns == self.system_namespace
        return any(_matches(p, ns) for p in self.namespaces)

    def trusted_view(self) -> bool:
        """Admins see internal fields (log positions, internal timestamps); agents get trimmed results."""
        return self.is_admin

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Principal:
        return cls(
            agent_id=str(d["agent_id"]),
            role=str(d.get("role", "agent")),
            title=d.get("title"),
            organization=d.get("organization"),
            namespaces=tuple(d.get("namespaces", ())),
            read_only=tuple(d.get("read_only", ())),
            default_namespace=str(d.get("default_namespace") or (d.get("namespaces") or ["default"])[0]).rstrip("/*")
            or "default",
        )


@dataclass
class Directory:
    """Bearer-token hashes → principals, loaded from a JSON file:

    {"principals": [{"token_sha256": "…", "agent_id": "a1", "role": "agent", "organization": "acme",
                     "namespaces": ["acme/web/*"], "read_only": ["acme/docs"], "default_namespace": "acme/web"}]}
    """

    by_hash: dict[str, Principal] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> Directory:
        data = json.loads(Path(path).read_text())
        out = cls()
        for entry in data.get("principals", []):
            digest = str(entry["token_sha256"]).lower()
            if len(digest) != 64:
                raise ValueError(f"{path}: token_sha256 of {entry.get('agent_id')!r} is not a SHA-256 hex digest")
            out.by_hash[digest] = Principal.from_dict(entry)
        return out

    def for_token(self, token: str | None) -> Principal | None:
        return self.by_hash.get(hash_token(token)) if token else None

    def for_headers(self, headers: Mapping[str, str] | None) -> Principal | None:
        if not headers:
            return None
        auth = headers.get("authorization") or headers.get("Authorization") or ""
        scheme, _, token = auth.partition(" ")
        return self.for_token(token.strip()) if scheme.lower() == "bearer" else None
