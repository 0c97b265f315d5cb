"""The vector port's vocabulary, shared by the adapters (services/projector/edge_vector_index.py and
client_vector_index.py) and by whoever writes or searches points: the named vectors, the payload fields that
are indexed, deterministic point ids, the filter language (`Cond`, `Where`), points and hits, a search, the
`VectorIndex` protocol both adapters implement, and the translations they share (a `Where` into a library's
filter, a point's vectors, a retrieved record or a scored point back into ours).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

DENSE, SPARSE = "dense", "bm25"
# What a point holds (payload fields, how the BM25 text is tokenised). 2: BM25 over folded text (accents,
# case, CJK bigrams, emoji; bm25.fold). 3: lean payloads (only the filtered fields and the state;
# vector_payload.payload_of) and payload indexes on the filtered fields only.
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


def translate(w: Where, make_filter: Callable[..., Any], cond: Callable[[Cond], Any]) -> Any:
    """A `Where` as a library's filter: `make_filter(must=, should=, must_not=)` builds one level (an empty
    clause is None), `cond` translates one condition; a nested `Where` is a nested filter."""

    def one(c: Cond | Where) -> Any:
        return translate(c, make_filter, cond) if isinstance(c, Where) else cond(c)

    return make_filter(
        must=[one(c) for c in w.must] or None,
        should=[one(c) for c in w.should] or None,
        must_not=[one(c) for c in w.must_not] or None,
    )


def vectors_of(p: VPoint, sparse_vector: Callable[..., Any]) -> dict[str, Any]:
    """A point's named vectors as a library takes them (`sparse_vector(indices=, values=)` builds the BM25 one)."""
    vec: dict[str, Any] = {}
    if p.dense is not None:
        vec[DENSE] = p.dense  # (already a list: no copy per point)
    if p.sparse is not None:
        vec[SPARSE] = sparse_vector(indices=p.sparse[0], values=p.sparse[1])
    return vec


def payload_indexes(keyword: Any, tenant: Any, integer: Any, floating: Any) -> list[tuple[str, Any]]:
    """(field, the library's index schema) of every filtered payload field: `tenant` for the namespace."""
    return [
        *((f, tenant if f == "namespace" else keyword) for f in KEYWORD_FIELDS),
        *((f, integer) for f in INT_FIELDS),
        *((f, floating) for f in FLOAT_FIELDS),
    ]


def vpoints_of(records: Iterable[Any], with_dense: bool) -> dict[str, VPoint]:
    """Retrieved records of either adapter (id, payload, vectors by name) as points by id."""
    out = {}
    for r in records:
        dense = None
        if with_dense and isinstance(r.vector, dict) and DENSE in r.vector:
            dense = list(cast("list[float]", r.vector[DENSE]))  # the dense vector: one list of floats
        out[str(r.id)] = VPoint(id=str(r.id), payload=dict(r.payload or {}), dense=dense)
    return out


def hit_of(p: Any) -> Hit:
    """A scored point of either adapter (they share the shape: id, score, payload, vector by name)."""
    dense = sparse = None
    vec = p.vector  # (Edge converts the vectors on every access: read once)
    if vec and isinstance(vec, dict):
        dense = vec.get(DENSE)  # a list already: no copy
        sv = vec.get(SPARSE)
        if sv is not None:
            sparse = dict(zip(sv.indices, sv.values, strict=True))
    return Hit(str(p.id), float(p.score), dict(p.payload or {}), dense, sparse)
