"""`pip install .` ships every package of the source tree (a package missing from pyproject's list
imports in an editable install and fails in a real one)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_installed() -> None:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(tool["packages"])
    dirs = {v: k for k, v in tool["package-dir"].items()}  # source folder -> package
    found = set()
    for top, package in dirs.items():
        for init in (ROOT / top).glob("**/__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            found.add(".".join((package, *rel.parts)))
    assert found == listed
