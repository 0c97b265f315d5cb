"""Sync before acknowledging, by default (issue 29, item 1): every nats-server mneme starts runs JetStream with
`sync_interval: always`, unless MNEME_NATS_SYNC trades it back, which is said once at start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from mneme import durability, nats_auth
from mneme.app.cluster import LocalCluster, write_accounts
from mneme.app.settings import CoreSettings
from mneme.embedded_nats import EmbeddedNats

pytestmark = pytest.mark.anyio


def _config_of(pid: int) -> dict[str, object]:
    """The configuration file a running nats-server was started with, read through its command line."""
    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    conf = Path(args[args.index(b"-c") + 1].decode())
    parsed: dict[str, object] = json.loads(conf.read_text())
    return parsed


async def test_the_embedded_server_syncs_before_acknowledging_by_default(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    await server.start()
    try:
        assert server.proc is not None
        assert _config_of(server.proc.pid)["jetstream"] == {"sync_interval": "always"}
        nc = NATS()
        assert server.url is not None
        await nc.connect(server.url)  # and it serves JetStream with that configuration
        js = nc.jetstream()
        await js.add_stream(name="T", subjects=["t.>"])
        assert (await js.publish("t.x", b"x")).seq == 1
        await nc.close()
    finally:
        await server.stop()


async def test_a_timer_is_an_operator_choice(tmp_path: Path) -> None:
    server = EmbeddedNats(tmp_path / "nats", sync="2m")
    await server.start()
    try:
        assert server.proc is not None
        assert _config_of(server.proc.pid)["jetstream"] == {"sync_interval": "2m"}
    finally:
        await server.stop()


def test_the_setting_is_checked_and_its_warning_says_what_can_be_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    assert CoreSettings().nats_sync == "always" and durability.warning("always") is None
    monkeypatch.setenv("MNEME_NATS_SYNC", "1s")
    assert CoreSettings().nats_sync == "1s"
    warn = durability.warning("1s")
    assert warn is not None and "power cut can lose up to 1s of acknowledged writes" in warn
    for bad in ("sometimes", "0s", "-1s", "2 minutes", ""):
        monkeypatch.setenv("MNEME_NATS_SYNC", bad)
        with pytest.raises(ValueError, match=r"nats_sync|always"):
            CoreSettings()


def test_every_cluster_node_and_compose_accounts_sync_always(tmp_path: Path) -> None:
    c = LocalCluster(tmp_path / "c", nodes=3, gateways=0, projectors=0, auditors=0)
    conf = tmp_path / "c" / "nats" / "accounts.conf"
    assert c.passwords is not None
    accounts = json.loads(nats_auth.server_config(c.passwords))
    durability.write_config(conf, c.sync, accounts)  # what start_nats writes before the nodes start
    for node in c.layout.nodes:
        args = c._node_args(node)
        assert Path(args[args.index("-c") + 1]) == conf
    written = json.loads(conf.read_text())
    assert written["jetstream"] == {"sync_interval": "always"} and "accounts" in written
    assert oct(conf.stat().st_mode & 0o777) == "0o600"  # it holds the passwords
    compose = json.loads(Path(write_accounts(tmp_path / "compose")["accounts"]).read_text())
    assert compose["jetstream"] == {"sync_interval": "always"} and "accounts" in compose


def test_serve_warns_once_when_traded_back(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEME_")} | {"MNEME_NATS_SYNC": "1s"}
    mneme = str(Path(sys.executable).parent / "mneme")
    proc = subprocess.run(
        [mneme, "serve", "--data-dir", str(tmp_path / "d")], input=b"", capture_output=True, env=env, timeout=60
    )
    lines = [ln for ln in proc.stderr.decode().splitlines() if "MNEME_NATS_SYNC" in ln]
    assert len(lines) == 1 and "acknowledged writes" in lines[0], proc.stderr.decode()[-2000:]
