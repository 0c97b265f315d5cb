"""The vector port's contract, run against both adapters: Qdrant Edge (on disk, in a tmp dir) and
qdrant-client in local mode (`location=":memory:"`), with a tiny dimension.

Every observation is checked against an oracle computed here (cosine similarity with numpy, the
filters evaluated in Python over the payloads), and the two adapters must answer the same ids in
the same order with the same scores for the same data, dense and BM25 alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from services.projector.vector_index import (
    DENSE,
    OPEN,
    ClientIndex,
    Cond,
    EdgeIndex,
    Hit,
    Search,
    VectorIndex,
    VPoint,
    Where,
    point_id,
)
from services.projector.vector_view import BM25

DIM = 8
ADAPTERS = ("edge", "client")

TEXTS = [
    "deploy the service to production",
    "deploying dashboards takes a long time every quarter",
    "the cat sat on the mat",
    "deploys happen every night and deploys are automated",
    "mat cleaning schedule for the big office",
    "production database backups run nightly",
    "a quiet evening with a book",
    "services and their deployments across regions and zones",
]
KINDS = ["note", "fact", "note", "decision", "fact", "note", "preference", "decision"]
TAGS = [["x", "y"], ["y"], ["x"], [], ["x", "y", "z"], ["z"], ["y"], ["x"]]


def open_index(kind: str, path: Path) -> VectorIndex:
    if kind == "edge":
        return EdgeIndex(path / "shard", DIM)
    return ClientIndex("contract", DIM, location=":memory:")


def vectors() -> list[list[float]]:
    rng = np.random.default_rng(20260728)
    return [list(map(float, rng.normal(size=DIM))) for _ in TEXTS]


QUERY = list(map(float, np.random.default_rng(7).normal(size=DIM)))


def dataset() -> list[VPoint]:
    bm25 = BM25()
    vecs = vectors()
    points = []
    for i, text in enumerate(TEXTS):
        payload: dict[str, Any] = {
            "mid": f"m{i}",
            "version": 1,
            "namespace": "a" if i % 2 == 0 else "b",
            "kind": KINDS[i],
            "tags": TAGS[i],
            "status": "active",
            "verification": "verified" if i % 3 == 0 else "unverified",
            "importance": round(0.1 * (i + 1), 2),
            "seq_from": i + 1,
            "seq_to": OPEN,
            "expires_at": 1e15 if i != 5 else 1000.0,
            "category": None if i % 4 == 0 else f"c{i % 2}",
            "state": f'{{"id": "m{i}"}}',
        }
        dense = vecs[i] if i != 7 else None  # the last one waits for its dense vector (model loading)
        points.append(VPoint(point_id(f"m{i}", 1), payload, dense, bm25.document(text)))
    return points


def cosine(a: list[float], b: list[float]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def holds(c: Cond | Where, p: dict[str, Any]) -> bool:
    """The filter semantics the port promises, evaluated in Python."""
    if isinstance(c, Where):
        return (
            all(holds(x, p) for x in c.must)
            and (not c.should or any(holds(x, p) for x in c.should))
            and not any(holds(x, p) for x in c.must_not)
        )
    v = p.get(c.field)
    values = v if isinstance(v, list) else [v]
    if c.op == "eq":
        return c.value in values
    if c.op == "any":
        return any(x in c.value for x in values)
    if c.op == "null":
        return c.field in p and v is None
    if v is None:
        return False
    return (
        (c.gte is None or v >= c.gte)
        and (c.gt is None or v > c.gt)
        and (c.lte is None or v <= c.lte)
        and (c.lt is None or v < c.lt)
    )


FILTERS: dict[str, Where] = {
    "all": Where(),
    "eq": Where(must=(Cond("namespace", "eq", "a"),)),
    "eq-array": Where(must=(Cond("tags", "eq", "x"),)),
    "all-tags": Where(must=(Cond("tags", "eq", "x"), Cond("tags", "eq", "y"))),
    "any": Where(must=(Cond("kind", "any", ["fact", "decision"]),)),
    "range-closed": Where(must=(Cond("importance", "range", gte=0.3, lte=0.6),)),
    "range-open": Where(must=(Cond("importance", "range", gt=0.3, lt=0.6),)),
    "range-int": Where(must=(Cond("seq_from", "range", lte=4), Cond("seq_to", "range", gte=OPEN))),
    "range-expiry": Where(must=(Cond("expires_at", "range", gt=2000.0),)),
    "null": Where(must=(Cond("category", "null"),)),
    "should": Where(should=(Cond("kind", "eq", "note"), Cond("tags", "eq", "z"))),
    "nested-should": Where(
        must=(
            Where(
                should=(
                    Where(must=(Cond("namespace", "eq", "a"),)),
                    Where(must=(Cond("namespace", "any", ["b"]), Cond("verification", "eq", "verified"))),
                )
            ),
            Cond("importance", "range", gte=0.2),
        )
    ),
    "must-not": Where(must_not=(Cond("kind", "eq", "note"), Cond("tags", "eq", "z"))),
    "nothing": Where(must=(Cond("namespace", "eq", "nowhere"),)),
}


def observe(ix: VectorIndex, points: list[VPoint]) -> list[Any]:
    """Run the whole contract on one adapter, asserting against the oracle; return what it saw (for the
    cross-adapter comparison)."""
    seen: list[Any] = []
    bm25 = BM25()
    by_id = {p.id: p for p in points}
    dense_of = {p.id: p.dense for p in points}

    def hits(h: list[Hit]) -> list[tuple[str, float]]:
        return [(x.id, round(x.score, 5)) for x in h]

    def dense_oracle(where: Where, limit: int = 100, threshold: float | None = None) -> list[str]:
        cands = [
            (cosine(QUERY, d), pid) for pid, d in dense_of.items() if d is not None and holds(where, by_id[pid].payload)
        ]
        cands.sort(reverse=True)
        return [pid for s, pid in cands if threshold is None or s >= threshold][:limit]

    # empty, at position 0
    assert ix.load_checkpoint() == 0
    assert ix.count(Where()) == 0
    assert ix.search([Search("dense", QUERY, Where(), 10)]) == [[]]
    ix.upsert(points)
    ix.upsert(points[:2])  # idempotent
    assert ix.count(Where()) == len(points)

    # retrieve: payloads as written; dense only when asked, normalised (cosine); unknown ids left out
    got = ix.retrieve([p.id for p in points] + [point_id("nope", 1)], with_dense=True)
    assert set(got) == {p.id for p in points}
    for p in points:
        assert got[p.id].payload == p.payload and got[p.id].id == p.id
        if p.dense is None:
            assert got[p.id].dense is None
        else:
            want = np.asarray(p.dense) / np.linalg.norm(p.dense)
            assert got[p.id].dense == pytest.approx(list(want), abs=1e-5)
    assert all(v.dense is None for v in ix.retrieve([points[0].id]).values())
    assert ix.retrieve([]) == {}

    # dense search, each filter, against the oracle; count agrees
    for name, where in FILTERS.items():
        (res,) = ix.search([Search("dense", QUERY, where, 100)])
        assert [h.id for h in res] == dense_oracle(where), name
        for h in res:
            assert h.score == pytest.approx(cosine(QUERY, dense_of[h.id]), abs=1e-5)  # type: ignore[arg-type]
            assert h.payload == by_id[h.id].payload
        assert ix.count(where) == sum(holds(where, p.payload) for p in points), name
        seen.append((name, hits(res), ix.count(where)))
    # limit and threshold
    (res,) = ix.search([Search("dense", QUERY, Where(), 3)])
    assert [h.id for h in res] == dense_oracle(Where(), limit=3)
    (res,) = ix.search([Search("dense", QUERY, Where(), 100, threshold=0.2)])
    assert [h.id for h in res] == dense_oracle(Where(), threshold=0.2) and all(h.score >= 0.2 for h in res)
    seen.append(hits(res))

    # BM25: stemmed matches ("deploying" finds deploy, deploys, deployments), rarer words weigh more
    deploy = {0, 1, 3, 7}
    for query, want, where in (
        ("deploying", deploy, Where()),
        ("deployment", deploy, Where(must=(Cond("namespace", "eq", "b"),))),
        ("mat", {2, 4}, Where()),
        ("nightly production", {0, 3, 5}, Where()),  # "nightly" and "night" share a stem
        ("zebra", set(), Where()),
    ):
        (res,) = ix.search([Search("bm25", bm25.query(query), where, 100)])
        ids = {h.id for h in res}
        assert ids == {points[i].id for i in want if holds(where, points[i].payload)}, (
            query,
            [by_id[i].payload["mid"] for i in ids],
        )
        assert [h.score for h in res] == sorted((h.score for h in res), reverse=True)
        assert all(h.score > 0 for h in res)
        seen.append((query, hits(res)))
    # the word in fewer documents scores higher (IDF applied at query time)
    (res,) = ix.search([Search("bm25", bm25.query("production cat"), Where(), 100)])
    assert res[0].payload["mid"] == "m2", hits(res)

    # several searches in one batch answer as each alone
    batch = [
        Search("dense", QUERY, FILTERS["nested-should"], 5),
        Search("bm25", bm25.query("deploys"), Where(), 5),
        Search("dense", QUERY, FILTERS["any"], 2, threshold=-1.0),
    ]
    together = ix.search(batch)
    assert [hits(r) for r in together] == [hits(ix.search([s])[0]) for s in batch]
    seen.append([hits(r) for r in together])

    # restricted to given point ids, without payloads (how a hybrid search scores the candidates only the other
    # retriever found); each hit's vectors on request
    some = [points[i].id for i in (1, 2, 5)]
    only = Where(must=(Cond("", "ids", some),))
    (res,) = ix.search([Search("dense", QUERY, only, 10, with_payload=False)])
    assert [h.id for h in res] == sorted(some, key=lambda i: -cosine(QUERY, dense_of[i]))  # type: ignore[arg-type]
    assert all(h.payload == {} and h.dense is None and h.sparse is None for h in res)
    for h in res:
        assert h.score == pytest.approx(cosine(QUERY, dense_of[h.id]), abs=1e-5)  # type: ignore[arg-type]
    seen.append(hits(res))
    (res,) = ix.search([Search("bm25", bm25.query("deploying"), only, 10, with_payload=False)])
    assert [h.id for h in res] == [points[1].id], hits(res)  # of the three, only it shares a word
    seen.append(hits(res))
    (res,) = ix.search([Search("bm25", bm25.query("cat"), Where(), 1, with_vectors=("bm25", "dense"))])
    (h,) = res
    assert h.id == points[2].id and h.payload == points[2].payload
    assert h.sparse == pytest.approx(dict(zip(*points[2].sparse, strict=True)), abs=1e-5)  # type: ignore[misc]
    want = np.asarray(dense_of[h.id]) / np.linalg.norm(dense_of[h.id])  # type: ignore[arg-type]
    assert h.dense == pytest.approx(list(want), abs=1e-5)

    # set_payload: close two versions' record intervals; other fields untouched
    ix.set_payload([points[0].id, points[3].id], {"seq_to": 42})
    assert ix.retrieve([points[0].id])[points[0].id].payload == {**points[0].payload, "seq_to": 42}
    open_now = Where(must=(Cond("seq_to", "range", gte=OPEN),))
    assert ix.count(open_now) == len(points) - 2
    for i in (0, 3):
        points[i].payload["seq_to"] = 42
    (res,) = ix.search([Search("dense", QUERY, open_now, 100)])
    assert [h.id for h in res] == dense_oracle(open_now)
    assert ix.count(Where(must=(Cond("seq_to", "range", gt=41, lt=43),))) == 2

    # set_dense: the point written without a dense vector gets one and is found
    late = points[7]
    assert late.id not in [h.id for h in ix.search([Search("dense", QUERY, Where(), 100)])[0]]
    vec = vectors()[7]
    ix.set_dense({late.id: vec})
    dense_of[late.id] = vec
    assert ix.retrieve([late.id], with_dense=True)[late.id].dense == pytest.approx(
        list(np.asarray(vec) / np.linalg.norm(vec)), abs=1e-5
    )
    assert ix.retrieve([late.id])[late.id].payload == late.payload  # the payload survives
    (res,) = ix.search([Search("dense", vec, Where(), 1)])
    assert res[0].id == late.id and res[0].score == pytest.approx(1.0, abs=1e-5)
    (res,) = ix.search([Search("dense", QUERY, Where(), 100)])
    assert [h.id for h in res] == dense_oracle(Where())
    # its BM25 vector is still there
    (res,) = ix.search([Search("bm25", bm25.query("regions"), Where(), 100)])
    assert [h.id for h in res] == [late.id]
    seen.append(hits(res))

    # the position
    ix.save_checkpoint(17)
    assert ix.load_checkpoint() == 17
    ix.save_checkpoint(42)
    assert ix.load_checkpoint() == 42
    # the reserved position never shows in a search
    (res,) = ix.search([Search("dense", QUERY, Where(), 100)])
    assert len(res) == len(points)
    (res,) = ix.search([Search("bm25", bm25.query("the"), Where(), 100)])  # stop words only: no tokens
    seen.append(hits(res))
    return seen


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any] | AssertionError]:
    """The contract run once per adapter (an Edge shard takes ~1 s to create): what it saw, or how it failed."""
    out: dict[str, list[Any] | AssertionError] = {}
    for adapter in ADAPTERS:
        ix = open_index(adapter, tmp_path_factory.mktemp(adapter))
        try:
            out[adapter] = observe(ix, dataset())
        except AssertionError as exc:
            out[adapter] = exc
        finally:
            ix.close()
    return out


def ids_of(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        if len(x) == 2 and isinstance(x[0], str) and isinstance(x[1], float):
            return x[0]
        return [ids_of(y) for y in x]
    return x


def scores_of(x: Any) -> list[float]:
    if isinstance(x, (list, tuple)):
        if len(x) == 2 and isinstance(x[0], str) and isinstance(x[1], float):
            return [x[1]]
        return [s for y in x for s in scores_of(y)]
    return []


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_contract(adapter: str, observed: dict[str, list[Any] | AssertionError]) -> None:
    got = observed[adapter]
    if isinstance(got, AssertionError):
        raise got


def test_both_adapters_answer_the_same_ids_in_the_same_order(observed: dict[str, list[Any] | AssertionError]) -> None:
    edge, client = observed["edge"], observed["client"]
    assert not isinstance(edge, AssertionError) and not isinstance(client, AssertionError), "see test_contract"
    assert len(edge) == len(client)
    for a, b in zip(edge, client, strict=True):
        # the same ids in the same order; the scores equal up to float32 rounding (BM25 IDF differs ~1e-5)
        assert ids_of(a) == ids_of(b), (a, b)
        assert scores_of(a) == pytest.approx(scores_of(b), rel=1e-5, abs=1e-5), (a, b)
    # (and the comparison compared something: most searches found points)
    assert sum(1 for x in edge if isinstance(x, tuple) and x[1]) >= 15


def test_an_edge_shard_keeps_points_and_position_across_reopening(tmp_path: Path) -> None:
    points = dataset()
    ix = EdgeIndex(tmp_path / "shard", DIM)
    ix.upsert(points)
    ix.set_payload([points[1].id], {"seq_to": 9})
    ix.save_checkpoint(9)
    before = ix.search([Search("dense", QUERY, Where(), 100), Search("bm25", BM25().query("deploy"), Where(), 100)])
    ix.close()
    again = EdgeIndex(tmp_path / "shard", DIM)
    try:
        assert again.load_checkpoint() == 9
        assert again.count(Where()) == len(points)
        assert again.retrieve([points[1].id])[points[1].id].payload["seq_to"] == 9
        after = again.search(
            [Search("dense", QUERY, Where(), 100), Search("bm25", BM25().query("deploy"), Where(), 100)]
        )
        assert [[(h.id, h.score) for h in r] for r in after] == [[(h.id, h.score) for h in r] for r in before]
        # payload indexes were made once, at creation: filtering on them still works
        assert again.count(Where(must=(Cond("namespace", "eq", "a"),))) == 4
    finally:
        again.close()


def test_count_after_a_checkpoint_counts_only_points(tmp_path: Path) -> None:
    ix = open_index("client", tmp_path)
    try:
        points = dataset()
        ix.upsert(points)
        ix.save_checkpoint(5)
        assert ix.count(Where()) == len(points)
        assert ix.count(Where(must_not=(Cond("namespace", "eq", "a"),))) == 4
    finally:
        ix.close()


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_null_condition_matches_an_absent_field(adapter: str, tmp_path: Path) -> None:
    ix = open_index(adapter, tmp_path)
    try:
        points = dataset()
        for p in points:
            p.payload.pop("category")
        ix.upsert(points)
        assert ix.count(Where(must=(Cond("category", "null"),))) == len(points)
    finally:
        ix.close()


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_vector_condition_tells_points_with_their_dense_vector_from_those_without(adapter: str, tmp_path: Path) -> None:
    """What verify_generation counts: points written with their sparse vector only (the model not loaded)."""
    ix = open_index(adapter, tmp_path)
    try:
        points = dataset()
        bare = points[:2]
        for p in bare:
            p.dense = None
        ix.upsert(points)
        without = sum(1 for p in points if p.dense is None)  # (the dataset has a sparse-only point of its own)
        assert len(bare) <= without < len(points)
        assert ix.count(Where(must_not=(Cond(DENSE, "vector"),))) == without
        assert ix.count(Where(must=(Cond(DENSE, "vector"),))) == len(points) - without
    finally:
        ix.close()
