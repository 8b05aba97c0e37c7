"""fuse-gelu's references (`_refs`) are computed on first use, without scipy.special: they equal
`wsecc.ir.rules.gelu` at every probe point, so the pass matches what it matched before."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from wsecc.passes import fuse_gelu, fuse_swiglu

from wsecc.ir.rules import gelu, silu


def test_the_references_equal_the_rules_gelu_at_every_probe_point():
    refs = fuse_gelu._refs()
    assert set(refs) == {"none", "tanh"}
    for approx, ref in refs.items():
        want = gelu(fuse_gelu._PROBE, approx)  # scipy.special.erf for "none"
        assert ref.dtype == want.dtype == np.float32
        assert np.array_equal(ref, want), approx


def test_importing_the_passes_loads_no_scipy_special():
    code = "import sys, wsecc.passes; print('scipy.special' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_swiglu_gates_computed_on_first_use_are_the_rules_functions():
    x = fuse_swiglu._PROBE64
    want = {"silu": silu(x), "gelu": gelu(x), "gelu_tanh": gelu(x, "tanh")}
    gates = fuse_swiglu._gates()
    assert list(gates) == list(want)  # the order they are tried in
    assert all(np.array_equal(gates[k], want[k]) for k in want)
