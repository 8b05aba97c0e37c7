"""A normal compile of a real export prints nothing but wsecc's own lines: no Python warning
(numpy's, a library's) reaches the user's terminal."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from conftest import SAMPLES

import wsecc

DATA = Path(__file__).resolve().parent / "data"
EXPORTS = sorted(SAMPLES.glob("*.onnx")) + sorted(DATA.glob("*.onnx"))


@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: p.name)
def test_a_compile_emits_no_python_warning(path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = wsecc.compile(path, seq=16, placer="greedy", sim="l0", validate=True)
    assert c.numerics.passed
    assert [f"{w.category.__name__}: {w.message} ({w.filename})" for w in caught] == []
