"""An AsyncAPI 3.0 document of every subject mneme uses, generated from the code: the subjects from
schemas/subjects.py, the payloads' JSON Schemas from the msgspec types (events, access records, queries
and their results, control requests and replies). Checked in as schemas/asyncapi.json;
tests/test_asyncapi.py fails when it is stale, and when the subjects the projector's and the auditor's
FastStream routers serve (mneme/query_server.py) are not exactly its query and control channels. FastStream's
own AsyncAPI generator is not used for those: it describes handler parameters through pydantic, and these
payloads are msgspec types.

    python -m schemas.asyncapi            # print it
    python -m schemas.asyncapi --write    # rewrite schemas/asyncapi.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from schemas import subjects as S
from schemas.access import AnyAccess
from schemas.control import CONTROL_VERBS
from schemas.dead_letter import DeadLetter
from schemas.events import Envelope
from schemas.queries import REPAIR_TYPES, RESULT_TYPES, AuditQuery, Reply

PATH = Path(__file__).with_name("asyncapi.json")
# Reply as it is on the wire: its `result` is the query's result, msgpack-encoded in place (msgspec.Raw,
# which has no JSON Schema of its own); nil on an error
ReplyShape = msgspec.defstruct(
    "Reply", [("applied_seq", int), ("result", Any, None), ("error", dict[str, Any] | None, None)], kw_only=True
)
assert ReplyShape.__struct_fields__ == Reply.__struct_fields__, "schemas.queries.Reply changed: describe it here"
REF = "#/components/schemas/{name}"
JSON, MSGPACK = "application/json", "application/msgpack"


def _param(description: str) -> dict[str, str]:
    return {"description": description}


def _version() -> str:
    """The package's version (read from its metadata: the wire types sit below the library's package)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mneme")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "0.0.0"


def document() -> dict[str, Any]:
    """The whole document, deterministic (sorted keys when written)."""
    queries = dict(sorted({**_query_types(), AuditQuery.OPERATION: AuditQuery}.items()))
    payloads: list[Any] = [
        Envelope,
        AnyAccess,
        DeadLetter,
        ReplyShape,
        *queries.values(),
        *REPAIR_TYPES.values(),
        *sorted(set(RESULT_TYPES.values()), key=lambda t: t.__name__),
    ]
    for request, reply in CONTROL_VERBS.values():
        payloads += [request, reply]
    schemas_list, components = msgspec.json.schema_components(payloads, ref_template=REF)
    by_type = dict(zip([_name(t) for t in payloads], schemas_list, strict=True))

    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}

    def message(name: str, content_type: str, summary: str) -> dict[str, str]:
        messages[name] = {"name": name, "contentType": content_type, "summary": summary, "payload": by_type[name]}
        return {"$ref": f"#/components/messages/{name}"}

    channels["events"] = {
        "address": f"{S.EVENTS_PREFIX}.{{namespace}}.{S.MEMORY_AGGREGATE}.{{store}}.{{memory_id}}",
        "description": f"The event log, stream {S.EVENTS_STREAM} (subjects {S.EVENTS_SUBJECTS}): the only source of "
        "truth. One subject per memory; appends carry Nats-Msg-Id (idempotency) and the expected last subject "
        "sequence (no lost updates).",
        "parameters": {
            "namespace": _param("the namespace, as a subject token (schemas.subjects.token)"),
            "store": _param(f"the store's token, or '{S.NO_STORE_TOKEN}' for a memory without a store"),
            "memory_id": _param("the memory's id"),
        },
        "messages": {"Envelope": message("Envelope", JSON, "One event about one memory, with who, when, why")},
    }
    operations["appendEvent"] = {
        "action": "send",
        "channel": {"$ref": "#/channels/events"},
        "summary": "The gateway appends a decided event",
    }
    operations["followEvents"] = {
        "action": "receive",
        "channel": {"$ref": "#/channels/events"},
        "summary": "Projectors and the auditor fold the log (ordered consumers)",
    }

    channels["access"] = {
        "address": f"{S.ACCESS_PREFIX}.{{kind}}.{{namespace}}",
        "description": f"Access records, stream {S.ACCESS_STREAM} (subjects {S.ACCESS_SUBJECTS}): reads and "
        "denied attempts; the auditor keeps them, projectors fold them into access statistics.",
        "parameters": {"kind": {"enum": ["read", "denied"]}, "namespace": _param("the namespace's token")},
        "messages": {"AccessRecord": message(_name(AnyAccess), JSON, "A read or a denied attempt")},
    }
    operations["recordAccess"] = {"action": "send", "channel": {"$ref": "#/channels/access"}}
    operations["followAccess"] = {"action": "receive", "channel": {"$ref": "#/channels/access"}}

    channels["deadLetters"] = {
        "address": f"{S.DEAD_LETTER_PREFIX}.{{consumer}}",
        "description": f"Dead letters, stream {S.DEAD_LETTER_STREAM} (subjects {S.DEAD_LETTER_SUBJECTS}): a message "
        "of the event or access stream that a consumer could not decode, with where it is and why it was skipped.",
        "parameters": {"consumer": _param("projector-rows, projector-access, projector-vectors, auditor-events, ...")},
        "messages": {"DeadLetter": message("DeadLetter", JSON, "A skipped message: stream, seq, reason, first bytes")},
    }
    operations["deadLetter"] = {"action": "send", "channel": {"$ref": "#/channels/deadLetters"}}

    message("Reply", MSGPACK, "Every query's reply: applied_seq, and the result (msgpack) or an error")
    for op, query in queries.items():
        key = f"query.{op}"
        served_by = "auditors" if query is AuditQuery else "projectors"
        queue = S.AUDITOR_QUEUE if query is AuditQuery else S.PROJECTOR_QUEUE
        channels[key] = {
            "address": S.query_subject(op),
            "description": f"Request/reply, served by the {served_by} (queue group {queue}); the reply's "
            f"result is a {RESULT_TYPES[op].__name__}.",
            "messages": {
                query.__name__: message(query.__name__, MSGPACK, f"The {op} query"),
                "Reply": {"$ref": "#/components/messages/Reply"},
            },
        }
        operations[f"ask.{op}"] = _request_reply(key, query.__name__, "Reply")
    for op, query in REPAIR_TYPES.items():
        key = f"control.repair.{op}"
        channels[key] = {
            "address": S.repair_subject(op),
            "description": "Request/reply, a repair served by every projector (no queue group: each replica repairs "
            f"its own read models; the first reply answers); the reply's result is a {RESULT_TYPES[op].__name__}.",
            "messages": {
                query.__name__: message(query.__name__, MSGPACK, f"The {op} repair"),
                "Reply": {"$ref": "#/components/messages/Reply"},
            },
        }
        operations[f"control.repair.{op}"] = _request_reply(key, query.__name__, "Reply")
    for result in sorted(set(RESULT_TYPES.values()), key=lambda t: t.__name__):
        message(result.__name__, MSGPACK, "A query's result, inside Reply.result")

    for verb, (request, reply) in CONTROL_VERBS.items():
        key = f"control.{verb}"
        channels[key] = {
            "address": f"{S.CONTROL_PREFIX}.{{target}}.{verb}",
            "description": "Operator requests to the projector serving one data directory (target: a hash of its "
            "path; mneme.app.compose.control_id).",
            "parameters": {"target": _param("the data directory's control id")},
            "messages": {
                request.__name__: message(request.__name__, JSON, f"The {verb} request"),
                reply.__name__: message(reply.__name__, JSON, f"The {verb} reply"),
            },
        }
        operations[f"control.{verb}"] = _request_reply(key, request.__name__, reply.__name__)

    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "mneme",
            "version": _version(),
            "description": "Event-sourced shared memory for AI agents: every subject on NATS. Generated by "
            "`python -m schemas.asyncapi --write` from schemas/; do not edit by hand.",
        },
        "defaultContentType": JSON,
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages, "schemas": components},
    }


def _request_reply(channel: str, request: str, reply: str) -> dict[str, Any]:
    """A request/reply operation on one channel: the request sent, the reply on the same channel."""
    ref = f"#/channels/{channel}"
    return {
        "action": "send",
        "channel": {"$ref": ref},
        "messages": [{"$ref": f"{ref}/messages/{request}"}],
        "reply": {"channel": {"$ref": ref}, "messages": [{"$ref": f"{ref}/messages/{reply}"}]},
    }


def _query_types() -> dict[str, type]:
    from schemas.queries import QUERY_TYPES

    return dict(QUERY_TYPES)


def _name(t: Any) -> str:
    """The component name msgspec gives a type (a union of tagged structs: the name of their base)."""
    if t is AnyAccess:
        return "AccessRecord"
    return str(t.__name__)


def render() -> str:
    return json.dumps(document(), indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--write"]:
        PATH.write_text(render())
        print(f"wrote {PATH}")
    elif not args:
        sys.stdout.write(render())
    else:
        sys.exit("usage: python -m schemas.asyncapi [--write]")


if __name__ == "__main__":
    main()
