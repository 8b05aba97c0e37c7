"""Gradient rules (each op's vjp against float64 central differences of its own reference rule)
and reverse mode over a Graph (`wsecc.ir.grad`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from wsecc.interp import evaluate
from wsecc.ir import DType, Graph, IRError, Node, Op, TensorType, Value, rules
from wsecc.ir.core import make_attrs
from wsecc.ir.grad import Loss, LossTerm, choose_loss, value_and_grad, weights
from wsecc.ir.rules import RULES

RNG = np.random.default_rng(7)


def r(*shape: int, low: float | None = None) -> np.ndarray:
    x = RNG.standard_normal(shape)
    return np.abs(x) + low if low is not None else x


def check_vjp(op: Op, xs: list[np.ndarray], attrs: dict[str, Any], eps: float = 1e-6) -> None:
    """vjp(g) == ∇_x ⟨g, f(x)⟩ by central differences, for every float operand; None exactly
    for the others."""
    rule = RULES[op]
    assert rule.vjp is not None, op
    ys = rule.impl(xs, attrs)
    gs = [RNG.standard_normal(np.shape(y)) for y in ys]
    ds = rule.vjp(xs, ys, gs, attrs)
    assert len(ds) == len(xs)

    def f(args: list[np.ndarray]) -> float:
        return sum(float(np.sum(g * y)) for g, y in zip(gs, rule.impl(args, attrs), strict=True))

    float_out = any(np.asarray(y).dtype.kind == "f" for y in ys)
    for i, (x, d) in enumerate(zip(xs, ds, strict=True)):
        if x.dtype.kind != "f" or not float_out:
            assert d is None, f"{op.name} operand {i} is not differentiable but got a cotangent"
            continue
        assert d is not None and d.shape == x.shape, f"{op.name} operand {i}"
        fd = np.zeros(x.shape)
        for j in range(x.size):
            up, down = x.copy(), x.copy()
            up.reshape(-1)[j] += eps
            down.reshape(-1)[j] -= eps
            args_up = [up if k == i else a for k, a in enumerate(xs)]
            args_down = [down if k == i else a for k, a in enumerate(xs)]
            fd.reshape(-1)[j] = (f(args_up) - f(args_down)) / (2 * eps)
        np.testing.assert_allclose(d, fd, rtol=1e-5, atol=1e-6, err_msg=f"{op.name} operand {i}")


ATT = {
    "num_heads": 2,
    "head_dim": 3,
    "q_offset": 0,
    "k_offset": 6,
    "v_offset": 12,
    "scale": 0.5,
    "causal": True,
    "fill": float(np.finfo(np.float32).min),
    "mask": "none",
    "nan_to_zero": False,
    "window": 0,
}
IDS = np.array([[1, 3, 1], [0, 4, 4]])

CASES: list[tuple[str, Op, list[np.ndarray], dict[str, Any]]] = [
    ("add-bcast", Op.ADD, [r(2, 3), r(3)], {}),
    ("sub-bcast", Op.SUB, [r(2, 1), r(1, 3)], {}),
    ("mul", Op.MUL, [r(2, 3), r(2, 3)], {}),
    ("div", Op.DIV, [r(2, 3), r(3, low=0.5)], {}),
    ("pow", Op.POW, [r(2, 3, low=0.5), np.array(3.0)], {}),
    ("max", Op.MAX, [r(2, 3), r(2, 3)], {}),
    ("min", Op.MIN, [r(2, 3), r(3)], {}),
    ("neg", Op.NEG, [r(4)], {}),
    ("abs", Op.ABS, [r(4)], {}),
    ("sqrt", Op.SQRT, [r(4, low=0.5)], {}),
    ("reciprocal", Op.RECIPROCAL, [r(4, low=0.5)], {}),
    ("exp", Op.EXP, [r(4)], {}),
    ("log", Op.LOG, [r(4, low=0.5)], {}),
    ("erf", Op.ERF, [r(4)], {}),
    ("tanh", Op.TANH, [r(4)], {}),
    ("sigmoid", Op.SIGMOID, [r(4)], {}),
    ("relu", Op.RELU, [r(6)], {}),
    ("cast-float", Op.CAST, [r(3)], {"to": "f64"}),
    ("cast-int", Op.CAST, [IDS.astype(np.float64)], {"to": "i64"}),
    ("identity", Op.IDENTITY, [r(3)], {}),
    ("dropout", Op.DROPOUT, [r(3)], {}),
    ("where", Op.WHERE, [r(2, 3) > 0, r(2, 3), r(3)], {}),
    ("matmul", Op.MATMUL, [r(2, 3), r(3, 4)], {}),
    ("matmul-batch-bcast", Op.MATMUL, [r(2, 2, 3), r(3, 4)], {}),
    ("matmul-vec-mat", Op.MATMUL, [r(3), r(2, 3, 4)], {}),
    ("matmul-mat-vec", Op.MATMUL, [r(2, 3), r(3)], {}),
    ("matmul-vec-vec", Op.MATMUL, [r(3), r(3)], {}),
    (
        "gemm",
        Op.GEMM,
        [r(3, 2), r(4, 3), r(4)],
        {"trans_a": 1, "trans_b": 1, "alpha": 0.5, "beta": 2.0},
    ),
    ("reshape", Op.RESHAPE, [r(2, 6)], {"shape": (3, 4)}),
    ("transpose", Op.TRANSPOSE, [r(2, 3, 4)], {"perm": (2, 0, 1)}),
    ("expand", Op.EXPAND, [r(3, 1)], {"shape": (2, 3, 4)}),
    ("concat", Op.CONCAT, [r(2, 1), r(2, 3)], {"axis": 1}),
    (
        "slice",
        Op.SLICE,
        [r(4, 5)],
        {"starts": (4, 1), "ends": (0, 5), "axes": (1, 0), "steps": (-2, 2)},
    ),
    ("split", Op.SPLIT, [r(2, 5)], {"axis": 1, "sizes": (2, 3)}),
    ("gather", Op.GATHER, [r(2, 5, 3), IDS], {"axis": 1}),
    (
        "gather-elements",
        Op.GATHER_ELEMENTS,
        [r(3, 5), np.array([[0, 4, 4], [1, 1, 0], [2, 3, -1]])],
        {"axis": 1},
    ),
    ("tile", Op.TILE, [r(2, 3)], {"repeats": (2, 3)}),
    ("reduce-mean", Op.REDUCE_MEAN, [r(2, 3, 4)], {"axes": (1, -1), "keepdims": False}),
    ("reduce-sum", Op.REDUCE_SUM, [r(2, 3, 4)], {"axes": (), "keepdims": True}),
    ("reduce-max", Op.REDUCE_MAX, [r(2, 3, 4)], {"axes": (2,), "keepdims": False}),
    ("cumsum", Op.CUMSUM, [r(2, 5)], {"axis": 1}),
    ("cumsum-excl-rev", Op.CUMSUM, [r(2, 5)], {"axis": 1, "exclusive": 1, "reverse": 1}),
    ("softmax", Op.SOFTMAX, [r(2, 5)], {"axis": -1}),
    *[
        (
            f"linear-{act}",
            Op.LINEAR,
            [r(2, 3, 4), r(4, 5), r(5)],
            {"activation": act, "has_bias": True},
        )
        for act in rules.ACTIVATIONS
    ],
    ("linear-nobias", Op.LINEAR, [r(3, 4), r(4, 5)], {"activation": "none", "has_bias": False}),
    ("lm-head", Op.LM_HEAD, [r(2, 3, 4), r(4, 7)], {"activation": "none", "has_bias": False}),
    ("layer-norm", Op.LAYER_NORM, [r(2, 3, 6), r(6), r(6)], {"epsilon": 1e-5, "has_skip": False}),
    (
        "layer-norm-skip-sum",
        Op.LAYER_NORM,
        [r(2, 3, 6), r(3, 6), r(6), r(6)],
        {"epsilon": 1e-5, "has_skip": True, "emit_sum": True},
    ),
    ("gelu", Op.GELU, [r(5)], {"approximate": "none"}),
    ("gelu-tanh", Op.GELU, [r(5)], {"approximate": "tanh"}),
    ("attention-causal-shared", Op.ATTENTION, [r(2, 4, 18)] * 3, ATT),
    (
        "attention-padding",
        Op.ATTENTION,
        [r(2, 4, 6), r(2, 5, 8), r(2, 5, 6), np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])],
        {**ATT, "causal": False, "k_offset": 2, "v_offset": 0, "mask": "key_padding"},
    ),
    (
        "attention-all-masked-nan",
        Op.ATTENTION,
        [r(1, 2, 6), r(1, 2, 6), r(1, 2, 6), np.array([[0, 0]])],
        {
            **ATT,
            "causal": False,
            "k_offset": 0,
            "v_offset": 0,
            "mask": "key_padding",
            "fill": float("-inf"),
            "nan_to_zero": True,
        },
    ),
    ("embedding", Op.EMBEDDING, [IDS, r(5, 4), np.array([[0, 1, 2]]), r(3, 4)], {}),
]


@pytest.mark.parametrize("op, xs, attrs", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_vjp_matches_central_differences(
    op: Op, xs: list[np.ndarray], attrs: dict[str, Any]
) -> None:
    check_vjp(op, xs, attrs)


def test_a_wrong_vjp_fails_the_vjp_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness can fail: GELU's derivative without its x·φ(x) term is caught."""
    monkeypatch.setattr(rules, "gelu_grad", lambda x, approximate="none": rules.gelu(x) / x)
    with pytest.raises(AssertionError, match="GELU operand 0"):
        check_vjp(Op.GELU, [r(5)], {"approximate": "none"})


shapes = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, max_side=3)


@settings(max_examples=30, deadline=None)
@given(shapes=shapes, op=st.sampled_from([Op.ADD, Op.SUB, Op.MUL, Op.DIV]))
def test_broadcast_binary_vjps(shapes: Any, op: Op) -> None:
    a, b = (r(*s, low=0.5) for s in shapes.input_shapes)
    check_vjp(op, [np.asarray(a), np.asarray(b)], {})


@settings(max_examples=20, deadline=None)
@given(
    batch=hnp.array_shapes(min_dims=0, max_dims=2, max_side=2),
    m=st.integers(1, 3),
    k=st.integers(1, 3),
    n=st.integers(1, 3),
)
def test_batched_matmul_vjp(batch: tuple[int, ...], m: int, k: int, n: int) -> None:
    check_vjp(Op.MATMUL, [r(*batch, m, k), r(k, n)], {})


def test_every_differentiable_fused_op_has_a_vjp() -> None:
    for op in (Op.LINEAR, Op.LAYER_NORM, Op.GELU, Op.ATTENTION, Op.EMBEDDING, Op.LM_HEAD):
        assert RULES[op].vjp is not None


# ---------------------------------------------------------------- reverse mode over a Graph

F64 = DType.FLOAT64


def val(name: str, *shape: int, dt: DType = F64) -> Value:
    return Value(name, TensorType(dt, shape))


def node(op: Op, ins: tuple[Value, ...], out: Value, **attrs: Any) -> Node:
    return Node(op, ins, (out,), make_attrs(attrs), out.name)


def tied_graph() -> tuple[Graph, Value, Value]:
    """h = tanh(x·W); out = (h·Wᵀ) + b: W read twice (once through a transpose), as GPT-2's
    wte is by the embedding and the LM head."""
    x = val("x", 2, 3)
    w = Value.constant("w", RNG.standard_normal((3, 4)))
    b = Value.constant("b", RNG.standard_normal(3))
    h0, h, wt, o0, out = (
        val("h0", 2, 4),
        val("h", 2, 4),
        val("wt", 4, 3),
        val("o0", 2, 3),
        val("out", 2, 3),
    )
    g = Graph(
        (x,),
        (out,),
        (
            node(Op.MATMUL, (x, w), h0),
            node(Op.TANH, (h0,), h),
            node(Op.TRANSPOSE, (w,), wt, perm=(1, 0)),
            node(Op.MATMUL, (h, wt), o0),
            node(Op.ADD, (o0, b), out),
        ),
    )
    return g, w, b


def test_value_and_grad_sums_fan_out_and_matches_differences() -> None:
    g, w, b = tied_graph()
    feeds = {"x": RNG.standard_normal((2, 3))}
    loss = Loss((LossTerm("out", "class", np.array([0, 2])),))
    value, grads = value_and_grad(g, feeds, loss)
    assert set(grads) == {w, b}

    def at(params: dict[Value, np.ndarray]) -> float:
        swap = {p: Value.constant(p.name, a) for p, a in params.items()}
        nodes = [
            Node(n.op, tuple(swap.get(v, v) for v in n.inputs), n.outputs, n.attrs, n.name)
            for n in g.nodes
        ]
        return loss({v.name: a for v, a in evaluate(g.replace(nodes), feeds).items()})

    base = {w: w.const, b: b.const}
    assert value == pytest.approx(at(base))
    for param in (w, b):
        fd = np.zeros(param.type.shape)
        for j in range(fd.size):
            up, down = param.const.copy(), param.const.copy()
            up.reshape(-1)[j] += 1e-6
            down.reshape(-1)[j] -= 1e-6
            fd.reshape(-1)[j] = (at({**base, param: up}) - at({**base, param: down})) / 2e-6
        np.testing.assert_allclose(grads[param], fd, rtol=1e-6, atol=1e-8)


def test_an_op_without_vjp_on_the_path_is_an_error_naming_it() -> None:
    x = val("x", 3)
    w = Value.constant("w", np.array([1.5, -2.0, 3.0]))
    m, out = val("m", 3), val("out", 3)
    g = Graph((x,), (out,), (node(Op.MOD, (x, w), m, fmod=1), node(Op.ADD, (m, x), out)))
    loss = Loss((LossTerm("out", "regression", np.zeros(3)),))
    with pytest.raises(IRError, match=r"MOD 'm' has no gradient rule \(vjp\)"):
        value_and_grad(g, {"x": np.ones(3)}, loss)


def test_an_op_without_vjp_off_the_path_is_fine() -> None:
    """MOD reads only the input, not the weight: nothing flows through it to a weight."""
    x = val("x", 3)
    w = Value.constant("w", np.array([1.5, -2.0, 3.0]))
    two = Value.constant("two", np.array([2.0, 2.0, 2.0]))
    m, out = val("m", 3), val("out", 3)
    g = Graph((x,), (out,), (node(Op.MOD, (x, two), m, fmod=1), node(Op.MUL, (m, w), out)))
    loss = Loss((LossTerm("out", "regression", np.zeros(3)),))
    _, grads = value_and_grad(g, {"x": np.array([3.0, 1.0, 5.0])}, loss, wrt=[w])
    np.testing.assert_allclose(grads[w], np.array([1.0, 1.0, 1.0]) ** 2 * w.const)


def test_weights_are_float_tensors_not_scalars_or_integers() -> None:
    g, w, b = tied_graph()
    assert weights(g) == [w, b]
    x = val("x", 3, dt=DType.FLOAT32)
    half = Value.constant("half", np.float32(0.5))
    idx = Value.constant("idx", np.array([0, 1]))
    y, z = val("y", 3, dt=DType.FLOAT32), val("z", 2, dt=DType.FLOAT32)
    g2 = Graph((x,), (z,), (node(Op.MUL, (x, half), y), node(Op.GATHER, (y, idx), z, axis=0)))
    assert weights(g2) == []


def test_loss_cotangents_are_its_gradient() -> None:
    logits = RNG.standard_normal((2, 3, 5))
    labels = np.array([[1, 4, -1], [0, 2, -1]])
    terms = (
        LossTerm("lm", "next_token", labels),
        LossTerm("h", "regression", RNG.standard_normal((2, 2))),
    )
    loss = Loss(terms)
    outs = {"lm": logits, "h": RNG.standard_normal((2, 2))}
    _, cots = loss.value_and_cotangents(outs)
    assert np.all(cots["lm"][:, -1] == 0)  # the ignored positions
    for name in outs:
        fd = np.zeros(outs[name].shape)
        for j in range(fd.size):
            up = {**outs, name: outs[name].copy()}
            down = {**outs, name: outs[name].copy()}
            up[name].reshape(-1)[j] += 1e-6
            down[name].reshape(-1)[j] -= 1e-6
            fd.reshape(-1)[j] = (loss(up) - loss(down)) / 2e-6
        np.testing.assert_allclose(cots[name], fd, rtol=1e-6, atol=1e-8)


def test_mixed_rounds_contraction_operands_to_f16_forward_and_backward() -> None:
    x = val("x", 2, 3, dt=DType.FLOAT32)
    w = Value.constant("w", RNG.standard_normal((3, 4)).astype(np.float32))
    out = val("out", 2, 4, dt=DType.FLOAT32)
    g = Graph((x,), (out,), (node(Op.MATMUL, (x, w), out),))
    xv = RNG.standard_normal((2, 3)).astype(np.float32)
    target = RNG.standard_normal((2, 4))
    loss = Loss((LossTerm("out", "regression", target),))

    def f16(a: np.ndarray) -> np.ndarray:
        return a.astype(np.float16).astype(np.float32)

    y = f16(xv) @ f16(w.const)
    cot = (y.astype(np.float64) - target).astype(np.float32)
    _, mixed = value_and_grad(g, {"x": xv}, loss, precision="mixed")
    _, exact = value_and_grad(g, {"x": xv}, loss, precision="fp32")
    np.testing.assert_array_equal(mixed[w], f16(xv).T @ f16(cot))
    assert not np.array_equal(mixed[w], exact[w])
    with pytest.raises(IRError, match="fp32 or mixed"):
        value_and_grad(g, {"x": xv}, loss, precision="fp16")


@pytest.mark.parametrize(
    "sample, kind",
    [("gpt2_legacy_op17.onnx", "next_token"), ("bert_dynamo.onnx", "class")],
)
def test_choose_loss_from_the_graph(samples_dir: Any, sample: str, kind: str) -> None:
    from wsecc.passes import DEFAULT_PIPELINE

    from wsecc.check.numerics import make_inputs
    from wsecc.frontend.onnx import import_model
    from wsecc.pm import PassContext, PassManager

    graph, _ = import_model(samples_dir / sample, batch=2, seq=8)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph, PassContext())
    feeds = make_inputs(fused, seed=0)
    loss = choose_loss(fused, feeds)
    assert loss.kind == kind
    if kind == "next_token":
        labels = loss.terms[0].target
        np.testing.assert_array_equal(labels[:, :-1], feeds["input_ids"][:, 1:])
        assert np.all(labels[:, -1] == -1)


def test_choose_loss_falls_back_to_regression_on_hidden_states() -> None:
    x = val("x", 1, 3, 4, dt=DType.FLOAT32)
    y = val("y", 1, 3, 4, dt=DType.FLOAT32)
    g = Graph((x,), (y,), (node(Op.TANH, (x,), y),))
    loss = choose_loss(g, {"x": np.zeros((1, 3, 4), np.float32)}, seed=3)
    assert loss.kind == "regression" and loss.terms[0].target.shape == (1, 3, 4)
