"""schemas/asyncapi.json is the AsyncAPI document of every subject, generated from the code
(schemas/asyncapi.py): it fails here when the code changed and the document was not regenerated."""

from __future__ import annotations

import json
import typing

from schemas import asyncapi
from schemas import subjects as S
from schemas.control import CONTROL_VERBS
from schemas.events import AnyEvent
from schemas.queries import QUERY_TYPES, AuditQuery

REGENERATE = "schemas/asyncapi.json is stale: run `python -m schemas.asyncapi --write` and commit it"


def test_the_committed_document_is_what_the_code_generates() -> None:
    assert asyncapi.PATH.read_text() == asyncapi.render(), REGENERATE


def test_every_subject_and_message_is_in_it() -> None:
    doc = json.loads(asyncapi.PATH.read_text())
    assert doc["asyncapi"].startswith("3.")
    addresses = {c["address"] for c in doc["channels"].values()}
    for op in [*QUERY_TYPES, AuditQuery.OPERATION]:
        assert S.query_subject(op) in addresses, op
    for verb in CONTROL_VERBS:
        assert f"{S.CONTROL_PREFIX}.{{target}}.{verb}" in addresses, verb
    assert any(a.startswith(S.EVENTS_PREFIX + ".") for a in addresses)
    assert any(a.startswith(S.ACCESS_PREFIX + ".") for a in addresses)
    # every event type's tag (what is on the wire) has its schema
    text = json.dumps(doc["components"]["schemas"])
    for event in typing.get_args(AnyEvent):
        assert f'"{event.__struct_config__.tag}"' in text, event.__name__
    # every operation's references resolve
    for name, op in doc["operations"].items():
        channel = op["channel"]["$ref"].removeprefix("#/channels/")
        assert channel in doc["channels"], name
        for ref in op.get("messages", []):
            ch, _, msg = ref["$ref"].removeprefix("#/channels/").partition("/messages/")
            assert msg in doc["channels"][ch]["messages"], (name, ref)
