"""The docs a newcomer reads stay true to the code and to each other.

- The tools and settings references are generated from the code (`python -m mneme.app.reference`); a committed
  file that differs from what the code says now fails here, naming the command that rewrites it.
- Every relative link in README.md, CONTRIBUTING.md and docs/ names a file that exists (and, with a `#`,
  a heading of it), inside the repository.
- Every page of docs/ is reachable from docs/index.md; no doc is over 40 KB, the README not over 15 KB.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mneme.app import reference

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~)")


def pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted(DOCS.rglob("*.md"))]


def prose(text: str) -> str:
    """The text outside fenced code blocks and inline code (a link there is an example, not a link)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in page.read_text().splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(page: Path) -> list[str]:
    return [t for t in LINK.findall(prose(page.read_text())) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def test_reference_files_are_current() -> None:
    old = reference.stale(ROOT)
    assert not old, f"stale or missing: {', '.join(map(str, old))}; run `python -m mneme.app.reference`"


def test_reference_covers_every_profile_and_setting() -> None:
    from mneme.app import settings
    from services.gateway import profiles

    docs = reference.documents()
    for name in profiles.names():
        assert reference.REFERENCE / "tools" / f"{name}.md" in docs
    text = docs[reference.REFERENCE / "settings.md"]
    for cls in (settings.CoreSettings, settings.GatewaySettings, settings.ProjectorSettings, settings.AuditorSettings):
        prefix = cls.model_config.get("env_prefix", "")
        for field in cls.model_fields:
            assert f"`{(prefix + field).upper()}`" in text, field


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if ROOT not in where.parents and where != ROOT:
            broken.append(f"{target} (outside the repository)")
        elif not where.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and where.suffix == ".md" and anchor.lower() not in anchors(where):
            broken.append(f"{target} (no such heading)")
    assert not broken, f"{page.relative_to(ROOT)}: {broken}"


def test_every_docs_page_is_reachable_from_the_index() -> None:
    index = DOCS / "index.md"
    reached, todo = {index}, [index]
    while todo:
        page = todo.pop()
        for target in links(page):
            path = target.partition("#")[0]
            if not path:
                continue
            found = (page.parent / path).resolve()
            if found.suffix == ".md" and found.is_file() and DOCS in found.parents and found not in reached:
                reached.add(found)
                todo.append(found)
    unreached = sorted(str(p.relative_to(ROOT)) for p in DOCS.rglob("*.md") if p.resolve() not in reached)
    assert not unreached, f"not reachable from docs/index.md: {unreached}"


def test_no_doc_is_over_40_kb_and_the_readme_is_at_most_15_kb() -> None:
    big = [f"{p.relative_to(ROOT)}: {p.stat().st_size:,} bytes" for p in pages() if p.stat().st_size > 40_000]
    assert not big, big
    assert (ROOT / "README.md").stat().st_size <= 15_000
