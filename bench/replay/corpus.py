"""bench.replay's settings (full and quick), and (0) the log: history()'s events with contents from a pool of
sentences, the facts noted as they are published, and the embedding cache filled ahead of timing.
"""

from __future__ import annotations

import random
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET

from bench.common import log, rnd
from bench.synthetic import WORDS, history
from mneme.embed_cache import EmbeddingCache, text_key
from mneme.embedding import MODELS, OnnxEmbedder
from schemas.events import Envelope, MemoryCreated, MemoryDeleted, MemoryUpdated, event_name

TARGET_RATIO = 0.50
TARGET_P95_MS = 50.0
MODES = ("keyword", "semantic", "hybrid")
DEFAULT_CACHE = Path.home() / ".cache" / "mneme-bench" / "embeddings.sqlite"
PYSPY = Path(sys.executable).parent / "py-spy"
PROFILE_HZ = 50


@dataclass(frozen=True)
class Config:
    events: int
    memories: int
    namespaces: int
    pool: int  # distinct content texts
    queries: int  # per query kind
    floor_rounds: int

    @staticmethod
    def full() -> Config:
        return Config(events=1_000_000, memories=200_000, namespaces=4, pool=50_000, queries=300, floor_rounds=3)

    @staticmethod
    def quick() -> Config:
        return Config(events=100_000, memories=20_000, namespaces=4, pool=10_000, queries=100, floor_rounds=3)


# -- the log ----------------------------------------------------------------------------------------------

_MORE_WORDS = (
    "prefers likes avoids uses wants asked decided agreed moved switched started stopped joined left owns manages "
    "reviewed wrote shipped fixed broke tested planned cancelled postponed approved rejected booked paid sent "
    "kitchen garden office laptop phone bicycle car train flight hotel restaurant library museum park beach "
    "monday tuesday wednesday thursday saturday sunday april may june july august september october november "
    "python rust typescript golang kubernetes terraform grafana kafka redis mongodb sqlite spark airflow "
    "sister brother mother father manager colleague neighbour friend doctor dentist teacher landlord client "
    "chocolate pasta sushi salad soup bread cheese wine beer juice water pizza curry noodles rice"
)
VOCAB = tuple(dict.fromkeys([*WORDS, *_MORE_WORDS.split()]))  # 154 words


def pool_texts(n: int, seed: int = 1234) -> list[str]:
    """`n` distinct sentences of 8-24 words (the memory contents), the same for a given (n, seed)."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        words = rng.choices(VOCAB, k=rng.randint(8, 24))
        out[" ".join(words).capitalize() + "."] = None
    return list(out)


@dataclass
class LogFacts:
    """What the published log holds: counts, and per memory (namespace, first seq, last seq it existed)."""

    by_type: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    content_changes: int = 0
    ns: dict[str, str] = field(default_factory=dict)
    created: dict[str, int] = field(default_factory=dict)
    ended: dict[str, int] = field(default_factory=dict)  # seq of the permanent delete
    texts_used: set[int] = field(default_factory=set)

    def note(self, seq: int, env: Envelope, text_ix: int | None) -> None:
        ev = env.event
        self.by_type[event_name(ev)] += 1
        if text_ix is not None:
            self.texts_used.add(text_ix)
            self.content_changes += not isinstance(ev, MemoryCreated)
        if isinstance(ev, MemoryCreated):
            self.ns[ev.memory_id] = env.namespace
            self.created[ev.memory_id] = seq
        elif isinstance(ev, MemoryDeleted):
            self.ended[ev.memory_id] = seq


def log_events(cfg: Config, pool: list[str], facts: LogFacts) -> Iterator[tuple[str, Envelope]]:
    """history()'s events in its order, each content replaced by a pool sentence; facts noted as they go
    (sequence = position + 1: the stream is fresh and publish() keeps the order)."""
    rng = random.Random(99)
    pairs = history(cfg.events, n_memories=cfg.memories, namespaces=cfg.namespaces, seed=11)
    for i, (subject, env) in enumerate(pairs):
        ev = env.event
        ix = None
        if isinstance(ev, MemoryCreated) or (isinstance(ev, MemoryUpdated) and ev.content is not UNSET):
            ix = rng.randrange(len(pool))
            env = msgspec.structs.replace(env, event=msgspec.structs.replace(ev, content=pool[ix]))
        facts.note(i + 1, env, ix)
        yield subject, env


def prefill_cache(path: Path, model_name: str, pool: list[str], threads: int | None) -> dict[str, Any]:
    """Put every pool sentence's vector in the cache (the texts already there are skipped)."""
    t0 = time.perf_counter()
    cache = EmbeddingCache(path)
    model_id = MODELS[model_name].id
    try:
        keys = [text_key(t) for t in pool]
        have: set[bytes] = set()
        for i in range(0, len(keys), 5000):
            have.update(cache.get_many(model_id, keys[i : i + 5000]))
        todo = [(k, t) for k, t in zip(keys, pool, strict=True) if k not in have]
        embed_s = 0.0
        if todo:
            emb = OnnxEmbedder(model_name, threads=threads)
            t1 = time.perf_counter()
            for i in range(0, len(todo), 1024):
                chunk = todo[i : i + 1024]
                vecs = emb.embed([t for _, t in chunk])
                cache.put_many(model_id, {k: v for (k, _), v in zip(chunk, vecs, strict=True)})
                if (i // 1024) % 10 == 9:
                    done = i + len(chunk)
                    log(
                        f"(0) embedded {done:,} of {len(todo):,} pool texts "
                        f"({done / (time.perf_counter() - t1):,.0f}/s)"
                    )
            embed_s = time.perf_counter() - t1
    finally:
        cache.close()
    return {
        "cache": str(path),
        "model": model_id,
        "pool_texts": len(pool),
        "already_cached": len(have),
        "embedded_now": len(todo),
        "embed_seconds": rnd(embed_s, 2),
        "embed_per_s": rnd(len(todo) / embed_s, 1) if embed_s else None,
        "seconds": rnd(time.perf_counter() - t0, 2),
    }
