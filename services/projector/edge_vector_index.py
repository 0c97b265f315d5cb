"""The default vector index: Qdrant's engine in-process (Qdrant Edge), one shard on disk per projector.

The projector's position is a small JSON file beside the shard (its sequence, the log's mark there, and the
INDEX_VERSION the points were written under), replaced atomically and synced with its directory after the
points it covers are flushed. A shard written under another version is deleted when opened and folded again
from the log (services/projector/vector_index.py).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from services.projector.vector_port import (
    DENSE,
    INDEX_VERSION,
    SPARSE,
    Cond,
    Hit,
    Search,
    VPoint,
    Where,
    hit_of,
    payload_indexes,
    translate,
    vectors_of,
    vpoints_of,
)

# The library takes a list of point ids (int | str | UUID); ours are str, in lists it only reads: cast, not
# copied. (The library is imported where an index is opened.)
if TYPE_CHECKING:
    from qdrant_edge import PointId as EdgePointId

log = logging.getLogger("mneme.projector.vectors")


class EdgeIndex:
    """The default: the Qdrant engine in-process, on disk under `path` (one process per shard)."""

    def __init__(self, path: str | Path, dim: int, *, version: int = INDEX_VERSION):
        import qdrant_edge as q

        self.q = q
        self.path = Path(path)
        self.dim = dim
        self.version = version
        self.checkpoint_file = self.path.parent / f"{self.path.name}.checkpoint.json"
        cfg = q.EdgeConfig(
            vectors={DENSE: q.EdgeVectorParams(size=dim, distance=q.Distance.Cosine)},
            sparse_vectors={SPARSE: q.EdgeSparseVectorParams(modifier=q.Modifier.Idf)},
        )
        if self.path.exists() and any(self.path.iterdir()):
            stored = self._stored_version()
            if stored != version:  # points of another shape: rebuilt from the log (the position goes to 0)
                log.warning(
                    "vector index %s is version %s, not %s: rebuilding it from the log", self.path, stored, version
                )
                shutil.rmtree(self.path)
                self.checkpoint_file.unlink(missing_ok=True)
        if self.path.exists() and any(self.path.iterdir()):
            self.shard = q.EdgeShard.load(str(self.path), cfg)
        else:
            self.path.mkdir(parents=True, exist_ok=True)
            self.shard = q.EdgeShard.create(str(self.path), cfg)
            self._create_indexes()
            self.save_checkpoint(0)  # records the version from the start

    def _stored_version(self) -> int | None:
        """The version the position file records (files written before versioning: 1; no file: unknown)."""
        try:
            return int(json.loads(self.checkpoint_file.read_text()).get("version", 1))
        except FileNotFoundError:
            return None
        except (ValueError, AttributeError):
            return 1

    def _create_indexes(self) -> None:
        q = self.q
        t = q.PayloadSchemaType
        for f, schema in payload_indexes(t.Keyword, q.KeywordIndexParams(is_tenant=True), t.Integer, t.Float):
            self.shard.update(q.UpdateOperation.create_field_index(f, schema))

    # -- writes
    def _point(self, p: VPoint) -> Any:
        return self.q.Point(id=p.id, vector=vectors_of(p, self.q.SparseVector), payload=p.payload)

    def upsert(self, points: list[VPoint]) -> None:
        if points:
            self.shard.update(self.q.UpdateOperation.upsert_points([self._point(p) for p in points]))

    def set_payload(self, ids: list[str], payload: dict[str, Any]) -> None:
        if ids:
            self.shard.update(self.q.UpdateOperation.set_payload(cast("list[EdgePointId]", ids), payload))

    def set_dense(self, vectors: dict[str, list[float]]) -> None:
        if vectors:
            pv = [self.q.PointVectors(id=i, vector={DENSE: list(v)}) for i, v in vectors.items()]
            self.shard.update(self.q.UpdateOperation.update_vectors(pv))

    def retrieve(self, ids: list[str], *, with_dense: bool = False) -> dict[str, VPoint]:
        if not ids:
            return {}
        recs = self.shard.retrieve(
            cast("list[EdgePointId]", ids), with_payload=True, with_vector=[DENSE] if with_dense else False
        )
        return vpoints_of(recs, with_dense)

    # -- reads
    def _cond(self, c: Cond) -> Any:
        q = self.q
        if c.op == "eq":
            return q.FieldCondition(key=c.field, match=q.MatchValue(c.value))
        if c.op == "any":
            return q.FieldCondition(key=c.field, match=q.MatchAny(list(c.value)))
        if c.op == "null":
            return q.IsEmptyCondition(c.field)
        if c.op == "ids":
            return q.HasIdCondition(set(c.value))
        if c.op == "vector":
            return q.HasVectorCondition(c.field)
        return q.FieldCondition(key=c.field, range=q.RangeFloat(gte=c.gte, gt=c.gt, lte=c.lte, lt=c.lt))

    def _filter(self, w: Where) -> Any:
        return translate(w, self.q.Filter, self._cond)

    def _request(self, s: Search) -> Any:
        q = self.q
        if s.using == SPARSE:
            vec: Any = q.SparseVector(indices=list(s.vector[0]), values=list(s.vector[1]))
        else:
            vec = list(s.vector)
        return q.QueryRequest(
            limit=s.limit,
            query=q.Query.Nearest(vec, using=s.using),
            filter=self._filter(s.where),
            with_payload=s.with_payload,
            score_threshold=s.threshold,
            with_vector=list(s.with_vectors) or None,
        )

    def search(self, searches: list[Search]) -> list[list[Hit]]:
        reqs = [self._request(s) for s in searches]
        if len(reqs) == 1:
            results = [self.shard.query(reqs[0])]
        else:
            results = self.shard.query_batch(self.q.QueryBatchRequest(reqs))
        return [[hit_of(p) for p in res] for res in results]

    def count(self, where: Where) -> int:
        return int(self.shard.count(self.q.CountRequest(filter=self._filter(where), exact=True)))

    # -- position
    def load_checkpoint(self) -> int:
        try:
            return int(json.loads(self.checkpoint_file.read_text())["seq"])
        except (FileNotFoundError, ValueError, KeyError):
            return 0

    def load_mark(self) -> str | None:
        try:
            mark = json.loads(self.checkpoint_file.read_text()).get("mark")
        except (FileNotFoundError, ValueError):
            return None
        return mark if isinstance(mark, str) else None

    def save_checkpoint(self, seq: int, mark: str | None = None) -> None:
        self.shard.flush()
        tmp = self.checkpoint_file.with_suffix(".tmp")
        with tmp.open("w") as f:
            f.write(json.dumps({"seq": seq, "version": self.version} | ({"mark": mark} if mark else {})))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.checkpoint_file)
        # the rename is durable only once its directory is synced: without it a power cut could bring back
        # the previous position (or none), and a start would rebuild the whole index (the power-cut harness)
        fd = os.open(self.checkpoint_file.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        try:
            self.shard.flush()
        finally:
            self.shard.close()
