"""Llama 4 text (the bundled samples/llama4_dynamo.onnx, made by samples/make_moe_samples.py):
its MoE block (sigmoid top-1 router scattered into a row of −inf, every expert computing every
token on its input scaled by the router's weight, a shared expert), its chunked attention with
the rotary and the q/k L2 norm after it, and its NoPE layer fuse into known kernels, compute
what onnxruntime computes, and generate onnxruntime's greedy ids."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from wsecc.passes import PASSES, PassContext
from wsecc.passes.fuse_attention import chunked

from wsecc.frontend.onnx import import_model
from wsecc.interp import run
from wsecc.ir.core import Graph, Node, Op
from wsecc.ir.rewrite import make_node
from wsecc.ir.rules import attention_keep, evaluate_op
from wsecc.kernels.ir import KernelKind

SAMPLE = "llama4_dynamo.onnx"
BEFORE_MOE = ("canonicalize", "fuse-embedding", "fuse-linear")
BEFORE_ATTENTION = (*BEFORE_MOE, "fuse-moe", "fuse-swiglu", "fuse-layernorm")


def _graph(samples_dir: Path, passes: tuple[str, ...], seq: int = 16) -> Graph:
    g, _ = import_model(samples_dir / SAMPLE, batch=2, seq=seq)
    ctx = PassContext()
    for p in passes:
        g = PASSES[p](g, ctx)
    return g


def _same_outputs(before: Graph, after: Graph, seq: int = 16) -> None:
    rng = np.random.default_rng(0)
    mask = np.ones((2, seq), np.int64)
    mask[1, :3] = 0  # left padding on the second row
    feeds = {"input_ids": rng.integers(3, 256, (2, seq)).astype(np.int64), "attention_mask": mask}
    want, got = run(before, feeds), run(after, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_scatter_elements_writes_the_updates_along_the_axis() -> None:
    """ONNX ScatterElements (no reduction): Llama 4's router writes its top-k logits into a
    row of −inf; a negative index counts from the end."""
    data = np.full((2, 4), -np.inf, np.float32)
    idx = np.array([[2], [-1]])
    upd = np.array([[5.0], [7.0]], np.float32)
    (out,) = evaluate_op(Op.SCATTER_ELEMENTS, [data, idx, upd], {"axis": 1})
    want = np.full((2, 4), -np.inf, np.float32)
    want[0, 2], want[1, 3] = 5.0, 7.0
    np.testing.assert_array_equal(out, want)
    assert np.isneginf(data).all()  # the input is not written


def test_chunked_keep_by_hand() -> None:
    """chunk 4 over 10 positions: a query sees the keys of its own chunk up to itself; with a
    window of the last 3 queries (decode), positions 7..9 keep keys 4..7 and 8..9."""
    keep = attention_keep({"causal": True, "mask": "none", "chunk": 4}, 1, 10, 10, None)[0, 0]
    assert [list(np.flatnonzero(r)) for r in keep[[0, 3, 4, 6, 8, 9]]] == [
        [0], [0, 1, 2, 3], [4], [4, 5, 6], [8], [8, 9],
    ]  # fmt: skip
    tail = attention_keep({"causal": True, "mask": "none", "chunk": 4}, 1, 3, 10, None)[0, 0]
    np.testing.assert_array_equal(tail, keep[7:])
    np.testing.assert_array_equal(chunked(10, 10, 4), keep)
    # two keys of left padding: the chunks start at the first kept key (transformers' mask)
    m = np.array([[0, 0, 1, 1, 1, 1, 1, 1]])
    a = {"causal": True, "mask": "key_padding", "chunk": 4}
    padded = attention_keep(a, 1, 8, 8, m)[0, 0]
    assert [list(np.flatnonzero(r)) for r in padded[[1, 2, 5, 6, 7]]] == [
        [], [2], [2, 3, 4, 5], [6], [6, 7],
    ]  # fmt: skip


def test_moe_scale_input_by_hand() -> None:
    """`moe` with scale "input": the chosen expert reads w·x, w = sigmoid(its logit); the
    experts not chosen add nothing (a SwiGLU of 0 is 0). One token, E = 2, H = 2, I = 1."""
    x = np.array([[1.0, 2.0]], np.float32)
    wr = np.array([[1.0, 0.0], [0.0, -1.0]], np.float32)  # logits (1, -2): expert 0
    wg = np.array([[[1.0], [1.0]], [[5.0], [5.0]]], np.float32)
    wu = np.array([[[2.0], [0.0]], [[5.0], [5.0]]], np.float32)
    wd = np.array([[[1.0, -1.0]], [[9.0, 9.0]]], np.float32)
    attrs = {"k": 1, "router": "sigmoid", "normalize": False, "activation": "silu"}
    (y,) = evaluate_op(Op.MOE, [x, wr, wg, wu, wd], {**attrs, "scale": "input"})
    s = 1 / (1 + np.exp(-1.0))
    g, u = 3 * s, 2 * s  # (s x)·W_gate[0], (s x)·W_up[0]
    h = g / (1 + np.exp(-g)) * u
    np.testing.assert_allclose(y, [[h, -h]], rtol=1e-6)
    (y_out,) = evaluate_op(Op.MOE, [x, wr, wg, wu, wd], attrs)  # the weight on the output
    h_out = s * 3 / (1 + np.exp(-3.0)) * 2
    np.testing.assert_allclose(y_out, [[h_out, -h_out]], rtol=1e-6)


def test_sigmoid_router_chooses_by_the_logits() -> None:
    """Logits 30 and 20 both saturate the float32 sigmoid to 1: the top-1 is still expert 1,
    the larger logit, as Llama 4's TopK of the logits chooses (not the lower index)."""
    x = np.array([[1.0]], np.float32)
    wr = np.array([[20.0, 30.0]], np.float32)
    wd = np.zeros((2, 1, 1), np.float32)
    wd[1] = 1.0
    w = np.ones((2, 1, 1), np.float32)
    attrs = {"k": 1, "router": "sigmoid", "normalize": False, "activation": "silu"}
    (y,) = evaluate_op(Op.MOE, [x, wr, w, w, wd], {**attrs, "scale": "input"})
    assert y[0, 0] > 0  # expert 1's output, expert 0's would be 0


def test_llama4_moe_block_becomes_one_moe_op(samples_dir: Path) -> None:
    g = _graph(samples_dir, BEFORE_MOE)
    out = PASSES["fuse-moe"](g, PassContext())
    moes = [n for n in out.nodes if n.op is Op.MOE]
    assert len(moes) == 1  # layer 0 is dense, layer 1 MoE
    assert moes[0].attr_dict == {
        "activation": "silu", "k": 1, "normalize": False, "router": "sigmoid", "scale": "input",
        "shared": "plain",
    }  # fmt: skip
    # x, W_router [64, 4], W_gate, W_up [4, 64, 48], W_down [4, 48, 64], the shared expert's
    assert [v.type.shape for v in moes[0].inputs[1:]] == [
        (64, 4), (4, 64, 48), (4, 64, 48), (4, 48, 64), (64, 48), (64, 48), (48, 64),
    ]  # fmt: skip
    assert not {Op.TOP_K, Op.SCATTER_ELEMENTS} & {n.op for n in out.nodes}
    _same_outputs(g, out)


def test_a_dense_block_scaled_on_the_output_is_not_fused(samples_dir: Path) -> None:
    """The router's weights multiplied into the experts' outputs instead of their inputs:
    every expert then adds 0·SwiGLU(x) for the experts not chosen, but the chosen one
    w·SwiGLU(x), another function than Llama 4's SwiGLU(w·x); no candidate computes it... except
    the output-scaled `moe` itself, which is what the block now is: it fuses, with the scale on
    the output, and still computes what the block computes."""
    g = _graph(samples_dir, BEFORE_MOE)
    producer = g.producers()
    gate_up, down = [n for n in g.nodes if n.op is Op.MATMUL and n.inputs[1].is_const]
    mul = producer[producer[gate_up.inputs[0]].inputs[0]]  # x·w, viewed as [E, T, H]
    assert mul.op is Op.MUL
    x_rep, w = mul.inputs
    e, t, h = down.output.type.shape
    w3 = make_node(Op.RESHAPE, [w], "w3", (), shape=(e, t, 1))
    scaled = make_node(Op.MUL, [down.output, w3.output], "scaled_out", ())
    nodes: list[Node] = []
    for n in g.nodes:
        if n is mul:  # the experts read x itself
            n = Node(Op.IDENTITY, (x_rep,), n.outputs, (), n.name, n.origin)
        elif down.output in n.inputs:
            ins = tuple(scaled.output if v is down.output else v for v in n.inputs)
            n = Node(n.op, ins, n.outputs, n.attrs, n.name, n.origin)
        nodes.append(n)
        if n is down:
            nodes += [w3, scaled]
    g2 = Graph(g.inputs, g.outputs, tuple(nodes), g.name)
    out = PASSES["fuse-moe"](g2, PassContext())
    moes = [n for n in out.nodes if n.op is Op.MOE]
    assert len(moes) == 1 and "scale" not in moes[0].attr_dict  # the weight on the output
    _same_outputs(g2, out)


def test_llama4_attention_chunked_rotary_and_nope(samples_dir: Path) -> None:
    """Layer 0: chunks of 8 with the interleaved rotary, its q/k L2 norm moved ahead of the
    rotary (the norm of a head is the rotation's); layer 1: full causal attention without
    rotary (NoPE), its temperature 1 at these positions."""
    g = _graph(samples_dir, BEFORE_ATTENTION)
    out = PASSES["fuse-attention"](g, PassContext())
    attn = [n.attr_dict for n in out.nodes if n.op is Op.ATTENTION]
    assert len(attn) == 2 and Op.SOFTMAX not in [n.op for n in out.nodes]
    assert (attn[0]["chunk"], attn[0]["rotary"], attn[0]["rotary_dim"]) == (8, "interleaved", 16)
    assert "chunk" not in attn[1] and attn[1].get("rotary", "none") == "none"
    assert all(a["causal"] and a["mask"] == "key_padding" and a["window"] == 0 for a in attn)
    _same_outputs(g, out)


def test_a_norm_with_a_weight_per_dim_stays_after_the_rotary(samples_dir: Path) -> None:
    """A norm whose weight differs between dims does not commute with a rotation: it is not
    moved, and layer 0's attention is not fused."""
    g = _graph(samples_dir, BEFORE_ATTENTION)
    norm = next(n for n in g.nodes if n.op is Op.RMS_NORM and n.inputs[0].type.rank == 4)
    gamma = norm.inputs[1]
    weighted = type(gamma).constant(
        f"{gamma.name}/ramp", np.linspace(0.5, 1.5, 16, dtype=np.float32)
    )
    nodes = [
        Node(n.op, (n.inputs[0], weighted), n.outputs, n.attrs, n.name, n.origin)
        if n is norm
        else n
        for n in g.nodes
    ]
    ctx = PassContext()
    out = PASSES["fuse-attention"](g.replace(nodes), ctx)
    assert [n.op for n in out.nodes].count(Op.ATTENTION) == 1


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
def test_llama4_sample_compiles_to_known_kernels_and_matches_onnxruntime(
    samples_dir: Path, precision: str
) -> None:
    import wsecc

    c = wsecc.compile(
        samples_dir / SAMPLE, seq=16, placer="greedy", validate=True, precision=precision
    )
    kinds = [k.kind for k in c.kernel_graph.kernels]
    assert kinds.count(KernelKind.MOE) == 1 and kinds.count(KernelKind.ATTENTION) == 2
    assert KernelKind.GENERIC not in kinds
    assert c.numerics is not None and c.numerics.passed, c.numerics.summary()


def test_a_dense_block_too_large_to_evaluate_whole_is_checked_rebound_to_a_few_tokens(
    samples_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_PROBE_ELEMS the dense block (every expert on every token: nothing gathered for
    the few-token check to leave unmaterialised) is evaluated rebound to FEW_TOKENS tokens:
    it still fuses, to the same function; a block whose rebound values still do not fit is
    not fused, and the note says so."""
    import importlib

    fuse_moe = importlib.import_module("wsecc.passes.fuse_moe")
    g = _graph(samples_dir, BEFORE_MOE)  # 32 tokens: 102,592 values in the block, 3,206 a token
    monkeypatch.setattr(fuse_moe, "MAX_PROBE_ELEMS", 20_000)
    out = PASSES["fuse-moe"](g, PassContext())
    assert [n.op for n in out.nodes].count(Op.MOE) == 1
    _same_outputs(g, out)
    monkeypatch.setattr(fuse_moe, "MAX_PROBE_ELEMS", 1_000)
    ctx = PassContext()
    out = PASSES["fuse-moe"](g, ctx)
    assert Op.MOE not in [n.op for n in out.nodes]
    assert any("over the 1,000 it evaluates: not even one" in n for n in ctx.notes)


def test_a_weightless_dense_block_is_checked_without_materialising_its_stacks(
    samples_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the expert stacks without data (`--weights inputs`: one value each), the rebound
    check multiplies by a stack as the row's sum times its value, and agrees with the `moe`
    candidate: the block fuses."""
    import importlib

    from wsecc.ir.arrays import placeholder

    fuse_moe = importlib.import_module("wsecc.passes.fuse_moe")
    g = _graph(samples_dir, BEFORE_MOE)
    stacks = [n for n in g.nodes if n.op is Op.MATMUL and n.inputs[1].is_const]
    nodes = []
    for tag, n in enumerate(g.nodes):
        if n in stacks:
            w = n.inputs[1]
            blank = placeholder(np.dtype(np.float32), w.type.shape, tag)
            n = Node(n.op, (n.inputs[0], type(w).constant(w.name, blank)), n.outputs, n.attrs,
                     n.name, n.origin)  # fmt: skip
        nodes.append(n)
    g = g.replace(nodes)
    monkeypatch.setattr(fuse_moe, "MAX_PROBE_ELEMS", 20_000)
    ctx = PassContext()
    out = PASSES["fuse-moe"](g, ctx)
    assert [n.op for n in out.nodes].count(Op.MOE) == 1, ctx.notes
    # (no output comparison: the fused op tags the up half of a weight without data apart
    # from the gate half, `fuse_moe._replacement`; the check above compared the functions)


def _scatter_model(path: Path, reduction: str) -> Path:
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node(
        "ScatterElements", ["d", "i", "u"], ["y"], axis=1, reduction=reduction, name="scatter"
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("d", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [
            helper.make_tensor("i", TensorProto.INT64, [2, 1], [2, 0]),
            helper.make_tensor("u", TensorProto.FLOAT, [2, 1], [5.0, 7.0]),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def test_scatter_elements_imports_and_a_reduction_is_refused_in_one_line(tmp_path: Path) -> None:
    from wsecc.errors import WseccError

    g, _ = import_model(_scatter_model(tmp_path / "s.onnx", "none"))
    d = np.zeros((2, 4), np.float32)
    np.testing.assert_array_equal(run(g, {"d": d})["y"], [[0, 0, 5, 0], [7, 0, 0, 0]])
    with pytest.raises(WseccError, match="reduction 'add' is not supported"):
        import_model(_scatter_model(tmp_path / "add.onnx", "add"))
