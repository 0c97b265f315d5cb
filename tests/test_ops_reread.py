"""Issue 28, item 8: a recorded read of a memory's history or diff, of stats, or of graph nodes (search_nodes,
graph_get) is asked again as of its log position after later writes, and matches; a read that cannot be asked
again (a status, a record kept without its query) says so (`rerunnable: false`, the reason; `mneme audit
reread` prints NOT RE-RUNNABLE and exits 3), so that a MISMATCH (exit 1) means only that the answer differs."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from mcp import Client

from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from mneme.ids import new_id
from schemas import subjects as S
from schemas.access import ReadRecorded, decode_access, encode_access
from services.gateway.server import build_server
from tests.harness import Stack, start_stack
from tests.test_reread import BOT, DANA, as_, mneme  # (the same principals and helpers)

pytestmark = pytest.mark.anyio

GROUPS = ["core", "time", "governance", "audit", "graph", "system", "debug"]


async def test_history_diff_stats_and_graph_reads_are_asked_again_and_match(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    gs = GatewaySettings(agent_id="bot", namespace="acme/web", namespaces=["acme/*"], tools=GROUPS)
    stack = await start_stack(tmp_path / "d", nats_server, gs)
    try:
        m1 = (await as_(stack, BOT, "memory_add", content="The harbour opens at six", tags=["port"]))["id"]
        await as_(stack, BOT, "memory_update", id=m1, content="The harbour opens at seven")
        await as_(stack, BOT, "memory_add", content="The ferry leaves at noon", kind="fact", category="ops",
                  subject="Ferry", importance=0.9, metadata={"line": 7}, store="port", path="ferry/noon",
                  expires_at="2020-01-01T00:00:00Z")  # fmt: skip
        await as_(stack, BOT, "graph_entity", name="Harbour", type="place", add=["opens at seven"])
        await as_(stack, BOT, "graph_entity", name="Ferry", type="vessel", add=["leaves from the harbour"])

        history = await as_(stack, BOT, "memory_history", id=m1)
        diff = await as_(stack, BOT, "memory_diff", id=m1, from_version=1)
        stats = await as_(stack, BOT, "memory_stats")
        found = await as_(stack, BOT, "graph_get", text="harbour")
        stack.gateway.principal = BOT
        async with Client(build_server(stack.gateway, profile="server-memory")) as kg:
            nodes = (await kg.call_tool("search_nodes", {"query": "harbour"})).structured_content
        status = await as_(stack, BOT, "memory_status")
        assert [v["version"] for v in history["results"]] == [1, 2] and diff["to_version"] == 2
        assert stats["total"] == 2 and {e["name"] for e in found["results"]} == {"Harbour", "Ferry"}
        assert {e["name"] for e in nodes["entities"]} == {"Harbour", "Ferry"} and status

        # later writes that change every one of those answers, were they asked again as of now
        await as_(stack, BOT, "memory_update", id=m1, content="The harbour opens at eight")
        await as_(stack, BOT, "memory_add", content="The lighthouse is closed", tags=["port"], subject="ferry")
        await as_(stack, BOT, "memory_retire", id=m1, mode="archive")
        await as_(stack, BOT, "graph_entity", name="Harbour", type="place", add=["closed on Sundays"])
        await as_(stack, BOT, "graph_entity", name="Harbour master", type="person", add=["works at the harbour"])
        await stack.settle()

        page = await as_(stack, DANA, "audit_reads", agent_id="bot")
        reads = {r["operation"]: r for r in page["results"]}
        assert set(reads) >= {"memory_history", "memory_diff", "memory_stats", "graph_get", "search_nodes"}, reads
        for op in ("memory_history", "memory_diff", "memory_stats", "graph_get", "search_nodes"):
            again = await as_(stack, DANA, "audit_reread", trail_seq=reads[op]["trail_seq"])
            assert again["match"] is True and again["differences"] == [] and again.get("rerunnable"), (op, again)
        assert reads["memory_history"]["versions"] == [1, 2] and reads["memory_diff"]["versions"] == [1, 2]
        again = await as_(stack, DANA, "audit_reread", trail_seq=reads["memory_history"]["trail_seq"])
        assert [(r["version"], r["recorded_version"]) for r in again["results"]] == [(1, 1), (2, 2)]
        assert again["results"][1]["content"] == "The harbour opens at seven"  # as it was then
        again = await as_(stack, DANA, "audit_reread", trail_seq=reads["memory_stats"]["trail_seq"])
        assert again["figures"]["total"] == 2 and again["as_of"]["seq"] == reads["memory_stats"]["seq"]

        # a status cannot be asked again: said so, without a verdict
        status_read = reads["memory_status"]["trail_seq"]
        cannot = await as_(stack, DANA, "audit_reread", trail_seq=status_read)
        assert cannot["rerunnable"] is False and "match" not in cannot and cannot["differences"] == [], cannot
        assert "memory_status" in cannot["reason"]

        # a forged history record (a version the memory did not have then): a MISMATCH, naming it
        source = await access_seq(stack, reads["memory_history"]["trail_seq"])
        original = decode_access((await stack.nc.jetstream().get_msg(S.ACCESS_STREAM, seq=source)).data or b"")
        assert isinstance(original, ReadRecorded) and original.query is not None
        forged = msgspec.structs.replace(original, record_id=new_id(), request_id="forged", versions=(1, 2, 3))
        await stack.nc.jetstream().publish(S.access_subject("read", forged.namespace), encode_access(forged))
        # and a record as gateways wrote them before reads kept their query: not re-runnable
        old: dict[str, object] = {
            "type": "read",
            "record_id": new_id(),
            "at": "2026-01-02T03:04:05Z",
            "agent_id": "bot",
        }
        old["role"] = "agent"
        old |= {"request_id": "old", "namespace": "acme/web", "operation": "memory_history", "memory_ids": [m1]}
        await stack.nc.jetstream().publish(S.access_subject("read", "acme/web"), json.dumps(old).encode())
        await stack.settle()
        page = await as_(stack, DANA, "audit_reads", agent_id="bot", offset=page["total"])
        assert [r["request_id"] for r in page["results"]] == ["forged", "old"]
        tampered, before = page["results"][0]["trail_seq"], page["results"][1]["trail_seq"]
        bad = await as_(stack, DANA, "audit_reread", trail_seq=tampered)
        assert bad["rerunnable"] is True and bad["match"] is False
        assert bad["differences"] == [f"{m1}: version 3 recorded (rank 3), not in the re-run"], bad
        unknown = await as_(stack, DANA, "audit_reread", trail_seq=before)
        assert unknown["rerunnable"] is False and "match" not in unknown and "keeps no query" in unknown["reason"]

        # the command, as the operator: exit 0 on a match, 1 on a mismatch, 3 when it cannot be asked again
        url = stack.url
        for op in ("memory_history", "memory_stats", "search_nodes"):
            code, out, err = await mneme("audit", "reread", str(reads[op]["trail_seq"]), "--nats-url", url)
            assert code == 0 and ": MATCH" in out, (op, code, out, err)
        code, out, err = await mneme("audit", "reread", str(tampered), "--nats-url", url)
        assert code == 1 and "MISMATCH" in out and "version 3 recorded" in out, out + err
        for trail_seq in (status_read, before):
            code, out, err = await mneme("audit", "reread", str(trail_seq), "--nats-url", url)
            assert code == 3 and "NOT RE-RUNNABLE" in out and "MISMATCH" not in out, out + err
        code, out, err = await mneme("audit", "reread", str(status_read), "--nats-url", url, "--json")
        assert code == 3 and json.loads(out)["rerunnable"] is False, out + err
    finally:
        await stack.close()


async def access_seq(stack: Stack, trail_seq: int) -> int:
    row = stack.trail.con.execute("SELECT source_seq FROM audit_trail WHERE trail_seq = ?", [trail_seq]).fetchone()
    assert row is not None
    return int(row[0])


async def test_the_exit_codes_of_reread_are_in_its_help() -> None:
    code, out, _ = await mneme("audit", "--help")
    text = " ".join(out.split())
    assert code == 0 and "exit status" in text
    for words in ("0 MATCH", "1 MISMATCH", "3 NOT RE-RUNNABLE"):
        assert words in text, text
