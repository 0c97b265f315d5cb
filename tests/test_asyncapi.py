"""schemas/asyncapi.json is the AsyncAPI document of every subject, generated from the code
(schemas/asyncapi.py): it fails here when the code changed and the document was not regenerated."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import pytest

from mneme.embedded_nats import EmbeddedNats
from schemas import asyncapi
from schemas import subjects as S
from schemas.control import CONTROL_VERBS
from schemas.events import AnyEvent
from schemas.queries import QUERY_TYPES, AuditQuery
from tests.harness import start_stack

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


@pytest.mark.anyio
async def test_the_planes_serve_exactly_the_request_reply_subjects_it_describes(
    tmp_path: Path, nats_server: EmbeddedNats
) -> None:
    """The document is generated from schemas/, the routers are built in services/: what the running projector
    and auditor subscribe (their FastStream planes) is what the document's query and control channels say."""
    stack = await start_stack(tmp_path, nats_server, replayable=True)
    try:
        served = [*stack.projector.plane.subjects, *stack.auditor.plane.subjects]
        target = stack.projector.control.control_id if stack.projector.control else None
    finally:
        await stack.close()
    assert target
    own = f"{S.CONTROL_PREFIX}.{target}."
    served_addresses = {s.replace(own, f"{S.CONTROL_PREFIX}.{{target}}.") for s in served}
    assert len(served_addresses) == len(served)
    doc = json.loads(asyncapi.PATH.read_text())
    described = {c["address"] for name, c in doc["channels"].items() if name.startswith(("query.", "control."))}
    assert served_addresses == described
