"""Search over the vector projection: semantic (dense), keyword (BM25) and hybrid (fused).

Scores are absolute: they mean the same in every query and every namespace, so `threshold` can
drop what is unrelated. Two relevance scales, one per retriever:
- semantic: the cosine similarity of the query and the memory's indexed text (paraphrase-MiniLM:
  unrelated text ~0.0-0.2, a paraphrase ~0.4-0.8).
- keyword coverage: the memory's BM25 over the query's own BM25 as a document (its self-score: the
  IDF of each query word times its weight in a short text), capped at 1. About the share of the
  query's words, weighted by rarity, that the memory holds: 1 when it has them all, 0 when none.
  Each query word's IDF is Qdrant's own, read from a one-hit probe per word in the same batched
  call as the search (IDF = the probe's score over the hit's weight for the word).

The score of each mode (0-1):
- semantic: the cosine (negative ones count as 0). Default threshold 0.2.
- keyword: the coverage. Default threshold 0: every memory sharing a word with the query.
- hybrid, `fusion="calibrated"` (the default): semantic_weight * S + (1 - semantic_weight) * K, S the
  cosine mapped linearly from [0.15, 0.8] onto [0, 1] (below: unrelated; above: a close paraphrase), K
  the coverage to the power 1.25 (a partial match weighs a little less than its share), semantic_weight
  0.3. Every candidate of either retriever is scored by both, exactly: a second batched call asks each
  retriever again, restricted to the candidates only the other one found. A memory with no word in common
  scores at most 0.3 (a paraphrase), an unrelated one (cosine <= 0.15) 0. Default threshold 0.1: a
  memory without a common word needs a cosine of 0.37, one without semantic similarity a coverage of
  0.21. The ramp, exponent and weight were chosen on LoCoMo for rank quality (docs/performance.md).
- hybrid, `fusion="zscore"` or `"rrf"` (kept for comparison): scores relative to the candidate list
  (z-scores through a logistic; RRF over its maximum); default threshold 0.
Both retrievers and the probes run as one batched Qdrant call (the rescoring of a hybrid search as a
second); fusion happens here so the weights and the method are inputs, the same for Edge and a Qdrant server.

Then the memory's standing, as factors on that score (the `score` returned, compared with `threshold`):
+0.1 when the content contains the query verbatim (capped at 1); x0.7 deprecated, x0.5 archived, x0.7
when its valid time has ended. Verified organization rules count as the caller's own memories.

Order: `order="relevance"` (the default) by score. `order="tiers"` (for a contract that promises it):
memories of the caller's namespace that contain the query ("exact"), then the rest of the caller's
namespace ("scope"), then organization rules ("rules"); within each, the demoted (deprecated, archived,
valid time ended) after the rest; then by score.

The payload filter is services/projector/search_filter.py; the fusions' arithmetic services/projector/search_fusion.py.
"""

from __future__ import annotations

import math
from typing import Literal

from mneme.embed_cache import EmbeddingCache, text_key
from mneme.embedding import ModelHandle
from mneme.errors import InvalidInput
from schemas.queries import AsOfResolved, SearchHit, SearchMemories, SearchResult
from services.projector.bm25 import BM25
from services.projector.graph_signal import GraphSignal
from services.projector.search_filter import where_of as where_of
from services.projector.search_fusion import coverage, fuse, logistic, ramp, zfused
from services.projector.vector_payload import state_of
from services.projector.vector_port import Cond, Hit, Search, VectorIndex, Where

DEFAULT_THRESHOLD = {"semantic": 0.2, "keyword": 0.0, "hybrid": 0.1}  # hybrid: the calibrated fusion
RELATIVE_THRESHOLD = 0.0  # z-score and RRF scores are relative to their candidates: no default cut
SEMANTIC_RAMP = (0.15, 0.8)  # cosine -> 0..1 in the calibrated fusion
COVERAGE_POWER = 1.25  # keyword coverage -> 0..1 in the calibrated fusion
EXACT_BOOST = 0.1
STATUS_FACTOR = {"active": 1.0, "deprecated": 0.7, "archived": 0.5}
ENDED_FACTOR = 0.7  # valid time over
FETCH_MIN = 50  # candidates per retriever before fusion and re-ranking
MAX_PROBES = 64  # query words whose IDF is probed; the rest count at the probed words' mean
TIERS = {"exact": 0, "scope": 1, "rules": 2}


def default_threshold(q: SearchMemories) -> float:
    if q.mode == "hybrid" and q.fusion != "calibrated":
        return RELATIVE_THRESHOLD
    return DEFAULT_THRESHOLD[q.mode]


class Searcher:
    def __init__(
        self,
        index: VectorIndex,
        model: ModelHandle,
        cache: EmbeddingCache,
        bm25: BM25,
        graph: GraphSignal | None = None,
    ):
        self.index, self.model, self.cache, self.bm25 = index, model, cache, bm25
        self.graph = graph  # the knowledge graph's PPR signal (hybrid searches with graph_weight > 0)

    def query_vector(self, text: str) -> list[float]:
        embedder = self.model.get()  # raises EMBEDDING_MODEL_LOADING until the model is ready
        key = text_key(text)
        got = self.cache.get_many(embedder.model_id, [key])
        if key in got:
            cached: list[float] = got[key].tolist()
            return cached
        vec = embedder.embed([text])[0]
        # in memory only: every distinct query text kept on disk grew the file without bound (4.0 -> 16.3 MB in a
        # 9-minute reads soak); memory contents stay on disk, where a replay finds them
        self.cache.put_many(embedder.model_id, {key: vec}, persist=False)
        fresh: list[float] = vec.tolist()
        return fresh

    def search(self, q: SearchMemories, at: AsOfResolved | None = None) -> SearchResult:
        text = q.query.strip()
        if not text:
            raise InvalidInput("query", "must not be empty")
        threshold = default_threshold(q) if q.threshold is None else q.threshold
        now = at.time if at is not None and at.time is not None else q.now
        where = where_of(q, now, at)
        fetch = max(FETCH_MIN, q.limit * 5)
        with_graph = q.mode == "hybrid" and q.graph_weight > 0 and self.graph is not None
        calibrated = (q.mode != "hybrid" or q.fusion == "calibrated") and not with_graph
        searches: dict[str, Search] = {}  # name -> its query; one batched call runs them all
        qvec: list[float] | None = None
        if q.mode in ("semantic", "hybrid"):
            qvec = self.query_vector(text)
            searches["dense"] = Search("dense", qvec, where, fetch)
        terms: dict[int, float] = {}
        sparse: tuple[list[int], list[float]] = ([], [])
        if q.mode in ("keyword", "hybrid"):
            sparse = self.bm25.query(text)
            if sparse[0]:  # (a query of stop words only has no keyword retriever)
                terms = dict(zip(*sparse, strict=True))
                searches["bm25"] = Search("bm25", sparse, where, fetch)
                if calibrated:  # each word's IDF, over the whole collection as Qdrant counts it
                    for t in list(terms)[:MAX_PROBES]:
                        searches[f"idf:{t}"] = Search(
                            "bm25", ([t], [1.0]), Where(), 1, with_vectors=("bm25",), with_payload=False
                        )
        found = self._run(searches)
        dense, keyword = found.get("dense", []), found.get("bm25", [])
        hit_of: dict[str, Hit] = {}
        for h in (*dense, *keyword):
            hit_of.setdefault(h.id, h)
        cos: dict[str, float] = {h.id: h.score for h in dense}
        bm: dict[str, float] = {h.id: h.score for h in keyword}
        # (no keyword hit: every coverage is 0, whatever the self-score)
        self_score = self._self_score(text, terms, found) if calibrated and keyword else 0.0
        if q.mode == "hybrid" and (calibrated or with_graph):
            # every candidate scored by both retrievers: each one again, restricted to what the other found
            rescore: dict[str, Search] = {}
            only_kw = [i for i in bm if i not in cos]
            only_sem = [i for i in cos if i not in bm]
            if only_kw and qvec is not None:
                rescore["dense"] = Search(
                    "dense", qvec, Where(must=(Cond("", "ids", only_kw),)), len(only_kw), with_payload=False
                )
            if only_sem and terms:
                rescore["bm25"] = Search(
                    "bm25", sparse, Where(must=(Cond("", "ids", only_sem),)), len(only_sem), with_payload=False
                )
            again = self._run(rescore)
            cos.update({h.id: h.score for h in again.get("dense", [])})
            bm.update(dict.fromkeys(only_sem, 0.0) if terms else {})  # no word in common: 0
            bm.update({h.id: h.score for h in again.get("bm25", [])})
        ppr: dict[str, float] = {}
        nodes = 0
        if with_graph:
            relevance, ppr, nodes = self._graph_fused(q, text, at, where, qvec, sparse, hit_of, cos, bm)
        elif q.mode == "semantic":
            relevance = {i: max(c, 0.0) for i, c in cos.items()}
        elif q.mode == "keyword":
            relevance = {i: coverage(s, self_score) for i, s in bm.items()}
        elif calibrated:
            w = q.semantic_weight
            relevance = {
                i: w * ramp(cos.get(i, 0.0), *SEMANTIC_RAMP)
                + (1 - w) * coverage(bm.get(i, 0.0), self_score) ** COVERAGE_POWER
                for i in hit_of
            }
        else:
            w_kw = q.keyword_weight if q.keyword_weight is not None else 1.0 - q.semantic_weight
            relevance = {i: s for i, (s, _) in fuse(dense, keyword, q.fusion, q.semantic_weight, w_kw).items()}

        needle = _norm(text)
        hits = []
        for pid, rel in relevance.items():
            state = state_of(hit_of[pid].payload)
            contains = bool(needle) and needle in _norm(state.content)
            group: Literal["exact", "scope", "rules"] = (
                "rules" if state.namespace != q.namespace else "exact" if contains else "scope"
            )
            until = state.valid_until
            ended = until is not None and until <= now
            score = min(1.0, rel + EXACT_BOOST) if contains else rel
            score *= STATUS_FACTOR.get(state.status, 1.0) * (ENDED_FACTOR if ended else 1.0)
            if score < threshold:
                continue
            hits.append(
                SearchHit(
                    memory=state,
                    score=round(score, 6),
                    semantic=cos.get(pid),
                    keyword=bm.get(pid),
                    graph=ppr.get(pid) if with_graph else None,
                    group=group,
                    demoted=state.status != "active" or ended,
                )
            )
        # equal scores (coverage is capped at 1): the higher raw BM25, then the closer meaning, first
        if q.order == "tiers":
            hits.sort(
                key=lambda x: (
                    TIERS[x.group],
                    x.demoted,
                    -x.score,
                    -(x.keyword or 0.0),
                    -(x.semantic or 0.0),
                    x.memory.id,
                )
            )
        else:
            hits.sort(key=lambda x: (-x.score, x.demoted, -(x.keyword or 0.0), -(x.semantic or 0.0), x.memory.id))
        return SearchResult(
            hits=_distinct(hits)[: q.limit],
            mode=q.mode,
            threshold=threshold,
            model=self.model.model_id if q.mode != "keyword" else None,
            as_of=at,
            subgraph_nodes=nodes,
        )

    def _graph_fused(
        self,
        q: SearchMemories,
        text: str,
        at: AsOfResolved | None,
        where: Where,
        qvec: list[float] | None,
        sparse: tuple[list[int], list[float]],
        hit_of: dict[str, Hit],
        cos: dict[str, float],
        bm: dict[str, float],
    ) -> tuple[dict[str, float], dict[str, float], int]:
        """Three signals, z-scored over the candidates and weighted: the cosine, BM25 and the memory's PPR mass,
        the walk seeded from the two retrievers' top hits. Memories the walk reaches that neither retriever
        found join the candidates (scored by both retrievers, under the same filters). Returns (relevance,
        PPR mass, subgraph nodes) by point id."""
        assert self.graph is not None
        w_v = q.semantic_weight
        w_b = q.keyword_weight if q.keyword_weight is not None else 1.0 - w_v
        memory_of = {pid: str(h.payload.get("id") or state_of(h.payload).id) for pid, h in hit_of.items()}
        first = zfused({"v": cos, "b": bm}, {"v": w_v, "b": w_b}, list(hit_of))
        top = sorted(first.items(), key=lambda kv: -kv[1])
        mass, nodes = self.graph.scores(q.namespace, text, [(memory_of[p], s) for p, s in top], at)
        if mass:
            known = set(memory_of.values())
            reach = [m for m, x in sorted(mass.items(), key=lambda kv: -kv[1]) if x > 0 and m not in known]
            pids = list(self.graph.points(reach[: max(q.limit, 10)], at).values())
            if pids:
                only = Where(must=(where, Cond("", "ids", pids)))
                extra: dict[str, Search] = {}
                if qvec is not None:
                    extra["dense"] = Search("dense", qvec, only, len(pids))
                if sparse[0]:
                    extra["bm25"] = Search("bm25", sparse, only, len(pids))
                again = self._run(extra)
                for h in again.get("dense", []):
                    hit_of.setdefault(h.id, h)
                    cos[h.id] = h.score
                for h in again.get("bm25", []):
                    hit_of.setdefault(h.id, h)
                    bm[h.id] = h.score
                for pid in hit_of:
                    memory_of.setdefault(pid, state_of(hit_of[pid].payload).id)
                    bm.setdefault(pid, 0.0)
        ppr = {pid: mass.get(memory_of[pid], 0.0) for pid in hit_of}
        fused = zfused({"v": cos, "b": bm, "p": ppr}, {"v": w_v, "b": w_b, "p": q.graph_weight}, list(hit_of))
        return {i: logistic(s) for i, s in fused.items()}, ppr, nodes

    def _run(self, searches: dict[str, Search]) -> dict[str, list[Hit]]:
        if not searches:
            return {}
        return dict(zip(searches, self.index.search(list(searches.values())), strict=True))

    def _self_score(self, text: str, terms: dict[int, float], found: dict[str, list[Hit]]) -> float:
        """The query's BM25 against itself as a document: about what a memory holding every query word scores.
        Each word's IDF is Qdrant's: its probe's top score over that hit's weight for the word. A word no
        memory holds gets the IDF of a word in no document; words past MAX_PROBES the probed words' mean."""
        idf: dict[int, float] = {}
        absent = []
        for t in terms:
            probe = found.get(f"idf:{t}")
            if probe is None:
                continue
            weight = (probe[0].sparse or {}).get(t, 0.0) if probe else 0.0
            if weight > 0:
                idf[t] = probe[0].score / weight
            else:
                absent.append(t)
        if absent:
            n = self.index.count(Where())
            for t in absent:
                idf[t] = math.log(1 + (n + 0.5) / 0.5)
        mean = sum(idf.values()) / len(idf) if idf else 1.0
        own = dict(zip(*self.bm25.document(text), strict=True))
        return sum(idf.get(t, mean) * w * own.get(t, 0.0) for t, w in terms.items())


def _norm(s: str) -> str:
    return " ".join(s.casefold().split())


def _distinct(hits: list[SearchHit]) -> list[SearchHit]:
    """Identical content stored twice answers once (the better-ranked memory)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for h in hits:
        key = (h.memory.namespace, h.memory.content)
        if key not in seen:
            seen.add(key)
            out.append(h)
    return out
