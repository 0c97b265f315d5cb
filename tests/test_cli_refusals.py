"""The operator's command line: a refusal is one clear line and exit status 1, never a traceback, and
never a store created by mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from mneme.embedded_nats import EmbeddedNats
from tests.cli_checks import mneme, refused

pytestmark = pytest.mark.anyio


def test_commands_on_a_directory_without_data_refuse_and_create_nothing(tmp_path: Path) -> None:
    typo = tmp_path / "typo"
    for args in (["snapshot"], ["replay"], ["rebuild"]):
        refused(mneme(*args, "--data-dir", str(typo)), str(typo))
        assert not typo.exists(), args
    empty = tmp_path / "empty"
    empty.mkdir()
    for args in (["snapshot"], ["replay"], ["rebuild"]):
        refused(mneme(*args, "--data-dir", str(empty)), str(empty))
        assert list(empty.iterdir()) == [], args


async def test_replay_refuses_a_bad_model_or_upto_before_building_and_cleans_up_a_failure(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:  # fmt: skip
    data = tmp_path / "data"
    data.mkdir()
    url = nats_server.url or ""
    refused(mneme("replay", "--data-dir", str(data), "--nats-url", url, "--model", "bogus"), "--model", "'bogus'",
            "paraphrase-minilm-l3")  # fmt: skip
    refused(mneme("replay", "--data-dir", str(data), "--nats-url", url, "--upto", "99999"), "--upto", "99999",
            "head of the log (0)")  # fmt: skip
    assert list(data.iterdir()) == [], "nothing is built for a refused replay"
    # a failure mid-build (the vector store is out of reach) leaves no half-built generation
    unreachable = {"MNEME_PROJECTOR_VECTORS": "qdrant", "MNEME_PROJECTOR_QDRANT_URL": "http://127.0.0.1:1"}
    res = mneme("replay", "--data-dir", str(data), "--nats-url", url, env=unreachable)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert "replay failed" in res.stderr.strip().splitlines()[-1]
    assert not (data / "projections").exists()


def test_a_server_with_an_unknown_model_refuses_before_anything_starts(tmp_path: Path) -> None:
    data = tmp_path / "d"
    refused(mneme("serve", "--data-dir", str(data), env={"MNEME_PROJECTOR_EMBEDDING_MODEL": "bogus"}, stdin=""),
            "MNEME_PROJECTOR_EMBEDDING_MODEL", "'bogus'")  # fmt: skip
    assert not data.exists()
