"""Counting text in the embedding model's own tokens, so that no chunk is cut short by the model.

The bundled MiniLM models share one BERT-uncased WordPiece tokenizer (`mneme/models/bert-uncased-tokenizer.json`)
and truncate their input at `ModelSpec.max_tokens` word pieces, [CLS] and [SEP] included. A chunk longer than
that loses its tail silently, so the chunker measures every chunk in these tokens: `default_budget(model)` is
the model's maximum less the two special tokens (126 for the default paraphrase-MiniLM-L3-v2).

`TokenCounter` counts without special tokens. Besides `count` and `count_many` it gives `spans(text)`, the
byte offset at which every token of a whole file starts: the chunker tokenizes each file once and counts any
byte range by bisection. For the BERT tokenizer that count is exact wherever a range is cut between words
(`additive_at`: whitespace or punctuation on one side); a chunk cut anywhere else is counted again, whole.
"""

from __future__ import annotations

import string
from bisect import bisect_left
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from mneme.embedding import DEFAULT_MODEL, MODELS, TOKENIZER

_SEPARATING = frozenset(string.whitespace.encode() + string.punctuation.encode())  # ASCII: BERT splits there
SPECIAL_TOKENS = 2  # [CLS] and [SEP], which the embedder adds to every input


def default_budget(model: str = DEFAULT_MODEL) -> int:
    """The most tokens (header included, special tokens not) that `model` embeds without truncating."""
    return MODELS[model].max_tokens - SPECIAL_TOKENS


class TokenCounter:
    """Counts text in the tokens of one tokenizer file (by default the bundled BERT-uncased one).

    Not shared between threads: build one per worker (loading takes ~50 ms).
    """

    def __init__(self, tokenizer_file: Path | str = TOKENIZER):
        self._tok = Tokenizer.from_file(str(tokenizer_file))
        self._tok.no_truncation()  # the file ships with the model's truncation and padding: count everything
        self._tok.no_padding()
        # BERT splits words at whitespace and at every punctuation character and normalizes per character, so
        # the tokens of a text cut where one of those is on either side add up exactly (see `additive_at`)
        self.additive = (
            type(self._tok.pre_tokenizer).__name__ == "BertPreTokenizer"
            and type(self._tok.normalizer).__name__ in ("BertNormalizer", "NoneType")
            and type(self._tok.model).__name__ == "WordPiece"
        )

    def additive_at(self, data: bytes, offset: int) -> bool:
        """Whether a cut of `data` at `offset` splits no word: counts of both sides then add up exactly."""
        if not self.additive:
            return False
        if offset <= 0 or offset >= len(data):
            return True
        return data[offset - 1] in _SEPARATING or data[offset] in _SEPARATING

    def count(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def count_many(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        return [len(e.ids) for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def spans(self, text: str, data: bytes) -> TokenSpans:
        """Token start offsets of `text` (which is `data` decoded as UTF-8), in bytes of `data`."""
        starts = [start for start, _end in self._tok.encode(text, add_special_tokens=False).offsets]
        if len(data) != len(text):  # not ASCII: map character offsets to byte offsets
            codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
            widths = 1 + (codes >= 0x80).astype(np.int64) + (codes >= 0x800) + (codes >= 0x10000)
            byte_at = np.concatenate(([0], np.cumsum(widths)))
            starts = byte_at[np.asarray(starts, dtype=np.int64)].tolist() if starts else []
        return TokenSpans(starts)


class TokenSpans:
    """The token start offsets (bytes) of one file: how many tokens a byte range holds, where to cut it."""

    def __init__(self, starts: list[int]):
        self.starts = starts

    def between(self, start: int, end: int) -> int:
        """Tokens that start in [start, end)."""
        return bisect_left(self.starts, end) - bisect_left(self.starts, start)

    def cut_after(self, start: int, end: int, tokens: int) -> int:
        """The byte offset that ends the first `tokens` tokens starting in [start, end) (at most `end`)."""
        i = bisect_left(self.starts, start) + tokens
        if i >= len(self.starts):
            return end
        return min(end, self.starts[i])
