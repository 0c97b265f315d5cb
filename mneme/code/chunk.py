"""Chunking source files by syntax for the code index (cAST-style), within the embedding model's tokens.

    chunker = Chunker()                       # the bundled tokenizer, default_budget() tokens per chunk
    chunks = chunker.chunk("src/app.py", data)  # list[Chunk], in file order

A `Chunker` parses a file with its language's tree-sitter grammar and cuts it into windows of sibling nodes
(see `mneme.code.windows` for the rules). Each `Chunk` carries the text to embed, `header + "\\n" + code`,
where the header is `path \u203a Class \u203a method` (the enclosing named scopes, and the chunk's own definition when
it holds exactly one), and no chunk's text is over `budget` tokens of the embedding model's own tokenizer:
a chunk cut inside a word (which can count differently from the whole file) is counted once more, whole,
and any chunk over the budget is halved until it fits. Files in other languages, and files the grammar cannot parse
(the root is an error), are cut by lines: one chunk of type "file" when the whole file fits, else "lines".

Chunk types: function, method, class, struct, enum, interface, trait, impl, type, module (a namespace or
`mod m {}`; at the top level also a window of several top-level statements), macro, imports (only imports,
package clauses, a module docstring), block (several statements or definitions inside a definition), lines
(cut by lines), file. `name` is the identifier of the one definition a chunk holds, or of the definition
whose head opens it when that definition is split; otherwise None. `start_line`/`end_line` are 1-based and
inclusive, of the code (the header is not in the file). The same bytes, budget and tokenizer always give the
same chunks: a replay may re-chunk a file and find the same chunks. Bytes that are not UTF-8 are replaced
(U+FFFD) before parsing. A `Chunker` holds parsers and is meant for one thread.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from typing import NamedTuple

from mneme.code.languages import (
    TEXT,
    Grammars,
    definition,
    is_attached,
    is_prologue,
    language_for,
)
from mneme.code.tokens import TokenCounter, TokenSpans, default_budget
from mneme.code.windows import Scope, Window, Windower

# Raise when a change to the rules (or a grammar pin) can change the chunks of the same bytes: an indexer that
# re-chunks files on replay records it beside the budget and model, and knows chunks from another version differ.
CHUNKER_VERSION = 1
SEPARATOR = " \u203a "
MIN_BUDGET = 16  # below this a header leaves no room for code
_BLANK = b" \t\r\n\f\v"
_WORD = re.compile(r"\w")


class _Draft(NamedTuple):
    start: int
    end: int
    header: str
    names: tuple[str, ...]
    kind: str
    name: str | None


@dataclass(frozen=True, slots=True)
class Chunk:
    path: str  # relative POSIX path within the project
    language: str  # python, javascript, typescript, go, rust or text
    start_line: int  # 1-based, inclusive, of the code in the file
    end_line: int
    chunk_type: str
    name: str | None
    scope: tuple[str, ...]  # the names in the header after the path
    header: str  # "path \u203a Class \u203a method"
    code: str  # the file's text from start_line to end_line (a partial first/last line when cut inside one)
    tokens: int  # tokens of `text` in the counter's tokenizer (no special tokens), at most the budget

    @property
    def text(self) -> str:
        """What to embed: the header line, then the code."""
        return f"{self.header}\n{self.code}"


class Chunker:
    def __init__(self, counter: TokenCounter | None = None, budget: int | None = None):
        self.counter = counter if counter is not None else TokenCounter()
        self.budget = budget if budget is not None else default_budget()
        if self.budget < MIN_BUDGET:
            raise ValueError(f"a chunk budget of {self.budget} tokens is too small (at least {MIN_BUDGET})")
        self.grammars = Grammars()

    def chunk(self, path: str, data: bytes, language: str | None = None) -> list[Chunk]:
        """The chunks of one file (`path` relative, POSIX), in order; [] for a blank file."""
        language = language or language_for(path)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("utf-8", "replace")
            data = text.encode("utf-8")
        return _File(self, path, language, data, text).chunks()


class _File:
    def __init__(self, chunker: Chunker, path: str, language: str, data: bytes, text: str):
        self.chunker = chunker
        self.counter = chunker.counter
        self.budget = chunker.budget
        self.path = path
        self.language = language
        self.data = data
        self.text = text
        self.line_starts = [0, *(m.end() for m in re.finditer(b"\n", data))]
        if self.line_starts[-1] != len(data):
            self.line_starts.append(len(data))
        self.spans: TokenSpans = self.counter.spans(text, data)
        self._headers: dict[tuple[str, ...], tuple[str, int]] = {}
        self._names: dict[str, int] = {}
        self.windower = Windower(self.budget, self.spans, self.line_starts, self._scope_cost, self._name_cost)

    # headers -------------------------------------------------------------------------------------------
    def header(self, names: tuple[str, ...]) -> tuple[str, int]:
        """The header for these scope names and its tokens, shortened to at most half the budget."""
        cached = self._headers.get(names)
        if cached is not None:
            return cached
        limit = self.budget // 2
        candidates = [
            SEPARATOR.join((self.path, *names)),
            SEPARATOR.join((self.path.rsplit("/", 1)[-1], *names)),
            SEPARATOR.join((self.path.rsplit("/", 1)[-1], *names[-1:])),
        ]
        result: tuple[str, int] | None = None
        for header in candidates:
            tokens = self.counter.count(header)
            if tokens <= limit:
                result = (header, tokens)
                break
        if result is None:  # a name longer than the budget: keep what fits
            header = candidates[-1]
            while header and self.counter.count(header) > limit:
                header = header[: len(header) * 3 // 4]
            result = (header, self.counter.count(header))
        self._headers[names] = result
        return result

    def _scope_cost(self, scope: Scope) -> int:
        return self.header(tuple(n for n, _ in scope))[1]

    def _name_cost(self, name: str) -> int:
        cost = self._names.get(name)
        if cost is None:
            cost = self._names[name] = self.counter.count(SEPARATOR + name)
        return cost

    # chunks --------------------------------------------------------------------------------------------
    def chunks(self) -> list[Chunk]:
        windows = self._windows()
        whole = self.language == TEXT or windows is None
        if windows is None:
            windows = self.windower.lines(0, len(self.data), (), top=True)
        drafts = [d for d in (self._draft(w) for w in windows) if d is not None]
        if whole and len(drafts) == 1:
            drafts[0] = drafts[0]._replace(kind="file")
        return self._fit(drafts)

    def _windows(self) -> list[Window] | None:
        parser = self.chunker.grammars.parser(self.language, self.path)
        if parser is None:
            return None
        root = parser.parse(self.data).root_node
        if root.type == "ERROR":
            return None
        return self.windower.file(root)

    def _row(self, offset: int) -> int:
        return bisect_right(self.line_starts, offset) - 1

    def _draft(self, w: Window) -> _Draft | None:
        """(start, end, header, names, type, name) for a window: trimmed, named; None when it holds no word."""
        data, start, end = self.data, w.start, w.end
        while end > start and data[end - 1] in _BLANK:
            end -= 1
        while start < end and data[start] in _BLANK:
            start += 1
        if start == end or not _WORD.search(data[start:end].decode("utf-8", "replace")):
            return None  # blank, or only punctuation such as a closing brace
        line_start = self.line_starts[self._row(start)]
        if not data[line_start:start].strip(_BLANK):
            start = line_start  # keep the first line's indentation
        names = tuple(n for n, _ in w.scope)
        kind, name = self._classify(w)
        if name is not None and not w.tag and kind not in ("lines", "block", "module", "imports"):
            names = (*names, name)
        return _Draft(start, end, self.header(names)[0], names, kind, name)

    def _classify(self, w: Window) -> tuple[str, str | None]:
        if w.tag is not None:
            return w.tag.kind, w.tag.name
        if w.lines:
            return "lines", None
        enclosing = w.scope[-1][1] if w.scope else None
        main = [n for n in w.nodes if not is_attached(n)]
        core = [n for n in main if not is_prologue(n)] if w.top else main
        if len(core) == 1:
            d = definition(core[0], enclosing)
            if d is not None:
                return d.kind, d.name
        if main and not core:
            return "imports", None
        return ("module" if w.top else "block"), None

    def _fit(self, drafts: list[_Draft]) -> list[Chunk]:
        """Count every chunk exactly; halve any over the budget (by lines, else by characters) until it fits."""
        counter, data = self.counter, self.data
        known: list[int | None] = []
        for d in drafts:  # a chunk cut between words is counted exactly by the file's token offsets already
            exact = counter.additive_at(data, d.start) and counter.additive_at(data, d.end)
            known.append(self.header(d.names)[1] + self.spans.between(d.start, d.end) if exact else None)
        recount = [i for i, estimate in enumerate(known) if estimate is None or estimate > self.budget]
        texts = [f"{drafts[i].header}\n{data[drafts[i].start : drafts[i].end].decode('utf-8')}" for i in recount]
        for i, counted in zip(recount, counter.count_many(texts), strict=True):
            known[i] = counted
        out: list[Chunk] = []
        for draft, tokens in zip(drafts, known, strict=True):
            out.extend(self._fitted(draft, tokens or 0))
        return out

    def _fitted(self, draft: _Draft, tokens: int) -> list[Chunk]:
        start, end, header, names, kind, name = draft
        code = self.data[start:end].decode("utf-8")
        if tokens <= self.budget or end - start <= 1:
            first, last = self._row(start) + 1, self._row(end - 1) + 1
            return [Chunk(self.path, self.language, first, last, kind, name, names, header, code, tokens)]
        mid = self._middle(start, end)
        halves = [(start, mid), (mid, end)]
        out: list[Chunk] = []
        for s, e in halves:
            piece = self.data[s:e]
            trimmed_s = s + len(piece) - len(piece.lstrip(_BLANK))
            trimmed_e = e - (len(piece) - len(piece.rstrip(_BLANK)))
            if trimmed_s >= trimmed_e:
                continue
            sub = _Draft(trimmed_s, trimmed_e, header, names, "lines", None)
            text = f"{header}\n{self.data[trimmed_s:trimmed_e].decode('utf-8')}"
            out.extend(self._fitted(sub, self.counter.count(text)))
        return out

    def _middle(self, start: int, end: int) -> int:
        """A cut near the middle of [start, end): a line boundary if there is one, else a character boundary."""
        first, last = self._row(start), self._row(end - 1)
        if last > first:
            return self.line_starts[(first + last + 1) // 2]
        mid = (start + end) // 2
        while mid > start and (self.data[mid] & 0xC0) == 0x80:  # not inside a UTF-8 character
            mid -= 1
        return mid if mid > start else end - 1
