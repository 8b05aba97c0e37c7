"""The library's import graph has no cycle (issue 31): each module's imports of library modules
(those under `if TYPE_CHECKING:` excluded: they never run), read with the standard library's
`ast`, form a directed graph over the modules of `wsecc` (with `passes/` as `wsecc.passes` and
`targets/` as `wsecc.targets`), and a cycle in it fails with the modules along it.

Two graphs: the module-level imports (what importing a module runs), which must have no cycle
at all; and every import, those inside functions too, so that an import moved into a function
cannot hide a cycle (imports inside functions are for optional or heavy dependencies, not for
cycles). Neither has a cycle.

And an import inside a function is of a heavy dependency (`HEAVY`: optional, or seconds to
load, so `wsecc --help`, a reloaded folder or a greedy compile need not load it) or of a library
module that imports one at module level; a module's PEP 562 `__getattr__` may import anything
(`import wsecc` stays light)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import Any

from conftest import ROOT

PACKAGES = {
    "wsecc": ROOT / "wsecc",
    "wsecc.passes": ROOT / "passes",
    "wsecc.targets": ROOT / "targets",
}
HEAVY = frozenset(
    {
        "torch",  # optional (export)
        "transformers",  # optional (export)
        "ray",  # optional (sweep --ray)
        "playwright",  # optional (viewer tests)
        "matplotlib",  # the PNGs only
        "numba",  # the functional simulator and the router's inner loops only
        "ortools",  # the CP-SAT placer only (and the pandas it imports)
        "onnxscript",  # constant folding only
        "onnxruntime",  # the numerics checks only
        "rich",  # the progress display only
        "onnx_ir",  # constant folding only (and the sympy it imports)
        "networkx",  # one query of KernelGraph only
        "scipy.special",  # erf and expit in the reference and the functional simulator only
        "pyarrow",  # the sweep's results table only
    }
)
"""Third-party packages (or subpackages, dotted) a module may import inside a function (seconds
to load, or optional)."""


def _is_heavy(module: str) -> bool:
    """Whether third-party `module` is, or is inside, a `HEAVY` package."""
    parts = module.split(".")
    return any(".".join(parts[:n]) in HEAVY for n in range(1, len(parts) + 1))


@cache
def modules() -> dict[str, Path]:
    """Module name -> file, for every module of the library."""
    found: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join((package, *parts))
            if package == "wsecc" and name.split(".")[1:2] in (["passes"], ["targets"]):
                continue
            found[name] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _every(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement a module holds, in functions too (not in `if TYPE_CHECKING:`)."""
    out: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.If) and _is_type_checking(node):
            out += _every(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                out += _every([child])
            elif isinstance(child, ast.ExceptHandler):
                out += _every(child.body)
    return out


def _in_functions(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The import statements inside functions (not in `if TYPE_CHECKING:`, not in a module-level
    `__getattr__`)."""
    top = {id(n) for n in _module_level(body)}
    lazy = [
        n
        for node in body
        if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"
        for n in _every(node.body)
    ]
    skip = top | {id(n) for n in lazy}
    return [n for n in _every(body) if id(n) not in skip]


def _module_level(body: list[ast.stmt]) -> list[ast.Import | ast.ImportFrom]:
    """The import statements a module runs when imported: its top level, and the branches of
    top-level `if`/`try` (not `if TYPE_CHECKING:`)."""
    out: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        elif isinstance(node, ast.If) and not _is_type_checking(node):
            out += _module_level(node.body) + _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            out += _module_level(node.body)
            for h in node.handlers:
                out += _module_level(h.body)
            out += _module_level(node.orelse) + _module_level(node.finalbody)
    return out


def _resolve(name: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement of module `name` names, absolute (`from . import x`
    resolved against `name`)."""
    mods = modules()
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        anchor = name.split(".")
        anchor = anchor if is_package else anchor[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    # `from package import module` imports the module too
    return [base] + [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]


def import_graph(statements: Any = _module_level) -> dict[str, set[str]]:
    """Module -> the library modules it imports (`statements`: which import statements count;
    by default those at module level)."""
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        for node in statements(ast.parse(path.read_text(), str(path)).body):
            for t in _resolve(name, is_package, node):
                while t and t not in mods:  # `from m import name` names module m
                    t = t.rpartition(".")[0]
                # importing a.b.c runs a/__init__ and a/b/__init__ first; a module's own
                # packages are always initialized before it, so they are no edges
                while t:
                    if t in mods and t != name and not name.startswith(t + "."):
                        graph[name].add(t)
                    t = t.rpartition(".")[0]
    return graph


def heavy_modules() -> set[str]:
    """The library modules whose module-level imports load a `HEAVY` package, directly or
    through other library modules."""
    mods = modules()
    direct = {
        name
        for name, path in mods.items()
        for node in _module_level(ast.parse(path.read_text(), str(path)).body)
        if any(_is_heavy(t) for t in _resolve(name, path.name == "__init__.py", node))
    }
    graph = import_graph()
    heavy = set(direct)
    while True:
        more = {m for m in mods if m not in heavy and graph[m] & heavy}
        if not more:
            return heavy
        heavy |= more


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_is_read() -> None:
    graph = import_graph()
    assert "wsecc.core.chain" in graph["wsecc.compiler"]
    assert "wsecc.core.stages" in graph["wsecc.core.chain"]
    assert "wsecc.passdef" in graph["wsecc.passes.canonicalize"]
    assert "wsecc.passes" in graph["wsecc.pm"]
    assert "wsecc.kernels.registry" in graph["wsecc.kernels.ir"]
    assert "wsecc.kernels" not in graph["wsecc.kernels.ir"]  # its own package: no edge


def test_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_cycle_hidden_in_functions() -> None:
    """The kernel library was a ten-module cycle held by imports inside functions."""
    graph = import_graph(_every)
    found = cycles(graph)
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_imports_inside_functions_are_read() -> None:
    """`_every` sees an import in a function body and skips `if TYPE_CHECKING:`."""
    body = ast.parse(
        "if TYPE_CHECKING:\n    import a\ndef f():\n    try:\n        import b\n"
        "    except ImportError:\n        from c import d\n"
    ).body
    names = [n.names[0].name if isinstance(n, ast.Import) else n.module for n in _every(body)]
    assert names == ["b", "c"]
    assert _module_level(body) == []


def _loads_heavy(module: str, mods: dict[str, Path], heavy: set[str]) -> bool:
    """Whether importing `module` loads a `HEAVY` package (`heavy`: such library modules)."""
    if not module.startswith("wsecc."):
        return _is_heavy(module)
    while module not in mods and "." in module:  # `from m import name` names module m
        module = module.rpartition(".")[0]
    return module in heavy


def test_imports_inside_functions_only_for_heavy_dependencies() -> None:
    """An import inside a function is of a `HEAVY` package or of a library module that loads
    one; any other belongs at the top of its module (where a cycle would show)."""
    mods, heavy = modules(), heavy_modules()
    assert {"wsecc.view.png", "wsecc.place.cpsat", "wsecc.sim.functional"} <= heavy
    assert "wsecc.compiler" not in heavy  # a compile with the greedy placer loads none
    bad = []
    for name, path in mods.items():
        for node in _in_functions(ast.parse(path.read_text(), str(path)).body):
            named = _resolve(name, path.name == "__init__.py", node)
            if isinstance(node, ast.Import):  # `import a, b`: each module
                light = [t for t in named if not _loads_heavy(t, mods, heavy)]
            else:  # `from m import x`: module m, or its submodule x
                light = named[:1] if not any(_loads_heavy(t, mods, heavy) for t in named) else []
            bad += [f"{path.relative_to(ROOT)}:{node.lineno} imports {t}" for t in light]
    assert not bad, "imports inside functions of light modules: " + "; ".join(bad)
