"""How a search's candidates get one relevance from several signals (services/projector/search.py): the
calibrated fusion's pieces (the cosine's ramp, keyword coverage against the query's self-score), z-score fusion
of any number of signals over the candidates (with the knowledge graph's PPR mass as a third), and the relative
fusions kept for comparison (RRF, z-scores through a logistic). Pure arithmetic over scores by point id.
"""

from __future__ import annotations

import math
from typing import Any

from services.projector.vector_port import Hit

RRF_K = 60


def ramp(x: float, lo: float, hi: float) -> float:
    return min(1.0, max(0.0, (x - lo) / (hi - lo)))


def coverage(bm25: float, self_score: float) -> float:
    return min(1.0, bm25 / self_score) if self_score > 0 else 0.0


def zfused(signals: dict[str, dict[str, float]], weights: dict[str, float], ids: list[str]) -> dict[str, float]:
    """Each signal standardised over the candidates `ids` (a candidate without it counts as its lowest), then
    weighted and summed. A signal that is the same for every candidate adds nothing."""
    out = dict.fromkeys(ids, 0.0)
    for name, values in signals.items():
        if not values or not weights.get(name):
            continue
        floor = min(values.values())
        xs = [values.get(i, floor) for i in ids]
        mean = sum(xs) / len(xs)
        std = math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))
        if std == 0:
            continue
        for i, x in zip(ids, xs, strict=True):
            out[i] += weights[name] * (x - mean) / std
    return out


def fuse(
    dense: list[Hit], keyword: list[Hit], method: str, w_sem: float, w_kw: float | None = None
) -> dict[str, tuple[float, Hit]]:
    """The relative fusions, kept for comparison: {point id: (fused score 0-1, hit)}. RRF: sum of w / (k + rank),
    over its maximum. z-score: each retriever's scores standardised over its candidates (a miss counts as that
    list's lowest), weighted, then squashed with a logistic."""
    w = {"d": w_sem, "k": 1.0 - w_sem if w_kw is None else w_kw}
    lists = {"d": dense, "k": keyword}
    hit_of: dict[str, Hit] = {}
    for lst in lists.values():
        for h in lst:
            hit_of.setdefault(h.id, h)
    fused: dict[str, float] = dict.fromkeys(hit_of, 0.0)
    if method == "rrf":
        top = sum(w[n] / (RRF_K + 1) for n, lst in lists.items() if lst) or 1.0
        for n, lst in lists.items():
            for rank, h in enumerate(lst, 1):
                fused[h.id] += w[n] / (RRF_K + rank)
        return {i: (s / top, hit_of[i]) for i, s in fused.items()}
    for n, lst in lists.items():
        if not lst:
            continue
        scores = [h.score for h in lst]
        mean = sum(scores) / len(scores)
        std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores)) or 1.0
        z: dict[str, Any] = {h.id: (h.score - mean) / std for h in lst}
        floor = min(z.values())
        for i in fused:
            fused[i] += w[n] * z.get(i, floor)
    return {i: (logistic(s), hit_of[i]) for i, s in fused.items()}


def logistic(s: float) -> float:
    """1 / (1 + e^-s) without overflow for any finite s."""
    if s >= 0:
        return 1.0 / (1.0 + math.exp(-s))
    e = math.exp(s)
    return e / (1.0 + e)
