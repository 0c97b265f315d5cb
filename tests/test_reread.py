"""What did this agent see? An agent's recorded reads (get, list, search), each asked again as of the log
position it was answered at after later updates, deletes and additions: the same ids and versions come back,
with per-signal scores for the search; a record whose ids cannot be reproduced at its position is reported
as a mismatch, by the tool (`audit_reread`) and by the command (`mneme audit reread`); one kept without its
query is not re-runnable (no verdict; tests/test_ops_reread.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
import pytest

from mneme.app.settings import GatewaySettings
from mneme.embedded_nats import EmbeddedNats
from mneme.ids import new_id
from mneme.principals import Principal
from schemas import subjects as S
from schemas.access import ReadRecorded, decode_access, encode_access
from tests.cli_checks import ENV
from tests.harness import MNEME, Stack, ToolFailure, start_stack

pytestmark = pytest.mark.anyio

GROUPS = ["core", "time", "governance", "audit", "graph", "debug"]
BOT = Principal(agent_id="bot", role="agent", namespaces=("acme/*",), default_namespace="acme/web")
DANA = Principal(agent_id="dana", role="admin", namespaces=("acme/*",), default_namespace="acme/web")


async def as_(stack: Stack, who: Principal, tool: str, **args: object) -> dict:
    stack.gateway.principal = who
    return await stack.call(tool, **args)


async def mneme(*args: str) -> tuple[int, str, str]:
    """The `mneme` command, run while this process keeps serving the stack it asks."""
    proc = await asyncio.create_subprocess_exec(
        MNEME, *args, env=ENV, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_recorded_reads_are_asked_again_as_they_were_answered(tmp_path: Path, nats_server: EmbeddedNats) -> None:
    gs = GatewaySettings(agent_id="bot", namespace="acme/web", namespaces=["acme/*"], tools=GROUPS)
    stack = await start_stack(tmp_path / "d", nats_server, gs, vectors=True)
    try:
        add = lambda text: as_(stack, BOT, "memory_add", content=text)  # noqa: E731
        m1 = (await add("Postgres is the primary database of the billing service"))["id"]
        m2 = (await add("The billing service database is backed up nightly"))["id"]
        m3 = (await add("Redis caches the web sessions"))["id"]
        got = await as_(stack, BOT, "memory_get", id=m1)
        listed = await as_(stack, BOT, "memory_list")
        found = await as_(stack, BOT, "memory_search", query="billing service database")
        assert got["version"] == 1 and {r["id"] for r in listed["results"]} == {m1, m2, m3}
        assert {r["id"] for r in found["results"][:2]} == {m1, m2}

        # later writes that change every one of those answers
        await as_(stack, BOT, "memory_update", id=m1, content="MySQL is the primary database of the billing service")
        await as_(stack, BOT, "memory_retire", id=m2, mode="delete")
        await as_(stack, BOT, "memory_retire", id=m3)
        m4 = (await add("The billing service database moves to Postgres 16"))["id"]
        now = await as_(stack, BOT, "memory_list")
        assert [r["id"] for r in now["results"]] == [m4, m1]
        await stack.settle()

        with pytest.raises(ToolFailure) as denied:
            await as_(stack, BOT, "audit_reads")
        assert denied.value.code == "PERMISSION_ERROR"
        page = await as_(stack, DANA, "audit_reads", agent_id="bot")
        reads = {r["operation"]: r for r in page["results"]}
        assert page["total"] == 4 and [r["operation"] for r in page["results"]] == [
            "memory_get", "memory_list", "memory_search", "memory_list",
        ]  # fmt: skip
        get, lst, search = reads["memory_get"], page["results"][1], reads["memory_search"]
        assert get["memory_ids"] == [m1] and get["versions"] == [1] and get["arguments"]["memory_id"] == m1
        assert sorted(lst["memory_ids"]) == sorted([m1, m2, m3]) and lst["versions"] == [1, 1, 1]
        assert search["arguments"]["query"] == "billing service database" and search["arguments"]["mode"] == "hybrid"
        assert get["seq"] == lst["seq"] == search["seq"] == 3  # the three adds, nothing after

        for read in (get, lst, search):
            again = await as_(stack, DANA, "audit_reread", trail_seq=read["trail_seq"])
            assert again["match"] is True and again["differences"] == [], again
            assert again["as_of"]["seq"] == read["seq"]
            assert [r["id"] for r in again["results"]] == read["memory_ids"]
            assert [r["version"] for r in again["results"]] == read["versions"]
            assert all(r["rank"] == r["recorded_rank"] for r in again["results"])
        content = {r["id"]: r["content"] for r in again["results"]}
        assert content[m1] == "Postgres is the primary database of the billing service"  # as it was then
        for r, hit in zip(again["results"], found["results"], strict=True):  # the search: every signal, as then
            assert r["semantic_score"] > 0 and r["keyword_score"] > 0
            assert r["score"] == pytest.approx(hit["score"], abs=1e-3) == pytest.approx(r["recorded_score"], abs=1e-3)
        assert again["model"] and again["score_drift"] is not None

        # A tampered record: the list's record, claiming it was answered after the later writes. The trail chains
        # it as it came; asked again at that position, the recorded ids and versions cannot be reproduced.
        data = await stack.nc.jetstream().get_msg(S.ACCESS_STREAM, seq=await access_seq(stack, lst["trail_seq"]))
        original = decode_access(data.data or b"")
        assert isinstance(original, ReadRecorded) and original.query is not None
        head = await stack.last_seq()
        forged = msgspec.structs.replace(original, record_id=new_id(), request_id="forged", seq=head)
        await stack.nc.jetstream().publish(S.access_subject("read", forged.namespace), encode_access(forged))
        # and a record as gateways wrote them before reads kept their position, versions and query: it still
        # decodes, and says it cannot be asked again
        old: dict[str, object] = {
            "type": "read",
            "record_id": new_id(),
            "at": "2026-01-02T03:04:05Z",
            "agent_id": "bot",
        }
        old |= {"role": "agent", "request_id": "old", "namespace": "acme/web", "operation": "memory_list"}
        old["memory_ids"] = [m1]
        await stack.nc.jetstream().publish(S.access_subject("read", "acme/web"), json.dumps(old).encode())
        await stack.settle()
        page = await as_(stack, DANA, "audit_reads", agent_id="bot", offset=4)
        assert [r["request_id"] for r in page["results"]] == ["forged", "old"]
        tampered, before = page["results"][0]["trail_seq"], page["results"][1]
        assert before["memory_ids"] == [m1] and "seq" not in before and "arguments" not in before
        unknown = await as_(stack, DANA, "audit_reread", trail_seq=before["trail_seq"])
        assert unknown["rerunnable"] is False and "match" not in unknown and "keeps no query" in unknown["reason"]
        bad = await as_(stack, DANA, "audit_reread", trail_seq=tampered)
        assert bad["match"] is False and bad["as_of"]["seq"] == head
        assert any(d.startswith(f"{m2}: recorded") for d in bad["differences"]), bad["differences"]
        assert f"{m1}: version 1 recorded, 2 in the re-run" in bad["differences"]
        assert any(d.startswith(f"{m4}: in the re-run") for d in bad["differences"])

        # the command, as the operator: the same reads, the same verdicts
        url = stack.url
        code, out, err = await mneme("audit", "reads", "--nats-url", url, "--agent", "bot", "--json")
        assert code == 0, err
        assert [r["trail_seq"] for r in json.loads(out)["results"]][:3] == [
            get["trail_seq"], lst["trail_seq"], search["trail_seq"],
        ]  # fmt: skip
        code, out, err = await mneme("audit", "reads", "--nats-url", url, "--agent", "bot")
        assert code == 0 and "memory_search" in out and 'query="billing service database"' in out, out + err
        code, out, err = await mneme("audit", "reread", str(search["trail_seq"]), "--nats-url", url, "--json")
        assert code == 0 and json.loads(out)["match"] is True, out + err
        code, out, err = await mneme("audit", "reread", str(tampered), "--nats-url", url)
        assert code == 1 and "MISMATCH" in out and f"{m1}: version 1 recorded, 2 in the re-run" in out, out + err
    finally:
        await stack.close()


async def access_seq(stack: Stack, trail_seq: int) -> int:
    row = stack.trail.con.execute("SELECT source_seq FROM audit_trail WHERE trail_seq = ?", [trail_seq]).fetchone()
    assert row is not None
    return int(row[0])


async def test_the_command_needs_the_running_mneme(tmp_path: Path) -> None:
    code, _, err = await mneme("audit", "reread", "1", "--data-dir", str(tmp_path))
    assert code == 1 and "no mneme serve runs on" in err and "Traceback" not in err, err
    code, _, err = await mneme("audit", "reread", "--data-dir", str(tmp_path))
    assert code == 1 and "trail_seq" in err, err
