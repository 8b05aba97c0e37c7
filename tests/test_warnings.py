"""A normal compile of a real export prints nothing but wsecc's own lines: no Python warning
(numpy's, a library's) reaches the user's terminal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SAMPLES

DATA = Path(__file__).resolve().parent / "data"
EXPORTS = sorted(SAMPLES.glob("*.onnx")) + sorted(DATA.glob("*.onnx"))


@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: p.name)
def test_a_compile_emits_no_python_warning(path, sample_compile):
    """conftest's SAMPLE_COMPILE (numerics validated, the event-level simulation), the compile
    test_report's check of every sample's report reads too."""
    compiled = sample_compile(path)
    assert compiled.exit_code == 0
    report = json.loads((compiled.out / "report.json").read_text())
    assert report["numerics"]["passed"]
    assert list(compiled.warnings) == []
