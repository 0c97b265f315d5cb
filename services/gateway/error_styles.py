"""How each tool surface renders an error: the one domain error type, mapped onto a contract's codes and shape."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ErrorStyle:
    """How a surface renders an error: the domain's codes mapped onto the contract's, in its JSON shape."""

    codes: Mapping[str, str] = field(default_factory=dict)  # domain code -> contract code (absent: unchanged)
    with_field: bool = True  # the contract's error object names the field
    with_details: bool = True
    messages: Mapping[str, Callable[[str, dict[str, Any]], str]] = field(default_factory=dict)  # per domain code
    fallback: str | None = None  # the contract code for a domain code not in `codes` (None: the domain code)

    def render(
        self,
        code: str,
        message: str,
        field_: str | None = None,
        details: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> str:
        """`extra`: more keys of the error object (the native surface lists every argument error)."""
        err: dict[str, Any] = {"code": self.codes.get(code, self.fallback or code)}
        make = self.messages.get(code)
        err["message"] = make(message, details or {}) if make else message
        if field_ and self.with_field:
            err["field"] = field_
        if details and self.with_details:
            err["details"] = details
        if extra and self.with_details:
            err.update(extra)
        return json.dumps({"error": err}, ensure_ascii=False)


NATIVE_ERRORS = ErrorStyle()
_KEYWORD_HINT = re.compile(r"[;,] keyword search[^;]*(?=;|$)")  # (a retry hint may follow it)


def without_keyword_hint(message: str, details: dict[str, Any]) -> str:
    """A model-loading or indexing message for a surface that has no keyword search: without the clause that
    points to it ("...; keyword search (mode 'keyword') answers now")."""
    return _KEYWORD_HINT.sub("", message)


@dataclass(frozen=True)
class PlainErrors(ErrorStyle):
    """A surface whose errors are the message alone, as plain text (the reference knowledge-graph server's:
    a thrown Error's message becomes the text of a result with isError)."""

    def render(
        self,
        code: str,
        message: str,
        field_: str | None = None,
        details: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> str:
        make = self.messages.get(code)
        return make(message, details or {}) if make else message
