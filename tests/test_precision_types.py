"""Issue 31 item 6: a precision is a `wsecc.vocab.Precision` in every signature. Read with the
standard library's `ast`, no parameter, return or dataclass field of the library whose name
says it holds a precision (`precision`, `prec`, `precision_name`) is annotated `str`: it is
`Precision`, or `wsecc.check.numerics.Criterion` where a structure or fused check is judged too."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

NAMES = frozenset({"precision", "prec", "precision_name"})
STR = frozenset({"str", "str | None", "Optional[str]"})


def _str_annotated(path: Path, root: Path) -> list[str]:
    """`file:line name: str` of each precision-named parameter, field or function return
    annotated `str` (a parser such as `check_precision(precision: Precision | str)` says so)."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        pairs: list[tuple[str, ast.expr | None, int]] = []
        if isinstance(node, ast.arg):
            pairs.append((node.arg, node.annotation, node.lineno))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            pairs.append((node.target.id, node.annotation, node.lineno))
        elif isinstance(node, ast.FunctionDef) and node.name in NAMES:
            pairs.append((node.name, node.returns, node.lineno))
        for name, annotation, line in pairs:
            if name in NAMES and annotation is not None and ast.unparse(annotation) in STR:
                found.append(f"{path.relative_to(root)}:{line} {name}: {ast.unparse(annotation)}")
    return found


def test_no_precision_is_typed_str() -> None:
    files = sorted(p for d in ("wsecc", "passes", "targets") for p in (ROOT / d).rglob("*.py"))
    assert files
    offenders = [hit for path in files for hit in _str_annotated(path, ROOT)]
    assert offenders == []


def test_the_scan_finds_a_str_precision(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "class A:\n    precision: str\n"
        "def f(x: int, prec: str | None, precision_name: Precision) -> None: ...\n"
        "def g(precision: Precision | str) -> None: ...\n"
    )
    assert _str_annotated(probe, tmp_path) == [
        "probe.py:2 precision: str",
        "probe.py:3 prec: str | None",
    ]
