"""Input rules of the domain. Each failure names its field (InvalidInput)."""

from __future__ import annotations

import math
import re
import unicodedata
import uuid
from datetime import UTC, datetime
from typing import Any, overload

import msgspec

from mneme.errors import InvalidInput

MAX_CONTENT_CHARS = 65_536
MAX_TAGS = 50
MAX_TAG_CHARS = 64
MAX_CITATIONS = 100
MAX_CITATION_CHARS = 2_048
MAX_METADATA_BYTES = 16_384
MAX_LABEL_CHARS = 128
MAX_PATH_CHARS = 512
MAX_PATH_DEPTH = 16

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_NAMESPACE_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_PATH_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_. -]{0,127}")
_KIND = re.compile(r"[a-z][a-z0-9_-]{0,31}")
# Patterns are applied with fullmatch: "$" would also accept a trailing newline.


# Characters that have no place in an identifier: controls (NUL, ESC of ANSI sequences, newlines), format
# characters (right-to-left overrides, zero-width joiners, the BOM) and lone surrogates. Content keeps them.
_HIDDEN = frozenset({"Cc", "Cf", "Cs"})


def plain_text(value: str, field: str, *, spaces: bool = False) -> str:
    """An identifier-like text (tag, category, subject, citation, metadata key) shows what it holds.
    `spaces`: whitespace controls (tab, newline) pass, for labels that collapse whitespace to one space."""
    for i, ch in enumerate(value):
        if unicodedata.category(ch) in _HIDDEN and not (spaces and ch.isspace()):
            name = unicodedata.name(ch, "a control character")
            raise InvalidInput(
                field,
                f"character {i} is U+{ord(ch):04X} ({name}): control and format characters "
                "are not allowed here (content may hold them)",
            )
    return value


def namespace(value: str, field: str = "namespace") -> str:
    segments = value.split("/")
    if not value or len(value) > 255 or len(segments) > 4:
        raise InvalidInput(field, "must be 1-4 segments joined by '/', at most 255 characters")
    for i, seg in enumerate(segments):
        if i > 0 and i == len(segments) - 1 and seg == "_system":  # an organization's rules: <org>/_system
            continue
        if not _NAMESPACE_SEGMENT.fullmatch(seg) or seg in (".", ".."):
            raise InvalidInput(field, f"segment {seg!r} must match [A-Za-z0-9][A-Za-z0-9_.-]{{0,63}}")
    return value


def store(value: str, field: str = "store") -> str:
    if not _NAME.fullmatch(value) or ".." in value:
        raise InvalidInput(field, "must be 1-64 characters of letters, digits, '_', '-', '.', starting alphanumeric")
    return value


def path(value: str, field: str = "path") -> str:
    """A memory path: category segments then a name, joined by '/'. No '..', no empty segment."""
    if not value or len(value) > MAX_PATH_CHARS:
        raise InvalidInput(field, f"must be 1-{MAX_PATH_CHARS} characters")
    segments = value.split("/")
    if len(segments) > MAX_PATH_DEPTH:
        raise InvalidInput(field, f"at most {MAX_PATH_DEPTH} segments")
    for seg in segments:
        if seg in ("", ".", ".."):
            raise InvalidInput(field, "empty, '.' and '..' segments are not allowed")
        if not _PATH_SEGMENT.fullmatch(seg) or seg != seg.strip():
            raise InvalidInput(field, f"segment {seg!r} has characters outside [A-Za-z0-9_. -] or edge spaces")
    return value


def category_path(value: str, field: str = "category_path") -> str:
    return path(value, field)


def categories_of(p: str) -> list[str]:
    """Every category a path lives under: 'a/b/name' -> ['a', 'a/b']."""
    parts = p.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def content(value: str, field: str = "content", limit: int = MAX_CONTENT_CHARS) -> str:
    if not value.strip():
        raise InvalidInput(field, "must not be empty")
    if len(value) > limit:
        raise InvalidInput(field, f"is {len(value)} characters; the limit is {limit}")
    return value


def kind(value: str, field: str = "kind") -> str:
    if not _KIND.fullmatch(value):
        raise InvalidInput(field, "must match [a-z][a-z0-9_-]{0,31}")
    return value


def label(value: str | None, field: str) -> str | None:
    """category / subject: free text, trimmed, 1-128 characters."""
    if value is None:
        return None
    v = " ".join(plain_text(value, field, spaces=True).split())
    if not v or len(v) > MAX_LABEL_CHARS:
        raise InvalidInput(field, f"must be 1-{MAX_LABEL_CHARS} non-blank characters")
    return v


def tags(values: tuple[str, ...] | list[str], field: str = "tags") -> tuple[str, ...]:
    if len(values) > MAX_TAGS:
        raise InvalidInput(field, f"at most {MAX_TAGS} tags")
    out: list[str] = []
    for t in values:
        v = plain_text(t, field).strip().lower()
        if not v or len(v) > MAX_TAG_CHARS:
            raise InvalidInput(field, f"each tag must be 1-{MAX_TAG_CHARS} non-blank characters")
        if v not in out:
            out.append(v)
    return tuple(out)


def citations(values: tuple[str, ...] | list[str], field: str = "citations") -> tuple[str, ...]:
    if len(values) > MAX_CITATIONS:
        raise InvalidInput(field, f"at most {MAX_CITATIONS} citations")
    for c in values:
        plain_text(c, field)
        if not c.strip() or len(c) > MAX_CITATION_CHARS:
            raise InvalidInput(field, f"each citation must be 1-{MAX_CITATION_CHARS} non-blank characters")
    return tuple(values)


def unit_interval(value: float, field: str) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (ok and math.isfinite(value) and 0.0 <= value <= 1.0):
        raise InvalidInput(field, "must be a number from 0 to 1")
    return float(value)


def metadata(value: dict[str, Any], field: str = "metadata") -> dict[str, Any]:
    """Plain JSON only: what is stored must read back equal (no NaN, no non-string keys, no sets)."""
    try:
        encoded = msgspec.json.encode(value)
    except (TypeError, msgspec.EncodeError) as exc:
        raise InvalidInput(field, f"must be JSON: {exc}") from None
    if len(encoded) > MAX_METADATA_BYTES:
        raise InvalidInput(field, f"is {len(encoded)} bytes as JSON; the limit is {MAX_METADATA_BYTES}")
    if msgspec.json.decode(encoded) != value:
        raise InvalidInput(field, "must be plain JSON (string keys, finite numbers, lists, objects)")
    _metadata_keys(value, field)
    return value


def _metadata_keys(value: Any, field: str) -> None:
    """Keys are identifiers (no control or format characters); values are content and keep theirs."""
    stack = [(value, field)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, dict):
            for k, child in node.items():
                plain_text(k, f"{where}.{k}" if k.isprintable() else where)
                stack.append((child, f"{where}.{k}"))
        elif isinstance(node, list):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(node))


@overload
def utc(value: datetime, field: str) -> datetime: ...
@overload
def utc(value: datetime | None, field: str) -> datetime | None: ...
def utc(value: datetime | None, field: str) -> datetime | None:
    """Normalize to UTC; a naive time is taken as UTC."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+01:00, 9999-12-31T23:59-01:00: no such time in UTC
        raise InvalidInput(field, "is outside the range of times (years 1 to 9999 in UTC)") from None


def memory_id(value: str, field: str = "id") -> str:
    try:
        return str(uuid.UUID(value))
    except (ValueError, AttributeError, TypeError):
        raise InvalidInput(field, "must be a UUID") from None


def validity(valid_from: datetime | None, valid_until: datetime | None) -> None:
    if valid_from and valid_until and valid_until <= valid_from:
        raise InvalidInput("valid_until", "must be after valid_from")
