"""bench.search's timing proxies around the vector view's parts (bench-side; the core code is untouched)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mneme.embed_cache import EmbeddingCache
from mneme.embedding import OnnxEmbedder
from services.projector.vector_index import EdgeIndex, Hit, Search, VPoint
from services.projector.vector_view import BM25, VectorView


@dataclass
class Timers:
    """Seconds, calls and items per named part. Parts on the event loop and on worker threads alike."""

    s: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    items: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, seconds: float, items: int = 0) -> None:
        with self._lock:
            self.s[name] = self.s.get(name, 0.0) + seconds
            self.calls[name] = self.calls.get(name, 0) + 1
            self.items[name] = self.items.get(name, 0) + items

    def reset(self) -> None:
        with self._lock:
            self.s.clear()
            self.calls.clear()
            self.items.clear()

    def seconds(self, names: tuple[str, ...]) -> dict[str, float]:
        with self._lock:
            return {k: self.s.get(k, 0.0) for k in names}

    def snapshot(self) -> dict[str, dict[str, float]]:
        with self._lock:
            return {k: {"seconds": self.s[k], "calls": self.calls[k], "items": self.items[k]} for k in self.s}


class TimedEmbedder:
    def __init__(self, inner: OnnxEmbedder, timers: Timers):
        self.inner, self.timers = inner, timers
        self.model_id, self.dim = inner.model_id, inner.dim

    def embed(self, texts: list[str]) -> np.ndarray:
        t = time.perf_counter()
        try:
            return self.inner.embed(texts)
        finally:
            self.timers.add("model.embed", time.perf_counter() - t, len(texts))


class TimedBM25(BM25):
    def __init__(self, timers: Timers):
        super().__init__()
        self.timers = timers

    def document(self, text: str) -> tuple[list[int], list[float]]:
        t = time.perf_counter()
        try:
            return super().document(text)
        finally:
            self.timers.add("bm25.document", time.perf_counter() - t, 1)

    def query(self, text: str) -> tuple[list[int], list[float]]:
        t = time.perf_counter()
        try:
            return super().query(text)
        finally:
            self.timers.add("bm25.query", time.perf_counter() - t, 1)


class TimedCache(EmbeddingCache):
    def __init__(self, path: Path, timers: Timers):
        super().__init__(path)
        self.timers = timers

    def get_many(self, model: str, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        t = time.perf_counter()
        try:
            return super().get_many(model, keys)
        finally:
            self.timers.add("cache.get_many", time.perf_counter() - t, len(keys))

    def put_many(self, model: str, items: dict[bytes, np.ndarray], *, persist: bool = True) -> None:
        t = time.perf_counter()
        try:
            super().put_many(model, items, persist=persist)
        finally:
            self.timers.add("cache.put_many", time.perf_counter() - t, len(items))


class TimedIndex:
    """An EdgeIndex with its writes timed; everything else passes through."""

    def __init__(self, inner: EdgeIndex, timers: Timers):
        self.inner, self.timers = inner, timers

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _timed(self, name: str, fn: Any, items: int, *a: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*a)
        finally:
            self.timers.add(name, time.perf_counter() - t, items)

    def upsert(self, points: list[VPoint]) -> None:
        self._timed("edge.upsert", self.inner.upsert, len(points), points)

    def set_payload(self, ids: list[str], payload: dict[str, Any]) -> None:
        self._timed("edge.set_payload", self.inner.set_payload, len(ids), ids, payload)

    def retrieve(self, ids: list[str], *, with_dense: bool = False) -> dict[str, VPoint]:
        return self._timed("edge.retrieve", lambda: self.inner.retrieve(ids, with_dense=with_dense), len(ids))

    def save_checkpoint(self, seq: int, mark: str | None = None) -> None:
        self._timed("edge.flush+checkpoint", self.inner.save_checkpoint, 1, seq, mark)

    def search(self, searches: list[Search]) -> list[list[Hit]]:
        return self._timed("edge.search", self.inner.search, len(searches), searches)


class TimedVectorView(VectorView):
    def __init__(self, *a: Any, timers: Timers, **kw: Any):
        super().__init__(*a, **kw)
        self.timers = timers
        self.commits: list[tuple[float, float, int]] = []  # (start, end, points) per commit

    def stage(self, batch: list[Any], upto: int | None = None) -> None:
        t = time.perf_counter()
        try:
            super().stage(batch, upto)
        finally:
            self.timers.add("view.stage", time.perf_counter() - t, len(batch))

    def commit(self) -> int:
        t = time.perf_counter()
        n = len(self._upserts)
        try:
            return super().commit()
        finally:
            end = time.perf_counter()
            self.timers.add("view.commit", end - t, n)
            self.commits.append((t, end, n))

    def _vectors(self, texts: dict[str, str], use_model: bool = True) -> tuple[dict[str, list[float]], dict[str, str]]:
        t = time.perf_counter()
        try:
            return super()._vectors(texts, use_model)
        finally:
            self.timers.add("view._vectors", time.perf_counter() - t, len(texts))
