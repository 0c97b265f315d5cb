"""Non-ASCII text everywhere (issue 9, items 1 and 16): content and metadata in any script, emoji included,
through stats, lists, exports and the replay digest; identifiers refuse control and format characters."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import duckdb
import pytest

from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from tests.harness import MNEME, Stack, ToolFailure, start_stack

pytestmark = pytest.mark.anyio

TEXTS = [
    "Jürgen lives in Zürich",
    "東京の会議は月曜日です",
    "🚀 launch on Friday 🎉",
    "مرحبا بالعالم: the API gateway",
    "naïve café crème brûlée, Ελληνικά, Русский",
    "a family emoji 👨‍👩‍👧 and a flag 🇨🇭",
]


async def test_stats_list_and_get_with_non_ascii_content_and_metadata(stack: Stack) -> None:
    ids = []
    for i, text in enumerate(TEXTS):
        ids.append(
            (
                await stack.call(
                    "memory_add",
                    content=text,
                    subject="Jürgen",
                    category="Zürich ☕",
                    tags=["straße", "🚀"],
                    metadata={"città": "Zürich", "emoji": "🚀", "i": i},
                    store="s",
                    path=f"notes/n{i}",
                )
            )["id"]
        )
    stats = await stack.call("memory_stats")
    assert stats["total"] == len(TEXTS)
    meta = sum(
        len(json.dumps({"città": "Zürich", "emoji": "🚀", "i": i}, ensure_ascii=False, separators=(",", ":")).encode())
        for i in range(len(TEXTS))
    )
    assert stats["storage_bytes"] == sum(len(t.encode()) for t in TEXTS) + meta
    assert stats["by_subject"] == {"jürgen": len(TEXTS)} and stats["by_category"] == {"Zürich ☕": len(TEXTS)}
    # archived, and as of a past moment: the same query path
    await stack.call("memory_retire", id=ids[0], mode="archive")
    assert (await stack.call("memory_stats"))["total"] == len(TEXTS)
    assert (await stack.call("memory_stats", as_of=2))["total"] == 2
    listed = await stack.call("memory_list", tags=["Straße"], limit=50)
    assert {m["content"] for m in listed["results"]} == set(TEXTS[1:])
    got = await stack.call("memory_get", id="s:notes/n2")
    assert got["content"] == TEXTS[2] and got["metadata"]["città"] == "Zürich"
    recent = await stack.call("memory_list", limit=10)
    assert {e["content"] for e in recent["results"]} >= set(TEXTS[1:])


async def test_audit_export_with_non_ascii_principal_and_content(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    gs = GatewaySettings(agent_id="jürgen-🚀", role="admin", namespace="acme/web", namespaces=["acme/*"])
    stack = await start_stack(tmp_path / "d", nats_server, gs)
    try:
        for text in TEXTS:
            await stack.call("memory_add", content=text)
        found = await stack.call("audit_query", agent_id="jürgen-🚀")
        assert found["total"] == len(TEXTS)
        await stack.settle()
    finally:
        await stack.close()
    for fmt in ("jsonl", "parquet"):
        out = tmp_path / f"trail.{fmt}"
        res = subprocess.run([MNEME, "audit", "export", "--data-dir", str(tmp_path / "d"), "--out", str(out),
                              "--format", fmt, "--agent", "jürgen-🚀"], capture_output=True, timeout=60)  # fmt: skip
        assert res.returncode == 0, res.stderr.decode()
        if fmt == "jsonl":
            rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
            assert {r["agent_id"] for r in rows} == {"jürgen-🚀"}
        else:
            rows = duckdb.connect().execute(f"SELECT agent_id FROM read_parquet('{out}')").fetchall()
            assert {r[0] for r in rows} == {"jürgen-🚀"}
        assert len(rows) >= len(TEXTS)
    verify = subprocess.run(
        [MNEME, "audit", "verify", "--data-dir", str(tmp_path / "d")], capture_output=True, timeout=60
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.mark.parametrize(
    "bad", ["a\x00b", "ansi \x1b[31mred", "line\nbreak", "rtl \u202eevil", "zero\u200bwidth", "bell\x07"]
)
@pytest.mark.parametrize("where", ["tags", "subject", "category", "metadata_key", "citations"])
async def test_identifiers_refuse_control_and_format_characters(stack: Stack, bad: str, where: str) -> None:
    args: dict[str, object] = {"content": f"content keeps them: {bad}"}
    field = {
        "tags": "tags",
        "subject": "subject",
        "category": "category",
        "metadata_key": "metadata",
        "citations": "citations",
    }[where]
    if where == "tags":
        args["tags"] = [bad]
    elif where == "metadata_key":
        args["metadata"] = {"nested": {bad: 1}}
    elif where == "citations":
        args["citations"] = [bad]
    else:
        args[where] = bad
    if bad == "line\nbreak" and where in ("subject", "category"):  # labels collapse whitespace to one space
        m = await stack.call("memory_add", **args)
        assert (await stack.call("memory_get", id=m["id"]))[where] == "line break"
        return
    head = await stack.last_seq()
    with pytest.raises(ToolFailure) as err:
        await stack.call("memory_add", **args)
    assert err.value.code == "INVALID_INPUT", err.value.error
    assert err.value.field is not None and err.value.field.startswith(field), err.value.error
    assert "U+" in err.value.error["message"]
    assert await stack.last_seq() == head  # nothing written
    # an update is held to the same rule
    m = await stack.call("memory_add", content=f"content keeps them: {bad}")
    assert (await stack.call("memory_get", id=m["id"]))["content"] == f"content keeps them: {bad}"
    upd = {k: v for k, v in args.items() if k != "content"}
    with pytest.raises(ToolFailure) as err:
        await stack.call("memory_update", id=m["id"], **upd)
    assert err.value.code == "INVALID_INPUT"
