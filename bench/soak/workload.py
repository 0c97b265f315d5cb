"""The soak's clients: a seeded random mix of tool calls per client over one MCP session each, a ledger of
every acknowledged write, and the tally of calls, latencies, errors and failed checks."""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.soak.ledger import Err, Mem, Session, Tally, Version
from bench.soak.targets import CODE_QUERIES, touch_module

# kind -> weight; a kind is one operation of the mix (some make several calls, each timed under its tool's kind)
MIX: dict[str, int] = {
    "add": 16,
    "update": 12,
    "delete": 2,
    "get": 10,
    "get_deleted": 1,
    "get_as_of": 5,
    "list": 3,
    "list_as_of": 2,
    "history": 2,
    "search_keyword": 8,
    "search_semantic": 6,
    "search_hybrid": 8,
    "search_as_of": 4,
    "graph_entity": 5,
    "graph_relate": 3,
    "graph_get": 4,
    "graph_get_as_of": 1,
    "graph_forget": 1,
    "code_search": 3,
    "code_status": 1,
    "status": 1,
}

WRITES = frozenset({"add", "update", "delete", "graph_entity", "graph_relate", "graph_forget"})
READS = {k: w for k, w in MIX.items() if k not in WRITES}

_SUBJECTS = "Alice Bob Carol Dana Erin Farid Grace Hiro Ines Jonas Kemal Lena".split()
_VERBS = "prefers likes avoids maintains reviews deploys owns documents tests migrated".split()
_OBJECTS = (
    "dark mode|the billing service|green tea|the search index|Friday releases|the Postgres schema|"
    "the mobile app|weekly reports|the incident runbook|rust services|the staging cluster|long meetings"
).split("|")
_WHEN = "since March|on weekends|after the outage|for the next quarter|during reviews|every morning".split("|")
_WORDS = "latency cache deploy schema invoice token budget retry outage review report index vector".split()
_ENTITIES = [f"{s} {t}" for s in ("Atlas", "Borealis", "Cobalt", "Delta", "Ember", "Fjord") for t in ("Team", "API")]
_ENTITIES += _SUBJECTS
_RELATIONS = ["knows", "depends_on", "part_of", "mentions", "owns"]


def sentence(rng: random.Random) -> str:
    return f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_WHEN)}"


def token(client: int, i: int) -> str:
    """A word no other memory holds, for exact keyword checks (letters only; the `qx` ending survives stemming)."""
    n, out = client * 1_000_000 + i, ""
    while True:
        n, r = divmod(n, 26)
        out += chr(97 + r)
        if n == 0:
            return f"zq{out}qx"


def iso(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Shared:
    """What the clients share: the ledger of acknowledged writes, the entities that exist, the code project."""

    run: str
    project: Path
    ledger: dict[str, Mem] = field(default_factory=dict)
    # entities created through each gateway (its URL): a gateway's reads wait for its own writes only, so in
    # the cluster a client relates and traverses the entities its gateway has seen created
    entities: dict[str, set[str]] = field(default_factory=dict)
    reindexed: int = 0
    stop_at: float = math.inf  # loop time at which the clients stop (set once the warm-up is over)
    # --steady: fill to `steady` live memories (adds only), then pair each add with a delete of the adding
    # client's oldest live memory, so the live working set stays fixed (the history still grows)
    steady: int = 0
    live: int = 0  # live memories the clients added (probes not counted)
    filled: bool = False
    # --reads-only: once `measuring` (after the warm-up), only the kinds that write nothing (READS)
    reads_only: bool = False
    measuring: bool = False


class Client:
    def __init__(self, k: int, url: str, seed: int, shared: Shared, tally: Tally, *, reindex_every: float = 0):
        self.k = k
        self.rng = random.Random(seed * 1000 + k)
        self.session = Session(url, tally)
        self.shared = shared
        self.tally = tally
        self.live: list[Mem] = []
        self.gone: list[Mem] = []
        self.n = 0
        self.high_seq = 0  # the highest sequence this client's writes were acknowledged at
        self.reindex_every = reindex_every
        self.ops: dict[str, Callable[[], Any]] = {name: getattr(self, f"op_{name}") for name in MIX}
        self.entities = shared.entities.setdefault(url, set())

    def rid(self) -> str:
        self.n += 1
        return f"{self.shared.run}-c{self.k}-{self.n}"

    def acked(self, r: dict[str, Any]) -> None:
        self.high_seq = max(self.high_seq, int(r.get("seq") or 0))

    async def run(self, stop_at: float | None = None) -> None:
        """The mix until `stop_at` (loop time; default: the shared one, which may be set later)."""
        loop = asyncio.get_running_loop()
        names, weights = list(MIX), list(MIX.values())
        next_reindex = loop.time() + self.reindex_every if self.reindex_every else None
        sh = self.shared
        reads, read_weights = list(READS), list(READS.values())
        try:
            while loop.time() < (stop_at if stop_at is not None else sh.stop_at):
                if sh.steady and not sh.filled:
                    sh.filled = sh.live >= sh.steady
                    if not sh.filled:
                        await self.op_add()
                        continue
                if sh.reads_only and sh.measuring:  # no writes, no re-index: any growth is per call
                    await self.ops[self.rng.choices(reads, read_weights)[0]]()
                    continue
                if next_reindex is not None and loop.time() >= next_reindex:
                    next_reindex = loop.time() + self.reindex_every
                    await self.op_reindex()
                    continue
                await self.ops[self.rng.choices(names, weights)[0]]()
        finally:
            await self.session.close()

    # -- writes ---------------------------------------------------------------------------------------------
    async def op_add(self) -> None:
        i = self.n
        tok = token(self.k, i)
        content = f"{sentence(self.rng)}; marker {tok}."
        args: dict[str, Any] = {
            "content": content,
            "request_id": self.rid(),
            "tags": self.rng.sample(_WORDS, self.rng.randint(0, 3)),
            "importance": round(self.rng.random(), 2),
        }
        if self.rng.random() < 0.15:
            args.update(store="soak", path=f"c{self.k}/m{i}")
        r = await self.session.call("add", "memory_add", args)
        if isinstance(r, Err):
            return
        self.acked(r)
        mem = Mem(r["id"], self.k, tok, [Version(r["seq"], r["version"], content, args["request_id"])])
        self.shared.ledger[mem.id] = mem
        self.live.append(mem)
        self.shared.live += 1
        if self.shared.filled and self.shared.live > self.shared.steady and len(self.live) > 1:
            await self.retire(self.live.pop(0))  # --steady: the oldest of this client's live memories

    async def op_update(self) -> None:
        if not self.live:
            return await self.op_add()
        mem = self.rng.choice(self.live)
        content = f"{sentence(self.rng)}; marker {mem.token}; revision {len(mem.versions)}."
        args: dict[str, Any] = {"id": mem.id, "content": content, "request_id": self.rid()}
        if self.rng.random() < 0.3:
            args["tags"] = self.rng.sample(_WORDS, 2)
        r = await self.session.call("update", "memory_update", args)
        if isinstance(r, Err):
            mem.in_doubt = True
            return None
        self.acked(r)
        mem.versions.append(Version(r["seq"], r["version"], content, args["request_id"]))
        return None

    async def op_delete(self) -> None:
        if len(self.live) < 5:
            return await self.op_add()
        await self.retire(self.live.pop(self.rng.randrange(len(self.live))))
        return None

    async def retire(self, mem: Mem) -> None:
        """Delete `mem` (already taken out of `live`; put back if the delete failed)."""
        args = {"id": mem.id, "mode": "delete", "request_id": self.rid()}
        r = await self.session.call("delete", "memory_retire", args)
        if isinstance(r, Err):
            mem.in_doubt = True
            self.live.append(mem)
            return
        self.acked(r)
        mem.versions.append(Version(r["seq"], r["version"], None, args["request_id"]))
        self.gone.append(mem)
        self.shared.live -= 1

    # -- reads of one memory ----------------------------------------------------------------------------------
    async def op_get(self) -> None:
        if not self.live:
            return await self.op_add()
        mem = self.rng.choice(self.live)
        r = await self.session.call("get", "memory_get", {"id": mem.id})
        if not isinstance(r, Err) and not mem.in_doubt and (r["content"], r["version"]) != _cv(mem.last):
            self.tally.fail("stale_get", f"{mem.id}: got v{r['version']} {r['content']!r}, acked {mem.last}")
        return None

    async def op_get_deleted(self) -> None:
        if not self.gone:
            return await self.op_get()
        mem = self.rng.choice(self.gone)
        r = await self.session.call("get_deleted", "memory_get", {"id": mem.id}, expect=("MEMORY_NOT_FOUND",))
        if not isinstance(r, Err) and not mem.in_doubt:
            self.tally.fail("deleted_visible", f"{mem.id} answered after its acknowledged delete: {r}")
        return None

    def past(self) -> tuple[Mem, Version, int] | None:
        """A memory of this client, one of its acknowledged versions, and a log position when it was that one."""
        pool = [m for m in self.live + self.gone if not m.in_doubt]
        if not pool:
            return None
        mem = self.rng.choice(pool)
        j = self.rng.randrange(len([v for v in mem.versions if v.content is not None]))
        v = mem.versions[j]
        hi = mem.versions[j + 1].seq - 1 if j + 1 < len(mem.versions) else self.high_seq
        return mem, v, self.rng.randint(v.seq, max(v.seq, hi))

    async def op_get_as_of(self) -> None:
        got = self.past()
        if got is None:
            return await self.op_add()
        mem, v, seq = got
        r = await self.session.call("get_as_of", "memory_get", {"id": mem.id, "as_of": seq})
        if not isinstance(r, Err) and (r["content"], r["version"]) != _cv(v):
            self.tally.fail("stale_as_of_get", f"{mem.id} as_of {seq}: got v{r['version']}, acked then {v}")
        return None

    async def op_history(self) -> None:
        pool = self.live + self.gone
        if not pool:
            return await self.op_add()
        mem = self.rng.choice(pool)
        r = await self.session.call("history", "memory_history", {"id": mem.id, "limit": 500})
        if not isinstance(r, Err) and not mem.in_doubt and r["total"] != mem.last.version:
            self.tally.fail("history_length", f"{mem.id}: {r['total']} versions, acked up to v{mem.last.version}")
        return None

    # -- lists and searches ------------------------------------------------------------------------------
    async def op_list(self) -> None:
        args: dict[str, Any] = {"limit": 20, "sort_by": self.rng.choice(["created_at", "updated_at", "importance"])}
        if self.rng.random() < 0.3:
            args["tags"] = [self.rng.choice(_WORDS)]
        await self.session.call("list", "memory_list", args)

    async def op_list_as_of(self) -> None:
        back = self.rng.uniform(0.5, max(1.0, min(60.0, time.perf_counter() - self.tally.t0 - 1)))
        at = iso(datetime.now(UTC) - timedelta(seconds=back))
        await self.session.call("list_as_of", "memory_list", {"limit": 20, "as_of": at, "sort_by": "created_at"})

    async def _search(self, kind: str, mode: str) -> None:
        if self.live and self.rng.random() < 0.6:
            mem = self.rng.choice(self.live)
            r = await self.session.call(kind, "memory_search", {"query": mem.token, "mode": mode, "limit": 10})
            if not isinstance(r, Err) and not mem.in_doubt and mem.id not in {h["id"] for h in r["results"]}:
                self.tally.fail(f"{kind}_miss", f"{mem.token} ({mem.id}) not found: {r['results'][:2]}")
            return
        query = " ".join(self.rng.sample(_WORDS, 2))
        await self.session.call(kind, "memory_search", {"query": query, "mode": mode, "limit": 10})

    async def op_search_keyword(self) -> None:
        await self._search("search_keyword", "keyword")

    async def op_search_hybrid(self) -> None:
        await self._search("search_hybrid", "hybrid")

    async def op_search_semantic(self) -> None:
        args = {"query": sentence(self.rng), "mode": "semantic", "limit": 10}
        await self.session.call("search_semantic", "memory_search", args)

    async def op_search_as_of(self) -> None:
        got = self.past()
        if got is None:
            return await self.op_add()
        mem, v, seq = got
        mode = self.rng.choice(["keyword", "hybrid"])
        args = {"query": mem.token, "mode": mode, "limit": 10, "as_of": seq}
        r = await self.session.call("search_as_of", "memory_search", args)
        if not isinstance(r, Err) and mem.id not in {h["id"] for h in r["results"]}:
            self.tally.fail("search_as_of_miss", f"{mode} {mem.token} ({mem.id}, v{v.version}) as_of {seq}")
        return None

    # -- graph ------------------------------------------------------------------------------------------------
    async def op_graph_entity(self) -> None:
        name = self.rng.choice(_ENTITIES)
        args = {"name": name, "type": "person" if " " not in name else "system", "add": [f"{sentence(self.rng)}."]}
        r = await self.session.call("graph_entity", "graph_entity", args)
        if not isinstance(r, Err):
            self.entities.add(name)

    async def op_graph_relate(self) -> None:
        if len(self.entities) < 2:
            return await self.op_graph_entity()
        a, b = self.rng.sample(sorted(self.entities), 2)
        args = {"source": a, "target": b, "type": self.rng.choice(_RELATIONS), "weight": round(self.rng.random(), 2)}
        await self.session.call("graph_relate", "graph_relate", args)
        return None

    async def op_graph_get(self) -> None:
        if not self.entities:
            return await self.op_graph_entity()
        names = sorted(self.entities)
        pick = self.rng.random()
        if pick < 0.4:
            args: dict[str, Any] = {"names": self.rng.sample(names, min(2, len(names)))}
        elif pick < 0.8:
            args = {"related_to": self.rng.choice(names), "depth": self.rng.randint(1, 2), "limit": 20}
        else:
            args = {"text": self.rng.choice(_VERBS), "limit": 20}
        await self.session.call("graph_get", "graph_get", args)
        return None

    async def op_graph_get_as_of(self) -> None:
        if not self.high_seq:
            return await self.op_graph_get()
        args = {"as_of": self.rng.randint(1, self.high_seq), "limit": 20}
        await self.session.call("graph_get_as_of", "graph_get", args)
        return None

    async def op_graph_forget(self) -> None:
        temp = f"Temp {self.k} {self.n}"
        self.n += 1
        r = await self.session.call("graph_entity", "graph_entity", {"name": temp, "type": "temp"})
        if isinstance(r, Err):
            return
        if self.entities:
            other = self.rng.choice(sorted(self.entities))
            await self.session.call("graph_relate", "graph_relate", {"source": temp, "target": other, "type": "temp"})
        r = await self.session.call("graph_forget", "graph_forget", {"entities": [temp]})
        if not isinstance(r, Err) and r.get("entities") != 1:
            self.tally.fail("graph_forget", f"{temp}: {r}")

    # -- code and status --------------------------------------------------------------------------------------
    async def op_code_search(self) -> None:
        args = {"query": self.rng.choice(CODE_QUERIES), "limit": 5}
        await self.session.call("code_search", "code_search", args)

    async def op_code_status(self) -> None:
        await self.session.call("code_status", "code_status", {"project": self.shared.project.name})

    async def op_reindex(self) -> None:
        self.shared.reindexed += 1
        touch_module(self.shared.project, self.shared.reindexed)
        r = await self.session.call("code_index", "code_index", {"path": str(self.shared.project)})
        if not isinstance(r, Err) and r.get("files") != 1:
            self.tally.fail("code_reindex", f"one file changed, {r.get('files')} re-indexed: {r}")

    async def op_status(self) -> None:
        r = await self.session.call("status", "memory_status", {})
        if not isinstance(r, Err):
            self.tally.dead_letters = max(self.tally.dead_letters, int(r.get("dead_letters") or 0))


def _cv(v: Version) -> tuple[str | None, int]:
    return v.content, v.version
