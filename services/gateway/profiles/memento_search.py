"""memento's relevance: what `relevance_score` is, and which memories search_memories considers.

The contract's default threshold, 0.7, is written for a stronger embedding model than the bundled one
(paraphrase-MiniLM-L3-v2, on which unrelated text scores a cosine of about -0.15 to 0.2 and a paraphrase
about 0.4 to 0.8). And the contract's own example cannot be found by content alone: "dietary restrictions
for the family" and "Emma is lactose intolerant" have a cosine of 0.21 here, no higher than unrelated
pairs ("car maintenance schedule" / "Gordon works as a software engineer": 0.20). What links them is what
the memory was stored with: its category (restriction) and its tags (dietary, health).

So `relevance_score` is one function of two signals, both from the domain:
- the raw semantic cosine of the query and the memory's content (SearchHit.semantic), and
- label hits: how many of the query's words name the memory's category, one of its tags, or its subject
  where the content does not already say it, compared as keyword search compares words (Qdrant's BM25
  tokenizer: English stemming, stop words out, so "restrictions" names "restriction" and "allergies"
  names "allergy"), counting at most two.

evidence = cosine + LABEL_WEIGHT x label hits; relevance = a piecewise-linear, monotone map of evidence
onto 0-1 with RELEVANT_EVIDENCE at 0.7 (the contract's default threshold) and 1.0 at 1.0. One label hit
alone (0.22) never makes a memory relevant: its content must be at least loosely related (cosine 0.18;
"dietary restrictions for the family" scores 0.21-0.36 against dietary restrictions, 0.16 against "Grandpa
Joe can no longer drive at night"); two (a category and a tag) do. Retune here, and only here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from schemas.queries import SearchHit, SearchMemories
from services.gateway.gateway import Call
from services.gateway.profiles.memento_models import CATEGORIES, Found
from services.projector.vector_view import BM25

CANDIDATES = 50  # per retrieval: the memories closest in content that are scored
RELEVANT_EVIDENCE = 0.40  # evidence that scores 0.7: a paraphrase's cosine with this model
LABEL_WEIGHT = 0.22  # per query word naming the memory's subject, category or a tag
MAX_LABEL_HITS = 2


def relevance(cosine: float | None, label_hits: int) -> float:
    """`relevance_score` (0-1) from the raw cosine and the label hits; monotone in both."""
    evidence = max(cosine or 0.0, 0.0) + LABEL_WEIGHT * min(label_hits, MAX_LABEL_HITS)
    if evidence <= RELEVANT_EVIDENCE:
        score = 0.7 * evidence / RELEVANT_EVIDENCE
    else:
        score = 0.7 + 0.3 * (evidence - RELEVANT_EVIDENCE) / (1.0 - RELEVANT_EVIDENCE)
    return round(min(score, 1.0), 4)


@lru_cache(maxsize=1)
def _tokenizer() -> BM25:
    return BM25()


@lru_cache(maxsize=4096)
def words(text: str) -> frozenset[int]:
    """The words of a text as keyword search sees them (stemmed, without stop words)."""
    return frozenset(_tokenizer().query(text)[0])


def label_hits(
    query_words: frozenset[int], content: str, subject: str | None, category: str | None, tags: Iterable[str]
) -> int:
    """How many of the query's words name the memory's category, a tag, or its subject where the content does
    not already say it (a name in both would count twice: the cosine has it)."""
    labels: set[int] = set()
    for label in (category, *tags):
        if label:
            labels |= words(label)
    if subject:
        labels |= words(subject) - words(content)
    return len(query_words & labels)


def named_categories(query_words: frozenset[int], categories: Iterable[str]) -> list[str]:
    """The categories the query names ("restrictions" names restriction)."""
    return [c for c in categories if words(c) & query_words]


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


async def search(
    call: Call, query: str, subject: str | None, category: str | None, limit: int, threshold: float
) -> list[Found]:
    """The domain's semantic search (status active, outdated memories left out, the caller's filters), scored
    here. Candidates: the CANDIDATES memories closest in content, and as many of each category the query
    names ("dietary restrictions" names restriction), so a memory linked to the query by its labels alone is
    among them. Best first; identical content about one subject answers once."""
    gw = call.gw
    assert gw is not None
    qw = words(query)
    base: dict[str, Any] = {
        "namespace": call.namespace,
        "now": gw.now(),
        "mode": "semantic",
        "query": query,
        "threshold": 0.0,
        "limit": CANDIDATES,
        "status": "active",
        "include_invalid": False,
        "subject": subject,
    }
    cats = [category] if category else [None, *named_categories(qw, CATEGORIES)]
    reads = call.app.reads  # (each asked after the gateway's mark; built here: they share one `now`)
    answers = await asyncio.gather(*(reads.send(call, SearchMemories(**base, category=c)) for c in cats))
    scored: list[tuple[float, SearchHit]] = []
    for hit in (h for a in answers for h in a.hits):
        m = hit.memory
        scored.append((relevance(hit.semantic, label_hits(qw, m.content, m.subject, m.category, m.tags)), hit))
    scored.sort(key=lambda x: -x[0])  # stable: ties keep the domain's order
    out: list[Found] = []
    seen: set[Any] = set()
    for score, hit in scored:
        m = hit.memory
        same = (_norm(m.subject or ""), _norm(m.content))
        if score < threshold or m.id in seen or same in seen:
            continue
        seen |= {m.id, same}
        out.append(Found.of(m, relevance_score=score))
        if len(out) == limit:
            break
    return out
