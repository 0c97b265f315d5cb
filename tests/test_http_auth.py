"""Bearer tokens over streamable HTTP: `mneme serve --transport http` with a principals file.

The file keeps only SHA-256 hashes of tokens. A request without a token, with an unknown token, with
another auth scheme, or with the stored hash itself as the token gets HTTP 401 before it reaches MCP;
never a default principal. A known token runs the call as its principal: identity (created_by),
role (agents cannot lock; a locked memory refuses the agent), namespaces (another principal's
namespace is out of scope), organization (its `_system` rules are readable, not writable by agents).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mneme.principals import hash_token
from tests.harness import MNEME, ToolFailure, free_port, nats_pid, result_of, wait_dead, wait_listening

pytestmark = pytest.mark.anyio

AGENT_TOKEN = "agent-token-ann-7f3c1a"
ADMIN_TOKEN = "admin-token-root-9b2e44"
OTHER_TOKEN = "agent-token-gus-51d0c8"


def write_principals(path: Path) -> None:
    path.write_text(
        json.dumps(
            {
                "principals": [
                    {
                        "token_sha256": hash_token(AGENT_TOKEN),
                        "agent_id": "ann",
                        "role": "agent",
                        "organization": "acme",
                        "namespaces": ["acme/web"],
                    },
                    {
                        "token_sha256": hash_token(ADMIN_TOKEN),
                        "agent_id": "root",
                        "role": "admin",
                        "organization": "acme",
                        "namespaces": ["acme/*"],
                    },
                    {
                        "token_sha256": hash_token(OTHER_TOKEN),
                        "agent_id": "gus",
                        "role": "agent",
                        "organization": "globex",
                        "namespaces": ["globex/web"],
                    },
                ]
            }
        )
    )


class Remote:
    def __init__(self, client: Client):
        self.client = client

    async def __call__(self, tool: str, **args: Any) -> dict[str, Any]:
        return result_of(await self.client.call_tool(tool, args))


@asynccontextmanager
async def as_token(url: str, token: str) -> AsyncIterator[Remote]:
    """An MCP client whose every HTTP request carries `Authorization: Bearer <token>`."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield Remote(client)


async def code_of(remote: Remote, tool: str, **args: Any) -> ToolFailure:
    with pytest.raises(ToolFailure) as err:
        await remote(tool, **args)
    return err.value


def test_hash_token_command_prints_the_sha256() -> None:
    out = subprocess.run([MNEME, "hash-token", AGENT_TOKEN], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.strip() == hash_token(AGENT_TOKEN)
    assert len(out.stdout.strip()) == 64


async def test_bearer_tokens_map_to_principals_over_http(tmp_path: Path) -> None:
    principals = tmp_path / "principals.json"
    write_principals(principals)
    for token in (AGENT_TOKEN, ADMIN_TOKEN, OTHER_TOKEN):
        assert token not in principals.read_text(), "tokens are stored hashed"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")}
    env["MNEME_GATEWAY_PRINCIPALS_FILE"] = str(principals)
    # --context optional: the native tools offer the context argument, checked against the token's principal below
    argv = [MNEME, "serve", "--data-dir", str(tmp_path / "d"), "--transport", "http", "--host", "127.0.0.1",
            "--port", str(port), "--context", "optional"]  # fmt: skip
    # a long-running server child, stopped at the end
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_listening(proc, port)

        # -- no token, unknown token, wrong scheme, the hash as token: 401 -------------------------
        probe = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        accept = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        async with httpx2.AsyncClient(timeout=10) as http:
            for auth in (
                None,
                "Bearer not-a-known-token",
                "Bearer",
                f"Basic {AGENT_TOKEN}",
                AGENT_TOKEN,
                f"Bearer {hash_token(AGENT_TOKEN)}",
                f"Bearer {AGENT_TOKEN}x",
            ):
                headers = accept | ({"authorization": auth} if auth is not None else {})
                r = await http.post(url, json=probe, headers=headers)
                assert r.status_code == 401, (auth, r.status_code, r.text)
                assert r.json()["error"]["code"] == "UNAUTHORIZED"
                assert r.headers.get("www-authenticate", "").lower().startswith("bearer")
                assert "tools" not in r.text and "memory_add" not in r.text
            assert (await http.get(url, headers=accept)).status_code == 401
            assert (await http.delete(url)).status_code == 401
            # a known token gets past the guard (whatever MCP then answers, it is not a 401)
            r = await http.post(url, json=probe, headers=accept | {"authorization": f"Bearer {AGENT_TOKEN}"})
            assert r.status_code != 401, r.text
        with pytest.raises(Exception):  # noqa: B017 - the MCP client cannot even connect without a token
            async with Client(url) as anonymous:
                await anonymous.call_tool("memory_list", {})
        assert proc.poll() is None, "the server died on unauthorized requests"

        async with (
            as_token(url, AGENT_TOKEN) as ann,
            as_token(url, ADMIN_TOKEN) as root,
            as_token(url, OTHER_TOKEN) as gus,
        ):
            # -- a valid agent token works, as its principal ----------------------------------
            added = await ann("memory_add", content="ann's note", store="s", path="notes/one")
            assert added["namespace"] == "acme/web", "the token principal's default namespace"
            got = await ann("memory_get", id=added["id"])
            assert got["content"] == "ann's note"
            assert (got["created_by"], got["updated_by"], got["verification"]) == ("ann", "ann", "unverified")
            assert got["history"][0]["agent_id"] == "ann"
            err = await code_of(ann, "memory_add", content="x", context={"agent_id": "root"})
            assert err.code == "SCOPE_VIOLATION", "the context cannot claim another identity"
            by_admin = await root("memory_add", content="root's note", namespace="acme/web")
            assert (await ann("memory_get", id=by_admin["id"]))["created_by"] == "root"
            assert (await ann("memory_get", id=by_admin["id"]))["verification"] == "verified"

            # -- roles: the agent cannot lock; the admin can, and the agent is then refused ----
            err = await code_of(ann, "memory_lock", id=added["id"])
            assert err.code == "PERMISSION_ERROR", err.error
            assert (await code_of(ann, "memory_verify", id=added["id"])).code == "PERMISSION_ERROR"
            assert (await code_of(ann, "memory_add", content="r", kind="business_rule")).code == "WRITE_NOT_ALLOWED"
            locked = await root("memory_lock", id=added["id"], namespace="acme/web", reason="frozen")
            assert locked["locked"] is True
            err = await code_of(ann, "memory_update", id=added["id"], content="ann edits")
            assert err.code == "MEMORY_LOCKED", err.error
            assert (await code_of(ann, "memory_retire", id=added["id"])).code == "MEMORY_LOCKED"
            assert (await ann("memory_get", id=added["id"]))["content"] == "ann's note"
            edited = await root("memory_update", id=added["id"], namespace="acme/web", content="root edits")
            assert edited["changed"] is True
            assert (await root("memory_get", id=added["id"], namespace="acme/web"))["updated_by"] == "root"
            await root("memory_unlock", id=added["id"], namespace="acme/web")
            assert (await ann("memory_update", id=added["id"], content="ann again"))["version"] == 5

            # -- namespaces: another principal's namespace is out of scope --------------------
            for tool, args in (
                ("memory_list", {}),
                ("memory_stats", {}),
                ("memory_list", {"sort_by": "updated_at"}),  # was memory_recent
                ("memory_get", {"id": added["id"]}),
                ("memory_add", {"content": "x"}),
            ):
                err = await code_of(gus, tool, namespace="acme/web", **args)
                assert err.code == "SCOPE_VIOLATION", (tool, err.error)
                assert "ann" not in json.dumps(err.error)
            err = await code_of(gus, "memory_get", id=added["id"])  # from its own namespace: not there
            assert err.code == "MEMORY_NOT_FOUND" and "ann again" not in json.dumps(err.error)
            err = await code_of(gus, "memory_get", id="s:notes/one")
            assert err.code == "MEMORY_NOT_FOUND"
            gus_note = await gus("memory_add", content="gus's note")
            assert gus_note["namespace"] == "globex/web"
            assert (await code_of(ann, "memory_get", id=gus_note["id"], namespace="globex/web")).code == (
                "SCOPE_VIOLATION"
            )
            assert (await code_of(ann, "memory_list", namespace="acme/api")).code == "SCOPE_VIOLATION"
            assert (await code_of(root, "memory_list", namespace="globex/web")).code == "SCOPE_VIOLATION"
            assert [m["id"] for m in (await gus("memory_list"))["results"]] == [gus_note["id"]]

            # -- the organization's system scope: readable by its agents, written by its admin -
            rule = await root("memory_add", content="ship on fridays", namespace="acme/_system")
            assert (await ann("memory_get", id=rule["id"], namespace="acme/_system"))["content"] == "ship on fridays"
            assert (await code_of(ann, "memory_add", content="x", namespace="acme/_system")).code == "SCOPE_VIOLATION"
            assert (await code_of(gus, "memory_get", id=rule["id"], namespace="acme/_system")).code == (
                "SCOPE_VIOLATION"
            )

        # -- clean stop ------------------------------------------------------------------------
        child = nats_pid(tmp_path / "d")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0, proc.stderr.read().decode() if proc.stderr else ""
        assert wait_dead(child), "nats-server outlived mneme serve --transport http"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
