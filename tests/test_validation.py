"""mneme.domain.validation at its boundaries: the last good value passes, the first bad
one fails, and every failure is an InvalidInput naming the right field."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import msgspec
import pytest

from mneme.domain import validation as v
from mneme.errors import InvalidInput

UTC = UTC


def _fails(field: str, fn, *args, **kwargs) -> InvalidInput:
    with pytest.raises(InvalidInput) as exc:
        fn(*args, **kwargs)
    assert exc.value.field == field
    assert exc.value.code == "INVALID_INPUT"
    assert exc.value.to_dict()["field"] == field
    return exc.value


# --- namespace ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ns",
    ["a", "acme", "acme/research", "a/b/c/d", "A1_b.c-d", "x" * 64, "/".join(["y" * 63] * 4)],  # last: 255 chars
)
def test_namespace_accepts(ns: str) -> None:
    assert v.namespace(ns) == ns


@pytest.mark.parametrize(
    "ns",
    [
        "",
        "a/b/c/d/e",  # 5 segments
        "x" * 65,  # segment too long
        "/".join(["y" * 64] * 4),  # 259 characters
        "a//b",
        "/a",
        "a/",
        "..",
        "a/..",
        ".",
        "-a",
        ".hidden",
        "_a",
        "a b",
        "a:b",
        "a*b",
        "a>b",
        "café",
    ],
)
def test_namespace_rejects(ns: str) -> None:
    _fails("namespace", v.namespace, ns)


def test_namespace_failure_names_the_given_field() -> None:
    _fails("target_namespace", v.namespace, "a/../b", "target_namespace")


# --- store -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["main", "a", "x" * 64, "team.notes", "my_store-2"])
def test_store_accepts(name: str) -> None:
    assert v.store(name) == name


@pytest.mark.parametrize("name", ["", "x" * 65, "-a", ".a", "a..b", "a/b", "a b", "a*", "ü"])
def test_store_rejects(name: str) -> None:
    _fails("store", v.store, name)


# --- path --------------------------------------------------------------------------------

PATH_512 = "/".join(["a" * 128, "b" * 128, "c" * 128, "d" * 125])


def test_path_length_limit_is_512() -> None:
    assert len(PATH_512) == v.MAX_PATH_CHARS == 512
    assert v.path(PATH_512) == PATH_512
    _fails("path", v.path, PATH_512 + "e")


def test_path_depth_limit_is_16() -> None:
    deep = "/".join(["s"] * 16)
    assert v.path(deep) == deep
    _fails("path", v.path, deep + "/s")


def test_path_segment_limit_is_128() -> None:
    assert v.path("x" * 128) == "x" * 128
    _fails("path", v.path, "x" * 129)


@pytest.mark.parametrize(
    "p",
    ["name", "a/b/name", "My notes/2024 plan.md", "_private/x", "a/b.c-d_e f", "v1..2", "x."],
)
def test_path_accepts(p: str) -> None:
    assert v.path(p) == p


@pytest.mark.parametrize(
    "p",
    [
        "",
        "a//b",
        "/a",
        "a/",
        ".",
        "a/./b",
        "..",
        "a/../b",
        "../etc/passwd",
        " a",
        "a ",
        "a/ b",
        "a/b ",
        "a/b\n",
        "-a",
        ".a",
        "a:b",
        "a*b",
        "a\\b",
        "a\tb",
        "é",
    ],
)
def test_path_rejects(p: str) -> None:
    _fails("path", v.path, p)


def test_path_failure_names_the_given_field() -> None:
    _fails("to_path", v.path, "a/../b", "to_path")
    _fails("category_path", v.category_path, "a//b")


# --- content, kind, label ---------------------------------------------------------------


@pytest.mark.parametrize("blank", ["", " ", "\n\t  "])
def test_content_must_not_be_blank(blank: str) -> None:
    _fails("content", v.content, blank)


def test_content_limit_exactly_at_passes_and_one_over_fails() -> None:
    at = "x" * v.MAX_CONTENT_CHARS
    assert v.content(at) is at
    _fails("content", v.content, at + "x")


def test_content_custom_limit_and_surrounding_space_is_kept() -> None:
    assert v.content(" hi ", limit=4) == " hi "
    err = _fails("content", v.content, "hello", limit=4)
    assert "5" in err.message and "4" in err.message


@pytest.mark.parametrize("k", ["note", "a", "a" + "b" * 31, "decision_log", "how-to", "v2"])
def test_kind_accepts(k: str) -> None:
    assert v.kind(k) == k


@pytest.mark.parametrize("k", ["", "Note", "1note", "_x", "a" * 33, "no te", "note!"])
def test_kind_rejects(k: str) -> None:
    _fails("kind", v.kind, k)


def test_label_collapses_whitespace_and_keeps_none() -> None:
    assert v.label(None, "subject") is None
    assert v.label("  the \t build\nsystem  ", "subject") == "the build system"
    assert v.label("x" * 128, "category") == "x" * 128
    assert v.label("  " + "x" * 128 + "  ", "category") == "x" * 128


@pytest.mark.parametrize("bad", ["", "   ", "\n", "x" * 129])
def test_label_rejects(bad: str) -> None:
    _fails("category", v.label, bad, "category")


# --- tags, citations ----------------------------------------------------------------------


def test_tags_are_trimmed_lower_cased_and_deduplicated_in_order() -> None:
    assert v.tags(["Python", " rust ", "python", "RUST", "go"]) == ("python", "rust", "go")
    assert v.tags(()) == ()


def test_tags_count_limit_is_50() -> None:
    fifty = [f"t{i}" for i in range(50)]
    assert len(v.tags(fifty)) == 50
    _fails("tags", v.tags, [*fifty, "t50"])


def test_tag_length_limit_is_64_after_trimming() -> None:
    assert v.tags(["x" * 64]) == ("x" * 64,)
    assert v.tags(["  " + "x" * 64 + "  "]) == ("x" * 64,)
    _fails("tags", v.tags, ["x" * 65])


@pytest.mark.parametrize("bad", ["", "  ", "\t"])
def test_blank_tag_is_rejected(bad: str) -> None:
    _fails("tags", v.tags, ["ok", bad])


def test_citations_are_kept_as_given() -> None:
    assert v.citations(["b", "a", "b"]) == ("b", "a", "b")
    assert isinstance(v.citations(["x"]), tuple)


def test_citations_count_limit_is_100() -> None:
    hundred = [f"c{i}" for i in range(100)]
    assert len(v.citations(hundred)) == 100
    _fails("citations", v.citations, [*hundred, "c100"])


def test_citation_length_limit_is_2048() -> None:
    assert v.citations(["u" * 2048]) == ("u" * 2048,)
    _fails("citations", v.citations, ["u" * 2049])
    _fails("citations", v.citations, ["ok", "   "])


# --- metadata ------------------------------------------------------------------------------


def test_metadata_limit_is_16_kib_of_json() -> None:
    at = {"k": "x" * (v.MAX_METADATA_BYTES - len(b'{"k":""}'))}
    assert len(msgspec.json.encode(at)) == 16_384
    assert v.metadata(at) is at
    over = {"k": at["k"] + "x"}
    err = _fails("metadata", v.metadata, over)
    assert "16385" in err.message


@pytest.mark.parametrize(
    "bad",
    [{"o": object()}, {"f": lambda: 1}, {(1, 2): "tuple key"}, {"nested": {"deep": [object()]}}],
    ids=["object", "function", "tuple-key", "nested-object"],
)
def test_metadata_must_be_json(bad: dict) -> None:
    _fails("metadata", v.metadata, bad)


@pytest.mark.parametrize("value", [{"x": math.nan}, {1: "a"}, {"s": {1, 2}}], ids=["nan", "int-key", "set"])
def test_metadata_is_either_rejected_or_survives_the_log_round_trip(value: dict) -> None:
    try:
        out = v.metadata(value)
    except InvalidInput as exc:
        assert exc.field == "metadata"
        return
    assert msgspec.json.decode(msgspec.json.encode(out)) == out


# --- unit_interval -------------------------------------------------------------------------


@pytest.mark.parametrize("x", [0, 0.0, 0.5, 1, 1.0])
def test_unit_interval_accepts_and_returns_float(x: float) -> None:
    out = v.unit_interval(x, "importance")
    assert out == x and type(out) is float


@pytest.mark.parametrize("x", [math.nan, math.inf, -math.inf, -0.1, 1.0000001, 2, "0.5", None])
def test_unit_interval_rejects(x: object) -> None:
    _fails("confidence", v.unit_interval, x, "confidence")


# --- memory_id, categories_of, utc, validity ---------------------------------------------------

UUID = "3f2b8c1e-9a4d-4e6f-8b7a-1c2d3e4f5a6b"


@pytest.mark.parametrize("given", [UUID, UUID.upper(), UUID.replace("-", ""), "{" + UUID + "}"])
def test_memory_id_is_canonicalized(given: str) -> None:
    assert v.memory_id(given) == UUID


@pytest.mark.parametrize("bad", ["", "not-a-uuid", UUID[:-1], UUID + "0", 123, None])
def test_memory_id_rejects(bad: object) -> None:
    _fails("id", v.memory_id, bad)
    _fails("memory_id", v.memory_id, bad, "memory_id")


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        ("name", []),
        ("a/name", ["a"]),
        ("a/b/c/name", ["a", "a/b", "a/b/c"]),
        ("My notes/2024/plan", ["My notes", "My notes/2024"]),
    ],
)
def test_categories_of(p: str, expected: list[str]) -> None:
    assert v.categories_of(p) == expected


def test_utc_takes_naive_as_utc_and_converts_offsets() -> None:
    assert v.utc(None, "expires_at") is None
    naive = v.utc(datetime(2025, 1, 1, 12, 0), "expires_at")
    assert naive == datetime(2025, 1, 1, 12, 0, tzinfo=UTC) and naive.tzinfo is UTC
    plus2 = v.utc(datetime(2025, 1, 1, 12, 0, tzinfo=timezone(timedelta(hours=2))), "expires_at")
    assert plus2 is not None
    assert (plus2.hour, plus2.tzinfo) == (10, UTC)


def test_validity_requires_until_after_from() -> None:
    t = datetime(2025, 1, 1, tzinfo=UTC)
    v.validity(t, t + timedelta(microseconds=1))
    v.validity(None, t)
    v.validity(t, None)
    v.validity(None, None)
    _fails("valid_until", v.validity, t, t)
    _fails("valid_until", v.validity, t, t - timedelta(days=1))


# --- a trailing newline must not slip through (fullmatch, not `$`) ------------------


@pytest.mark.parametrize(
    ("fn", "field", "value"),
    [(v.namespace, "namespace", "team\n"), (v.store, "store", "main\n"), (v.kind, "kind", "note\n")],
    ids=["namespace", "store", "kind"],
)
def test_a_trailing_newline_is_rejected(fn, field: str, value: str) -> None:
    _fails(field, fn, value)
