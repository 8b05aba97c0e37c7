"""onnxruntime's `com.microsoft.MoE` contrib op (as onnxruntime-genai writes it) becomes the
`moe` op: small graphs built with onnx.helper, compiled to one moe kernel and checked against
onnxruntime, which runs the contrib op on the CPU; what the moe kernel does not compute is
refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from wsecc.errors import FrontendError
from wsecc.kernels import KernelKind

T, H, F, E = 6, 8, 4, 4  # tokens, width, expert width, experts


def _model(
    path: Path, attrs: dict[str, Any], biases: bool = True, router_of_x: bool = True
) -> Path:
    """x [1, T, H] -> Reshape [T, H] -> MoE(x2, x2·W_r + b_r, fc1, [b1], fc2, [b2]) -> [1, T, H]."""
    rng = np.random.default_rng(0)
    arrays = {
        "wr": rng.standard_normal((H, E)),
        "br": 0.1 * rng.standard_normal(E),
        "fc1": 0.5 * rng.standard_normal((E, 2 * F, H)),
        "b1": 0.1 * rng.standard_normal((E, 2 * F)),
        "fc2": 0.5 * rng.standard_normal((E, H, F)),
        "b2": 0.1 * rng.standard_normal((E, H)),
    }
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in arrays.items()]
    inits += [
        numpy_helper.from_array(np.array([T, H]), "shape2"),
        numpy_helper.from_array(np.array([1, T, H]), "shape3"),
    ]
    experts = (
        ["x2", "logits", "fc1", "b1", "fc2", "b2"] if biases else ["x2", "logits", "fc1", "", "fc2"]
    )
    nodes = [
        helper.make_node("Reshape", ["x", "shape2"], ["x2"]),
        helper.make_node("MatMul", ["x2" if router_of_x else "x2sq", "wr"], ["mm"]),
        helper.make_node("Add", ["mm", "br"], ["logits"]),
        helper.make_node("MoE", experts, ["y2"], "moe", domain="com.microsoft", **attrs),
        helper.make_node("Reshape", ["y2", "shape3"], ["y"]),
    ]
    if not router_of_x:
        nodes.insert(1, helper.make_node("Mul", ["x2", "x2"], ["x2sq"]))
    graph = helper.make_graph(
        nodes,
        "ms_moe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, T, H])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, T, H])],
        inits,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)
    return path


GPT_OSS = dict(
    k=2, activation_type="swiglu", swiglu_fusion=1, normalize_routing_weights=1,
    activation_alpha=1.702, activation_beta=1.0, swiglu_limit=7.0,
)  # fmt: skip
SWIGLU = dict(k=2, activation_type="swiglu", swiglu_fusion=1, normalize_routing_weights=0)


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
@pytest.mark.parametrize(
    ("attrs", "biases"), [(GPT_OSS, True), (SWIGLU, False)], ids=["gpt-oss", "swiglu"]
)
def test_contrib_moe_is_one_moe_kernel_and_matches_onnxruntime(
    tmp_path: Path, attrs: dict[str, Any], biases: bool, precision: str
) -> None:
    import wsecc

    c = wsecc.compile(
        _model(tmp_path / "m.onnx", attrs, biases),
        placer="greedy",
        validate=True,
        precision=precision,
    )
    (moe,) = c.kernel_graph.kernels
    assert moe.kind is KernelKind.MOE
    p = moe.params
    assert (p["E"], p["k"], p["H"], p["F"], p["router"]) == (E, 2, H, F, "softmax")
    assert p["normalize"] == bool(attrs["normalize_routing_weights"])
    assert p["activation"] == ("clamped_silu" if "swiglu_limit" in attrs else "silu")
    assert p["bias"] is True  # the router's bias makes every bias an operand (zeros if absent)
    assert c.numerics is not None and c.numerics.passed, c.numerics.summary()


@pytest.mark.parametrize(
    ("attrs", "says"),
    [
        ({**SWIGLU, "activation_type": "relu"}, "activation_type 'relu'"),
        ({**SWIGLU, "swiglu_fusion": 0}, "swiglu_fusion 0"),
        ({**SWIGLU, "activation_beta": 1.0}, "neither SwiGLU"),
    ],
)
def test_what_the_moe_kernel_does_not_compute_is_refused(
    tmp_path: Path, attrs: dict[str, Any], says: str
) -> None:
    import wsecc

    with pytest.raises(FrontendError, match=says):
        wsecc.compile(_model(tmp_path / "m.onnx", attrs), placer="greedy", validate=False)


def test_a_router_that_does_not_read_the_input_is_refused(tmp_path: Path) -> None:
    import wsecc

    with pytest.raises(FrontendError, match="router_probs are not x·W"):
        wsecc.compile(
            _model(tmp_path / "m.onnx", SWIGLU, router_of_x=False), placer="greedy", validate=False
        )
