"""The passes' probe values and references, computed once or on first use, equal what each
candidate computed for itself before: fuse-gelu's references (`_refs`, without scipy.special)
equal `wsecc.ir.rules.gelu` at every probe point, fuse-swiglu's gates the rules' functions,
fuse-layernorm's probes (`_probes`, drawn once per width) a fresh draw; so each pass matches
what it matched."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
from conftest import SAMPLES
from wsecc.passes import fuse_gelu, fuse_layernorm, fuse_swiglu

from wsecc.core import chain
from wsecc.ir.core import Op
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


def test_the_layernorm_probes_drawn_once_are_a_fresh_draw_and_stay_unchanged():
    d = 48
    rng = np.random.default_rng(0)
    fresh = [
        (rng.standard_normal((fuse_layernorm._ROWS, d)) * (1.5 + i) + 0.3 * i).astype(np.float32)
        for i in range(3)
    ]
    once = fuse_layernorm._probes(d)
    assert all(
        np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(once, fresh, strict=True)
    )
    assert fuse_layernorm._probes(d) is once  # drawn once per width


def test_fusing_a_models_norms_leaves_the_probes_as_drawn():
    """`_fit` evaluates each region on copies of the probes, so the next candidate sees them as
    drawn whatever the region's ops do."""
    graph = chain.fuse(chain.load(chain.job(SAMPLES / "llama_dynamo.onnx", seq=8))).graph
    widths = {n.inputs[0].type.shape[-1] for n in graph.nodes if n.op is Op.RMS_NORM}
    assert widths
    for d in widths:
        rng = np.random.default_rng(0)
        for i, p in enumerate(fuse_layernorm._probes(d)):
            want = rng.standard_normal((fuse_layernorm._ROWS, d)) * (1.5 + i) + 0.3 * i
            assert np.array_equal(p, want.astype(np.float32))
