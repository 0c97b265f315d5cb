"""Embedding cache keyed by (model id, sha256 of the indexed text).

A replay, a second projector on the same machine, or a governance event on an old
memory (same content, new version) finds its vector here instead of running the
model. SQLite in WAL mode: several processes share one file safely (DuckDB's
one-process lock would not allow that). A small in-memory LRU sits in front.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np


def text_key(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


class EmbeddingCache:
    def __init__(self, path: str | Path | None, *, memory_items: int = 20_000):
        self._mem: OrderedDict[tuple[str, bytes], bytes] = OrderedDict()
        self._mem_max = memory_items
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        self._db: sqlite3.Connection | None = None
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), check_same_thread=False, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            # a rowid table with a unique index: 1.5 KB blobs in a WITHOUT ROWID b-tree cost 3x per write, 2x on disk
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS embeddings_v2 (model TEXT NOT NULL, key BLOB NOT NULL, vec BLOB NOT NULL, "
                "UNIQUE (model, key))"
            )
            self._db.commit()

    def get_many(self, model: str, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        found: dict[bytes, bytes] = {}
        with self._lock:
            for k in keys:
                v = self._mem.get((model, k))
                if v is not None:
                    found[k] = v
                    self._mem.move_to_end((model, k))
            rest = [k for k in dict.fromkeys(keys) if k not in found]
            if rest and self._db is not None:
                for i in range(0, len(rest), 500):
                    chunk = rest[i : i + 500]
                    marks = ",".join("?" * len(chunk))
                    for k, v in self._db.execute(
                        f"SELECT key, vec FROM embeddings_v2 WHERE model = ? AND key IN ({marks})", [model, *chunk]
                    ):
                        found[bytes(k)] = bytes(v)
                        self._remember((model, bytes(k)), bytes(v))
            self.hits += sum(1 for k in keys if k in found)
            self.misses += sum(1 for k in keys if k not in found)
        return {k: np.frombuffer(v, dtype=np.float32) for k, v in found.items()}

    def put_many(self, model: str, items: dict[bytes, np.ndarray], *, persist: bool = True) -> None:
        """Remember vectors; `persist=False`: in memory only (the LRU), for texts that come and go (queries)."""
        if not items:
            return
        rows = [(model, k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items.items()]
        with self._lock:
            for m, k, b in rows:
                self._remember((m, k), b)
            if self._db is not None and persist:
                self._db.executemany("INSERT OR IGNORE INTO embeddings_v2 VALUES (?, ?, ?)", rows)
                self._db.commit()

    def size(self, model: str | None = None) -> int:
        """Vectors held (on disk; in memory when there is no file), for one model or all."""
        with self._lock:
            if self._db is None:
                return sum(1 for m, _ in self._mem if model is None or m == model)
            sql, args = "SELECT count(*) FROM embeddings_v2", []
            if model is not None:
                sql += " WHERE model = ?"
                args.append(model)
            return int(self._db.execute(sql, args).fetchone()[0])

    def _remember(self, key: tuple[str, bytes], value: bytes) -> None:
        self._mem[key] = value
        if len(self._mem) > self._mem_max:
            self._mem.popitem(last=False)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
