"""The knowledge graph's domain rules: how names compare, and which entities a text mentions.

A name is compared by its key: Unicode NFKC, case-folded, split into words (letters and digits, with
inner `.`, `-`, `_`, `'`, `+`, `#` kept: "Node.js", "C++", "gpt-4o"), joined by one space. "Alice  Smith",
"alice smith" and "ALICE SMITH" are one entity; "Alice-Smith" is another. A text mentions an entity when
the entity's key appears in the text's words as a whole run of words (no language model: the same text
and the same names always give the same mentions, so a replay gives the same graph).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping

_WORD = re.compile(r"[^\W_]+(?:[.\-_'+#]+[^\W_]+)*[+#]*")
MAX_NAME_WORDS = 8  # a longer name is still an entity, but is not looked for in texts
MAX_NAME_CHARS = 200
MAX_OBSERVATION_CHARS = 4000


def words(text: str) -> list[str]:
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def name_key(name: str) -> str:
    """The key two names are compared by (empty for a name without a letter or digit)."""
    return " ".join(words(name))


def mentions(text: str, known: Mapping[str, str]) -> list[str]:
    """The ids of the entities (`known`: name key → id) whose names appear in `text`, in order of first
    appearance, each once. Longest match first at each position, so "New York Times" is not also "New York"."""
    toks = words(text)
    found: dict[str, None] = {}
    i = 0
    while i < len(toks):
        for n in range(min(MAX_NAME_WORDS, len(toks) - i), 0, -1):
            eid = known.get(" ".join(toks[i : i + n]))
            if eid is not None:
                found.setdefault(eid, None)
                i += n
                break
        else:
            i += 1
    return list(found)


def distinct(items: Iterable[str]) -> list[str]:
    """Items in order, each once."""
    return list(dict.fromkeys(items))


MAX_ENTITIES_PER_MEMORY = 50


def entity_names(values: tuple[str, ...] | list[str], field: str = "entities") -> tuple[str, ...]:
    """Entity names a memory is explicitly about: each with a letter or digit, at most MAX_NAME_CHARS, each once
    (by name key), at most MAX_ENTITIES_PER_MEMORY."""
    from mneme.errors import InvalidInput

    if len(values) > MAX_ENTITIES_PER_MEMORY:
        raise InvalidInput(field, f"at most {MAX_ENTITIES_PER_MEMORY} entities")
    out: dict[str, str] = {}
    for i, raw in enumerate(values):
        name = raw.strip() if isinstance(raw, str) else ""
        if not name_key(name):
            raise InvalidInput(f"{field}[{i}]", "a name needs at least one letter or digit")
        if len(name) > MAX_NAME_CHARS:
            raise InvalidInput(f"{field}[{i}]", f"at most {MAX_NAME_CHARS} characters")
        out.setdefault(name_key(name), name)
    return tuple(out.values())
