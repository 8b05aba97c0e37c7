"""The graph IR: verifier (negative cases with exact messages), text round trip, interpreter."""

from __future__ import annotations

import numpy as np
import pytest

from wsecc.interp import run
from wsecc.ir import DType, Graph, Node, Op, TensorType, Value, VerificationError, verify
from wsecc.ir.core import make_attrs
from wsecc.ir.printer import format_graph, parse_graph

F32 = DType.FLOAT32


def v(name: str, *shape: int, dt: DType = F32) -> Value:
    return Value(name, TensorType(dt, shape))


def small_graph() -> Graph:
    x = v("x", 2, 4)
    w = Value.constant("w", np.arange(12, dtype=np.float32).reshape(4, 3) / 7)
    b = Value.constant("b", np.array([0.5, -1.0, 2.0], np.float32))
    y = v("y", 2, 3)
    z = v("z", 2, 3)
    return Graph(
        (x,),
        (z,),
        (
            Node(
                Op.LINEAR,
                (x, w, b),
                (y,),
                make_attrs({"activation": "gelu", "has_bias": True}),
                "lin",
                ("/MatMul", "/Add"),
            ),
            Node(Op.SOFTMAX, (y,), (z,), make_attrs({"axis": 1}), "sm"),
        ),
    )


def test_round_trip_text():
    g = small_graph()
    text = format_graph(g, full=True)
    g2 = parse_graph(text)
    verify(g2)
    assert format_graph(g2, full=True) == text
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_array_equal(run(g, {"x": x})["z"], run(g2, {"x": x})["z"])


def test_round_trip_keeps_odd_names_and_infinite_attrs():
    x, y = v("in put/0", 1, 2, 2, 2), v("::out", 2, 2)
    q = v("q", 1, 2, 2)
    text = format_graph(
        Graph(
            (x,),
            (y,),
            (
                Node(Op.RESHAPE, (x,), (q,), make_attrs({"shape": (1, 2, 4)})),
                Node(
                    Op.REDUCE_SUM,
                    (q,),
                    (y,),
                    make_attrs({"axes": (0,), "keepdims": False, "note": float("-inf")}),
                ),
            ),
        )
    )
    g = parse_graph(text)
    assert g.inputs[0].name == "in put/0"
    assert g.nodes[1].attr("note") == float("-inf")
    assert format_graph(g) == text


def test_verifier_rejects_use_before_definition():
    x, y, z = v("x", 2), v("y", 2), v("z", 2)
    g = Graph((x,), (z,), (Node(Op.ADD, (x, y), (z,)), Node(Op.NEG, (x,), (y,))))
    with pytest.raises(
        VerificationError,
        match=r"operand %y is used before it is defined\n  at: %z: f32\[2\] = add\(%x, %y\)",
    ):
        verify(g)


def test_verifier_rejects_wrong_output_type():
    x, y = v("x", 2, 3), v("y", 3, 2)
    g = Graph((x,), (y,), (Node(Op.NEG, (x,), (y,)),))
    with pytest.raises(
        VerificationError,
        match=r"NEG output types \['f32\[3,2\]'\] differ from inferred \['f32\[2,3\]'\]",
    ):
        verify(g)


def test_verifier_rejects_double_definition_and_duplicate_names():
    x, y = v("x", 2), v("y", 2)
    g = Graph((x,), (y,), (Node(Op.NEG, (x,), (y,)), Node(Op.ABS, (x,), (y,))))
    with pytest.raises(VerificationError, match=r"value %y is defined twice"):
        verify(g)
    y2 = v("y", 2)
    g = Graph((x,), (y2,), (Node(Op.NEG, (x,), (v("y", 2),)), Node(Op.ABS, (x,), (y2,))))
    with pytest.raises(VerificationError, match=r"two different values are named %y"):
        verify(g)


def test_verifier_rejects_bad_operands():
    x, w, y = v("x", 2, 4), v("w", 5, 3), v("y", 2, 3)
    g = Graph((x, w), (y,), (Node(Op.MATMUL, (x, w), (y,)),))
    with pytest.raises(
        VerificationError, match=r"MATMUL: matmul inner dims differ: \(2, 4\) x \(5, 3\)"
    ):
        verify(g)
    g = Graph((x,), (y,), (Node(Op.ADD, (x,), (y,)),))
    with pytest.raises(VerificationError, match=r"ADD: ADD takes 2..2 operands, got 1"):
        verify(g)


def test_verifier_rejects_undefined_output_and_unfused_math_at_fused_level():
    x, y = v("x", 2), v("y", 2)
    with pytest.raises(VerificationError, match=r"graph output %y is never defined"):
        verify(Graph((x,), (y,), ()))
    g = Graph((x,), (y,), (Node(Op.TANH, (x,), (y,)),))
    verify(g)
    with pytest.raises(VerificationError, match=r"TANH is left outside a fused op"):
        verify(g, allow_unfused=False)


def test_interpreter_attention_matches_manual_computation():
    rng = np.random.default_rng(1)
    b, s, h, dh = 2, 5, 2, 3
    qkv = rng.standard_normal((b, s, 3 * h * dh)).astype(np.float32)
    mask = np.ones((b, s), np.int64)
    mask[1, 3:] = 0
    x, m, o = v("qkv", b, s, 3 * h * dh), v("mask", b, s, dt=DType.INT64), v("o", b, s, h * dh)
    attrs = make_attrs(
        {"num_heads": h, "head_dim": dh, "q_offset": 0, "k_offset": h * dh, "v_offset": 2 * h * dh,
         "scale": 0.5, "causal": True, "mask": "key_padding", "fill": -1e4, "nan_to_zero": False}
    )  # fmt: skip
    g = Graph((x, m), (o,), (Node(Op.ATTENTION, (x, x, x, m), (o,), attrs),))
    verify(g)
    got = run(g, {"qkv": qkv, "mask": mask})["o"]
    q, k, vv = (
        qkv[..., i * h * dh : (i + 1) * h * dh].reshape(b, s, h, dh).transpose(0, 2, 1, 3)
        for i in range(3)
    )
    sc = q @ k.transpose(0, 1, 3, 2) * 0.5
    keep = np.tril(np.ones((s, s), bool))[None, None] & (mask != 0)[:, None, None, :]
    sc = np.where(keep, sc, -1e4)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    want = (p @ vv).transpose(0, 2, 1, 3).reshape(b, s, h * dh)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_special_values_are_results_not_warnings():
    """sqrt of a negative is nan and 1/0 is inf, as onnxruntime computes them; the reference
    rules say nothing on the user's terminal while folding or probing."""
    import warnings

    import numpy as np

    from wsecc.ir.core import Op
    from wsecc.ir.rules import evaluate_op

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (r,) = evaluate_op(Op.SQRT, [np.array([-1.0, 4.0], np.float32)], {})
        (q,) = evaluate_op(Op.DIV, [np.ones(2, np.float32), np.zeros(2, np.float32)], {})
    assert np.isnan(r[0]) and r[1] == 2 and np.isinf(q).all()


def test_a_float64_run_keeps_float32_values_in_float64():
    """(a + b) cast to float32, minus a: float32 loses b = 2^-25 against a = 1, float64 keeps
    it, through the Cast too. The inputs are float32 values (a float64 feed is rounded first);
    integer values keep their dtype."""
    a, b, s, c, d = (v(n, 3) for n in "abscd")
    n, m = v("n", 3, dt=DType.INT64), v("m", 3, dt=DType.INT32)
    g = Graph(
        (a, b, n),
        (d, m),
        (
            Node(Op.ADD, (a, b), (s,), make_attrs({}), "add"),
            Node(Op.CAST, (s,), (c,), make_attrs({"to": "f32"}), "cast"),
            Node(Op.SUB, (c, a), (d,), make_attrs({}), "sub"),
            Node(Op.CAST, (n,), (m,), make_attrs({"to": "i32"}), "ints"),
        ),
    )
    feeds = {"a": np.ones(3), "b": np.full(3, 2.0**-25), "n": np.arange(3)}
    feeds["b"][0] = 1 / 3  # float32 rounds it on the way in
    narrow, wide = run(g, feeds), run(g, feeds, float64=True)
    assert narrow["d"].dtype == np.float32 and wide["d"].dtype == np.float64
    np.testing.assert_array_equal(narrow["d"][1:], 0)
    np.testing.assert_array_equal(wide["d"], np.float32([1 / 3, 2.0**-25, 2.0**-25]))
    assert wide["m"].dtype == np.int32 and wide["m"].tolist() == [0, 1, 2]


def test_a_full_attention_mask_is_per_query_and_checked() -> None:
    """mask "full": [B, S_q, S_kv], a pair kept where it is not 0; any other shape is refused
    with the shape it has."""
    from wsecc.ir.core import DType, IRError, TensorType
    from wsecc.ir.rules import attention_keep, infer_types

    qkv = TensorType(DType.FLOAT32, (2, 3, 12))
    attrs = {
        "num_heads": 2, "head_dim": 2, "q_offset": 0, "k_offset": 4, "v_offset": 8,
        "scale": 1.0, "causal": True, "mask": "full", "fill": -1e4, "nan_to_zero": False,
    }  # fmt: skip
    mask = TensorType(DType.FLOAT32, (2, 3, 3))
    assert infer_types(Op.ATTENTION, [qkv, qkv, qkv, mask], attrs)[0].shape == (2, 3, 4)
    with pytest.raises(IRError, match=r"full mask must be \[B, S_q, S_kv\], got \(2, 3\)"):
        infer_types(Op.ATTENTION, [qkv, qkv, qkv, TensorType(DType.FLOAT32, (2, 3))], attrs)
    m = np.array([[[1, 0, 0], [0, 1, 1], [1, 1, 1]]] * 2, np.float32)
    keep = attention_keep(attrs, 2, 3, 3, m)[:, 0]
    assert (keep == (m != 0) & np.tril(np.ones((3, 3), bool))).all()  # and causal


def test_an_attention_bias_is_added_per_head_query_and_key_and_checked() -> None:
    """has_bias: a constant [H, S_q, S_kv] after the mask operand, added to the scaled scores
    before the masked pairs are filled (MPNet's relative position bias); any other shape, or an
    operand count that disagrees, is refused."""
    from wsecc.ir.core import IRError
    from wsecc.ir.rules import infer_types

    rng = np.random.default_rng(2)
    b, s, h, dh = 2, 4, 2, 3
    attrs = {
        "num_heads": h, "head_dim": dh, "q_offset": 0, "k_offset": h * dh, "v_offset": 2 * h * dh,
        "scale": 0.5, "causal": False, "mask": "key_padding", "fill": -1e4, "nan_to_zero": False,
        "has_bias": True,
    }  # fmt: skip
    x, m, o = v("qkv", b, s, 3 * h * dh), v("mask", b, s, dt=DType.INT64), v("o", b, s, h * dh)
    table = rng.standard_normal((h, s, s)).astype(np.float32)
    bias = Value.constant("bias", table)
    g = Graph((x, m), (o,), (Node(Op.ATTENTION, (x, x, x, m, bias), (o,), make_attrs(attrs)),))
    verify(g)
    qkv = rng.standard_normal((b, s, 3 * h * dh)).astype(np.float32)
    mask = np.ones((b, s), np.int64)
    mask[1, 2:] = 0
    q, k, vv = (
        qkv[..., i * h * dh : (i + 1) * h * dh].reshape(b, s, h, dh).transpose(0, 2, 1, 3)
        for i in range(3)
    )
    sc = np.where((mask != 0)[:, None, None, :], q @ k.transpose(0, 1, 3, 2) * 0.5 + table, -1e4)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True) @ vv).transpose(0, 2, 1, 3).reshape(b, s, h * dh)
    got = run(g, {"qkv": qkv, "mask": mask})["o"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    t, mt = x.type, m.type
    with pytest.raises(IRError, match=r"bias must be \[H, S_q, S_kv\] with H = 2, got \(1, 4, 4\)"):
        infer_types(Op.ATTENTION, [t, t, t, mt, TensorType(DType.FLOAT32, (1, s, s))], attrs)
    with pytest.raises(IRError, match=r"mask kind, bias or rotary form disagrees with its operand"):
        infer_types(Op.ATTENTION, [t, t, t, mt], attrs)
