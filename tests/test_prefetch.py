"""Synchronous embedding (replay, rebuild) prefetches: the texts of each staged batch are embedded on a
thread of their own while the follower goes on, and a commit writes a chunk's points as soon as the chunk
is embedded (services/projector/vector_view.py). Real Qdrant Edge and the real SQLite cache; the model is a
small deterministic stand-in, so every dense vector can be checked against its text."""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from mneme.embed_cache import EmbeddingCache
from mneme.sink import Positioned
from services.projector import vector_view
from services.projector.vector_index import EdgeIndex, point_id
from services.projector.vector_view import VectorView, index_text, state_of
from tests.harness import model_of
from tests.test_batch_fold import cuts, history

DIM = 8


def vector_of(text: str) -> np.ndarray:
    v = np.frombuffer(hashlib.sha256(text.encode()).digest()[:DIM], dtype=np.uint8).astype(np.float32) + 1.0
    return v / np.linalg.norm(v)


class Hashing:
    """A deterministic embedder; counts texts and can fail its first calls, or wait at a gate."""

    model_id, dim = "hashing-test", DIM

    def __init__(self, *, fail_calls: int = 0) -> None:
        self.texts: list[str] = []
        self.calls = 0
        self.fail_calls = fail_calls
        self.gate = threading.Event()
        self.gate.set()

    def embed(self, texts: list[str]) -> np.ndarray:
        if texts == ["warm up"]:
            return np.stack([vector_of(t) for t in texts])
        assert self.gate.wait(30), "the test never opened the gate"
        self.calls += 1
        if self.calls <= self.fail_calls:
            raise RuntimeError("the model failed")
        self.texts.extend(texts)
        return np.stack([vector_of(t) for t in texts])


def open_view(path: Path, embedder: Hashing) -> VectorView:
    return VectorView(EdgeIndex(path / "v", DIM), model_of(embedder), EmbeddingCache(path / "c.sqlite"))


@contextmanager
def opened(path: Path, embedder: Hashing) -> Iterator[VectorView]:
    view = open_view(path, embedder)
    try:
        yield view
    finally:
        view.close()


def fold(view: VectorView, events: list[Positioned], plan: list[tuple[list[int], bool]]) -> None:
    for ix, commit in plan:
        view.stage([events[i] for i in ix], events[ix[-1]].seq)
        if commit:
            view.commit()


def check_points(view: VectorView, events: list[Positioned]) -> int:
    """Every version's point has the dense vector of its own text; returns how many points."""
    ids = sorted({point_id(p.envelope.aggregate_id, p.envelope.event.version) for p in events})
    got = view.index.retrieve(ids, with_dense=True)
    assert got
    for pid, p in got.items():
        assert p.dense is not None, f"{pid} has no dense vector"
        want = vector_of(index_text(state_of(p.payload)))
        assert np.allclose(p.dense, want, atol=1e-5), f"{pid} has another text's vector"
    return len(got)


@pytest.mark.parametrize("seed", [3, 17])
def test_prefetched_points_carry_their_own_vectors_and_each_text_is_embedded_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    monkeypatch.setattr(vector_view, "PREFETCH_CHUNK", 3)  # many chunks per commit
    events = history(seed, 80)
    embedder = Hashing()
    with opened(tmp_path, embedder) as view:
        fold(view, events, cuts(random.Random(seed), len(events)))
        assert check_points(view, events) > 0
        assert len(embedder.texts) == len(set(embedder.texts)), "a text was embedded twice"
        assert view.embedded == len(embedder.texts) and view.pending_dense == 0


def test_the_model_starts_on_a_batch_before_its_commit(tmp_path: Path) -> None:
    events = history(5, 30)
    embedder = Hashing()
    with opened(tmp_path, embedder) as view:
        view.stage(events, events[-1].seq)
        for _ in range(500):  # the prefetch thread embeds while nothing has asked for a commit
            if embedder.texts:
                break
            threading.Event().wait(0.01)
        assert embedder.texts, "staging handed nothing to the model"
        view.commit()
        assert len(embedder.texts) == len(set(embedder.texts)), "the commit embedded the prefetched texts again"
        check_points(view, events)


def test_a_failed_prefetch_is_embedded_by_the_commit(tmp_path: Path) -> None:
    events = history(11, 40)
    embedder = Hashing(fail_calls=1)  # the prefetch's call fails; the commit's own call works
    with opened(tmp_path, embedder) as view:
        view.stage(events, events[-1].seq)
        view.commit()
        assert embedder.calls >= 2
        check_points(view, events)
        assert view.pending_dense == 0


def test_closing_while_a_prefetch_waits_on_the_model_does_not_hang(tmp_path: Path) -> None:
    events = history(13, 20)
    embedder = Hashing()
    view = open_view(tmp_path, embedder)
    embedder.gate.clear()
    view.stage(events, events[-1].seq)
    view.stop_embedding()
    threading.Timer(0.3, embedder.gate.set).start()  # the model call in flight returns; nothing more starts
    done = threading.Event()

    def close() -> None:
        view.close()
        done.set()

    threading.Thread(target=close, daemon=True).start()
    assert done.wait(20), "close() hung on the prefetch"
    assert embedder.calls <= 1
