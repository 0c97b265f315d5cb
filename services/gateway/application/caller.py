"""What a use case needs of the tool call it runs for (services/gateway/gateway.py's `Call` is one)."""

from __future__ import annotations

from typing import Protocol

from mneme.principals import Principal
from services.gateway.access_log import Answered


class Caller(Protocol):
    @property
    def principal(self) -> Principal: ...

    @property
    def namespace(self) -> str: ...

    @property
    def request_id(self) -> str: ...

    @property
    def answered(self) -> list[Answered]:
        """The projector answers of this call, for its read record (appended by `Reads`)."""
        ...
