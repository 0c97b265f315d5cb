"""The operator's command line: a refusal is one clear line and exit status 1, never a traceback, and
never a store created by mistake."""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from pathlib import Path

import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client

from mneme.app.settings import TOOL_GROUPS, CoreSettings
from mneme.embedded_nats import EmbeddedNats, running_url
from tests.cli_checks import mneme, refused
from tests.harness import serve_params

pytestmark = pytest.mark.anyio


def test_commands_on_a_directory_without_data_refuse_and_create_nothing(tmp_path: Path) -> None:
    typo = tmp_path / "typo"
    for args in (["snapshot"], ["replay"], ["rebuild"], ["audit", "verify"], ["audit", "export", "--out", "x"]):
        refused(mneme(*args, "--data-dir", str(typo)), str(typo))
        assert not typo.exists(), args
    empty = tmp_path / "empty"
    empty.mkdir()
    for args in (["snapshot"], ["replay"], ["rebuild"], ["audit", "verify"]):
        refused(mneme(*args, "--data-dir", str(empty)), str(empty))
        assert list(empty.iterdir()) == [], args


def test_audit_export_names_a_bad_time_flag(tmp_path: Path) -> None:
    line = refused(
        mneme("audit", "export", "--data-dir", str(tmp_path), "--out", str(tmp_path / "x"), "--since", "yesterday"),
        "--since",
        "'yesterday'",
        "ISO 8601",
    )
    assert "2026-11-26T14:02:00Z" in line, "it shows the accepted format"
    refused(
        mneme("audit", "export", "--data-dir", str(tmp_path), "--out", str(tmp_path / "x"), "--until", "soon"),
        "--until",
    )


async def test_replay_refuses_a_bad_model_or_upto_before_building_and_cleans_up_a_failure(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    url = nats_server.url or ""
    refused(
        mneme("replay", "--data-dir", str(data), "--nats-url", url, "--model", "bogus"),
        "--model",
        "'bogus'",
        "paraphrase-minilm-l3",
    )
    refused(
        mneme("replay", "--data-dir", str(data), "--nats-url", url, "--upto", "99999"),
        "--upto",
        "99999",
        "head of the log (0)",
    )
    assert list(data.iterdir()) == [], "nothing is built for a refused replay"
    # a failure mid-build (the vector store is out of reach) leaves no half-built generation
    unreachable = {"MNEME_PROJECTOR_VECTORS": "qdrant", "MNEME_PROJECTOR_QDRANT_URL": "http://127.0.0.1:1"}
    res = mneme("replay", "--data-dir", str(data), "--nats-url", url, env=unreachable)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert "replay failed" in res.stderr.strip().splitlines()[-1]
    assert not (data / "projections").exists()


def test_hash_token_reads_stdin_and_refuses_an_empty_token() -> None:
    want = hashlib.sha256(b"s3cret-token").hexdigest()
    res = mneme("hash-token", stdin="s3cret-token\n")
    assert (res.returncode, res.stdout.strip(), res.stderr) == (0, want, "")
    refused(mneme("hash-token", stdin=""), "empty")
    refused(mneme("hash-token", stdin="  \n"), "empty")
    refused(mneme("hash-token", ""), "empty")
    res = mneme("hash-token", "s3cret-token")  # still works, with a warning
    assert (res.returncode, res.stdout.strip()) == (0, want)
    assert "visible" in res.stderr and "stdin" in res.stderr


def test_audit_help_describes_each_filter() -> None:
    text = " ".join(mneme("audit", "--help").stdout.split())
    assert "times ISO 8601" not in text
    for want in (
        "--since SINCE export: only records from this time on (ISO 8601",
        "--until UNTIL export: only records before this time (ISO 8601)",
        "--agent AGENT export, reads: only records of this agent id",
        "--memory MEMORY export: only records that touch this memory id",
        "--action-prefix ACTION_PREFIX export: only records whose action starts with this",
    ):
        assert want in text, (want, text)


def test_a_server_with_an_unknown_model_refuses_before_anything_starts(tmp_path: Path) -> None:
    data = tmp_path / "d"
    refused(
        mneme("serve", "--data-dir", str(data), env={"MNEME_PROJECTOR_EMBEDDING_MODEL": "bogus"}, stdin=""),
        "MNEME_PROJECTOR_EMBEDDING_MODEL",
        "'bogus'",
    )
    assert not data.exists()


def test_a_bad_setting_is_named_on_one_line(tmp_path: Path) -> None:
    refused(
        mneme("serve", "--data-dir", str(tmp_path / "d"), env={"MNEME_GATEWAY_PORT": "eighty"}, stdin=""),
        "MNEME_GATEWAY_PORT",
        "integer",
    )
    assert not (tmp_path / "d").exists()


def test_a_bad_tool_group_names_the_flag_or_the_variable_and_every_group(tmp_path: Path) -> None:
    """Issue 28, item 11: `--tools core,bogus` named MNEME_GATEWAY_TOOLS_1; the help left `debug` out."""
    d = str(tmp_path / "d")
    for cmd in (["serve", "--data-dir", d], ["gateway", "--nats-url", "nats://127.0.0.1:1"]):
        line = refused(mneme(*cmd, "--tools", "core,bogus", stdin=""), "--tools: 'bogus'", "'debug'")
        assert "MNEME_GATEWAY_TOOLS" not in line and "_1" not in line, line
        line = refused(mneme(*cmd, env={"MNEME_GATEWAY_TOOLS": "core,bogus"}, stdin=""), "MNEME_GATEWAY_TOOLS: 'bogus'")
        assert "TOOLS_1" not in line, line
        helped = mneme(cmd[0], "--help").stdout
        assert all(g in " ".join(helped.split()) for g in TOOL_GROUPS), helped
    refused(mneme("serve", "--data-dir", d, "--transport", "http", "--port", "99999", stdin=""), "--port: must be")
    assert not (tmp_path / "d").exists()


async def test_a_second_serve_or_a_rebuild_beside_a_running_serve_never_starts_a_second_nats_server(
    tmp_path: Path,
) -> None:
    """A second `mneme serve` on a served directory is refused before it touches the store, and `mneme rebuild
    --output` uses the running serve's NATS: before, each started a second nats-server on the same JetStream
    store and overwrote `client-url`, so `mneme status`, `snapshot` and `replay` lost the running serve."""
    data = tmp_path / "d"
    async with stdio_client(serve_params(data)) as (r, w), ClientSession(r, w) as cs:
        await cs.initialize()
        assert not (await cs.call_tool("memory_add", {"content": "the harbour opens at six"})).is_error
        url_file = data / "nats" / "client-url"
        before = url_file.read_text()
        assert running_url(data / "nats") is not None
        second = await asyncio.to_thread(mneme, "serve", "--data-dir", str(data), stdin="")
        refused(second, "already running", str(data))
        rebuilt = await asyncio.to_thread(
            mneme, "rebuild", "--data-dir", str(data), "--output", str(tmp_path / "copy.duckdb")
        )
        assert rebuilt.returncode == 0, rebuilt.stderr
        assert url_file.read_text() == before
        status = await asyncio.to_thread(mneme, "status", "--data-dir", str(data))
        assert status.returncode == 0, status.stderr
        assert not (await cs.call_tool("memory_add", {"content": "and closes at ten"})).is_error


def test_an_empty_nats_url_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MNEME_NATS_URL", "")
    monkeypatch.setenv("MNEME_NATS_USER", " ")
    core = CoreSettings()
    assert core.nats_url is None and core.nats_user is None


async def test_a_nats_server_that_cannot_start_says_why_and_leaves_no_ports_directory(tmp_path: Path) -> None:
    """Its own reason (stderr), not the tail of an old log from an earlier run; no /tmp/mneme-nats-* left."""
    store = tmp_path / "nats"
    store.mkdir()
    (store / "nats-server.log").write_text("[1] 2026/01/01 an old run on /somewhere/else\n")
    os.utime(store / "nats-server.log", (0, 0))
    (store / "nats-server.pid").mkdir()  # nats-server cannot write its pid file there
    before = set(Path(tempfile.gettempdir()).glob("mneme-nats-*"))
    with pytest.raises(RuntimeError) as err:
        await EmbeddedNats(store).start()
    assert "an old run" not in str(err.value) and "nats-server exited" in str(err.value), err.value
    assert set(Path(tempfile.gettempdir()).glob("mneme-nats-*")) == before


def test_a_database_name_with_a_directory_part_is_refused(tmp_path: Path) -> None:
    """MNEME_PROJECTOR_DB_NAME=../../x.duckdb wrote outside the data directory."""
    res = mneme("rebuild", "--data-dir", str(tmp_path), env={"MNEME_PROJECTOR_DB_NAME": "../../x.duckdb"})
    refused(res, "MNEME_PROJECTOR_DB_NAME", "file name")
    assert not (tmp_path.parent.parent / "x.duckdb").exists()


def test_a_list_or_mapping_variable_that_is_not_json_is_named(tmp_path: Path) -> None:
    res = mneme("status", "--data-dir", str(tmp_path), env={"MNEME_GATEWAY_STORES": "{bad"})
    refused(res, "MNEME_GATEWAY_STORES", "not valid JSON")
