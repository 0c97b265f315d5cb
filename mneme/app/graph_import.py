"""`mneme import --from server-memory` and `mneme export --to server-memory`: the knowledge graph in and out as
the reference MCP knowledge-graph server (@modelcontextprotocol/server-memory) keeps it, one JSON object a line:

    {"type":"entity","name":"Alice","entityType":"person","observations":["likes tea"]}
    {"type":"relation","from":"Alice","to":"Bob","relationType":"knows"}

Import checks every line before it writes anything: a line that is not JSON, of an unknown type, an entity
without a name, an observation that is not a string, a name or text over the graph's limits (the write side's
own rules: services/gateway/graph_commands.py) makes the whole file refused with each bad line's number, and
nothing is written. Then it writes through the graph's write side only (GraphCommands: events, never a read
model): the entities, then the observations an entity lacks, then the relations. Ids follow from names, so an
entity or relation that exists (by name key: case, Unicode form and spacing aside) is found and left as it is,
and importing the same file twice adds nothing. Lines that name one entity (or one relation) again are merged:
the first line's name and type, every line's observations, in order, each once.

A relation whose end is neither an entity of the file nor one of the memory (the reference keeps such
relations; mneme's graph relates existing entities only) gets that end created as an entity of type
"unknown" without observations, named as the relation names it, so no relation of the file is lost; the
summary counts them (`placeholders_created`) and stderr names them.

Export writes every entity of the namespace, then every relation, each sorted by name, as they stood at one
log position (the read is pinned with `as_of`, so pages stay consistent while others write), in the same
format: import(export(x)) adds nothing, and the reference server reads the file.

Both reach the memory as the other operator commands do: beside a running `mneme serve` on the data directory
(or with `--nats-url`) through its NATS and its projector; with nothing running, they start the embedded
nats-server on the data directory and a projector in this process (as `mneme serve` does, without the gateway
and the auditor: the next serve's auditor records the events from the log). Export never creates a store.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO, TypeVar

from mneme.app import compose
from mneme.app.generations import serving_settings
from mneme.app.graph_file import (
    SHOWN,
    FileEntity,
    FileRelation,
    Parsed,
    entity_line,
    parse,
    read_file,
    relation_line,
    write_file,
)
from mneme.app.preflight import Refused, require_log, serve_url
from mneme.app.settings import CoreSettings, GatewaySettings, ProjectorSettings
from mneme.domain import validation as v
from mneme.domain.graph import name_key
from mneme.errors import InvalidInput, MnemeError, ProjectionLag
from mneme.eventlog import EventLog
from mneme.ids import new_id
from schemas.events import Actor
from schemas.queries import AsOf, Entity, GraphEntities
from services.gateway.graph_commands import (
    GraphCommands,
    NewEntity,
    NewRelation,
)
from services.gateway.queries import QueryClient

T = TypeVar("T")
PLACEHOLDER_TYPE = "unknown"  # the type of an entity made for a relation's end found nowhere else
ACTOR = Actor(agent_id="mneme-import", role="admin")  # who the import's events name (the operator)
BATCH = 100  # entities, observation groups or relations per call of the write side
OBS_PER_EVENT = 100  # observations in one event at most, and their UTF-8 bytes (an event is one NATS message)
OBS_BYTES_PER_EVENT = 200_000
PAGE = 200  # entities per page of an export's read (fewer when a page's answer is too large: see read_graph)
# The write side reads the entities a call touches (with every observation) from a projector, and an answer over
# NATS is one message (1 MB at most; a larger one is never delivered): a call's entities are kept under this.
BUDGET = 256 * 1024


# ---- reaching the memory ----------------------------------------------------------------------------------


@dataclass
class Reached:
    graph: GraphCommands
    queries: QueryClient
    log: EventLog
    live: bool  # through a running mneme (its NATS and projector), not one started here


@contextlib.asynccontextmanager
async def reach(
    core: CoreSettings, gs: GatewaySettings, ps: ProjectorSettings, name: str, *, create: bool
) -> AsyncIterator[Reached]:
    """The graph's write side and a query client: through the running mneme (`--nats-url`, or the `mneme serve`
    on the data directory), or, with none, the embedded nats-server started on the data directory and a
    projector in this process, serving once it has caught up with the log. `create`: a data directory without a
    log may get one (import); else it is refused (export)."""
    url = core.nats_url or serve_url(core)
    async with AsyncExitStack() as stack:
        local = catching_up = None
        if url is not None:
            core = core.model_copy(update={"nats_url": url})  # (that server, or refused: never a second one)
            nc = await stack.enter_async_context(compose.nats_connection(core, name, stack_embedded=False))
        else:
            if not create:
                require_log(core)
            nc = await stack.enter_async_context(compose.nats_connection(core, name, stack_embedded=True))
            from mneme.app.runtime import start_projector

            ps = compose.checked(serving_settings(core, ps))
            log_nc = await compose.connect(compose.url_of(nc), f"{name}-log", core)
            stack.push_async_callback(compose.close_nats, log_nc)
            projector = await start_projector(stack, core, ps, nc, log_nc=log_nc)
            await _until_serving(projector.serving, projector.catch_up_progress, name)
            local, catching_up = projector.answer_here, projector.catch_up_progress
        elog = EventLog(nc.jetstream(), timeout=gs.publish_timeout, connected=lambda: nc.is_connected)
        queries = QueryClient(nc, timeout=gs.query_timeout, local=local, catching_up=catching_up,
                              model_wait=gs.model_wait)  # fmt: skip
        yield Reached(GraphCommands(elog, queries, lambda: datetime.now(UTC)), queries, elog, live=url is not None)


async def _until_serving(serving: asyncio.Event, progress: Callable[[], dict[str, Any] | None], name: str) -> None:
    """Wait for the projector started here to serve (it folds the log it found first), saying so now and then."""
    while True:
        try:
            async with asyncio.timeout(10):
                await serving.wait()
                return
        except TimeoutError:
            p = progress() or {}
            where = f" ({p['done']:,} of {p['total']:,} events)" if "done" in p and "total" in p else ""
            sys.stderr.write(f"{name.replace('-', ' ', 1)}: the read models are catching up with the log{where}\n")


# ---- import -----------------------------------------------------------------------------------------------


class Progress:
    """`entities 120/500, relations 0/300` on stderr: redrawn in place on a terminal; elsewhere a line at most
    every `every` seconds, and the last one."""

    def __init__(self, stream: TextIO | None = None, every: float = 2.0) -> None:
        self._stream, self.every, self._at = stream, every, -1e9

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def __call__(self, ents: tuple[int, int], rels: tuple[int, int], *, final: bool = False) -> None:
        text = f"mneme import: entities {ents[0]}/{ents[1]}, relations {rels[0]}/{rels[1]}"
        try:
            tty = self.stream.isatty()
        except (AttributeError, ValueError):
            tty = False
        if tty:
            self.stream.write("\r" + text + ("\n" if final else ""))
        else:
            now = time.monotonic()
            if not final and now - self._at < self.every:
                return
            self._at = now
            self.stream.write(text + "\n")
        self.stream.flush()


def _chunks(observations: Sequence[str]) -> list[list[str]]:
    """Observations in groups small enough for one event each (count and bytes)."""
    out: list[list[str]] = [[]]
    size = 0
    for o in observations:
        b = len(o.encode())
        if out[-1] and (len(out[-1]) >= OBS_PER_EVENT or size + b > OBS_BYTES_PER_EVENT):
            out.append([])
            size = 0
        out[-1].append(o)
        size += b
    return out


def _size(e: FileEntity | None) -> int:
    """About the bytes a projector's answer spends on an entity the file holds (an unknown one: a guess)."""
    if e is None:
        return 1024
    return 256 + len(e.name.encode()) + len(e.entity_type.encode()) + sum(len(o.encode()) + 16 for o in e.observations)


def _by_budget(items: Sequence[T], cost: Callable[[T, set[str]], tuple[int, set[str]]]) -> list[list[T]]:
    """`items` in batches of at most BATCH whose entities (each counted once: `cost(item, seen)` gives an item's
    bytes beyond the entities `seen` in its batch, and its entities' keys) stay within BUDGET; an item over it
    alone is a batch of its own."""
    out: list[list[T]] = []
    seen: set[str] = set()
    used = 0
    for item in items:
        more, keys = cost(item, seen)
        if not out or len(out[-1]) >= BATCH or (out[-1] and used + more > BUDGET):
            out.append([])
            seen, used = set(), 0
            more, keys = cost(item, seen)
        out[-1].append(item)
        seen |= keys
        used += more
    return out


@dataclass
class Tally:
    entities_created: int = 0
    entities_existing: int = 0
    observations_added: int = 0
    relations_created: int = 0
    relations_existing: int = 0
    placeholders_created: list[str] = field(default_factory=list)
    seq: int = 0  # the last log position written


async def write(
    graph: GraphCommands,
    ns: str,
    parsed: Parsed,
    progress: Callable[..., None],
    request_id: str,
) -> Tally:
    """The parsed file into the graph, as events: entities (then the observations each lacks), the ends of
    relations found nowhere as placeholders, then the relations."""
    t = Tally()
    ents = list(parsed.entities.values())
    missing = parsed.missing_ends()
    rels = list(parsed.relations.values())
    total_e, total_r = len(ents) + len(missing), len(rels)
    done_e = 0
    later: list[tuple[str, list[list[str]]]] = []  # entity name -> observation groups still to add
    progress((0, total_e), (0, total_r))
    for i in range(0, len(ents), BATCH):
        batch = ents[i : i + BATCH]
        groups = {name_key(e.name): _chunks(e.observations) for e in batch}
        items = [NewEntity(e.name, e.entity_type, tuple(groups[name_key(e.name)][0])) for e in batch]
        w = await graph.create_entities(ns, items, ACTOR, request_id, t.seq)
        t.seq = max(t.seq, w.seq)
        created = {name_key(x.name) for x in w.created if isinstance(x, Entity)}
        t.entities_created += len(w.created)
        t.entities_existing += len(batch) - len(w.created)
        t.observations_added += sum(len(x.observations) for x in w.created if isinstance(x, Entity))
        for e in batch:
            key = name_key(e.name)
            rest = groups[key][1:] if key in created else [g for g in groups[key] if g]
            if rest:
                later.append((e.name, rest))
        done_e += len(batch)
        progress((done_e, total_e), (0, total_r))
    await _observations(graph, ns, later, t, request_id, parsed)
    placeholders = list(missing.values())
    for i in range(0, len(placeholders), BATCH):
        batch_names = placeholders[i : i + BATCH]
        w = await graph.create_entities(
            ns, [NewEntity(n, PLACEHOLDER_TYPE) for n in batch_names], ACTOR, request_id, t.seq
        )
        t.seq = max(t.seq, w.seq)
        t.placeholders_created += [x.name for x in w.created if isinstance(x, Entity)]
        done_e += len(batch_names)
        progress((done_e, total_e), (0, total_r))

    def ends(r: FileRelation, seen: set[str]) -> tuple[int, set[str]]:
        keys = {name_key(r.from_name), name_key(r.to_name)} - seen
        return sum(_size(parsed.entities.get(k)) for k in keys), keys

    done_r = 0
    for batch_rels in _by_budget(rels, ends):
        items_r = [NewRelation(r.from_name, r.to_name, r.relation_type) for r in batch_rels]
        w = await graph.create_relations(ns, items_r, ACTOR, request_id, t.seq)
        t.seq = max(t.seq, w.seq)
        t.relations_created += len(w.created)
        t.relations_existing += len(batch_rels) - len(w.created)
        done_r += len(batch_rels)
        progress((done_e, total_e), (done_r, total_r))
    progress((done_e, total_e), (total_r, total_r), final=True)
    return t


async def _observations(
    graph: GraphCommands, ns: str, later: list[tuple[str, list[list[str]]]], t: Tally, request_id: str,
    parsed: Parsed,
) -> None:  # fmt: skip
    """Add the observations entities lack, one group of each entity per round (so that an entity's groups land in
    order, each on the version the previous one made)."""

    def size(change: tuple[str, list[str]], seen: set[str]) -> tuple[int, set[str]]:
        return _size(parsed.entities.get(name_key(change[0]))), set()

    rounds = max((len(groups) for _, groups in later), default=0)
    for r in range(rounds):
        changes = [(name, groups[r]) for name, groups in later if len(groups) > r]
        for batch in _by_budget(changes, size):
            w = await graph.change_observations(ns, batch, ACTOR, request_id, t.seq, remove=False, strict=False)
            t.seq = max(t.seq, w.seq)
            t.observations_added += sum(len(added) for added in w.changed.values())


def check_namespace(ns: str | None, gs: GatewaySettings) -> str:
    try:
        return v.namespace(ns if ns is not None else gs.namespace, "--namespace")
    except InvalidInput as exc:
        raise Refused(exc.message) from None


async def import_file(
    core: CoreSettings,
    gs: GatewaySettings,
    ps: ProjectorSettings,
    path: Path,
    namespace: str | None = None,
    *,
    progress: Callable[..., None] | None = None,
) -> dict[str, Any]:
    """`mneme import --from server-memory PATH`: the summary it prints. BadLines (nothing written) when a line
    cannot be imported."""
    ns = check_namespace(namespace, gs)
    parsed = parse(read_file(path), path)  # every line checked before anything is reached, let alone written
    for note in parsed.notes[:SHOWN]:
        sys.stderr.write(f"mneme import: {path}: {note}\n")
    if len(parsed.notes) > SHOWN:
        sys.stderr.write(f"mneme import: {path}: {len(parsed.notes) - SHOWN} more such notes\n")
    async with reach(core, gs, ps, "mneme-import", create=True) as to:
        t = await write(to.graph, ns, parsed, progress or Progress(), f"import-{new_id()}")
    for name in t.placeholders_created[:SHOWN]:
        sys.stderr.write(
            f"mneme import: {name!r} is a relation's end that no entity line names: created as type "
            f"{PLACEHOLDER_TYPE!r}\n"
        )
    return {
        "namespace": ns,
        "lines": parsed.lines,
        "entities_created": t.entities_created,
        "entities_existing": t.entities_existing,
        "observations_added": t.observations_added,
        "relations_created": t.relations_created,
        "relations_existing": t.relations_existing,
        "placeholders_created": len(t.placeholders_created),
        "duplicate_lines": parsed.duplicates,
        "seq": t.seq,
        "live": to.live,
    }


# ---- export -----------------------------------------------------------------------------------------------


async def read_graph(queries: QueryClient, ns: str, head: int) -> tuple[list[str], list[str], int]:
    """Every entity and relation of `ns` as they stood at log position `head` (entity lines, relation lines,
    each sorted by name), read a page at a time from the projector."""
    entities: dict[str, tuple[str, str, list[str]]] = {}
    relations: dict[str, tuple[str, str, str]] = {}
    at = AsOf(seq=head) if head > 0 else None
    offset, limit = 0, PAGE
    while True:
        page = GraphEntities(namespace=ns, now=datetime.now(UTC), min_seq=head, relations="either", limit=limit,
                             offset=offset, as_of=at)  # fmt: skip
        try:
            got = await queries.ask(page)
        except MnemeError as exc:  # (an answer over 1 MB never arrives: ask for fewer entities at a time)
            if exc.code != ProjectionLag.code or limit == 1:
                raise
            limit = max(1, limit // 4)
            continue
        limit = min(PAGE, limit * 2)
        for e in got.entities:
            entities[e.id] = (e.name, e.entity_type, list(e.observations))
        for r in got.relations:
            relations[r.id] = (r.from_name, r.to_name, r.relation_type)
        offset += len(got.entities)
        if not got.entities or offset >= got.total:
            break
    ents = [entity_line(*e) for e in sorted(entities.values(), key=lambda e: (e[0], e[1]))]
    rels = [relation_line(*r) for r in sorted(relations.values())]
    return ents, rels, head


async def export_file(
    core: CoreSettings, gs: GatewaySettings, ps: ProjectorSettings, path: Path, namespace: str | None = None
) -> dict[str, Any]:
    """`mneme export --to server-memory PATH`: the summary it prints."""
    ns = check_namespace(namespace, gs)
    if not path.parent.is_dir():  # (before anything starts)
        raise Refused(f"export: the directory {path.parent} does not exist")
    async with reach(core, gs, ps, "mneme-export", create=False) as at:
        head = await at.log.last_seq()
        ents, rels, seq = await read_graph(at.queries, ns, head)
    write_file(path, ents + rels)
    return {"namespace": ns, "path": str(path), "entities": len(ents), "relations": len(rels), "seq": seq,
            "live": at.live}  # fmt: skip
