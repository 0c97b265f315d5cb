"""The five languages the code index parses, and what their syntax trees mean to the chunker.

`language_for(path)` names a file's language by its extension: python, javascript, typescript (.tsx too),
go, rust; anything else is "text" (chunked by lines). `Grammars` builds one tree-sitter `Parser` per language
from the grammar wheels (tree-sitter-python, -javascript, -typescript, -go, -rust: compiled in, nothing is
downloaded), lazily, for one thread.

`definition(node, enclosing_kind)` says whether a node defines something a reader would name, and returns
its chunk type and identifier: function, method, class, struct, enum, interface, trait, impl, type, module,
macro. Wrappers (Python decorators, `export`, TypeScript `declare`, `const f = () => …`) answer for what
they wrap. `is_prologue(node)` marks what opens a file: imports, package clauses, a module docstring or
"use strict", inner attributes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import tree_sitter as ts
import tree_sitter_go
import tree_sitter_javascript
import tree_sitter_python
import tree_sitter_rust
import tree_sitter_typescript

EXTENSIONS = {
    ".py": "python",
    ".pyi": "python",
    ".pyw": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "typescript",
    ".go": "go",
    ".rs": "rust",
}
LANGUAGES = ("python", "javascript", "typescript", "go", "rust")
TEXT = "text"

_GRAMMARS: dict[str, Callable[[], Any]] = {
    "python": tree_sitter_python.language,
    "javascript": tree_sitter_javascript.language,
    "typescript": tree_sitter_typescript.language_typescript,
    "tsx": tree_sitter_typescript.language_tsx,
    "go": tree_sitter_go.language,
    "rust": tree_sitter_rust.language,
}


def language_for(path: str) -> str:
    """The language of a file by its extension; "text" for anything the index does not parse."""
    dot = path.rfind(".")
    return EXTENSIONS.get(path[dot:].lower(), TEXT) if dot > path.rfind("/") else TEXT


class Grammars:
    """One parser per grammar, built on first use. Parsers are not thread-safe: one `Grammars` per thread."""

    def __init__(self) -> None:
        self._parsers: dict[str, ts.Parser] = {}

    def parser(self, language: str, path: str = "") -> ts.Parser | None:
        grammar = "tsx" if language == "typescript" and path.lower().endswith(".tsx") else language
        if grammar not in _GRAMMARS:
            return None
        parser = self._parsers.get(grammar)
        if parser is None:
            parser = self._parsers[grammar] = ts.Parser(ts.Language(_GRAMMARS[grammar]()))
        return parser


class Definition(NamedTuple):
    kind: str  # the chunk type: function, method, class, struct, enum, interface, trait, impl, type, module, macro
    name: str | None


_CONTAINERS = {"class", "interface", "impl", "trait", "struct"}  # a function directly inside one is a method
_FUNCTIONS = {
    "function_definition",  # python
    "function_declaration",  # javascript, typescript, go
    "generator_function_declaration",
    "function_signature",
    "function_item",  # rust
    "function_signature_item",
}
_METHODS = {"method_definition", "method_signature", "abstract_method_signature", "method_declaration"}
_KINDS = {
    "class_definition": "class",
    "class_declaration": "class",
    "abstract_class_declaration": "class",
    "interface_declaration": "interface",
    "type_alias_declaration": "type",
    "enum_declaration": "enum",
    "internal_module": "module",
    "module": "module",
    "struct_item": "struct",
    "union_item": "struct",
    "enum_item": "enum",
    "trait_item": "trait",
    "type_item": "type",
    "macro_definition": "macro",
}
_WRAPPERS = {"decorated_definition": "definition", "export_statement": "declaration"}
_FUNCTION_VALUES = {"arrow_function", "function_expression", "function", "generator_function"}
_GO_TYPES = {"struct_type": "struct", "interface_type": "interface"}


def _text(node: ts.Node | None) -> str | None:
    return node.text.decode("utf-8", "replace") if node is not None and node.text is not None else None


def definition(node: ts.Node, enclosing_kind: str | None = None) -> Definition | None:
    """What `node` defines, if it is a definition (see the module docstring); None otherwise."""
    kind = node.type
    if kind in _WRAPPERS:
        inner = node.child_by_field_name(_WRAPPERS[kind])
        return definition(inner, enclosing_kind) if inner is not None else None
    if kind in ("expression_statement", "ambient_declaration"):  # `namespace N {}`, `declare function f()`
        named = node.named_children
        return definition(named[0], enclosing_kind) if len(named) == 1 else None
    if kind in _FUNCTIONS:
        method = enclosing_kind in _CONTAINERS
        return Definition("method" if method else "function", _text(node.child_by_field_name("name")))
    if kind in _METHODS:
        return Definition("method", _text(node.child_by_field_name("name")))
    if kind in _KINDS:
        return Definition(_KINDS[kind], _text(node.child_by_field_name("name")))
    if kind == "mod_item":
        return (
            Definition("module", _text(node.child_by_field_name("name"))) if node.child_by_field_name("body") else None
        )
    if kind == "impl_item":
        return Definition("impl", _text(node.child_by_field_name("type")))
    if kind == "type_declaration":  # go: `type S struct {…}`
        specs = [c for c in node.named_children if c.type == "type_spec"]
        if len(specs) != 1:
            return None
        value = specs[0].child_by_field_name("type")
        kind_name = _GO_TYPES.get(value.type, "type") if value is not None else "type"
        return Definition(kind_name, _text(specs[0].child_by_field_name("name")))
    if kind in ("lexical_declaration", "variable_declaration"):  # `const f = () => {…}`
        declarators = [c for c in node.named_children if c.type == "variable_declarator"]
        if len(declarators) == 1:
            value = declarators[0].child_by_field_name("value")
            if value is not None and value.type in _FUNCTION_VALUES:
                return Definition("function", _text(declarators[0].child_by_field_name("name")))
    return None


def go_receiver(node: ts.Node) -> str | None:
    """The receiver type of a Go method (`func (s *Server) Run()` → "Server"): its scope in chunk headers."""
    receiver = node.child_by_field_name("receiver")
    if node.type != "method_declaration" or receiver is None:
        return None
    found: str | None = None
    stack = [receiver]
    while stack:
        current = stack.pop()
        if current.type == "type_identifier":
            found = _text(current)
        stack.extend(reversed(current.children))
    return found


_PROLOGUE = {
    "import_statement",
    "import_from_statement",
    "future_import_statement",
    "package_clause",
    "import_declaration",
    "use_declaration",
    "extern_crate_declaration",
    "inner_attribute_item",
}


# nodes that only wrap a definition: the definition inside opens the scope, not the wrapper
WRAPPERS = {"decorated_definition", "export_statement", "expression_statement", "ambient_declaration"}


def is_comment(node: ts.Node) -> bool:
    return "comment" in node.type


def is_prologue(node: ts.Node) -> bool:
    """Imports and what else opens a file (a docstring or "use strict", a package clause, `mod m;`)."""
    kind = node.type
    if kind in _PROLOGUE or is_comment(node):
        return True
    if kind == "mod_item":
        return node.child_by_field_name("body") is None
    if kind == "expression_statement":
        named = node.named_children
        return len(named) == 1 and named[0].type == "string"
    return False


def is_attached(node: ts.Node) -> bool:
    """Comments, decorators, attributes and bare tokens (`export`, `pub`, `{`) belong with what follows them."""
    return node.child_count == 0 or is_comment(node) or node.type in ("decorator", "attribute_item")
