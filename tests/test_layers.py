"""The layering, enforced (issue 30): every import of the product goes down the layers, and no package or module
imports itself back through another.

From the bottom:
  0 schemas           wire types (events, commands, queries, the memory's state)
  1 mneme.errors      the errors every layer above raises (and the wire names them by code)
  2 mneme.domain      the pure decider and the one evolve
  3 mneme (the rest)  the library: event log, follower, query plane, embedding, DuckDB, vector index, ...
  4 services          the gateway, the projector, the auditor
  5 mneme.app         the application: settings, composition, process mains, the CLI, operator commands
A module may import its own layer or any below it, never one above. Imports inside functions count too (a
late import is still a dependency); `if TYPE_CHECKING:` imports count as well.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("schemas", "mneme", "services")
LAYERS = ("schemas", "mneme.errors", "mneme.domain", "mneme", "services", "mneme.app")


ENTRY_POINTS = {"mneme.__main__": "mneme.app"}  # `python -m mneme`: the application's, where Python looks for it


def layer_of(module: str) -> int:
    module = ENTRY_POINTS.get(module, module)
    best, depth = -1, -1
    for i, prefix in enumerate(LAYERS):
        if (module == prefix or module.startswith(prefix + ".")) and prefix.count(".") > depth:
            best, depth = i, prefix.count(".")
    return best


def modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The product modules `name` imports (a `from a.b import c` counts as a.b.c when that is a module)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[: len(up) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            subs = {f"{base}.{a.name}" for a in node.names} & known
            found.update(subs)
            if len(subs) < len(node.names):  # (a name defined in `base` itself, not only its submodules)
                found.add(base)
    return {m for m in found if m.split(".")[0] in PACKAGES}


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    g: dict[str, set[str]] = {}
    for name, path in mods.items():
        targets = set()
        for m in imports_of(name, path, known):
            while m not in known and "." in m:  # a name inside a module
                m = m.rpartition(".")[0]
            if m in known and m != name:
                targets.add(m)
        g[name] = targets
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def package_of(module: str) -> str:
    """The package a module belongs to, at the granularity of the layers (and their subpackages)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else module if (ROOT / Path(*parts)).is_dir() else parts[0]


def test_every_import_goes_down_the_layers() -> None:
    upward = []
    for name, targets in graph().items():
        for t in targets:
            if layer_of(t) > layer_of(name):
                upward.append(f"{name} -> {t} ({LAYERS[layer_of(name)]} imports {LAYERS[layer_of(t)]})")
    assert not upward, "imports up the layers:\n" + "\n".join(sorted(upward))


def test_no_module_imports_itself_back() -> None:
    found = cycles(graph())
    assert not found, "import cycles between modules:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_package_imports_itself_back() -> None:
    g = graph()
    pg: dict[str, set[str]] = defaultdict(set)
    for name, targets in g.items():
        for t in targets:
            a, b = package_of(name), package_of(t)
            if a != b and not (a.startswith(b + ".") or b.startswith(a + ".")):
                pg[a].add(b)
    found = cycles(dict(pg))
    assert not found, "import cycles between packages:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_checker_catches_an_upward_import_and_a_cycle() -> None:
    """The checks above could fail: an upward import and a two-module cycle, made up, are both reported."""
    assert layer_of("mneme.domain.decider") < layer_of("mneme.follow") < layer_of("services.gateway.gateway")
    assert layer_of("services.gateway.gateway") < layer_of("mneme.app.compose")
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
