"""The dense half of the vector view: dense vectors for the points' texts, through the embedding cache and the
model, and how far that has got.

Synchronous mode (replay, rebuild): the texts of each staged batch are prefetched by a thread of their own
while the follower goes on, and a commit writes each chunk's points as soon as its vectors are there; what the
prefetch missed, the commit embeds itself. Background mode (a live projector): points are written without
their dense vector (unless the cache has it) and a filler thread embeds what is pending in micro-batches.
Either way a point written without one is pending until `fill_pending` or the filler adds it, and
`dense_applied` says up to which sequence every point has its dense vector. `VectorView`
(services/projector/vector_view.py) is this class with the fold and the saved position.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from abc import ABC, abstractmethod
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from mneme.embed_cache import EmbeddingCache, text_key
from mneme.embedding import ModelHandle, ModelLoading, ModelUnavailable, background_priority
from services.projector.vector_port import VectorIndex, VPoint

log = logging.getLogger("mneme.projector.vectors")
# Texts per call into the model: between two calls a stopping projector stops embedding (a 2,000-text commit
# took 3-20 s on a busy 2-core machine, longer than a supervisor waits after SIGTERM).
EMBED_CHUNK = 256
# Texts per prefetch (synchronous mode): a commit writes one chunk's points while the model embeds the
# next; larger chunks sort by length better (less padding), smaller ones leave the model idle less.
# (bench.search's catch-up, chunks of 256 / 512 / 1024: the model 0.92 / 0.90 / 0.89 of the time busy,
# at 0.79-0.80 / 0.85-0.86 / 0.86-0.89 of its raw rate)
PREFETCH_CHUNK = 1024


class DenseVectors(ABC):
    # the view's (services/projector/vector_view.py): where the rows' fold stands, and what it has staged
    committed: int
    _upserts: dict[str, tuple[VPoint, str, int]]  # point id -> (point, text to embed, its seq)

    def __init__(self, index: VectorIndex, model: ModelHandle, cache: EmbeddingCache, *, background: bool):
        self.index = index
        self.model = model
        self.cache = cache
        self.background = background
        self._lock = threading.RLock()  # reentrant: a snapshot holds it around save() and the copy
        self._wake = threading.Condition(self._lock)  # the filler waits here for pending texts
        # written without a dense vector, in sequence order (commits append in log order): point id -> (text, seq)
        self._pending_dense: dict[str, tuple[str, int]] = {}
        self.embedded = 0  # texts run through the model (for benchmarks)
        self.dense_total = 0  # texts that waited for a dense vector, and how many got one (progress)
        self.dense_done = 0
        self.dense_rate = 0.0  # texts/s of the filler's recent model calls (an estimate for ETAs)
        self.fill_failing = False  # the filler's last model call failed (it retries)
        self._in_flight = 0  # pending texts the filler is embedding right now (still in _pending_dense)
        self._embedding = True  # False once stopping: commits write what the cache holds, the rest stays pending
        self._closed = False
        self._filler: threading.Thread | None = None
        self._prefetch_pool: ThreadPoolExecutor | None = None  # synchronous mode: embeds staged texts early
        self._prefetching: list[Future[dict[str, list[float]]]] = []  # {point id: dense vector}, stage order

    @abstractmethod
    def _save_if_due(self, force: bool = False) -> None:
        """Save the position if it is due, never past `dense_applied` (the view's)."""

    # -- synchronous mode: prefetch
    def _prefetch_staged(self, fresh: list[str]) -> None:
        """Hand the texts of the points just staged to the prefetch thread, in chunks (synchronous mode, once
        the model is ready)."""
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

    @property
    def dense_applied(self) -> int:
        """Every point folded up to this sequence has its dense vector (semantic search may run up to it)."""
        first = next(iter(self._pending_dense.values()), None)
        return self.committed if first is None else min(self.committed, first[1] - 1)

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

    def _cache_first(
        self, model_id: str, texts: dict[str, str]
    ) -> tuple[dict[str, bytes], dict[bytes, Any], dict[bytes, str]]:
        """For {point id: text}: (each one's cache key, the vectors the cache has by key, the texts it lacks by
        key)."""
        keys = {pid: text_key(t) for pid, t in texts.items()}
        found = self.cache.get_many(model_id, list(set(keys.values())))
        todo = {k: texts[pid] for pid, k in keys.items() if k not in found}
        return keys, found, todo

    def _run_model(
        self, embedder: Any, model_id: str, todo: dict[bytes, str], keys: list[bytes], found: dict[bytes, Any]
    ) -> None:
        """One model call for the texts `keys` name in `todo`: their vectors go to the cache and into `found`."""
        fresh = dict(zip(keys, embedder.embed([todo[k] for k in keys]), strict=True))
        self.embedded += len(keys)
        self.cache.put_many(model_id, fresh)
        found.update(fresh)

    def _embed(self, texts: dict[str, str], embedder: Any) -> dict[str, list[float]]:
        """Dense vectors for {point id: text}, cache first (outside the view's lock: commits go on)."""
        model_id = self.model.model_id
        keys, found, todo = self._cache_first(model_id, texts)
        if todo:
            self._run_model(embedder, model_id, todo, list(todo), found)
        return {pid: found[k].tolist() for pid, k in keys.items() if k in found}

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
        keys, found, todo = self._cache_first(model_id, texts)
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
                    self._run_model(embedder, model_id, todo, order[i : i + EMBED_CHUNK], found)
        vectors = {pid: found[k].tolist() for pid, k in keys.items() if k in found}
        missing = {pid: texts[pid] for pid, k in keys.items() if k not in found}
        return vectors, missing
