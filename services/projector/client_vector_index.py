"""The vector index on a Qdrant server (distributed mode), through qdrant-client; `location=":memory:"` gives
the client's local mode for tests. The projector's position is a reserved point without vectors (META_ID)
written after the points it covers, and the INDEX_VERSION is part of the collection's name, so replicas of two
versions never share a collection (services/projector/vector_index.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from services.projector.vector_port import (
    DENSE,
    INDEX_VERSION,
    META_ID,
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
    from qdrant_client.conversions.common_types import PointId as ClientPointId


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
                t = models.PayloadSchemaType
                tenant = models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True)
                for f, schema in payload_indexes(t.KEYWORD, tenant, t.INTEGER, t.FLOAT):
                    self.client.create_payload_index(collection, f, schema)

    def _point(self, p: VPoint) -> Any:
        return self.m.PointStruct(id=p.id, vector=vectors_of(p, self.m.SparseVector), payload=p.payload)

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
        return vpoints_of(recs, with_dense)

    def _cond(self, c: Cond) -> Any:
        m = self.m
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
        return translate(w, self.m.Filter, self._cond)

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
        return [[hit_of(p) for p in r.points] for r in results]

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
