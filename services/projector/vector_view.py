"""The vector read model: one Qdrant point per memory version, folded from the log.

A sink of its own follower (mneme/follow.py), beside the DuckDB view: embedding is
slower than folding rows, so the vectors never hold the rows back, and a rebuild of
the vectors alone (a new model) replays only this sink.

Each version is a point `point_id(memory, version)` with the content's dense vector,
its BM25 sparse vector and a payload of the filtered fields, its record interval
[seq_from, seq_to) and the whole state (so a hit needs no second lookup, and a later
event folds on the state read back from the point). An event closes the previous
version's interval (seq_to = its sequence) and opens the new one; a permanent delete
only closes. Every write is an idempotent upsert or payload set keyed by
deterministic ids, so re-folding after a crash (from the saved position) has exactly
the effect of folding once (invariant 5).

Two ways to embed (services/projector/vector_dense.py, the dense half of this view). Synchronous (replay,
rebuild): at commit, in batches, through the cache; until the model is loaded, points are written with their
BM25 vector only (keyword search works) and `fill_pending` adds the dense vectors once the model is ready. The
texts of each staged batch are handed at once to a prefetch thread that embeds them (through the cache), so
the model works while the follower receives and stages and while a commit writes points; a commit writes each
chunk's points as soon as its vectors are there. Background (`background=True`, a live projector): a commit
never calls the model; every point is written at once with its BM25 vector (and its dense vector when the
cache has it), so keyword search never waits for an embedding, and a filler thread embeds what is pending in
micro-batches (whatever is waiting, up to EMBED_CHUNK texts per model call; onnxruntime and the tokenizer
release the GIL) and adds the dense vectors. `dense_applied` is the sequence up to which every point has its
dense vector: semantic and hybrid searches wait for it, keyword searches do not. Either way the saved
position never passes a point still without its dense vector.

What a point holds is services/projector/vector_payload.py; its BM25 vector, services/projector/bm25.py.
"""

from __future__ import annotations

import threading
import time

from mneme.domain.state import MemoryState, evolve, stale
from mneme.embed_cache import EmbeddingCache
from mneme.embedding import ModelHandle
from mneme.sink import Marks, Positioned
from schemas.events import Event, MemoryCreated
from schemas.placement import on_memory_subject
from services.projector.bm25 import BM25 as BM25
from services.projector.bm25 import fold as fold
from services.projector.known_states import KnownStates
from services.projector.vector_dense import EMBED_CHUNK as EMBED_CHUNK
from services.projector.vector_dense import PREFETCH_CHUNK as PREFETCH_CHUNK
from services.projector.vector_dense import DenseVectors
from services.projector.vector_payload import FAR as FAR
from services.projector.vector_payload import epoch as epoch
from services.projector.vector_payload import index_text as index_text
from services.projector.vector_payload import normalize_subject as normalize_subject
from services.projector.vector_payload import payload_of as payload_of
from services.projector.vector_payload import state_of as state_of
from services.projector.vector_port import VectorIndex, VPoint, point_id

CREATES_ON_LOOP = 256  # creates whose points a stage looks up without leaving the event loop


class VectorView(DenseVectors):
    def __init__(
        self,
        index: VectorIndex,
        model: ModelHandle,
        cache: EmbeddingCache,
        *,
        bm25: BM25 | None = None,
        background: bool = False,
    ):
        super().__init__(index, model, cache, background=background)
        self.bm25 = bm25 or BM25()
        self.checkpoint = index.load_checkpoint()  # the saved position
        self.checkpoint_mark = index.load_mark() if self.checkpoint else None  # the log's event there
        self.marks = Marks()  # (a position is saved only where its event's mark is known)
        self.staged = self.checkpoint
        self.committed = self.checkpoint
        self._states: dict[str, MemoryState | None] = {}  # memories touched since the last commit
        # the latest committed states of recently changed memories (a batch that changes them again reads no point)
        self._known = KnownStates()
        self._upserts = {}  # point id -> (point, text to embed, its seq)
        self._closes: dict[str, int] = {}  # point id (committed earlier) -> seq_to
        self.save_every = 2.0
        self._saved_at = 0.0

    # -- Sink
    def _missing(self, batch: list[Positioned]) -> set[str]:
        return (
            {
                p.envelope.aggregate_id
                for p in batch
                if p.seq > self.staged and isinstance(p.envelope.event, Event) and p.envelope.event.version > 1
            }
            - self._states.keys()
            - self._known.keys()
        )

    def _unknown_creates(self, batch: list[Positioned]) -> dict[str, tuple[str, int]]:
        """{point id: (memory id, the create's sequence)} of the batch's creates of ids this view has no state
        of: a gateway's create names a new id, but a message that bypassed it may name one the log had (then
        the point of its first version exists, or of the version the create names, for a history that itself
        began forged)."""
        out: dict[str, tuple[str, int]] = {}
        for p in batch:
            ev = p.envelope.event
            if p.seq > self.staged and isinstance(ev, MemoryCreated):
                mid = p.envelope.aggregate_id
                if mid not in self._states and self._known.get(mid) is None:  # (the first create in the batch:
                    out.setdefault(point_id(mid, 1), (mid, p.seq))  # a re-fold's own, before any forged one)
                    out.setdefault(point_id(mid, ev.version), (mid, p.seq))
        return out

    def _created_before(self, creates: dict[str, tuple[str, int]]) -> set[str]:
        """The memories of `creates` whose id the log had before: a point of theirs exists that another event
        made. A point this very create made (its `seq_from`) is a re-fold after a restart from the saved
        position (points are written before it moves past them): folded again, not refused."""
        if not creates:
            return set()
        got = self.index.retrieve(list(creates))
        return {mid for pid, (mid, seq) in creates.items() if pid in got and got[pid].payload.get("seq_from") != seq}

    def stage_reads_disk(self, batch: list[Positioned]) -> bool:
        # looking up a few creates' points costs less on the event loop than a thread hop (~8 us for one, 1.6 us
        # an id for thousands, measured on an empty shard): live writes stay on the loop, a catch-up hops
        return bool(self._missing(batch)) or len(self._unknown_creates(batch)) > CREATES_ON_LOOP

    def stage(self, batch: list[Positioned], upto: int | None = None) -> None:
        with self._lock:
            last = batch[-1].seq if batch else 0
            # memories only: the knowledge graph's events have no point
            batch = [p for p in batch if p.seq > self.staged and isinstance(p.envelope.event, Event)]
            need = self._missing(batch)
            loaded: dict[str, MemoryState] = {}
            if need:
                ids = {}
                for p in batch:
                    mid = p.envelope.aggregate_id
                    if mid in need and mid not in ids:
                        ids[mid] = point_id(mid, p.envelope.event.version - 1)
                got = self.index.retrieve(list(ids.values()))
                for mid, pid in ids.items():
                    if pid in got:
                        loaded[mid] = state_of(got[pid].payload)
            had = self._created_before(self._unknown_creates(batch))
            known = self._known
            fresh: list[str] = []  # point ids staged here (synchronous mode: their texts are prefetched)
            for p in batch:
                env = p.envelope
                mid = env.aggregate_id
                prev = self._states[mid] if mid in self._states else known.get(mid) or loaded.get(mid)
                if prev is not None and not on_memory_subject(p.subject, prev.namespace, prev.store, mid):
                    continue  # a change published outside its memory's subject (the rows' follower dead-letters it)
                if isinstance(env.event, MemoryCreated) and (mid in had or (prev is None and mid in self._states)):
                    continue  # a second create of an id the log had (deleted since, or its state not loaded)
                if stale(prev, env):
                    continue
                new = evolve(prev, env, p.seq)
                if prev is None and new is None:
                    continue
                if prev is not None:
                    old = point_id(prev.id, prev.version)
                    if old in self._upserts:
                        self._upserts[old][0].payload["seq_to"] = p.seq
                    else:
                        self._closes[old] = p.seq
                if new is not None:
                    pid = point_id(new.id, new.version)
                    payload = payload_of(new, p.seq)
                    text = index_text(new)
                    self._upserts[pid] = (VPoint(pid, payload, None, self.bm25.document(text)), text, p.seq)
                    fresh.append(pid)
                self._states[mid] = new
            self.staged = max(self.staged, last, upto or 0)
            self._prefetch_staged(fresh)

    def commit(self) -> int:
        with self._lock:
            last = self.staged
            if last == self.committed and not self._upserts and not self._closes:
                return self.checkpoint
            written = self._write_prefetched()  # (upserts are idempotent: the position is saved after all)
            points = [p for pid, (p, _, _) in self._upserts.items() if pid not in written]
            texts = {p.id: self._upserts[p.id][1] for p in points}
            vectors, missing = self._vectors(texts, use_model=not self.background)
            for p in points:
                if p.id in vectors:
                    p.dense = vectors[p.id]
            if points:
                self.index.upsert(points)
            by_seq: dict[int, list[str]] = {}
            for pid, seq in self._closes.items():
                by_seq.setdefault(seq, []).append(pid)
            for seq, ids in by_seq.items():
                self.index.set_payload(ids, {"seq_to": seq})
            fresh = {pid: (t, self._upserts[pid][2]) for pid, t in missing.items() if pid not in self._pending_dense}
            self._pending_dense.update(fresh)
            self.dense_total += len(fresh)
            self._known.record(self._states)
            self._states.clear()
            self._upserts.clear()
            self._closes.clear()
            self.committed = last
            self._save_if_due()
            if fresh and self.background:
                self._wake.notify_all()
            return self.checkpoint

    def _save_if_due(self, force: bool = False) -> None:
        """The saved position (it flushes the shard: ~100 us a point at 100,000) is written at most every
        `save_every` seconds, never past a point still without its dense vector; after a crash the points
        since are folded again, idempotently."""
        target = self.dense_applied
        if target > self.checkpoint and (force or time.monotonic() - self._saved_at >= self.save_every):
            # the latest position whose event's mark is known (a batch's last; a fold fed by hand has none)
            at = self.marks.upto(target) if self.marks.fed else (target, None)
            if at is not None and at[0] > self.checkpoint:
                self._save(*at)

    def _save(self, seq: int, mark: str | None) -> None:
        self.index.save_checkpoint(seq, mark)
        self.checkpoint, self.checkpoint_mark = seq, mark
        self._saved_at = time.monotonic()

    def mark(self, seq: int, mark: str) -> None:
        self.marks.add(seq, mark)

    def positions(self) -> list[tuple[str, int, str | None]]:
        return [("the vector index", self.checkpoint, self.checkpoint_mark)]

    def save(self) -> int:
        """Save the position now (at stop, before a snapshot)."""
        with self._lock:
            self._save_if_due(force=True)
            return self.checkpoint

    @property
    def lock(self) -> threading.RLock:
        """Held, no commit or filler writes the index (a snapshot copies its files meanwhile)."""
        return self._lock

    def close(self) -> None:
        """Saves the position and closes the index; the cache may be shared with the next generation."""
        if not self._closed:
            self.save()
            with self._wake:
                self._closed = True
                self._wake.notify_all()
                self.index.close()
            if self._filler is not None:
                self._filler.join(timeout=5)
            if self._prefetch_pool is not None:
                self._prefetch_pool.shutdown(wait=True, cancel_futures=True)
