"""A dead letter: a message on the event or access stream that a consumer could not decode or fold.

The consumer publishes one on `mneme.dlq.<consumer>` (stream MNEME_DLQ, JSON), counts it, records it in
the audit trail (the auditor) and moves on: a poison message never stalls a projector or the auditor.
The message itself stays in its stream (the log is immutable); the dead letter says where it is and why
it was skipped, with its first bytes for whoever investigates.
"""

from __future__ import annotations

import base64
from datetime import datetime

import msgspec
from msgspec import Struct

HEAD_BYTES = 1024  # how much of the message a dead letter carries (the stream keeps all of it)


class DeadLetter(Struct, frozen=True, kw_only=True):
    consumer: str  # who skipped it: projector-rows, projector-access, projector-vectors, auditor-events, ...
    stream: str  # MNEME_EVENTS or MNEME_ACCESS
    seq: int  # its stream sequence (read it whole with `nats stream get` or js.get_msg)
    subject: str
    reason: str  # "undecodable: <decoder message>", "misplaced: <what contradicts the subject>", or a fold's refusal
    size: int  # bytes of the message
    head_b64: str  # its first HEAD_BYTES bytes, base64
    recorded_at: datetime | None = None  # when the stream recorded the message
    skipped_at: datetime | None = None  # when the consumer skipped it

    @staticmethod
    def head(data: bytes) -> str:
        return base64.b64encode(data[:HEAD_BYTES]).decode("ascii")


def encode_dead_letter(d: DeadLetter) -> bytes:
    return msgspec.json.encode(d)


def decode_dead_letter(data: bytes) -> DeadLetter:
    return msgspec.json.decode(data, type=DeadLetter)
