"""compose.yaml checked without Docker: parsed (anchors and merge keys resolved), every mneme service's
command parsed by mneme's own command line, every MNEME_ variable a field of the settings class its prefix
names, every image pinned, the NATS nodes routed to each other with health checks, and the services
started only once NATS is healthy. Where a Docker engine exists, `docker compose config` must accept it;
otherwise that part skips with the reason.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic_settings import BaseSettings

from mneme.app.cli import parser
from mneme.app.settings import AuditorSettings, CoreSettings, GatewaySettings, ProjectorSettings

COMPOSE = Path(__file__).resolve().parents[1] / "compose.yaml"
SETTINGS: dict[str, type[BaseSettings]] = {  # longest prefix first
    "MNEME_GATEWAY_": GatewaySettings,
    "MNEME_PROJECTOR_": ProjectorSettings,
    "MNEME_AUDITOR_": AuditorSettings,
    "MNEME_": CoreSettings,
}
ROLES = {"gateway", "projector", "auditor"}


def services() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text())
    out: dict[str, Any] = doc["services"]
    return out


def settings_class(var: str) -> tuple[type[BaseSettings], str]:
    for prefix, cls in SETTINGS.items():
        if var.startswith(prefix):
            return cls, var[len(prefix) :].lower()
    raise AssertionError(f"{var} is not a mneme setting")


def test_the_layout_the_issue_names() -> None:
    s = services()
    roles = [svc["command"][1] for svc in s.values() if svc.get("command", [""])[0] == "mneme"]
    assert sorted(roles) == ["auditor", "cluster", "gateway", "gateway", "projector", "projector"]
    assert s["streams"]["command"][1:3] == ["cluster", "streams"] and s["streams"]["restart"] == "no"
    nats = {name: svc for name, svc in s.items() if str(svc["image"]).startswith("nats:")}
    assert len(nats) == 3 and "qdrant" in s
    for name, svc in nats.items():
        cmd = svc["command"]
        assert "-js" in cmd and cmd[cmd.index("--server_name") + 1] == name
        assert cmd[cmd.index("-c") + 1] == "/config/accounts.conf"
        assert "./accounts.conf:/config/accounts.conf:ro" in svc["volumes"]
        routes = cmd[cmd.index("--routes") + 1].split(",")
        assert sorted(routes) == sorted(f"nats://{other}:6222" for other in nats if other != name)
        assert svc["healthcheck"]["test"] and any(v.endswith(":/data") for v in svc["volumes"])


def test_every_image_is_pinned() -> None:
    for name, svc in services().items():
        image = str(svc["image"])
        repo, _, tag = image.rpartition(":")
        assert repo and tag and tag != "latest" and any(ch.isdigit() for ch in tag), f"{name}: {image}"
        if svc.get("command", [""])[0] == "mneme":
            assert svc["build"] == ".", f"{name} is built from this repository"


def test_every_command_and_variable_is_one_mneme_knows() -> None:
    for name, svc in services().items():
        cmd = svc.get("command", [])
        if not cmd or cmd[0] != "mneme":
            continue
        args = parser().parse_args(cmd[1:])
        env = svc["environment"]
        # least privilege: each process connects as its role, with that role's password from .env
        role = "admin" if args.command == "cluster" else args.command
        assert env["MNEME_NATS_USER"] == role, name
        assert env["MNEME_NATS_PASSWORD"].startswith(f"${{MNEME_NATS_PASSWORD_{role.upper()}:?"), name
        if args.command == "cluster":
            assert args.action == "streams" and args.replicas == 3
            assert all(svc["depends_on"][n]["condition"] == "service_healthy" for n in ("nats-1", "nats-2", "nats-3"))
            continue
        assert args.command in ROLES, name
        for var in env:
            cls, field = settings_class(var)
            assert field in cls.model_fields, f"{name}: {var} is no field of {cls.__name__}"
        core = CoreSettings(**{settings_class(k)[1]: v for k, v in env.items() if settings_class(k)[0] is CoreSettings})
        assert core.nats_url is not None and len(core.nats_url.split(",")) == 3 and core.stream_replicas == 3
        if args.command == "projector":
            ps = ProjectorSettings(
                **{settings_class(k)[1]: v for k, v in env.items() if settings_class(k)[0] is ProjectorSettings}
            )
            assert ps.vectors == "qdrant" and ps.qdrant_url == "http://qdrant:6333"
        if args.command == "gateway":
            assert env["MNEME_GATEWAY_PRINCIPALS_FILE"] and svc["healthcheck"]["test"]
        # started only once the streams exist (after every NATS node is healthy)
        assert svc["depends_on"]["streams"]["condition"] == "service_completed_successfully", name
        assert any(v.endswith(":/data") for v in svc.get("volumes", [])) or args.command == "gateway", name


def test_the_projectors_keep_their_own_collections() -> None:
    s = services()
    collections = [s[p]["environment"]["MNEME_PROJECTOR_QDRANT_COLLECTION"] for p in ("projector-1", "projector-2")]
    assert len(set(collections)) == 2


def test_the_accounts_and_env_files_compose_reads(tmp_path: Path) -> None:
    """`mneme cluster accounts` writes what compose.yaml mounts and interpolates: a nats-server config whose
    users are the roles, and a .env (mode 0600) with a password per role that the config holds."""
    got = subprocess.run(
        [sys.executable, "-m", "mneme", "cluster", "accounts", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 0, got.stderr
    conf = json.loads((tmp_path / "accounts.conf").read_text())
    users = {u["user"]: u for u in conf["accounts"]["MNEME"]["users"]}
    env = dict(line.split("=", 1) for line in (tmp_path / ".env").read_text().splitlines())
    assert set(users) == {"admin", "gateway", "projector", "auditor"}
    assert {k: users[k.removeprefix("MNEME_NATS_PASSWORD_").lower()]["password"] for k in env} == env
    assert (tmp_path / ".env").stat().st_mode & 0o077 == 0
    referenced = {
        v for svc in services().values() for k, v in svc.get("environment", {}).items() if k == "MNEME_NATS_PASSWORD"
    }
    assert {r.split(":?")[0].removeprefix("${") for r in referenced} == set(env)


def test_docker_compose_accepts_it() -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker command here: compose.yaml was checked statically only")
    plugin = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, timeout=30)
    if plugin.returncode != 0:
        pytest.skip(f"docker has no compose plugin here: {plugin.stderr.strip()[:200]}")
    got = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE), "config", "--quiet"], capture_output=True, text=True, timeout=60
    )
    assert got.returncode == 0, got.stderr


def test_compose_up_smoke(tmp_path: Path) -> None:
    """Where Docker runs compose: the stack built and started from a copy of this repository (accounts, .env
    and a principals file written for it), one memory written through gateway-1 and read through gateway-2,
    then everything removed. Skipped cleanly without a Docker engine and its compose plugin."""
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("no Docker engine with the compose plugin here")
    if subprocess.run([docker, "info"], capture_output=True).returncode != 0:
        pytest.skip("the docker command finds no engine")
    import anyio
    from mcp import ClientSession
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client
    from testcontainers.compose import DockerCompose

    repo = COMPOSE.parent
    for item in ("compose.yaml", "Dockerfile", "pyproject.toml", "README.md", "mneme", "schemas", "services"):
        src = repo / item
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / item)
    subprocess.run([sys.executable, "-m", "mneme", "cluster", "accounts", "--dir", str(tmp_path)], check=True)
    token = "compose-smoke-token"
    principal = {"token_sha256": hashlib.sha256(token.encode()).hexdigest(), "agent_id": "smoke", "role": "admin"}
    (tmp_path / "principals.json").write_text(json.dumps({"principals": [principal]}))

    async def round_trip() -> None:
        headers = {"Authorization": f"Bearer {token}"}
        got: dict[str, Any] = {}
        for port, tool, args in ((8765, "memory_add", {"content": "through compose"}), (8766, "memory_get", {})):
            http = create_mcp_http_client(headers=headers)
            async with (
                http,
                streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http) as (r, w, *_),
                ClientSession(r, w) as cs,
            ):
                await cs.initialize()
                res = await cs.call_tool(tool, args or {"id": got["id"]})
                assert not res.is_error, res.content
                got = res.structured_content or {}
        assert got["content"] == "through compose"

    with DockerCompose(tmp_path, compose_file_name="compose.yaml", build=True, wait=True):
        anyio.run(round_trip)
