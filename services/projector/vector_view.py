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

Two ways to embed. Synchronous (replay, rebuild): at commit, in batches, through the cache; until the
model is loaded, points are written with their BM25 vector only (keyword search works) and
`fill_pending` adds the dense vectors once the model is ready. The texts of each staged batch are handed
at once to a prefetch thread that embeds them (through the cache), so the model works while the follower
receives and stages and while a commit writes points; a commit writes each chunk's points as soon as its
vectors are there. Background (`background=True`, a live
projector): a commit never calls the model; every point is written at once with its BM25 vector (and its
dense vector when the cache has it), so keyword search never waits for an embedding, and a filler thread
embeds what is pending in micro-batches (whatever is waiting, up to EMBED_CHUNK texts per model call;
onnxruntime and the tokenizer release the GIL) and adds the dense vectors. `dense_applied` is the sequence
up to which every point has its dense vector: semantic and hybrid searches wait for it, keyword searches
do not. Either way the saved position never passes a point still without its dense vector.
"""

from __future__ import annotations

import itertools
import logging
import re
import threading
import time
import unicodedata
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from typing import Any

import msgspec

from mneme.domain.state import MemoryState, evolve, stale
from mneme.embed_cache import EmbeddingCache, text_key
from mneme.embedding import ModelHandle, ModelLoading, ModelUnavailable, background_priority
from mneme.sink import Marks, Positioned
from schemas.events import Event, MemoryCreated
from schemas.placement import on_memory_subject
from services.projector.known_states import KnownStates
from services.projector.vector_index import OPEN, VectorIndex, VPoint, point_id

log = logging.getLogger("mneme.projector.vectors")
FAR = 1e15  # an open end of a time interval, in epoch seconds (filters are ranges, never nulls)
# Texts per call into the model: between two calls a stopping projector stops embedding (a 2,000-text commit
# took 3-20 s on a busy 2-core machine, longer than a supervisor waits after SIGTERM).
EMBED_CHUNK = 256
# Texts per prefetch (synchronous mode): a commit writes one chunk's points while the model embeds the
# next; larger chunks sort by length better (less padding), smaller ones leave the model idle less.
# (bench.search's catch-up, chunks of 256 / 512 / 1024: the model 0.92 / 0.90 / 0.89 of the time busy,
# at 0.79-0.80 / 0.85-0.86 / 0.86-0.89 of its raw rate)
PREFETCH_CHUNK = 1024
_state_enc = msgspec.json.Encoder()
_state_dec = msgspec.json.Decoder(MemoryState)


def normalize_subject(subject: str | None) -> str | None:
    return " ".join(subject.split()).casefold() if subject else None


def index_text(s: MemoryState) -> str:
    """What a memory's vectors are made of: its content, after the date it holds from when it has one
    ("(8 May 2023) ..."), so questions about when something happened can match it."""
    if s.valid_from is None:
        return s.content
    return f"({s.valid_from.day} {s.valid_from:%B %Y}) {s.content}"


def epoch(t: datetime | None, default: float) -> float:
    return t.timestamp() if t is not None else default


def payload_of(s: MemoryState, seq: int) -> dict[str, Any]:
    """What a point carries: the fields searches filter on, its record interval, and the whole state (a hit
    needs no second lookup). Lean: converting a payload into Qdrant costs ~2.5 us a key, so fields no filter
    uses (id, version, store, path, lock, event) live only in `state`, and a field left empty (no category,
    subject or tags) is left out: an `eq` filter on a missing key matches nothing, as on an empty one."""
    p = {
        "namespace": s.namespace,
        "kind": s.kind,
        "status": s.status,
        "verification": s.verification,
        "importance": s.importance,
        "valid_from": epoch(s.valid_from, -FAR),
        "valid_until": epoch(s.valid_until, FAR),
        "expires_at": epoch(s.expires_at, FAR),
        "seq_from": seq,
        "seq_to": OPEN,
        "state": _state_enc.encode(s).decode(),
    }
    if s.category is not None:
        p["category"] = s.category
    if s.subject:
        p["subject"] = normalize_subject(s.subject)
    if s.tags:
        p["tags"] = list(s.tags)
    return p


def state_of(payload: dict[str, Any]) -> MemoryState:
    return _state_dec.decode(payload["state"])


# Combining marks that are accents on a letter, dropped when folding (Latin, Greek, Cyrillic: the combining
# diacritical blocks; Hebrew points; Arabic harakat). Marks that are letters' own parts (Indic vowel signs,
# the kana voicing marks, Thai) stay: dropping them would merge different words.
_ACCENTS = re.compile(
    "[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
    "\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7"
    "\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06dc\u06df-\u06e4\u06e7\u06e8\u06ea-\u06ed]"
)
# Scripts written without spaces between words (Han, kana) and Hangul: indexed as overlapping character
# bigrams plus single characters (as Lucene's CJK analyzer does), so a word matches inside a sentence.
_CJK = re.compile(
    "[\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\U00020000-\U0002fa1f]+"
)


def _cjk_grams(m: re.Match[str]) -> str:
    run = m.group(0)
    return " " + " ".join([*(run[i : i + 2] for i in range(len(run) - 1)), *run]) + " "


def _symbol(ch: str) -> str:
    """An emoji or other pictographic symbol as a word of its own ("🚀" -> "u1f680"): the tokenizer drops them."""
    return f" u{ord(ch):x} " if unicodedata.category(ch) == "So" else ch


def fold(text: str) -> str:
    """What BM25 tokenises, for documents and queries alike: compatibility forms and accents folded
    (NFKD, accents dropped, NFC: "Zürich" -> "zurich", "ﬁle" -> "file", "Ｆｏｏ" -> "foo"), case folded
    ("Straße" -> "strasse"), CJK runs as bigrams and characters, emoji as words. ASCII text is returned
    as it is (the tokenizer lower-cases it)."""  # noqa: RUF002 - fullwidth on purpose
    if text.isascii():
        return text
    s = unicodedata.normalize("NFC", _ACCENTS.sub("", unicodedata.normalize("NFKD", text))).casefold()
    s = _CJK.sub(_cjk_grams, s)
    return "".join(ch if ch.isascii() else _symbol(ch) for ch in s)


class BM25:
    """Qdrant's BM25 tokenizer (English stemming and stop words, ASCII folding) over `fold`ed text; IDF is
    applied by Qdrant at query time. Changing what this produces changes the indexed tokens: bump
    INDEX_VERSION (vector_index.py) so that indexes written before are rebuilt from the log."""

    def __init__(self) -> None:
        import qdrant_edge as q

        # Qdrant's defaults (k 1.2, b 0.75, avg_len 256: almost no length normalisation for short
        # memories) measured best on LoCoMo; the corpus's true average length lost 1-3 points.
        # ascii_folding also maps the letters `fold` leaves alone (ø, æ, ł, đ) to ASCII.
        self._m = q.Bm25(q.Bm25Config(ascii_folding=True))

    def document(self, text: str) -> tuple[list[int], list[float]]:
        v = self._m.embed_document(fold(text))
        return list(v.indices), list(v.values)

    def query(self, text: str) -> tuple[list[int], list[float]]:
        v = self._m.embed_query(fold(text))
        return list(v.indices), list(v.values)


CREATES_ON_LOOP = 256  # creates whose points a stage looks up without leaving the event loop


class VectorView:
    def __init__(
        self,
        index: VectorIndex,
        model: ModelHandle,
        cache: EmbeddingCache,
        *,
        bm25: BM25 | None = None,
        background: bool = False,
    ):
        self.index = index
        self.model = model
        self.cache = cache
        self.bm25 = bm25 or BM25()
        self.background = background
        self.checkpoint = index.load_checkpoint()  # the saved position
        self.checkpoint_mark = index.load_mark() if self.checkpoint else None  # the log's event there
        self.marks = Marks()  # (a position is saved only where its event's mark is known)
        self.staged = self.checkpoint
        self.committed = self.checkpoint
        self._lock = threading.RLock()  # reentrant: a snapshot holds it around save() and the copy
        self._wake = threading.Condition(self._lock)  # the filler waits here for pending texts
        self._states: dict[str, MemoryState | None] = {}  # memories touched since the last commit
        # the latest committed states of recently changed memories (a batch that changes them again reads no point)
        self._known = KnownStates()
        self._upserts: dict[str, tuple[VPoint, str, int]] = {}  # point id -> (point, text to embed, its seq)
        self._closes: dict[str, int] = {}  # point id (committed earlier) -> seq_to
        # written without a dense vector, in sequence order (commits append in log order): point id -> (text, seq)
        self._pending_dense: dict[str, tuple[str, int]] = {}
        self.embedded = 0  # texts run through the model (for benchmarks)
        self.dense_total = 0  # texts that waited for a dense vector, and how many got one (progress)
        self.dense_done = 0
        self.dense_rate = 0.0  # texts/s of the filler's recent model calls (an estimate for ETAs)
        self.fill_failing = False  # the filler's last model call failed (it retries)
        self._in_flight = 0  # pending texts the filler is embedding right now (still in _pending_dense)
        self._embedding = True  # False once stopping: commits write what the cache holds, the rest stays pending
        self.save_every = 2.0
        self._saved_at = 0.0
        self._closed = False
        self._filler: threading.Thread | None = None
        self._prefetch_pool: ThreadPoolExecutor | None = None  # synchronous mode: embeds staged texts early
        self._prefetching: list[Future[dict[str, list[float]]]] = []  # {point id: dense vector}, stage order

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
            if fresh and not self.background and self._embedding and self.model.ready:
                if self._prefetch_pool is None:
                    self._prefetch_pool = ThreadPoolExecutor(1, thread_name_prefix="mneme-prefetch")
                for i in range(0, len(fresh), PREFETCH_CHUNK):  # a commit writes one while the next embeds
                    chunk = {pid: self._upserts[pid][1] for pid in fresh[i : i + PREFETCH_CHUNK]}
                    self._prefetching.append(self._prefetch_pool.submit(self._prefetch, chunk))

    def _prefetch(self, texts: dict[str, str]) -> dict[str, list[float]]:
        """Dense vectors for staged {point id: text} ahead of their commit, through the cache (synchronous
        mode; the prefetch thread)."""
        if not self._embedding or self._closed:
            return {}
        return self._embed(texts, self.model.get())

    def _write_prefetched(self) -> set[str]:
        """Upsert the points whose texts were prefetched, a chunk as soon as it is embedded (the model goes on
        with the next meanwhile); returns their ids. A chunk the prefetch failed on is left to the commit,
        which embeds what the cache lacks itself (and meets the error, if it persists)."""
        written: set[str] = set()
        pending, self._prefetching = self._prefetching, []
        for future in pending:
            try:
                vectors = future.result()
            except Exception:  # the commit embeds these texts again and reports its own error
                log.debug("prefetching embeddings failed", exc_info=True)
                continue
            points = [self._upserts[pid][0] for pid in vectors]
            for p in points:
                p.dense = vectors[p.id]
            self.index.upsert(points)
            written.update(vectors)
        return written

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

    @property
    def dense_applied(self) -> int:
        """Every point folded up to this sequence has its dense vector (semantic search may run up to it)."""
        first = next(iter(self._pending_dense.values()), None)
        return self.committed if first is None else min(self.committed, first[1] - 1)

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

    def fill_pending(self) -> int:
        """Once the model is ready: add the dense vectors written without one, then save the position."""
        with self._lock:
            if self._pending_dense:
                vectors, _missing = self._vectors({pid: t for pid, (t, _) in self._pending_dense.items()})
                self.index.set_dense(vectors)
                for pid in vectors:
                    del self._pending_dense[pid]
                self.dense_done += len(vectors)
            self._save_if_due(force=True)
            return len(self._pending_dense)

    # -- background embedding (a live projector)
    def start_filler(self) -> None:
        """Start the thread that embeds pending texts (background mode; idempotent)."""
        if self.background and self._filler is None:
            self._filler = threading.Thread(target=self._fill_loop, name="mneme-embedder", daemon=True)
            self._filler.start()

    def _fill_loop(self) -> None:
        background_priority(self.model.nice)  # MNEME_PROJECTOR_EMBEDDING_NICE: see ModelHandle
        while True:
            with self._wake:
                while not self._closed and not (self._pending_dense and self._embedding):
                    self._wake.wait(0.5)
                if self._closed:
                    return
                chunk = dict(itertools.islice(((pid, t) for pid, (t, _) in self._pending_dense.items()), EMBED_CHUNK))
            try:
                embedder = self.model.get()
            except ModelLoading:
                self.model.wait(1.0)
                continue
            except ModelUnavailable:
                time.sleep(1.0)
                continue
            self._in_flight = len(chunk)
            t0 = time.monotonic()
            try:
                vectors = self._embed(chunk, embedder)
            except Exception:  # a failed model call is retried; the points stay pending meanwhile
                self._in_flight = 0
                self.fill_failing = True
                log.exception("embedding %d pending texts failed; retrying", len(chunk))
                time.sleep(1.0)
                continue
            took = max(time.monotonic() - t0, 1e-6)
            with self._wake:
                if self._closed:
                    return
                still = {pid: vec for pid, vec in vectors.items() if pid in self._pending_dense}
                self.index.set_dense(still)
                for pid in still:
                    del self._pending_dense[pid]
                self._in_flight = 0
                self.dense_done += len(still)
                self.fill_failing = False
                rate = len(chunk) / took
                self.dense_rate = rate if self.dense_rate == 0 else 0.7 * self.dense_rate + 0.3 * rate
                self._save_if_due()
                self._wake.notify_all()

    def _embed(self, texts: dict[str, str], embedder: Any) -> dict[str, list[float]]:
        """Dense vectors for {point id: text}, cache first (outside the view's lock: commits go on)."""
        model_id = self.model.model_id
        keys = {pid: text_key(t) for pid, t in texts.items()}
        found = self.cache.get_many(model_id, list(set(keys.values())))
        todo = {k: texts[pid] for pid, k in keys.items() if k not in found}
        if todo:
            order = list(todo)
            fresh = dict(zip(order, embedder.embed([todo[k] for k in order]), strict=True))
            self.embedded += len(order)
            self.cache.put_many(model_id, fresh)
            found.update(fresh)
        return {pid: found[k].tolist() for pid, k in keys.items() if k in found}

    @property
    def lock(self) -> threading.RLock:
        """Held, no commit or filler writes the index (a snapshot copies its files meanwhile)."""
        return self._lock

    def progress(self) -> dict[str, Any]:
        """Where dense embedding stands: texts done of those that waited, pending, rate and ETA."""
        pending = len(self._pending_dense)
        eta = round(pending / self.dense_rate, 1) if self.dense_rate > 0 and pending else (0.0 if not pending else None)
        return {
            "done": self.dense_done,
            "total": self.dense_total,
            "pending": pending,
            "dense_applied_seq": self.dense_applied,
            "texts_per_s": round(self.dense_rate, 1),
            "eta_s": eta,
        }

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

    def stop_embedding(self) -> None:
        """Shutting down: commits no longer wait for the model. Points without a vector stay pending, so the
        saved position stays behind them and the next start folds and embeds them again (idempotently)."""
        self._embedding = False

    @property
    def pending_dense(self) -> int:
        return len(self._pending_dense)

    @property
    def queued_dense(self) -> int:
        """Pending texts the filler has not started on (those it is embedding now are not counted)."""
        return max(0, len(self._pending_dense) - self._in_flight)

    def _vectors(self, texts: dict[str, str], use_model: bool = True) -> tuple[dict[str, list[float]], dict[str, str]]:
        """Dense vectors for {point id: text}: cache first, then the model (unless `use_model` is False).
        Returns (vectors, still missing)."""
        if not texts:
            return {}, {}
        model_id = self.model.model_id
        keys = {pid: text_key(t) for pid, t in texts.items()}
        found = self.cache.get_many(model_id, list(set(keys.values())))
        todo = {k: texts[pid] for pid, k in keys.items() if k not in found}
        if todo and use_model:
            try:
                embedder = self.model.get()
            except (ModelLoading, ModelUnavailable):  # keyword search must go on without a model
                embedder = None
            if embedder is not None:
                order = list(todo)
                for i in range(0, len(order), EMBED_CHUNK):
                    if not self._embedding:
                        break
                    chunk = order[i : i + EMBED_CHUNK]
                    fresh = dict(zip(chunk, embedder.embed([todo[k] for k in chunk]), strict=True))
                    self.embedded += len(chunk)
                    self.cache.put_many(model_id, fresh)
                    found.update(fresh)
        vectors = {pid: found[k].tolist() for pid, k in keys.items() if k in found}
        missing = {pid: texts[pid] for pid, k in keys.items() if k not in found}
        return vectors, missing
