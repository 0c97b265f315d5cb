"""The code index's syntax chunker (mneme/code/chunk.py, windows.py): exact chunks of the fixture repository in
all five languages, the token budget (never exceeded, also for generated code), imports in the first window,
the whole-file fallback, determinism."""

from __future__ import annotations

import random
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mneme.code import Chunk, Chunker, TokenCounter, default_budget
from mneme.embedding import DEFAULT_MODEL, MODELS

REPO = Path(__file__).parent / "fixtures" / "coderepo"
SOURCES = ["src/inventory.py", "web/cart.js", "web/api.ts", "web/Badge.tsx", "svc/server.go", "crate/lib.rs"]


@cache
def counter() -> TokenCounter:
    return TokenCounter()


@cache
def chunker(budget: int | None = None) -> Chunker:
    return Chunker(counter(), budget)


def chunks_of(path: str, budget: int | None = None) -> list[Chunk]:
    return chunker(budget).chunk(path, (REPO / path).read_bytes())


def shape(chunks: list[Chunk]) -> list[tuple[str, str | None, int, int, str]]:
    return [(c.chunk_type, c.name, c.start_line, c.end_line, c.header) for c in chunks]


# (chunk_type, name, start_line, end_line, header) at the default budget (126 tokens)
EXPECTED = {
    "src/inventory.py": [
        ("class", "Part", 1, 13, "src/inventory.py \u203a Part"),  # the imports open the first window
        ("class", "Inventory", 16, 25, "src/inventory.py \u203a Inventory"),  # its head, fields and `add`
        ("method", "restock", 27, 33, "src/inventory.py \u203a Inventory \u203a restock"),
        ("method", "take", 35, 41, "src/inventory.py \u203a Inventory \u203a take"),
        ("method", "to_json", 43, 45, "src/inventory.py \u203a Inventory \u203a to_json"),
        ("function", "low_stock", 48, 49, "src/inventory.py \u203a low_stock"),
    ],
    "web/cart.js": [
        ("imports", None, 1, 2, "web/cart.js"),
        ("class", "Cart", 4, 15, "web/cart.js \u203a Cart"),  # the comment above it, `export`, constructor, add
        ("block", None, 17, 29, "web/cart.js \u203a Cart"),  # remove and total, and the closing brace
        ("function", "emptyCart", 31, 31, "web/cart.js \u203a emptyCart"),  # `export const emptyCart = () => …`
    ],
    "web/api.ts": [
        ("module", None, 1, 14, "web/api.ts"),  # import, interface, type alias and enum fit one window
        ("function", "placeOrder", 16, 24, "web/api.ts \u203a placeOrder"),
        ("block", None, 25, 26, "web/api.ts \u203a placeOrder"),
    ],
    "web/Badge.tsx": [("module", None, 1, 9, "web/Badge.tsx")],
    "svc/server.go": [
        ("module", None, 1, 17, "svc/server.go"),
        ("module", None, 19, 30, "svc/server.go"),
    ],
    "crate/lib.rs": [
        ("struct", "WordCount", 1, 8, "crate/lib.rs \u203a WordCount"),  # `use` lines, doc comment, #[derive], struct
        ("impl", "WordCount", 10, 20, "crate/lib.rs \u203a WordCount"),
        ("module", None, 22, 35, "crate/lib.rs"),  # the Display impl, the trait and the enum
    ],
}

# (chunk_type, name, start_line, end_line, scope) at 48 tokens: big definitions split into their children
EXPECTED_SMALL = {
    "src/inventory.py": [
        ("imports", None, 1, 6, ()),
        ("class", "Part", 9, 13, ("Part",)),
        ("class", "Inventory", 16, 18, ("Inventory",)),
        ("block", None, 20, 21, ("Inventory",)),
        ("method", "add", 23, 24, ("Inventory", "add")),
        ("block", None, 25, 25, ("Inventory", "add")),
        ("method", "restock", 27, 27, ("Inventory", "restock")),
        ("block", None, 28, 30, ("Inventory", "restock")),
        ("block", None, 31, 33, ("Inventory", "restock")),
        ("method", "take", 35, 36, ("Inventory", "take")),
        ("block", None, 37, 38, ("Inventory", "take")),
        ("block", None, 39, 41, ("Inventory", "take")),
        ("method", "to_json", 43, 43, ("Inventory", "to_json")),
        ("block", None, 44, 44, ("Inventory", "to_json")),  # a long line, split between its nodes
        ("block", None, 44, 44, ("Inventory", "to_json")),
        ("block", None, 45, 45, ("Inventory", "to_json")),
        ("function", "low_stock", 48, 48, ("low_stock",)),
        ("block", None, 49, 49, ("low_stock",)),
    ],
    "svc/server.go": [
        ("struct", "Server", 1, 12, ("Server",)),
        ("interface", "Handler", 14, 17, ("Handler",)),
        ("method", "ServeHTTP", 19, 19, ("Server", "ServeHTTP")),  # the receiver's type is its scope
        ("block", None, 20, 24, ("Server", "ServeHTTP")),
        ("block", None, 25, 25, ("Server", "ServeHTTP")),
        ("function", "NewServer", 28, 30, ("NewServer",)),
    ],
    "crate/lib.rs": [
        ("imports", None, 1, 2, ()),
        ("module", None, 4, 5, ()),
        ("struct", "WordCount", 6, 8, ("WordCount",)),
        ("impl", "WordCount", 10, 11, ("WordCount", "add")),  # `impl WordCount {` opens the window of `add`
        ("block", None, 12, 12, ("WordCount", "add")),
        ("block", None, 13, 14, ("WordCount", "add")),
        ("method", "get", 17, 17, ("WordCount", "get")),
        ("block", None, 17, 19, ("WordCount", "get")),
        ("impl", "WordCount", 22, 22, ("WordCount", "fmt")),
        ("block", None, 23, 23, ("WordCount", "fmt")),
        ("block", None, 24, 25, ("WordCount", "fmt")),
        ("module", None, 28, 35, ()),
    ],
    "web/cart.js": [
        ("imports", None, 1, 2, ()),
        ("class", "Cart", 4, 5, ("Cart",)),
        ("method", "constructor", 5, 9, ("Cart", "constructor")),
        ("method", "add", 11, 12, ("Cart", "add")),
        ("block", None, 13, 15, ("Cart", "add")),
        ("method", "remove", 17, 20, ("Cart", "remove")),
        ("method", "total", 22, 23, ("Cart", "total")),
        ("block", None, 24, 26, ("Cart", "total")),
        ("block", None, 27, 28, ("Cart", "total")),
        ("function", "emptyCart", 31, 31, ("emptyCart",)),
    ],
}


@pytest.mark.parametrize("path", SOURCES)
def test_fixture_chunks_at_the_default_budget(path: str) -> None:
    assert shape(chunks_of(path)) == EXPECTED[path]


@pytest.mark.parametrize("path", sorted(EXPECTED_SMALL))
def test_fixture_chunks_at_a_small_budget(path: str) -> None:
    got = [(c.chunk_type, c.name, c.start_line, c.end_line, c.scope) for c in chunks_of(path, 48)]
    assert got == EXPECTED_SMALL[path]


def test_default_budget_fits_the_default_model() -> None:
    assert default_budget() == MODELS[DEFAULT_MODEL].max_tokens - 2 == 126  # [CLS] and [SEP] come on top
    assert chunker().budget == default_budget()
    with pytest.raises(ValueError, match="too small"):
        Chunker(counter(), 8)


def check_chunks(path: str, data: bytes, chunks: list[Chunk], budget: int) -> None:
    """Within the budget (counted whole, by the real tokenizer), in order, and every line with a word covered."""
    counts = counter().count_many([c.text for c in chunks])
    for c, tokens in zip(chunks, counts, strict=True):
        assert tokens == c.tokens <= budget, (c.header, c.start_line, tokens)
        assert c.text == f"{c.header}\n{c.code}" and c.header.startswith((path, path.rsplit("/", 1)[-1]))
    assert [c.start_line for c in chunks] == sorted(c.start_line for c in chunks)
    lines = data.decode("utf-8", "replace").splitlines()
    covered = {n for c in chunks for n in range(c.start_line, c.end_line + 1)}
    for number, line in enumerate(lines, 1):
        if any(ch.isalnum() for ch in line):
            assert number in covered, (path, number, line)


@pytest.mark.parametrize("budget", [16, 24, 48, 126])
@pytest.mark.parametrize("path", [*SOURCES, "README.md", "pkg/report.py"])
def test_no_chunk_is_over_the_budget(path: str, budget: int) -> None:
    data = (REPO / path).read_bytes()
    check_chunks(path, data, chunker(budget).chunk(path, data), budget)


@pytest.mark.parametrize(
    ("path", "imports"),
    [
        ("src/inventory.py", ["from __future__", "import json", "from dataclasses"]),
        ("web/cart.js", ["import { formatPrice }", "import { sendEvent }"]),
        ("web/api.ts", ["import type { Cart }"]),
        ("svc/server.go", ["package svc", '"fmt"', '"net/http"']),
        ("crate/lib.rs", ["use std::collections::HashMap;", "use std::fmt;"]),
    ],
)
def test_top_level_imports_are_in_the_first_window(path: str, imports: list[str]) -> None:
    for budget in (48, 126):
        first = chunks_of(path, budget)[0]
        assert all(i in first.code for i in imports), (budget, first.code)


def test_headers_name_the_enclosing_scopes() -> None:
    restock = next(c for c in chunks_of("src/inventory.py") if c.name == "restock")
    assert restock.text.startswith("src/inventory.py \u203a Inventory \u203a restock\n    def restock(self, sku: str")
    assert restock.scope == ("Inventory", "restock") and restock.language == "python"


def test_other_files_are_cut_by_lines() -> None:
    readme = chunks_of("README.md")
    assert shape(readme) == [("file", None, 1, 3, "README.md")] and readme[0].language == "text"
    data = "\n".join(f"line {i}: " + "lorem ipsum dolor sit amet " * 3 for i in range(80)).encode()
    chunks = chunker().chunk("docs/notes.md", data)
    assert len(chunks) > 1 and {c.chunk_type for c in chunks} == {"lines"}
    check_chunks("docs/notes.md", data, chunks, default_budget())
    assert [c.start_line for c in chunks[1:]] == [c.end_line + 1 for c in chunks[:-1]]  # whole lines, no gap


def test_a_line_over_the_budget_is_cut_at_token_boundaries() -> None:
    data = ("def f():\n    return '" + "word " * 400 + "'\n").encode()
    chunks = chunker().chunk("long.py", data)
    check_chunks("long.py", data, chunks, default_budget())
    assert len(chunks) > 3 and all(c.start_line == c.end_line == 2 for c in chunks[1:])
    assert "".join(c.code for c in chunks).count("word") == 400


def test_deep_trees_and_bad_bytes_do_not_break_it() -> None:
    deep = ("x = " + " + ".join(f"a{i}" for i in range(3000)) + "\n").encode()  # a binary tree 3,000 deep
    check_chunks("deep.py", deep, chunker().chunk("deep.py", deep), default_budget())
    latin1 = "# caf\xe9\ndef f():\n    return 'na\xefve'\n".encode("latin-1")
    chunks = chunker().chunk("old.py", latin1)
    assert chunks[0].name == "f" and "\ufffd" in chunks[0].code
    assert chunker().chunk("empty.py", b"") == [] and chunker().chunk("blank.rs", b"\n\n  \n") == []


def test_the_same_bytes_give_the_same_chunks() -> None:
    for path in SOURCES:
        data = (REPO / path).read_bytes()
        assert Chunker(TokenCounter()).chunk(path, data) == chunker().chunk(path, data) == chunker().chunk(path, data)


def _python_function(rng: random.Random, depth: int = 0) -> list[str]:
    lines: list[str] = []
    for _ in range(rng.randint(1, 8)):
        pick = rng.random()
        name = f"v{rng.randint(0, 99)}"
        if pick < 0.3 and depth < 2:
            lines.append(f"if {name} > {rng.randint(0, 9)}:")
            lines += ["    " + line for line in _python_function(rng, depth + 1)]
        elif pick < 0.45 and depth < 2:
            lines.append(f"def inner_{name}(a, b={rng.randint(0, 9)}):")
            lines += ["    " + line for line in _python_function(rng, depth + 1)]
        elif pick < 0.55:
            lines.append(f"{name} = '" + " ".join(f"w{rng.randint(0, 999)}" for _ in range(rng.randint(1, 150))) + "'")
        elif pick < 0.65:
            lines.append(f"# {name} " + "note " * rng.randint(1, 60))
        else:
            lines.append(f"{name} = call({', '.join(f'x{i}' for i in range(rng.randint(0, 40)))})")
    return lines


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), budget=st.sampled_from([16, 40, 126]), methods=st.integers(1, 4))
def test_generated_long_functions_stay_within_the_budget(seed: int, budget: int, methods: int) -> None:
    rng = random.Random(seed)
    lines = ["import os", "", "class Generated:"]
    for m in range(methods):
        lines += [f"    @decorator({m})", f"    def method_{m}(self, x):"]
        lines += ["        " + line for line in _python_function(rng)]
    data = ("\n".join(lines) + "\n").encode()
    chunks = chunker(budget).chunk("gen/generated.py", data)
    check_chunks("gen/generated.py", data, chunks, budget)
    assert chunker(budget).chunk("gen/generated.py", data) == chunks
