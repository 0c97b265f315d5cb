"""End to end: the `mneme serve` command, driven by the mcp package's ClientSession over stdio."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client

from mneme.embedded_nats import is_alive
from tests.harness import MNEME, ToolFailure, hints_of, nats_pid, result_of, serve_params, wait_dead

pytestmark = pytest.mark.anyio

TOOLS = {
    "memory_search", "memory_add", "memory_get", "memory_update", "memory_retire", "memory_list",
    "memory_restore", "memory_move", "memory_stats", "memory_prune_expired",
    "memory_history", "memory_diff",
    "memory_verify", "memory_lock", "memory_unlock",
    "audit_query",
    "graph_entity", "graph_relate", "graph_get", "graph_forget",
}  # fmt: skip


class Session:
    def __init__(self, s: ClientSession):
        self.s = s

    async def __call__(self, tool: str, **args: Any) -> dict[str, Any]:
        return result_of(await self.s.call_tool(tool, args))

    async def fails(self, tool: str, **args: Any) -> ToolFailure:
        with pytest.raises(ToolFailure) as err:
            await self(tool, **args)
        return err.value


async def test_every_tool_over_stdio(tmp_path: Path) -> None:
    async with stdio_client(serve_params(tmp_path / "d")) as (r, w), ClientSession(r, w) as cs:
        await cs.initialize()
        call = Session(cs)
        listed = {t.name: t for t in (await cs.list_tools()).tools}
        assert set(listed) == TOOLS
        assert hints_of(listed["memory_get"]).read_only_hint is True
        assert hints_of(listed["memory_retire"]).destructive_hint is True
        assert all(t.output_schema for t in listed.values())

        future = (datetime.now(UTC) + timedelta(days=30)).isoformat()
        a = await call(
            "memory_add",
            content="Alice is vegetarian",
            store="fam",
            path="diet/alice",
            kind="fact",
            category="diet",
            subject="  Alice ",
            tags=["Food", "family", "food"],
            importance=0.9,
            citations=["chat:2026-11-01"],
            metadata={"src": "chat"},
            expires_at=future,
        )
        assert a["version"] == 1 and a["path"] == "diet/alice" and a["store"] == "fam"
        stored = await call("memory_get", id=a["id"])
        assert stored["tags"] == ["food", "family"] and stored["subject"] == "Alice" and stored["version"] == 1
        b = await call(
            "memory_add",
            content="Bob avoids peanuts",
            store="fam",
            path="diet/bob",
            kind="fact",
            tags=["food", "allergy"],
            importance=0.3,
        )
        c = await call("memory_add", content="Project uses pytest", kind="preference", tags=["python"])
        assert c.get("store") is None and (await call("memory_get", id=c["id"]))["citations"] == []

        got = await call("memory_get", id="fam:diet/alice")
        assert got["id"] == a["id"] and got["citations"] == ["chat:2026-11-01"] and got["metadata"] == {"src": "chat"}
        assert (await call("memory_get", id="fam:diet/bob"))["citations"] == []

        # update: partial; citations [] clears, absent keeps; clear_expiry
        up = await call("memory_update", id=a["id"], content="Alice is vegan", citations=[], clear_expiry=True)
        assert sorted(up["updated_fields"]) == ["citations", "content", "expires_at"]
        m = await call("memory_get", id=a["id"])
        assert up["version"] == 2 and m["version"] == 2
        assert m["citations"] == [] and m.get("expires_at") is None and m["tags"] == ["food", "family"]
        up = await call("memory_update", id="fam:diet/alice", importance=0.95)
        assert up["updated_fields"] == ["importance"]
        assert (await call("memory_get", id=a["id"]))["content"] == "Alice is vegan"
        same = await call("memory_update", id=a["id"], importance=0.95)
        assert same["updated_fields"] == [] and same["version"] == 3

        # move / rename; destination taken is an error
        mv = await call("memory_move", id=a["id"], to_path="people/alice/diet")
        assert mv["from_path"] == "diet/alice" and mv["path"] == "people/alice/diet"
        err = await call.fails("memory_move", id=b["id"], to_path="people/alice/diet")
        assert err.code == "ALREADY_EXISTS"
        assert (await call.fails("memory_get", id="fam:diet/alice")).code == "MEMORY_NOT_FOUND"

        # list: filters, AND tags, pagination, sort
        page = await call("memory_list", tags=["food"], sort_by="importance", sort_order="asc")
        assert [x["id"] for x in page["results"]] == [b["id"], a["id"]] and page["total"] == 2
        assert (await call("memory_list", tags=["food", "allergy"]))["total"] == 1
        assert (await call("memory_list", kind="preference"))["results"][0]["id"] == c["id"]
        assert (await call("memory_list", category="diet"))["total"] == 1
        assert (await call("memory_list", importance_min=0.6))["total"] == 1
        p1 = await call("memory_list", limit=2, offset=0, sort_by="created_at", sort_order="asc")
        p2 = await call("memory_list", limit=2, offset=2, sort_by="created_at", sort_order="asc")
        assert p1["total"] == p2["total"] == 3 and p1["has_more"] and not p2["has_more"]
        assert [x["id"] for x in p1["results"] + p2["results"]] == [a["id"], b["id"], c["id"]]
        assert (await call("memory_list", store="fam", category_path="people"))["total"] == 1
        assert (await call("memory_list", store="fam", category_path="people", recursive=False))["total"] == 0

        # recent: newest first (memory_list's default sort), full content
        rec = await call("memory_list", limit=2)
        assert len(rec["results"]) == 2
        assert rec["results"][0]["id"] == a["id"] and rec["results"][0]["content"] == "Alice is vegan"

        # expiry: hidden unless asked; prune counts
        past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
        e = await call("memory_add", content="old promo code", store="fam", path="tmp/promo", expires_at=past)
        assert (await call.fails("memory_get", id=e["id"])).code == "MEMORY_NOT_FOUND"
        assert (await call("memory_get", id=e["id"], include_expired=True))["expired"] is True
        assert (await call("memory_list", store="fam"))["total"] == 2
        assert (await call("memory_list", store="fam", include_expired=True))["total"] == 3
        assert (await call("memory_prune_expired", store="fam")) == {"pruned": 1, "ids": [e["id"]]}
        assert (await call("memory_prune_expired"))["pruned"] == 0
        assert (await call.fails("memory_get", id=e["id"], include_expired=True)).code == "MEMORY_NOT_FOUND"

        # delete: archive by default (restorable), permanent frees the path
        d = await call("memory_retire", id=b["id"], mode="archive")
        assert d["status"] == "archived"
        assert (await call("memory_get", id=b["id"]))["status"] == "archived"
        assert (await call("memory_list", store="fam"))["total"] == 1
        assert (await call("memory_list", store="fam", status="archived"))["results"][0]["id"] == b["id"]
        assert (await call("memory_restore", id=b["id"]))["status"] == "active"
        await call("memory_retire", id="fam:diet/bob", mode="delete")
        assert (await call.fails("memory_get", id=b["id"])).code == "MEMORY_NOT_FOUND"
        again = await call("memory_add", content="Bob is fine with peanuts now", store="fam", path="diet/bob")
        assert again["id"] != b["id"]

        st = await call("memory_stats")
        assert st["total"] == 3 and st["active"] == 3 and st["archived"] == 0
        assert st["by_kind"] == {"fact": 1, "note": 1, "preference": 1}
        assert st["by_importance"] == {"high": 1, "medium": 2}
        assert st["by_subject"] == {"(none)": 2, "alice": 1}
        assert {"tag": "food", "count": 1} in st["top_tags"] and st["stores"] == 1 and st["storage_bytes"] > 0
        assert (await call("memory_stats", namespace="elsewhere"))["total"] == 0

        # search in `mneme serve`: the bundled model and Qdrant Edge under the data directory
        for mode, query in (
            ("semantic", "which testing tool does the project like"),
            ("keyword", "pytest"),
            ("hybrid", "what does the project test with"),
        ):
            found = None
            for _ in range(100):  # the model loads in the background at start
                try:
                    found = await call("memory_search", query=query, mode=mode, limit=1)
                    break
                except ToolFailure as exc:
                    assert exc.error["code"] == "EMBEDDING_MODEL_LOADING", exc.error
                    await asyncio.sleep(0.1)
            assert found is not None and found["results"][0]["id"] == c["id"], (mode, found)


async def test_read_your_writes_200_times(tmp_path: Path) -> None:
    async with stdio_client(serve_params(tmp_path / "d")) as (r, w), ClientSession(r, w) as cs:
        await cs.initialize()
        call = Session(cs)
        for i in range(200):
            added = await call("memory_add", content=f"fact number {i}")
            got = await call("memory_get", id=added["id"])
            assert got["content"] == f"fact number {i}"
            if i % 20 == 0:
                up = await call("memory_update", id=added["id"], content=f"fact number {i}, revised")
                assert (await call("memory_get", id=added["id"]))["version"] == up["version"] == 2


async def test_restart_finds_every_memory_and_leaves_no_orphan(tmp_path: Path) -> None:
    data = tmp_path / "d"
    async with stdio_client(serve_params(data)) as (r, w), ClientSession(r, w) as cs:
        await cs.initialize()
        call = Session(cs)
        ids = [(await call("memory_add", content=f"m{i}", store="s", path=f"c/m{i}"))["id"] for i in range(20)]
        await call("memory_update", id=ids[0], content="m0 changed")
        pid = nats_pid(data)
        assert is_alive(pid)
    # the client closed stdin: the server and its nats-server child are gone
    assert wait_dead(pid), "nats-server outlived mneme serve"
    # the audit trail that `mneme serve` keeps holds every event (20 adds, 1 update), chained
    out = subprocess.run([MNEME, "audit", "verify", "--data-dir", str(data)], capture_output=True, timeout=60)
    assert json.loads(out.stdout.splitlines()[-1]) == {"records": 21, "ok": True, "first_broken_seq": None}
    async with stdio_client(serve_params(data)) as (r, w), ClientSession(r, w) as cs:
        await cs.initialize()
        call = Session(cs)
        assert (await call("memory_list", store="s", limit=100))["total"] == 20
        assert (await call("memory_get", id=ids[0]))["content"] == "m0 changed"
        assert (await call("memory_get", id="s:c/m19"))["id"] == ids[19]


def _rpc(proc: subprocess.Popen[bytes], msg: dict[str, Any]) -> dict[str, Any] | None:
    assert proc.stdin and proc.stdout
    proc.stdin.write((json.dumps(msg) + "\n").encode())
    proc.stdin.flush()
    if "id" not in msg:
        return None
    while True:
        line = proc.stdout.readline()
        assert line, "server closed stdout"
        reply = json.loads(line)
        if reply.get("id") == msg["id"]:
            return reply


def _start_raw(data: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [MNEME, "serve", "--data-dir", str(data)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    assert _rpc(proc, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
    _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    return proc


def _add(proc: subprocess.Popen[bytes], n: int) -> str:
    reply = _rpc(
        proc,
        {
            "jsonrpc": "2.0",
            "id": n,
            "method": "tools/call",
            "params": {"name": "memory_add", "arguments": {"content": f"acked {n}"}},
        },
    )
    assert reply and not reply["result"].get("isError"), reply
    return reply["result"]["structuredContent"]["id"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
async def test_signal_stops_everything_and_keeps_acknowledged_writes(tmp_path: Path, sig: signal.Signals) -> None:
    data = tmp_path / "d"
    proc = _start_raw(data)
    try:
        ids = [_add(proc, n) for n in range(1, 26)]
        child = nats_pid(data)
        proc.send_signal(sig)
        assert proc.wait(timeout=15) is not None
        assert wait_dead(child), f"nats-server survived {sig.name} of mneme serve"
    finally:
        if proc.poll() is None:
            proc.kill()
    async with stdio_client(serve_params(data)) as (r, w), ClientSession(r, w) as cs:
        await cs.initialize()
        call = Session(cs)
        for mid in ids:
            assert (await call("memory_get", id=mid))["id"] == mid
        await asyncio.sleep(0)


async def test_serve_audits_every_call_and_answers_admin_queries_at_once(tmp_path: Path) -> None:
    env = {**os.environ, "MNEME_GATEWAY_ROLE": "admin", "MNEME_GATEWAY_AGENT_ID": "root"}
    async with (
        stdio_client(serve_params(tmp_path / "d", "--context", "optional", env=env)) as (r, w),
        ClientSession(r, w) as cs,
    ):
        await cs.initialize()
        call = Session(cs)
        a = await call("memory_add", content="audited", context={"request_id": "w-1"})
        await call("memory_get", id=a["id"], context={"request_id": "r-1"})
        page = await call("audit_query", memory_id=a["id"])
        assert [(r["action"], r["request_id"], r["agent_id"]) for r in page["results"]] == [
            ("memory_created", "w-1", "root"),
            ("read:memory_get", "r-1", "root"),
        ]


def _deep(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


def _call(rid: int, tool: str, args: str) -> bytes:
    return (
        f'{{"jsonrpc":"2.0","id":{rid},"method":"tools/call","params":{{"name":"{tool}","arguments":{args}}}}}'
    ).encode()


async def test_malformed_lines_are_answered_and_never_end_mneme_serve(tmp_path: Path) -> None:
    """Each line gets its answer (a JSON-RPC error, or the tool's INVALID_INPUT naming the argument); then a
    valid request is still served. Before: no reply at all to the first three, and the client hung."""
    burst: list[tuple[bytes, Any, str]] = [  # line, the reply's id, what it must say
        (_call(1, "memory_add", '{"content":"x","metadata":%s}' % _deep(200)), 1, "INVALID_INPUT metadata"),
        (_call(2, "memory_add", '{"content":"\\ud800"}'), 2, "INVALID_INPUT content"),
        (b"this is not JSON", None, "-32700"),
        (_call(3, "memory_add", '{"content":"x","tags":["ok","\\udc00"]}'), 3, "INVALID_INPUT tags"),
        (_call(4, "memory_add", '{"content":"x","metadata":%s}' % _deep(150)), 4, "INVALID_INPUT metadata"),
        (_call(5, "memory_add", '{"content":"x","importance":NaN}'), 5, "INVALID_INPUT importance"),
        (_call(6, "memory_add", '{"content":"x","confidence":1e400}'), 6, "INVALID_INPUT confidence"),
        (
            _call(7, "memory_search", '{"query":"x","mode":"keyword","threshold":-Infinity}'),
            7,
            "INVALID_INPUT threshold",
        ),
        (_call(8, "memory_nuke", "{}"), 8, "UNKNOWN_TOOL name"),
        (_call(9, "memory_get", '{"id":"00000000-0000-4000-8000-000000000000","as_of":1.5}'), 9, "INVALID_INPUT as_of"),
        (b'[{"jsonrpc":"2.0","id":10,"method":"tools/list"}]', None, "-32600"),
        (b'{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"memory_add"', 11, "-32700"),
        (
            b'{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"memory_add","arguments":{"content":"'
            b'\xed\xa0\x80"}}}',
            12,
            "-32700",
        ),  # a surrogate encoded as UTF-8 bytes: not UTF-8
        (b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}', None, "-32600"),
        (b"{" * 5000, None, "-32700"),
    ]
    proc = subprocess.Popen(
        [MNEME, "serve", "--data-dir", str(tmp_path / "d")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "stderr").open("wb"),
    )
    try:
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
        reply = _rpc(proc, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init})
        assert reply and reply["result"]["serverInfo"] == {"name": "mneme", "version": version("mneme")}, reply
        assert version("mneme") != ""
        _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert proc.stdin and proc.stdout
        for _ in range(3):  # three rounds of the same burst, written all at once
            proc.stdin.write(b"".join(line + b"\n" for line, _, _ in burst) + _call(99, "memory_list", "{}") + b"\n")
            proc.stdin.flush()
            replies = [
                json.loads(await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30))
                for _ in range(len(burst) + 1)
            ]
            by_id = {r["id"]: r for r in replies if r["id"] is not None}
            assert sorted(by_id) == sorted({rid for _, rid, _ in burst if rid is not None} | {99}), replies
            assert sum(r["id"] is None for r in replies) == sum(rid is None for _, rid, _ in burst), replies
            for line, rid, says in burst:
                if rid is None:
                    continue
                r = by_id[rid]
                if says.startswith("-32"):
                    assert r["error"]["code"] == int(says), (line[:80], r)
                else:
                    code, field = says.split()
                    assert r["result"]["isError"], (line[:80], r)
                    err = json.loads(r["result"]["content"][0]["text"])["error"]
                    assert (err["code"], err["field"]) == (code, field), (line[:80], err)
            for rid in (5, 6, 7):  # NaN, 1e400, -Infinity: said as the README promises (issue 28, item 12)
                err = json.loads(by_id[rid]["result"]["content"][0]["text"])["error"]
                assert "must be a finite number" in err["message"], err
            assert by_id[99]["result"]["structuredContent"]["total"] == 0  # served, and nothing was written
        assert _add(proc, 100)  # and a write still works
        assert proc.poll() is None
    finally:
        if proc.stdin:
            proc.stdin.close()
        assert proc.wait(timeout=20) == 0
    stderr = (tmp_path / "stderr").read_text()
    assert "Traceback" not in stderr, stderr[-3000:]
