"""Issue 31, item 5: `mneme import --from server-memory` and `mneme export --to server-memory`, the reference
knowledge-graph server's memory.jsonl in and out of mneme's graph, as events (mneme/app/graph_import.py).

- A reference file (unicode names and observations, duplicate lines, a relation to an entity no line names) is
  imported with nothing running, exported, imported again (nothing added), read through the server-memory
  profile (read_graph: the same graph), and imported and exported again beside a running serve, through it
  (no event added; the same file).
- A malformed file is refused with every bad line's number, and nothing is written: no data directory on a
  fresh one, no event in a running one's log.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nats
import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client

from mneme.app.graph_file import BadLines, FileRelation, parse
from mneme.app.graph_import import _by_budget, _chunks, _size
from mneme.domain.graph import name_key
from mneme.embedded_nats import running_url
from tests.cli_checks import mneme
from tests.harness import serve_params

pytestmark = pytest.mark.anyio

REFERENCE: list[dict[str, Any]] = [
    {"type": "entity", "name": "Zoë Ångström", "entityType": "person", "observations": ["likes tea", "lives in Malmö"]},
    {"type": "entity", "name": "東京", "entityType": "city", "observations": ["capital of Japan", "🗼 tower: 333 m"]},
    {"type": "relation", "from": "Zoë Ångström", "to": "東京", "relationType": "visited"},
    {"type": "entity", "name": "Zoë Ångström", "entityType": "person", "observations": ["likes tea", "speaks 日本語"]},
    {"type": "entity", "name": "Ørsted A/S", "entityType": "organization", "observations": []},
    {"type": "relation", "from": "Zoë Ångström", "to": "Ørsted A/S", "relationType": "works_at"},
    {"type": "relation", "from": "Zoë Ångström", "to": "東京", "relationType": "visited"},
    {"type": "relation", "from": "東京", "to": "Atlantis", "relationType": "twinned with"},
]

# what the file holds, once merged: the second Zoë line's new observation appended; Atlantis made as "unknown"
EXPORTED: list[dict[str, Any]] = [
    {"type": "entity", "name": "Atlantis", "entityType": "unknown", "observations": []},
    {"type": "entity", "name": "Zoë Ångström", "entityType": "person",
     "observations": ["likes tea", "lives in Malmö", "speaks 日本語"]},
    {"type": "entity", "name": "Ørsted A/S", "entityType": "organization", "observations": []},
    {"type": "entity", "name": "東京", "entityType": "city", "observations": ["capital of Japan", "🗼 tower: 333 m"]},
    {"type": "relation", "from": "Zoë Ångström", "to": "Ørsted A/S", "relationType": "works_at"},
    {"type": "relation", "from": "Zoë Ångström", "to": "東京", "relationType": "visited"},
    {"type": "relation", "from": "東京", "to": "Atlantis", "relationType": "twinned with"},
]  # fmt: skip


def jsonl(items: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(i, ensure_ascii=False, separators=(",", ":")) + "\n" for i in items)


async def run(*args: str) -> tuple[int, dict[str, Any], str]:
    res = await asyncio.to_thread(mneme, *args)
    lines = res.stdout.strip().splitlines()
    return res.returncode, (json.loads(lines[-1]) if lines else {}), res.stderr


async def last_seq(data: Path) -> int:
    url = running_url(data / "nats")
    assert url is not None, "no serve runs"
    nc = await nats.connect(url)
    try:
        return (await nc.jetstream().stream_info("MNEME_EVENTS")).state.last_seq
    finally:
        await nc.close()


def summary(**figures: int) -> dict[str, int]:
    zero = ("entities_created", "entities_existing", "observations_added", "relations_created",
            "relations_existing", "placeholders_created")  # fmt: skip
    return dict.fromkeys(zero, 0) | figures


def figures(out: dict[str, Any]) -> dict[str, Any]:
    return {k: out[k] for k in summary()}


async def test_round_trip_idempotent_and_read_through_the_server_memory_profile(tmp_path: Path) -> None:
    data, source = tmp_path / "d", tmp_path / "memory.jsonl"
    source.write_text(jsonl(REFERENCE) + "\n", encoding="utf-8")  # (a blank line at the end, as editors leave)

    # nothing running: the command starts the embedded server and a projector itself
    code, out, err = await run("import", "--from", "server-memory", str(source), "--data-dir", str(data))
    assert code == 0, err
    assert figures(out) == summary(entities_created=3, observations_added=5, relations_created=3,
                                   placeholders_created=1)  # fmt: skip
    assert (out["namespace"], out["lines"], out["duplicate_lines"], out["live"]) == ("default", 8, 2, False)
    assert out["seq"] > 0
    assert "entities 4/4, relations 3/3" in err and "'Atlantis'" in err and "'unknown'" in err, err

    exported = tmp_path / "out.jsonl"
    code, out, err = await run("export", "--to", "server-memory", str(exported), "--data-dir", str(data))
    assert code == 0, err
    assert (out["entities"], out["relations"], out["live"]) == (4, 3, False)
    assert exported.read_text(encoding="utf-8") == jsonl(EXPORTED)  # the reference's own line format

    # the same file again, and the export of it: nothing added
    for again in (source, exported):
        code, out, err = await run("import", "--from", "server-memory", str(again), "--data-dir", str(data))
        assert code == 0, err
        assert figures(out) == summary(entities_created=0, entities_existing=3 + (again == exported),
                                       relations_existing=3), out  # fmt: skip
        assert out["seq"] == 0

    params = serve_params(data, "--profile", "server-memory")
    async with stdio_client(params) as (r, w), ClientSession(r, w) as cs:
        await cs.initialize()
        res = await cs.call_tool("read_graph", {})
        assert not res.is_error, res
        graph = res.structured_content
        assert graph is not None
        lines = [{"type": "entity", **e} for e in graph["entities"]] + [
            {"type": "relation", **rel} for rel in graph["relations"]
        ]
        key = json.dumps
        assert sorted(lines, key=key) == sorted(EXPORTED, key=key)

        # beside the running serve: through it (its NATS and projector), nothing added, the same file out
        before = await last_seq(data)
        code, out, err = await run("import", "--from", "server-memory", str(source), "--data-dir", str(data))
        assert code == 0, err
        assert out["live"] is True and figures(out) == summary(entities_existing=3, relations_existing=3), out
        beside = tmp_path / "beside.jsonl"
        code, out, err = await run("export", "--to", "server-memory", str(beside), "--data-dir", str(data))
        assert code == 0 and out["live"] is True, err
        assert beside.read_bytes() == exported.read_bytes()
        assert await last_seq(data) == before

        # a new entity and observation written through the profile come out on the next export
        await cs.call_tool("add_observations", {"observations": [{"entityName": "東京", "contents": ["新宿"]}]})
        code, _, err = await run("export", "--to", "server-memory", str(beside), "--data-dir", str(data))
        assert code == 0, err
        assert '"observations":["capital of Japan","🗼 tower: 333 m","新宿"]' in beside.read_text(encoding="utf-8")


BAD = [
    '{"type":"entity","name":"A","entityType":"t","observations":[]}',
    '{"type":"entity","name":"B","entityType":"t","observations":["b"]}',
    '{"type":"entity","name":"C",',  # line 3: not JSON
    '{"type":"relation","from":"A","to":"B","relationType":"knows"}',
    '{"type":"entity","entityType":"t","observations":["nameless"]}',  # line 5: no name
    '{"type":"relation","from":"A","to":"C","relationType":"knows"}',
]


async def test_a_malformed_file_is_refused_line_by_line_and_nothing_is_written(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(BAD) + "\n", encoding="utf-8")

    # a fresh data directory: not even created
    fresh = tmp_path / "fresh"
    code, _, err = await run("import", "--from", "server-memory", str(bad), "--data-dir", str(fresh))
    assert code == 1 and "Traceback" not in err, err
    assert "line 3: not JSON" in err and "line 5: entity: name: missing" in err, err
    assert "2 bad line(s) (lines 3, 5); nothing imported" in err.splitlines()[-1], err
    assert not fresh.exists()

    # beside a running serve whose graph holds something: no event is added to its log
    data = tmp_path / "d"
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(BAD[:2]), encoding="utf-8")  # (no newline at the end, as the reference writes it)
    async with stdio_client(serve_params(data, "--profile", "server-memory")) as (r, w), ClientSession(r, w) as cs:
        await cs.initialize()
        code, out, err = await run("import", "--from", "server-memory", str(good), "--data-dir", str(data))
        assert code == 0 and out["entities_created"] == 2 and out["live"] is True, err
        before = await last_seq(data)
        code, _, err = await run("import", "--from", "server-memory", str(bad), "--data-dir", str(data))
        assert code == 1 and "line 3" in err and "line 5" in err, err
        assert await last_seq(data) == before
        res = await cs.call_tool("read_graph", {})
        assert res.structured_content == {
            "entities": [
                {"name": "A", "entityType": "t", "observations": []},
                {"name": "B", "entityType": "t", "observations": ["b"]},
            ],
            "relations": [],
        }


def test_every_rule_is_checked_before_writing() -> None:
    """The checks themselves (no server): each bad line named with its number and why; duplicates merged."""
    lines = [
        "[1, 2]",
        '{"type":"widget","name":"x"}',
        '{"name":"no type"}',
        '{"type":"entity","name":"","entityType":"t","observations":[]}',
        '{"type":"entity","name":"' + "n" * 201 + '","entityType":"t","observations":[]}',
        '{"type":"entity","name":"ok","entityType":"t","observations":[1]}',
        '{"type":"entity","name":"ok","entityType":"t","observations":["' + "o" * 4001 + '"]}',
        '{"type":"entity","name":"ok","entityType":"t","observations":"not a list"}',
        '{"type":"entity","name":"ok","observations":[]}',
        '{"type":"relation","from":"a","to":"b"}',
        '{"type":"relation","from":"a","to":"b","relationType":"' + "r" * 201 + '"}',
        '{"type":"relation","from":"a","to":"---","relationType":"r"}',
    ]
    with pytest.raises(BadLines) as caught:
        parse("\n".join(lines), Path("m.jsonl"))
    got = dict(caught.value.problems)
    assert sorted(got) == list(range(1, len(lines) + 1))
    assert got[1].startswith("not a JSON object") and got[2].startswith('unknown type "widget"')
    assert got[3].startswith("no type") and "must not be empty" in got[4] and "at most 200" in got[5]
    assert "observations[0]: must be a string" in got[6] and "at most 4000" in got[7]
    assert "must be a list" in got[8] and "entityType: missing" in got[9] and "relationType: missing" in got[10]
    assert "at most 200" in got[11] and "letter or digit" in got[12]

    merged = parse(
        "\n".join(
            [
                '{"type":"entity","name":"Zoë","entityType":"person","observations":["a","b"]}',
                '{"type":"entity","name":"zoë","entityType":"robot","observations":["c","a"]}',
                '{"type":"relation","from":"Zoë","to":"Kai","relationType":"knows"}',
                '{"type":"relation","from":"ZOË","to":"kai","relationType":"knows"}',
            ]
        ),
        Path("m.jsonl"),
    )
    (zoe,) = merged.entities.values()
    assert (zoe.name, zoe.entity_type, zoe.observations) == ("Zoë", "person", ["a", "b", "c"])
    assert merged.duplicates == 2 and len(merged.relations) == 1 and list(merged.missing_ends().values()) == ["Kai"]
    assert merged.notes == ["line 2: 'zoë' again as type 'robot': it keeps 'person' (line 1)"]


def test_events_and_answers_stay_small() -> None:
    """An entity's observations go into events of at most 100 and 200 kB each, and a call of the write side
    touches entities whose answer stays well under a NATS message (1 MB): a large file is written in pieces."""
    obs = [f"fact {i} " + "x" * 3000 for i in range(250)]
    groups = _chunks(obs)
    assert [o for g in groups for o in g] == obs and len(groups) > 2
    assert all(len(g) <= 100 and sum(len(o.encode()) for o in g) <= 200_000 for g in groups)
    assert _chunks([]) == [[]]

    parsed = parse(
        "\n".join(
            json.dumps({"type": "entity", "name": f"E{i}", "entityType": "t", "observations": obs[:60]})
            for i in range(10)
        ),
        Path("m.jsonl"),
    )
    rels = [FileRelation(f"E{i}", f"E{(i + 1) % 10}", "next") for i in range(10)]

    def ends(r: FileRelation, seen: set[str]) -> tuple[int, set[str]]:
        keys = {name_key(r.from_name), name_key(r.to_name)} - seen
        return sum(_size(parsed.entities.get(k)) for k in keys), keys

    batches = _by_budget(rels, ends)
    assert [r for b in batches for r in b] == rels and len(batches) > 1
    for b in batches:
        keys = {name_key(n) for r in b for n in (r.from_name, r.to_name)}
        assert len(b) == 1 or sum(_size(parsed.entities[k]) for k in keys) <= 256 * 1024
