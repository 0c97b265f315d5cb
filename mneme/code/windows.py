"""cAST-style windows over a syntax tree: siblings merged greedily up to a token budget, big nodes split.

The unit of merging is a node together with what is attached to it: the comments, decorators, attributes
and bare tokens (`export`, `pub`, `{`) just before it. Walking a sequence of siblings, a unit joins the current
window while the window stays within the budget (the chunk header counted); otherwise the window is closed
and the unit starts the next one. A unit too big for any window is split: its node's children become a new
sequence, with the node's "body" (a block, class body, declaration list…) opened in place so that the head
(`class Foo(Base):`, `impl S {`, `func (s *S) Run() {`) merges with the first statements of the body. What
is waiting in the current window is carried into the split when it is only attached nodes or head tokens, so
a decorator or a signature is never left alone. A node without children is cut by lines, and a line over the
budget at token boundaries. Windows never overlap and keep document order, so top-level imports, which open
a file, are always in the first window.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

import tree_sitter as ts

from mneme.code.languages import WRAPPERS, Definition, definition, go_receiver, is_attached, is_comment
from mneme.code.tokens import TokenSpans

MAX_DEPTH = 150  # nested splits before the rest of a node is cut by lines: Python's stack has ~1,000 frames
_PUNCTUATION = re.compile(rb"[^\w\s]+")
Scope = tuple[tuple[str, str], ...]  # (name, kind) of each enclosing definition, outermost first


@dataclass(slots=True)
class Window:
    start: int  # byte offsets of the window's code in the file
    end: int
    scope: Scope
    nodes: list[ts.Node]  # the window's sibling nodes (what names the chunk); empty for pieces cut by lines
    top: bool  # a window of the file's top level
    lines: bool = False  # cut by lines or tokens, not at node boundaries
    tag: Definition | None = None  # the window holds the head of this split definition


def _trailing(node: ts.Node) -> bool:
    if is_comment(node):
        return True
    return not node.is_named and node.child_count == 0 and _PUNCTUATION.fullmatch(node.text or b"") is not None


class Windower:
    def __init__(
        self,
        budget: int,
        spans: TokenSpans,
        line_starts: list[int],
        header_cost: Callable[[Scope], int],
        name_cost: Callable[[str], int],
    ):
        self.budget = budget
        self.spans = spans
        self.line_starts = line_starts
        self.size = line_starts[-1] if line_starts else 0  # the last entry is the file's length
        self.header_cost = header_cost
        self.name_cost = name_cost
        self._depth = 0

    def file(self, root: ts.Node) -> list[Window]:
        return self._sequence([(c, False) for c in root.children], (), [], top=True)

    def lines(self, start: int, end: int, scope: Scope, top: bool) -> list[Window]:
        """Cut [start, end) into windows of whole lines; a line over the budget at token boundaries."""
        avail = max(1, self.budget - self.header_cost(scope))
        out: list[Window] = []
        starts = self.line_starts
        pos = start
        while pos < end:
            row = bisect_right(starts, pos) - 1
            stop = pos
            nxt = row + 1
            while nxt < len(starts):
                boundary = min(starts[nxt], end)
                if self.spans.between(pos, boundary) > avail:
                    break
                stop = boundary
                if boundary >= end:
                    break
                nxt += 1
            if stop == pos:  # this line alone is over the budget
                line_end = min(end, starts[row + 1] if row + 1 < len(starts) else end)
                stop = self.spans.cut_after(pos, line_end, avail)
                if stop <= pos:
                    stop = line_end
            out.append(Window(pos, stop, scope, [], top, lines=True))
            pos = stop
        return out

    def _fits(self, start: int, end: int, scope: Scope, extra: int, share: float = 1.0) -> bool:
        return self.header_cost(scope) + extra + self.spans.between(start, end) <= self.budget * share

    def _extra(self, nodes: list[ts.Node], scope: Scope) -> int:
        """Room for the definition's name, which a one-definition chunk adds to its header."""
        d = definition(nodes[-1], scope[-1][1] if scope else None)
        return self.name_cost(d.name) if d is not None and d.name else 0

    @staticmethod
    def _units(items: list[tuple[ts.Node, bool]]) -> list[tuple[list[ts.Node], bool]]:
        """Group attached nodes with the node they precede; a unit is loose when it may be carried."""
        units: list[tuple[list[ts.Node], bool]] = []
        pending: list[ts.Node] = []
        for node, head in items:
            if not pending and units and node.start_point[0] == units[-1][0][-1].end_point[0] and _trailing(node):
                units[-1][0].append(node)  # a comment or `:`, `{`, `;` at the end of a line belongs to that line
                continue
            if is_attached(node):
                pending.append(node)
                continue
            units.append(([*pending, node], head))
            pending = []
        if pending:
            units.append((pending, True))
        return units

    def _sequence(
        self, items: list[tuple[ts.Node, bool]], scope: Scope, carry: list[ts.Node], top: bool
    ) -> list[Window]:
        out: list[Window] = []
        cur = list(carry)
        loose = True  # everything in cur is attached or head, so it may be carried into a split
        cur_extra = 0
        for nodes, unit_loose in self._units(items):
            extra = self._extra(nodes, scope)
            first = cur[0] if cur else nodes[0]
            if self._fits(first.start_byte, nodes[-1].end_byte, scope, max(cur_extra, extra)):
                cur.extend(nodes)
                loose = loose and unit_loose
                cur_extra = max(cur_extra, extra)
                continue
            alone = self._fits(nodes[0].start_byte, nodes[-1].end_byte, scope, extra)
            # a unit that fits alone is split only to take a short head or a comment with it
            if alone and not (
                cur
                and loose
                and nodes[-1].child_count
                and self._fits(cur[0].start_byte, cur[-1].end_byte, scope, 0, share=0.25)
            ):
                self._close(out, cur, scope, top)
                cur, loose, cur_extra = list(nodes), unit_loose, extra
                continue
            # the unit is over the budget, or cannot take what must stay with it: split its node, carrying that
            prefix = nodes[:-1]
            if cur and loose:
                prefix = cur + prefix
            else:
                self._close(out, cur, scope, top)
            cur, loose, cur_extra = [], True, 0
            if prefix and not self._fits(prefix[0].start_byte, prefix[-1].end_byte, scope, 0, share=0.5):
                out.extend(self._plain(prefix, scope, top))  # too much to carry: windows of its own
                prefix = []
            out.extend(self._split(nodes[-1], scope, prefix, top))
        self._close(out, cur, scope, top)
        return out

    def _plain(self, nodes: list[ts.Node], scope: Scope, top: bool) -> list[Window]:
        """Greedy windows of `nodes` one by one, nothing carried (a long run of comments, a huge signature)."""
        out: list[Window] = []
        cur: list[ts.Node] = []
        for node in nodes:
            if self._fits((cur[0] if cur else node).start_byte, node.end_byte, scope, 0):
                cur.append(node)
                continue
            self._close(out, cur, scope, top)
            cur = []
            if self._fits(node.start_byte, node.end_byte, scope, 0):
                cur = [node]
            else:
                out.extend(self._split(node, scope, [], top))
        self._close(out, cur, scope, top)
        return out

    @staticmethod
    def _close(out: list[Window], cur: list[ts.Node], scope: Scope, top: bool) -> None:
        if cur:
            out.append(Window(cur[0].start_byte, cur[-1].end_byte, scope, cur, top))

    def _split(self, node: ts.Node, scope: Scope, prefix: list[ts.Node], top: bool) -> list[Window]:
        children = node.children
        if not children or self._depth >= MAX_DEPTH:  # a leaf, or a tree too deep to follow (`a + b + … + z`)
            return self.lines(prefix[0].start_byte if prefix else node.start_byte, node.end_byte, scope, top)
        d = definition(node, scope[-1][1] if scope else None)
        inner = scope
        if d is not None and d.name and node.type not in WRAPPERS:
            receiver = go_receiver(node)
            if receiver:
                inner = (*inner, (receiver, "type"))
            inner = (*inner, (d.name, d.kind))
        body = node.child_by_field_name("body")
        items: list[tuple[ts.Node, bool]] = []
        before_body = True
        for child in children:
            if body is not None and child == body and child.child_count:
                items.extend((c, False) for c in child.children)
                before_body = False
            else:
                items.append((child, before_body))
        self._depth += 1
        try:
            windows = self._sequence(items, inner, prefix, top=False)
        finally:
            self._depth -= 1
        if d is not None and windows:
            windows[0].tag = d  # the outermost definition whose head opens the window names it
        return windows
