"""A search's payload filter (services/projector/search.py): the caller's namespace and its organization rules,
the record interval (now, or as of a position), status, expiry, valid time and the caller's filters, as the
vector port's `Where` over the indexed payload fields (services/projector/vector_payload.py).
"""

from __future__ import annotations

from datetime import datetime

from mneme.domain import validation as v
from schemas.queries import AsOfResolved, SearchMemories
from services.projector.vector_payload import normalize_subject
from services.projector.vector_port import OPEN, Cond, Where


def where_of(q: SearchMemories, now: datetime, at: AsOfResolved | None = None) -> Where:
    """The payload filter: scope, record interval (as_of), status, expiry and the caller's filters."""
    scope: list[Cond | Where] = [Where(must=(Cond("namespace", "eq", q.namespace),))]
    if q.rule_namespaces:
        scope.append(
            Where(must=(Cond("namespace", "any", list(q.rule_namespaces)), Cond("verification", "eq", "verified")))
        )
    must: list[Cond | Where] = [Where(should=tuple(scope))]
    if at is None:
        must.append(Cond("seq_to", "range", gte=OPEN))
    else:  # the versions whose record interval [seq_from, seq_to) holds the position
        must += [Cond("seq_from", "range", lte=at.seq), Cond("seq_to", "range", gt=at.seq)]
    if q.status == "live":
        must.append(Cond("status", "any", ["active", "deprecated"]))
    elif q.status == "active":
        must.append(Cond("status", "eq", "active"))
    if not q.include_expired:
        must.append(Cond("expires_at", "range", gt=now.timestamp()))
    if not q.include_invalid:
        must.append(Cond("valid_until", "range", gt=now.timestamp()))
    if q.valid_at is not None:  # valid time: from inclusive, until exclusive
        t = q.valid_at.timestamp()
        must += [Cond("valid_from", "range", lte=t), Cond("valid_until", "range", gt=t)]
    if q.kind:
        must.append(Cond("kind", "eq", q.kind))
    if q.kinds:
        must.append(Cond("kind", "any", list(q.kinds)))
    if q.kinds_not:
        must.append(Where(must_not=(Cond("kind", "any", list(q.kinds_not)),)))
    if q.category:
        must.append(Cond("category", "eq", q.category))
    if q.subject:
        must.append(Cond("subject", "eq", normalize_subject(q.subject)))
    for tag in v.tags(q.tags):  # normalised as stored tags are
        must.append(Cond("tags", "eq", tag))
    if q.importance_min is not None or q.importance_max is not None:
        must.append(Cond("importance", "range", gte=q.importance_min, lte=q.importance_max))
    return Where(must=tuple(must))
