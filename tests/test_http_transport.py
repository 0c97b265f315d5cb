"""`mneme serve --transport http`: the same tools over streamable HTTP on loopback."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client

from tests.harness import MNEME, ToolFailure, free_port, nats_pid, result_of, wait_dead, wait_listening

pytestmark = pytest.mark.anyio


async def test_tools_over_streamable_http_and_clean_stop(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([MNEME, "serve", "--data-dir", str(tmp_path / "d"), "--transport", "http",
                             "--host", "127.0.0.1", "--port", str(port)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "MNEME_GATEWAY_HTTP_ANONYMOUS": "true"})  # fmt: skip
    try:
        wait_listening(proc, port)
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert "memory_add" in names and "memory_stats" in names
            for i in range(20):  # read-your-writes over HTTP, request by request
                added = result_of(await client.call_tool("memory_add", {"content": f"over http {i}"}))
                got = result_of(await client.call_tool("memory_get", {"id": added["id"]}))
                assert got["content"] == f"over http {i}"
            with pytest.raises(ToolFailure) as err:
                result_of(await client.call_tool("memory_list", {"sort_by": "size"}))
            assert err.value.code == "INVALID_INPUT" and err.value.field == "sort_by"
        child = nats_pid(tmp_path / "d")
        proc.terminate()
        assert proc.wait(20) == 0
        assert wait_dead(child), "nats-server outlived mneme serve --transport http"
        stderr = proc.stderr.read().decode() if proc.stderr else ""
        assert "Traceback" not in stderr and "CancelledError" not in stderr, stderr  # SIGTERM stops it quietly
    finally:
        if proc.poll() is None:
            proc.kill()


async def test_malformed_bodies_get_json_rpc_errors_over_http(tmp_path: Path) -> None:
    """Both HTTP entries (the 2025 handshake one and the stateless 2026-07-28 one) answer a malformed body
    with a JSON-RPC error and a 4xx, never a hang or a 500; what parses reaches the tool's own limits."""
    port = free_port()
    errlog = tmp_path / "stderr"
    proc = subprocess.Popen([MNEME, "serve", "--data-dir", str(tmp_path / "d"), "--transport", "http",
                             "--host", "127.0.0.1", "--port", str(port)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errlog.open("wb"),
                            env={**os.environ, "MNEME_GATEWAY_HTTP_ANONYMOUS": "true"})  # fmt: skip
    deep = '{"a":' * 200 + "1" + "}" * 200
    modern_meta = (
        '"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
        '"io.modelcontextprotocol/clientInfo":{"name":"t","version":"0"},'
        '"io.modelcontextprotocol/clientCapabilities":{}},'
    )

    def add(rid: int, args: str, modern: bool) -> bytes:
        meta = modern_meta if modern else ""
        return (
            f'{{"jsonrpc":"2.0","id":{rid},"method":"tools/call","params":{{{meta}"name":"memory_add",'
            f'"arguments":{args}}}}}'
        ).encode()

    try:
        wait_listening(proc, port, errlog=errlog)
        url = f"http://127.0.0.1:{port}/mcp"
        accept = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient(timeout=15) as http:
            init = {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "0"},
                },
            }
            r = await http.post(url, json=init, headers=accept)
            legacy = {**accept, "mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=legacy)
            modern = {**accept, "mcp-protocol-version": "2026-07-28"}

            def reply(r: httpx.Response) -> dict[str, Any]:
                if r.headers.get("content-type", "").startswith("text/event-stream"):  # (after a priming event)
                    data = [ln[6:] for ln in r.text.splitlines() if ln.startswith("data: ") and ln[6:]]
                    return dict(json.loads(data[-1]))
                return dict(json.loads(r.text))

            for headers in (legacy, modern):
                for body in (
                    b"not json",
                    b"",
                    b"[1, 2]",
                    b'{"jsonrpc":"2.0","id":3,"method":5}',
                    b"\xff\xfe",
                    b"{" * 5000,
                ):
                    r = await http.post(url, content=body, headers=headers)
                    assert 400 <= r.status_code < 500, (body[:40], r.status_code, r.text)
                    assert reply(r)["error"]["code"] in (-32700, -32600, -32602), (body[:40], r.text)
            for headers, is_modern in ((legacy, False), (modern, True)):
                tool = {**headers, "mcp-method": "tools/call", "mcp-name": "memory_add"} if is_modern else headers
                for rid, args, field in (
                    (21, '{"content":"x","metadata":%s}' % ('{"a":' * 40 + "1" + "}" * 40), "metadata"),
                    (22, '{"content":"x","importance":NaN}', "importance"),
                ):
                    r = await http.post(url, content=add(rid, args, is_modern), headers=tool)
                    assert r.status_code == 200, r.text
                    res = reply(r)["result"]
                    assert res["isError"], res
                    assert json.loads(res["content"][0]["text"])["error"]["field"] == field
                # past what the SDK's parser reads: a parse error on the handshake entry; on the stateless
                # entry (Python's json) the tool sees it and names the argument
                r = await http.post(
                    url, content=add(23, '{"content":"x","metadata":%s}' % deep, is_modern), headers=tool
                )
                if is_modern:
                    err = json.loads(reply(r)["result"]["content"][0]["text"])["error"]
                    assert (err["code"], err["field"]) == ("INVALID_INPUT", "metadata"), err
                else:
                    assert r.status_code == 400 and reply(r)["error"]["code"] == -32700, r.text
                r = await http.post(url, content=add(24, '{"content":"\\ud800"}', is_modern), headers=tool)
                if is_modern:
                    err = json.loads(reply(r)["result"]["content"][0]["text"])["error"]
                    assert (err["code"], err["field"]) == ("INVALID_INPUT", "content"), err
                else:
                    assert r.status_code == 400 and reply(r)["error"]["code"] == -32700, r.text
        log = errlog.read_text()
        assert "Traceback" not in log and "Error handling POST request" not in log, log[-3000:]
        proc.terminate()
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
