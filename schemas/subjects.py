"""Every stream, subject, queue group and header name that mneme uses, in one place.

Nothing outside this module spells a subject string.
"""

from __future__ import annotations

import functools
import hashlib
import re

EVENTS_STREAM = "MNEME_EVENTS"
EVENTS_PREFIX = "mneme.evt"
EVENTS_SUBJECTS = f"{EVENTS_PREFIX}.>"

ACCESS_STREAM = "MNEME_ACCESS"
ACCESS_PREFIX = "mneme.audit"
ACCESS_SUBJECTS = f"{ACCESS_PREFIX}.>"

QUERY_PREFIX = "mneme.qry"
PROJECTOR_QUEUE = "mneme-projectors"
AUDITOR_QUEUE = "mneme-auditors"

HDR_MSG_ID = "Nats-Msg-Id"
HDR_EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
HDR_EXPECTED_LAST_SUBJECT_SEQ_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"
# SHA-256 of the command a request id was first used for: the same key with other arguments is refused.
HDR_REQUEST_DIGEST = "Mneme-Request-Digest"

# JetStream API error code for a failed expected-last-(subject-)sequence check.
ERR_WRONG_LAST_SEQUENCE = 10071

MEMORY_AGGREGATE = "mem"
ENTITY_AGGREGATE = "ent"
RELATION_AGGREGATE = "rel"
CODE_AGGREGATE = "code"
NAMESPACE_AGGREGATE = "ns"
NO_STORE_TOKEN = "-"

_READABLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


@functools.lru_cache(maxsize=4096)  # (every follower checks each event's subject: names repeat)
def token(name: str) -> str:
    """A subject-safe token for a namespace or store name.

    Simple names are used as they are (readable in `nats stream view`); anything
    else becomes `~` plus a hash, which can never collide with a readable name.
    """
    if _READABLE.fullmatch(name):
        return name
    return "~" + hashlib.sha256(name.encode()).hexdigest()[:32]


def memory_subject(namespace: str, store: str | None, memory_id: str) -> str:
    store_tok = token(store) if store else NO_STORE_TOKEN
    return f"{EVENTS_PREFIX}.{token(namespace)}.{MEMORY_AGGREGATE}.{store_tok}.{memory_id}"


def entity_subject(namespace: str, entity_id: str) -> str:
    return f"{EVENTS_PREFIX}.{token(namespace)}.{ENTITY_AGGREGATE}.{entity_id}"


def relation_subject(namespace: str, relation_id: str) -> str:
    return f"{EVENTS_PREFIX}.{token(namespace)}.{RELATION_AGGREGATE}.{relation_id}"


def code_subject(namespace: str, project_id: str) -> str:
    return f"{EVENTS_PREFIX}.{token(namespace)}.{CODE_AGGREGATE}.{token(project_id)}"


def namespace_subject(namespace: str, what: str) -> str:
    """Events about a whole namespace (`what`: "reset")."""
    return f"{EVENTS_PREFIX}.{token(namespace)}.{NAMESPACE_AGGREGATE}.{what}"


CODE_SUBJECTS = f"{EVENTS_PREFIX}.*.{CODE_AGGREGATE}.>"  # every namespace's code-index events


def store_filter(namespace: str, store: str) -> str:
    """All memory subjects of one store: the unit that guards path uniqueness."""
    return f"{EVENTS_PREFIX}.{token(namespace)}.{MEMORY_AGGREGATE}.{token(store)}.*"


def query_subject(operation: str) -> str:
    return f"{QUERY_PREFIX}.{operation}"


def access_subject(kind: str, namespace: str) -> str:
    """`mneme.audit.read.<ns>` or `mneme.audit.denied.<ns>`."""
    return f"{ACCESS_PREFIX}.{kind}.{token(namespace)}"


CONTROL_PREFIX = "mneme.ctl"


def repair_subject(operation: str) -> str:
    """A repair every projector replica answers (schemas/queries.py REPAIR_TYPES)."""
    return f"{CONTROL_PREFIX}.repair.{operation}"


def control_subject(target: str, verb: str) -> str:
    """Operator requests to one process (e.g. `mneme replay` asking a projector to swap generations)."""
    return f"{CONTROL_PREFIX}.{token(target)}.{verb}"


DEAD_LETTER_STREAM = "MNEME_DLQ"
DEAD_LETTER_PREFIX = "mneme.dlq"
DEAD_LETTER_SUBJECTS = f"{DEAD_LETTER_PREFIX}.>"


def dead_letter_subject(consumer: str) -> str:
    """Where a consumer puts a message it could not fold: `mneme.dlq.<consumer>` (e.g. `projector-rows`)."""
    return f"{DEAD_LETTER_PREFIX}.{token(consumer)}"
