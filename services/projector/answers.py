"""How a projector answers a query: wait for what the query reads to reach its min_seq (the route's follower,
staged or committed), never answer from read models ahead of the log, run the read model's handler on a worker
thread against one generation, and say which position the answer reflects. The status query is answered here
too: it reads the log and the embedding model as well as the read models."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Literal, Protocol

from nats.js import JetStreamContext

from mneme.catch_up import fold_progress
from mneme.embedding import MODELS
from mneme.errors import Indexing, MnemeError, Rebuilding
from mneme.eventlog import dead_letter_count
from mneme.query_server import Answer, wait_applied
from schemas import subjects as S
from schemas.events import decode_envelope
from schemas.queries import (
    GetMemory,
    GetResult,
    ListMemories,
    MemoryStats,
    ProjectorStatus,
    Query,
    SearchMemories,
    StatusResult,
)
from services.projector.generation import Generation, embedding_in_background
from services.projector.memories_queries import get_known
from services.projector.options import Tuning
from services.projector.read_models import route_of, run_query
from services.projector.vector_view import VectorView

log = logging.getLogger("mneme.projector")


class Serving(Protocol):
    """What answering needs of its projector (services/projector/service.py's Projector)."""

    gen: Generation
    js: JetStreamContext
    tuning: Tuning
    start_target: int
    vector_clock: tuple[float, int] | None
    rebuilding: str | None


class Answers:
    """The projector's answers (its query plane's handler and the in-process path both come here)."""

    def __init__(self, projector: Serving):
        self.p = projector

    async def reply(self, gen: Generation, query: Query) -> Answer:
        """Wait for what the query reads to have applied its min_seq, then run it on a worker thread (a failure
        raises: the query plane maps it to the reply)."""
        if self.p.rebuilding is not None:  # never an answer from read models ahead of the log
            raise Rebuilding(
                f"the read models are being rebuilt from the log ({self.p.rebuilding}); ask again in a moment",
                details={"why": self.p.rebuilding, "retry_after_s": 2},
            )
        as_of = getattr(query, "as_of", None)
        route = route_of(query)
        # point reads are answered from staged state; the rest, and any read of the past, need committed rows
        committed = not route.staged or as_of is not None
        need = max(query.min_seq, as_of.seq or 0) if as_of is not None else query.min_seq
        waits = [(gen.follower, "projection")]
        if route.follows == "vectors":
            assert isinstance(query, SearchMemories)
            if gen.vector_follower is None:
                raise MnemeError("this projector keeps no vector index", details={"op": query.OPERATION})
            waits = [(gen.vector_follower, "vector index")]
            if as_of is not None or query.graph_weight > 0:  # the rows resolve as_of and hold the graph
                waits.append((gen.follower, "projection"))
            await self.vectors_folded(gen)
        await wait_applied(waits, need, self.p.tuning.wait_timeout, committed=committed)
        # read-your-reads: the access statistics include the reads the asking gateway recorded. Statistics a
        # moment old are still an answer: a backlog of read records delays it, never refuses it
        reads = query.min_access_seq if isinstance(query, ListMemories | MemoryStats) and gen.fold_access else 0
        if reads and not await gen.access_follower.wait_for(reads, self.p.tuning.wait_timeout, committed=True):
            log.info(
                "access statistics behind %d after %.0f s: answered as they are", reads, self.p.tuning.wait_timeout
            )
        if isinstance(query, SearchMemories) and query.mode != "keyword":
            await self.dense_ready(gen, need)

        def reflected() -> int:
            """The position the answer reflects (an audited read is asked again as of it): the committed vectors
            for a search, the committed rows for a list or stats, the staged ones for a point read."""
            if route.follows == "vectors" and gen.vector_follower is not None:
                return gen.vector_follower.committed
            return gen.follower.committed if committed else gen.follower.applied

        applied = reflected()
        if isinstance(query, ProjectorStatus):
            return Answer(applied, await self.status(gen, query))
        if route.writes:  # no commit of the follower runs meanwhile
            async with gen.follower.paused():
                result = await asyncio.to_thread(run_query, gen, query)
        elif route.repeat:
            for _ in range(3):  # a commit that lands while the query runs moves the position the answer
                result = await asyncio.to_thread(run_query, gen, query)  # reflects: ask again, so the recorded
                if (now := reflected()) == applied:  # position is the answer's own (at most twice; commits
                    break  # come a few times a second)
                applied = now
        else:
            known = get_known(gen.view, query) if isinstance(query, GetMemory) else None  # no thread hop when
            result = known if known is not None else await asyncio.to_thread(run_query, gen, query)  # it is known
            if isinstance(result, GetResult) and result.item is not None and as_of is None:
                # staged while it ran: the answer reflects at least the position of the version it returned
                applied = max(applied, result.item.memory.last_seq)
        return Answer(applied, result)

    async def status(self, gen: Generation, q: ProjectorStatus) -> StatusResult:
        """Counts from the read models, the model and its cache, and the lag behind the head of the log."""
        info = await self.p.js.stream_info(S.EVENTS_STREAM)
        head, applied = info.state.last_seq, gen.follower.applied
        lag_seconds = 0.0
        if head > applied:
            try:
                oldest = await self.p.js.get_msg(S.EVENTS_STREAM, seq=applied + 1, direct=True)
                at = decode_envelope(oldest.data or b"").occurred_at  # (the writer's clock: close to record time)
                lag_seconds = max(0.0, time.time() - at.timestamp())
            except Exception:  # noqa: BLE001 - a purged sequence or an undecodable one: no age to report
                lag_seconds = 0.0
        counts = await asyncio.to_thread(status_counts, gen, q.namespace)
        vectors = gen.vectors
        model_status: Literal["loading", "ready", "error", "off"] = "off"
        model_id, error, dim = None, None, 0
        hits = misses = size = 0
        if vectors is not None:
            model = vectors.model
            model_id = MODELS[model.name].id if model.name in MODELS else model.name
            dim = MODELS[model.name].dim if model.name in MODELS else int(model.dim or 0)
            try:
                model.get()
                model_status = "ready"
            except MnemeError as exc:
                model_status = "loading" if exc.code == "EMBEDDING_MODEL_LOADING" else "error"
                error = exc.message if model_status == "error" else None
            hits, misses = vectors.cache.hits, vectors.cache.misses
            size = await asyncio.to_thread(vectors.cache.size)
        return StatusResult(
            memories=counts[0],
            entities=counts[1],
            relations=counts[2],
            code_chunks=counts[3],
            model=model_id,
            model_status=model_status,
            model_error=error,
            dimensions=dim,
            cache_hits=hits,
            cache_misses=misses,
            cache_size=size,
            applied_seq=applied,
            head_seq=head,
            lag_events=max(0, head - applied),
            lag_seconds=round(lag_seconds, 3),
            vectors_applied=gen.vector_follower.applied if gen.vector_follower is not None else None,
            code_pending=await asyncio.to_thread(gen.code.pending, q.namespace) if gen.code is not None else 0,
            dead_letters=await dead_letter_count(self.p.js),
            dead_letters_here=sum(f.dead_letters for f in gen.followers),
        )

    async def dense_ready(self, gen: Generation, need: int) -> None:
        """A semantic or hybrid search runs once every point up to `need` has its dense vector. While the
        projector is still embedding the log it found at start (a new replica, a rebuild) it answers INDEXING
        at once, with progress, rather than hold the caller; after that it waits up to wait_timeout for the
        writes it must see, then answers INDEXING."""
        vectors = embedding_in_background(gen)
        if vectors is None:
            return  # without a model the search itself answers EMBEDDING_MODEL_LOADING
        floor = self.p.start_target
        if vectors.dense_applied < floor:
            raise self.indexing(vectors, max(need, floor))
        deadline = time.monotonic() + self.p.tuning.wait_timeout
        while vectors.dense_applied < need:
            if time.monotonic() >= deadline:
                raise self.indexing(vectors, need)
            await asyncio.sleep(0.005)

    async def vectors_folded(self, gen: Generation) -> None:
        """Searches need the vector index to have folded the log found at start (a new replica, a rebuild: the
        rows serve first). A search waits for that when it would take less than wait_timeout at the rate seen
        so far, else answers INDEXING at once, with progress."""
        vf = gen.vector_follower
        floor = self.p.start_target
        if vf is None or vf.committed >= floor:
            return
        eta = fold_progress("folding", self.p.vector_clock, vf.committed, floor)["eta_s"]
        if (eta is None or eta < self.p.tuning.wait_timeout) and await vf.wait_for(floor, self.p.tuning.wait_timeout):
            return
        p = fold_progress("folding", self.p.vector_clock, vf.committed, floor)
        left = f"about {p['eta_s']:.0f} s left" if p["eta_s"] is not None else "starting"
        raise Indexing(
            f"the search index is folding the log ({p['done']:,} of {floor:,} events; {left}); "
            "memory_get and memory_list answer now",
            details=p,
        )

    @staticmethod
    def indexing(vectors: VectorView, need: int) -> Indexing:
        p = vectors.progress()
        eta = f"about {p['eta_s']:.0f} s left" if p["eta_s"] is not None else "the model is loading"
        return Indexing(
            f"the vector index is embedding memories ({p['done']:,} of {p['total']:,} done, "
            f"{p['pending']:,} waiting; {eta}); keyword search (mode 'keyword') answers now",
            details={**p, "min_seq": need},
        )


def status_counts(gen: Generation, ns: str) -> tuple[int, int, int, int]:
    """Live memories, entities, relations and code chunks of one namespace."""
    cur = gen.view.reader()
    row = cur.execute(
        "SELECT (SELECT count(*) FROM memories WHERE namespace = $ns AND status != 'archived'), "
        "(SELECT count(*) FROM graph_entities WHERE namespace = $ns AND seq_to IS NULL AND NOT deleted), "
        "(SELECT count(*) FROM graph_relations WHERE namespace = $ns AND seq_to IS NULL AND NOT deleted)",
        {"ns": ns},
    ).fetchall()[0]
    chunks = 0
    if gen.code is not None:
        got = gen.code.reader().execute("SELECT count(*) FROM code_chunks WHERE namespace = ?", [ns]).fetchall()
        chunks = int(got[0][0])
    return int(row[0]), int(row[1]), int(row[2]), chunks
