"""What the BM25 sparse vectors are made of: text folded the same way for documents and queries (compatibility
forms, accents and case folded, CJK runs as bigrams and characters, emoji as words), then Qdrant's own BM25
tokenizer. The vector view encodes every memory version's text with it and the searcher every query
(services/projector/vector_view.py, search.py); what it produces is part of INDEX_VERSION (vector_index.py).
"""

from __future__ import annotations

import re
import unicodedata

# Combining marks that are accents on a letter, dropped when folding (Latin, Greek, Cyrillic: the combining
# diacritical blocks; Hebrew points; Arabic harakat). Marks that are letters' own parts (Indic vowel signs,
# the kana voicing marks, Thai) stay: dropping them would merge different words.
_ACCENTS = re.compile(
    "[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
    "\u0591-\u05bd\u05bf\u05c1\u05c2\u05c4\u05c5\u05c7"
    "\u0610-\u061a\u064b-\u065f\u0670\u06d6-\u06dc\u06df-\u06e4\u06e7\u06e8\u06ea-\u06ed]"
)
# Scripts written without spaces between words (Han, kana) and Hangul: indexed as overlapping character
# bigrams plus single characters (as Lucene's CJK analyzer does), so a word matches inside a sentence.
_CJK = re.compile(
    "[\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\U00020000-\U0002fa1f]+"
)


def _cjk_grams(m: re.Match[str]) -> str:
    run = m.group(0)
    return " " + " ".join([*(run[i : i + 2] for i in range(len(run) - 1)), *run]) + " "


def _symbol(ch: str) -> str:
    """An emoji or other pictographic symbol as a word of its own ("🚀" -> "u1f680"): the tokenizer drops them."""
    return f" u{ord(ch):x} " if unicodedata.category(ch) == "So" else ch


def fold(text: str) -> str:
    """What BM25 tokenises, for documents and queries alike: compatibility forms and accents folded
    (NFKD, accents dropped, NFC: "Zürich" -> "zurich", "ﬁle" -> "file", "Ｆｏｏ" -> "foo"), case folded
    ("Straße" -> "strasse"), CJK runs as bigrams and characters, emoji as words. ASCII text is returned
    as it is (the tokenizer lower-cases it)."""  # noqa: RUF002 - fullwidth on purpose
    if text.isascii():
        return text
    s = unicodedata.normalize("NFC", _ACCENTS.sub("", unicodedata.normalize("NFKD", text))).casefold()
    s = _CJK.sub(_cjk_grams, s)
    return "".join(ch if ch.isascii() else _symbol(ch) for ch in s)


class BM25:
    """Qdrant's BM25 tokenizer (English stemming and stop words, ASCII folding) over `fold`ed text; IDF is
    applied by Qdrant at query time. Changing what this produces changes the indexed tokens: bump
    INDEX_VERSION (vector_index.py) so that indexes written before are rebuilt from the log."""

    def __init__(self) -> None:
        import qdrant_edge as q

        # Qdrant's defaults (k 1.2, b 0.75, avg_len 256: almost no length normalisation for short
        # memories) measured best on LoCoMo; the corpus's true average length lost 1-3 points.
        # ascii_folding also maps the letters `fold` leaves alone (ø, æ, ł, đ) to ASCII.
        self._m = q.Bm25(q.Bm25Config(ascii_folding=True))

    def document(self, text: str) -> tuple[list[int], list[float]]:
        v = self._m.embed_document(fold(text))
        return list(v.indices), list(v.values)

    def query(self, text: str) -> tuple[list[int], list[float]]:
        v = self._m.embed_query(fold(text))
        return list(v.indices), list(v.values)
