"""The vector port: one small interface over Qdrant, embedded (Qdrant Edge) or a server (qdrant-client).

A collection holds one point per memory version: a dense vector ("dense", cosine) of
its content, a sparse BM25 vector ("bm25", IDF applied by Qdrant at query time), and
a payload with every field a search filters on. Filters are written once as a tuple
of `Cond`s and translated per adapter; both adapters pass the same contract test.

The projector's position in the log is stored beside the points (a file next to an
Edge shard; a reserved point without vectors on a server), written after the
points it covers: replaying from an older position is harmless because every
write here is an idempotent upsert or payload set keyed by deterministic ids.

What the points hold is versioned (INDEX_VERSION): an Edge shard written under another
version is deleted when opened and folded again from the log; on a server the version is
part of the collection's name, so replicas of two versions never share a collection.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

# The libraries take a list of point ids (int | str | UUID); ours are str, in lists they only read: cast, not
# copied. (Each library is imported where an index of its own is opened.)
if TYPE_CHECKING:
    from qdrant_client.conversions.common_types import PointId as ClientPointId
    from qdrant_edge import PointId as EdgePointId

log = logging.getLogger("mneme.projector.vectors")
DENSE, SPARSE = "dense", "bm25"
# What a point holds (payload fields, how the BM25 text is tokenised). 2: BM25 over folded text (accents,
# case, CJK bigrams, emoji; vector_view.fold). 3: lean payloads (only the filtered fields and the state;
# vector_view.payload_of) and payload indexes on the filtered fields only.
INDEX_VERSION = 3
OPEN = 2**53  # seq_to of a version nobody has replaced yet
POINT_NS = uuid.UUID("6f1c9a52-2a3b-4e0c-9d57-0d7c1f4f0a11")
META_ID = str(uuid.uuid5(POINT_NS, "mneme:meta"))

# the payload fields searches filter on (services/projector/search.py where_of), each indexed
KEYWORD_FIELDS = ("namespace", "kind", "category", "subject", "tags", "status", "verification")
INT_FIELDS = ("seq_from", "seq_to")
FLOAT_FIELDS = ("importance", "valid_from", "valid_until", "expires_at")


def point_id(memory_id: str, version: int) -> str:
    return str(uuid.uuid5(POINT_NS, f"{memory_id}:{version}"))


@dataclass(frozen=True, slots=True)
class Cond:
    """One filter condition. op: eq (value), any (values), range (gte/gt/lte/lt), null (the field is absent,
    null or an empty list), ids (the point id is one of `value`; `field` is ignored), vector (the point has the
    named vector `field`, e.g. DENSE)."""

    field: str
    op: Literal["eq", "any", "range", "null", "ids", "vector"]
    value: Any = None
    gte: float | None = None
    gt: float | None = None
    lte: float | None = None
    lt: float | None = None


@dataclass(frozen=True, slots=True)
class Where:
    must: tuple[Cond | Where, ...] = ()
    should: tuple[Cond | Where, ...] = ()  # at least one, when given
    must_not: tuple[Cond | Where, ...] = ()


@dataclass(slots=True)
class VPoint:
    id: str
    payload: dict[str, Any]
    dense: list[float] | None = None
    sparse: tuple[list[int], list[float]] | None = None


@dataclass(frozen=True, slots=True)
class Hit:
    id: str
    score: float
    payload: dict[str, Any]
    dense: list[float] | None = None  # when the search asked for it (with_vectors) and the point has one
    sparse: dict[int, float] | None = None  # the BM25 vector {token: weight}, likewise


@dataclass(frozen=True, slots=True)
class Search:
    using: Literal["dense", "bm25"]
    vector: Any  # list[float] for dense, (indices, values) for bm25
    where: Where
    limit: int
    threshold: float | None = None
    with_vectors: tuple[Literal["dense", "bm25"], ...] = ()  # return these vectors of each hit
    with_payload: bool = True  # False: hits carry an empty payload (cheaper: the state is large)


class VectorIndex(Protocol):
    def upsert(self, points: list[VPoint]) -> None: ...

    def set_payload(self, ids: list[str], payload: dict[str, Any]) -> None: ...

    def set_dense(self, vectors: dict[str, list[float]]) -> None: ...

    def retrieve(self, ids: list[str], *, with_dense: bool = False) -> dict[str, VPoint]: ...

    def search(self, searches: list[Search]) -> list[list[Hit]]: ...

    def count(self, where: Where) -> int: ...

    def load_checkpoint(self) -> int: ...

    def load_mark(self) -> str | None: ...  # the identity of the log's event at the saved position

    def save_checkpoint(self, seq: int, mark: str | None = None) -> None: ...

    def close(self) -> None: ...


# --------------------------------------------------------------------------- Qdrant Edge
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
        for f in KEYWORD_FIELDS:
            params = q.KeywordIndexParams(is_tenant=True) if f == "namespace" else q.PayloadSchemaType.Keyword
            self.shard.update(q.UpdateOperation.create_field_index(f, params))
        for f in INT_FIELDS:
            self.shard.update(q.UpdateOperation.create_field_index(f, q.PayloadSchemaType.Integer))
        for f in FLOAT_FIELDS:
            self.shard.update(q.UpdateOperation.create_field_index(f, q.PayloadSchemaType.Float))

    # -- writes
    def _point(self, p: VPoint) -> Any:
        vec: dict[str, Any] = {}
        if p.dense is not None:
            vec[DENSE] = p.dense  # (already a list: no copy per point)
        if p.sparse is not None:
            vec[SPARSE] = self.q.SparseVector(indices=p.sparse[0], values=p.sparse[1])
        return self.q.Point(id=p.id, vector=vec, payload=p.payload)

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
        out = {}
        for r in recs:
            dense = None
            if with_dense and isinstance(r.vector, dict) and DENSE in r.vector:
                dense = list(cast("list[float]", r.vector[DENSE]))  # the dense vector: one list of floats
            out[str(r.id)] = VPoint(id=str(r.id), payload=dict(r.payload or {}), dense=dense)
        return out

    # -- reads
    def _cond(self, c: Cond | Where) -> Any:
        q = self.q
        if isinstance(c, Where):
            return self._filter(c)
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
        return self.q.Filter(
            must=[self._cond(c) for c in w.must] or None,
            should=[self._cond(c) for c in w.should] or None,
            must_not=[self._cond(c) for c in w.must_not] or None,
        )

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
        return [[_hit(p) for p in res] for res in results]

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


# --------------------------------------------------------------------------- qdrant-client
class ClientIndex:
    """A Qdrant server (distributed mode) through qdrant-client; `location=":memory:"` for local-mode tests."""

    def __init__(
        self,
        collection: str,
        dim: int,
        *,
        url: str | None = None,
        location: str | None = None,
        api_key: str | None = None,
        version: int = INDEX_VERSION,
    ):
        from qdrant_client import QdrantClient, models

        self.m = models
        self.version = version
        # The version in the name: replicas of two versions (a rolling upgrade) each fold their own collection.
        collection = f"{collection}-v{version}"
        self.collection = collection
        self.client = QdrantClient(url=url, location=location, api_key=api_key)
        if not self.client.collection_exists(collection):
            self.client.create_collection(
                collection,
                vectors_config={DENSE: models.VectorParams(size=dim, distance=models.Distance.COSINE)},
                sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
            )
            if url:  # payload indexes mean nothing to local mode (it warns)
                for f in KEYWORD_FIELDS:
                    schema: Any = models.PayloadSchemaType.KEYWORD
                    if f == "namespace":
                        schema = models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True)
                    self.client.create_payload_index(collection, f, schema)
                for f in INT_FIELDS:
                    self.client.create_payload_index(collection, f, models.PayloadSchemaType.INTEGER)
                for f in FLOAT_FIELDS:
                    self.client.create_payload_index(collection, f, models.PayloadSchemaType.FLOAT)

    def _point(self, p: VPoint) -> Any:
        vec: dict[str, Any] = {}
        if p.dense is not None:
            vec[DENSE] = p.dense  # (already a list: no copy per point)
        if p.sparse is not None:
            vec[SPARSE] = self.m.SparseVector(indices=p.sparse[0], values=p.sparse[1])
        return self.m.PointStruct(id=p.id, vector=vec, payload=p.payload)

    def upsert(self, points: list[VPoint]) -> None:
        if points:
            self.client.upsert(self.collection, [self._point(p) for p in points], wait=True)

    def set_payload(self, ids: list[str], payload: dict[str, Any]) -> None:
        if ids:
            self.client.set_payload(
                self.collection, payload=payload, points=cast("list[ClientPointId]", ids), wait=True
            )

    def set_dense(self, vectors: dict[str, list[float]]) -> None:
        if vectors:
            pv = [self.m.PointVectors(id=i, vector={DENSE: list(v)}) for i, v in vectors.items()]
            self.client.update_vectors(self.collection, pv, wait=True)

    def retrieve(self, ids: list[str], *, with_dense: bool = False) -> dict[str, VPoint]:
        if not ids:
            return {}
        recs = self.client.retrieve(
            self.collection, ids, with_payload=True, with_vectors=[DENSE] if with_dense else False
        )
        out = {}
        for r in recs:
            dense = None
            if with_dense and isinstance(r.vector, dict) and DENSE in r.vector:
                dense = list(cast("list[float]", r.vector[DENSE]))  # the dense vector: one list of floats
            out[str(r.id)] = VPoint(id=str(r.id), payload=dict(r.payload or {}), dense=dense)
        return out

    def _cond(self, c: Cond | Where) -> Any:
        m = self.m
        if isinstance(c, Where):
            return self._filter(c)
        if c.op == "eq":
            return m.FieldCondition(key=c.field, match=m.MatchValue(value=c.value))
        if c.op == "any":
            return m.FieldCondition(key=c.field, match=m.MatchAny(any=list(c.value)))
        if c.op == "null":
            return m.IsEmptyCondition(is_empty=m.PayloadField(key=c.field))
        if c.op == "ids":
            return m.HasIdCondition(has_id=list(c.value))
        if c.op == "vector":
            return m.HasVectorCondition(has_vector=c.field)
        return m.FieldCondition(key=c.field, range=m.Range(gte=c.gte, gt=c.gt, lte=c.lte, lt=c.lt))

    def _filter(self, w: Where) -> Any:
        return self.m.Filter(
            must=[self._cond(c) for c in w.must] or None,
            should=[self._cond(c) for c in w.should] or None,
            must_not=[self._cond(c) for c in w.must_not] or None,
        )

    def search(self, searches: list[Search]) -> list[list[Hit]]:
        m = self.m
        reqs = []
        for s in searches:
            vec: Any = (
                m.SparseVector(indices=list(s.vector[0]), values=list(s.vector[1]))
                if s.using == SPARSE
                else list(s.vector)
            )
            reqs.append(
                m.QueryRequest(
                    query=vec,
                    using=s.using,
                    filter=self._filter(s.where),
                    limit=s.limit,
                    with_payload=s.with_payload,
                    score_threshold=s.threshold,
                    with_vector=list(s.with_vectors) or False,
                )
            )
        results = self.client.query_batch_points(self.collection, reqs)
        return [[_hit(p) for p in r.points] for r in results]

    def count(self, where: Where) -> int:
        f = self._filter(where)
        f.must_not = [*(f.must_not or []), self.m.HasIdCondition(has_id=[META_ID])]  # not the position's point
        return int(self.client.count(self.collection, count_filter=f, exact=True).count)

    def load_checkpoint(self) -> int:
        recs = self.client.retrieve(self.collection, [META_ID], with_payload=True)
        return int(recs[0].payload.get("checkpoint", 0)) if recs and recs[0].payload else 0

    def load_mark(self) -> str | None:
        recs = self.client.retrieve(self.collection, [META_ID], with_payload=True)
        mark = recs[0].payload.get("mark") if recs and recs[0].payload else None
        return mark if isinstance(mark, str) else None

    def save_checkpoint(self, seq: int, mark: str | None = None) -> None:
        payload = {"checkpoint": seq, "mark": mark}
        self.client.upsert(self.collection, [self.m.PointStruct(id=META_ID, vector={}, payload=payload)], wait=True)

    def close(self) -> None:
        self.client.close()


def _hit(p: Any) -> Hit:
    """A scored point of either adapter (they share the shape: id, score, payload, vector by name)."""
    dense = sparse = None
    vec = p.vector  # (Edge converts the vectors on every access: read once)
    if vec and isinstance(vec, dict):
        dense = vec.get(DENSE)  # a list already: no copy
        sv = vec.get(SPARSE)
        if sv is not None:
            sparse = dict(zip(sv.indices, sv.values, strict=True))
    return Hit(str(p.id), float(p.score), dict(p.payload or {}), dense, sparse)
