"""fuse-moe on the bundled Mixtral export: the router, the gathered experts and the combine
become one `moe` op computing what the block computed; a block that computes something else
(or leaks a value) is left alone, with the reason noted."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pytest
from wsecc.passes import PASSES, PassContext

from wsecc.frontend.onnx import import_model
from wsecc.interp import run
from wsecc.ir.core import DType, Graph, Node, Op, TensorType, Value
from wsecc.ir.verify import verify

BEFORE = ("canonicalize", "fuse-embedding", "fuse-linear")


def _graph(
    samples_dir: Path, name: str = "mixtral_dynamo.onnx", batch: int = 2, seq: int = 8
) -> Graph:
    g, _ = import_model(samples_dir / name, batch=batch, seq=seq)
    ctx = PassContext()
    for p in BEFORE:
        g = PASSES[p](g, ctx)
    return g


def _feeds(g: Graph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "input_ids": rng.integers(3, 256, (2, 8)).astype(np.int64),
        "attention_mask": np.ones((2, 8), np.int64),
    }


def test_mixtral_blocks_become_one_moe_op_each(samples_dir: Path) -> None:
    g = _graph(samples_dir)
    out = PASSES["fuse-moe"](g, PassContext())
    verify(out)
    ops = [n.op for n in out.nodes]
    assert ops.count(Op.MOE) == 2
    assert Op.TOP_K not in ops
    assert not any(n.op is Op.GATHER_ND and n.inputs[0].is_const for n in out.nodes)
    moe = next(n for n in out.nodes if n.op is Op.MOE)
    assert moe.attr_dict == {
        "activation": "silu", "k": 2, "normalize": True, "router": "softmax", "shared": "none",
    }  # fmt: skip
    # x[.., 64], W_router [64, 4], W_gate, W_up [4, 64, 96], W_down [4, 96, 64]
    assert [v.type.shape for v in moe.inputs[1:]] == [
        (64, 4),
        (4, 64, 96),
        (4, 64, 96),
        (4, 96, 64),
    ]
    feeds = _feeds(g)
    want, got = run(g, feeds), run(out, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_qwen2_moe_shared_expert_joins_the_block(samples_dir: Path) -> None:
    """Qwen2-MoE: top 2 of 4 not renormalised, plus a shared SwiGLU expert (width 96) scaled
    by sigmoid(x w): the Add of the two is the block's output."""
    g = _graph(samples_dir, "qwen2moe_dynamo.onnx")
    out = PASSES["fuse-moe"](g, PassContext())
    moes = [n for n in out.nodes if n.op is Op.MOE]
    assert len(moes) == 2
    assert moes[0].attr_dict == {
        "activation": "silu", "k": 2, "normalize": False, "router": "softmax", "shared": "sigmoid",
    }  # fmt: skip
    assert [v.type.shape for v in moes[0].inputs[5:]] == [(64, 96), (64, 96), (96, 64), (64, 1)]
    feeds = _feeds(g)
    want, got = run(g, feeds), run(out, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_qwen3_moe_interleaved_dense_and_moe_layers(samples_dir: Path) -> None:
    """Qwen3-MoE with layer 1 dense (mlp_only_layers): layer 0's block fuses (renormalised,
    no shared expert), layer 1's SwiGLU MLP is left for fuse-swiglu."""
    g = _graph(samples_dir, "qwen3moe_dynamo.onnx")
    out = PASSES["fuse-moe"](g, PassContext())
    moes = [n for n in out.nodes if n.op is Op.MOE]
    assert len(moes) == 1 and moes[0].attr("normalize") and moes[0].attr("shared") == "none"
    assert Op.TOP_K not in [n.op for n in out.nodes]
    feeds = _feeds(g)
    want, got = run(g, feeds), run(out, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def _replace(g: Graph, old: Node, new: Node) -> Graph:
    return g.replace(new if n is old else n for n in g.nodes)


def test_a_block_that_combines_otherwise_is_not_fused(samples_dir: Path) -> None:
    """The k weighted expert outputs maxed instead of summed: everything else is in place, but
    the block no longer computes a mixture of experts."""
    g = _graph(samples_dir)
    combine = next(n for n in g.nodes if n.op is Op.REDUCE_SUM and n.output.type.shape[-1] == 64)
    g = _replace(g, combine, Node(Op.REDUCE_MAX, combine.inputs, combine.outputs, combine.attrs,
                                  combine.name, combine.origin))  # fmt: skip
    ctx = PassContext()
    out = PASSES["fuse-moe"](g, ctx)
    assert [n.op for n in out.nodes].count(Op.MOE) == 1  # the other layer still fuses
    assert any("computes what the block computes" in n for n in ctx.notes)


@pytest.mark.parametrize("leak", ["weights", "ids"])
def test_a_block_whose_routing_is_used_outside_is_not_fused(samples_dir: Path, leak: str) -> None:
    g = _graph(samples_dir)
    topk = next(n for n in g.nodes if n.op is Op.TOP_K)
    extra = topk.outputs[0 if leak == "weights" else 1]
    g = Graph(g.inputs, (*g.outputs, extra), g.nodes, g.name)
    ctx = PassContext()
    out = PASSES["fuse-moe"](g, ctx)
    assert [n.op for n in out.nodes].count(Op.MOE) == 1
    assert any("used outside it" in n for n in ctx.notes)


def test_a_block_too_large_to_evaluate_whole_is_checked_on_a_few_tokens_alone(
    samples_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past MAX_PROBE_ELEMS the check evaluates FEW_TOKENS tokens alone, the region shrunk to
    them (its Reshapes too) and the gathered expert weights never materialised: what it holds
    does not grow with the bound token count, so the block fuses at 16 tokens and at 2,048
    under a limit that 16 tokens' whole evaluation exceeds, to the same function."""
    fuse_moe = importlib.import_module("wsecc.passes.fuse_moe")
    monkeypatch.setattr(fuse_moe, "MAX_PROBE_ELEMS", 20_000)
    g = _graph(samples_dir)  # 16 tokens; the whole block holds about 40,000 elements a token
    out = PASSES["fuse-moe"](g, PassContext())
    assert [n.op for n in out.nodes].count(Op.MOE) == 2
    feeds = _feeds(g)
    want, got = run(g, feeds), run(out, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
    big = _graph(samples_dir, batch=1, seq=2048)
    out = PASSES["fuse-moe"](big, PassContext())
    assert [n.op for n in out.nodes].count(Op.MOE) == 2


def test_token_axes_find_the_token_index_in_front() -> None:
    """The leading axes whose extent is a multiple of the token count hold the token index."""
    assert fuse_moe_module().token_axes((2, 8, 64), 16) == 2
    assert fuse_moe_module().token_axes((32, 1, 64), 16) == 1  # 16 tokens x 2 choices
    assert fuse_moe_module().token_axes((4, 64), 16) == 2  # 16 values a token over both axes
    assert fuse_moe_module().token_axes((3, 5), 16) is None  # not a whole block a token
    assert fuse_moe_module().token_axes((), 16) is None


def fuse_moe_module():  # type: ignore[no-untyped-def]
    return importlib.import_module("wsecc.passes.fuse_moe")


def test_a_block_not_established_token_wise_is_checked_with_the_other_tokens_nan(
    samples_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the region is not established to keep tokens apart, the few-token check falls
    back to every token's values, those past FEW_TOKENS NaN (a region that mixes tokens
    carries the NaN into the checked ones); what that cannot hold is not fused, and the note
    says how many tokens would fit."""
    fuse_moe = fuse_moe_module()
    g = _graph(samples_dir)
    monkeypatch.setattr(fuse_moe, "_keeps_tokens_apart", lambda n, lead: False)
    monkeypatch.setattr(fuse_moe, "MAX_PROBE_ELEMS", 200_000)
    out = PASSES["fuse-moe"](g, PassContext())
    assert [n.op for n in out.nodes].count(Op.MOE) == 2
    for limit, says in ((1000, "not even one token's values fit"),
                        (20_000, "bind at most 6 tokens (--seq x --batch)")):  # fmt: skip
        monkeypatch.setattr(fuse_moe, "MAX_PROBE_ELEMS", limit)
        ctx = PassContext()
        out = PASSES["fuse-moe"](g, ctx)
        assert Op.MOE not in [n.op for n in out.nodes]
        assert any("is not established to keep tokens apart" in n and says in n
                   for n in ctx.notes), ctx.notes  # fmt: skip


def _with_router(g: Graph, change: str) -> Graph:
    """g with layer 0's router changed: "mixing" scores over the tokens (Softmax along axis 0),
    "bottom" keeps the k least likely experts (TopK of the negated scores)."""
    soft = next(n for n in g.nodes if n.op is Op.SOFTMAX and n.output.type.shape[-1] == 4)
    if change == "mixing":
        return _replace(g, soft, Node(Op.SOFTMAX, soft.inputs, soft.outputs, (("axis", 0),),
                                      soft.name, soft.origin))  # fmt: skip
    neg = Value(f"{soft.output.name}/neg", soft.output.type)
    nodes = []
    for n in g.nodes:
        if n.op is Op.TOP_K and n.inputs[0] is soft.output:
            nodes.append(Node(Op.NEG, (soft.output,), (neg,), (), f"{n.name}/neg", n.origin))
            n = Node(n.op, (neg,), n.outputs, n.attrs, n.name, n.origin)
        nodes.append(n)
    return g.replace(nodes)


@pytest.mark.parametrize("change", ["mixing", "bottom"])
@pytest.mark.parametrize("limit", [None, 20_000])
def test_a_wrong_router_is_refused_whole_and_on_a_few_tokens(
    samples_dir: Path, monkeypatch: pytest.MonkeyPatch, change: str, limit: int | None
) -> None:
    """A router whose scores mix tokens, or that keeps the k least likely experts, computes no
    mixture of experts the `moe` op has: refused when the check evaluates the whole block and
    when it evaluates a few tokens (the mixing one is not token-wise, so its few tokens are
    checked with the others NaN)."""
    if limit is not None:
        monkeypatch.setattr(fuse_moe_module(), "MAX_PROBE_ELEMS", limit)
    ctx = PassContext()
    out = PASSES["fuse-moe"](_with_router(_graph(samples_dir), change), ctx)
    assert [n.op for n in out.nodes].count(Op.MOE) == 1  # the other layer still fuses
    assert any("computes what the block computes" in n or "bind at most" in n
               for n in ctx.notes), ctx.notes  # fmt: skip


def test_the_few_token_check_still_refuses_another_function(
    samples_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The combine maxed instead of summed is refused on the few-token path too."""
    monkeypatch.setattr(fuse_moe_module(), "MAX_PROBE_ELEMS", 20_000)
    g = _graph(samples_dir)
    combine = next(n for n in g.nodes if n.op is Op.REDUCE_SUM and n.output.type.shape[-1] == 64)
    g = _replace(g, combine, Node(Op.REDUCE_MAX, combine.inputs, combine.outputs, combine.attrs,
                                  combine.name, combine.origin))  # fmt: skip
    ctx = PassContext()
    out = PASSES["fuse-moe"](g, ctx)
    assert [n.op for n in out.nodes].count(Op.MOE) == 1
    assert any("computes what the block computes" in n for n in ctx.notes)


def test_gpt_oss_block_with_biases_and_the_clamped_gate(samples_dir: Path) -> None:
    """gpt-oss: the router a Linear with bias, softmax over the two kept logits (the softmax
    router renormalised), experts with biases, gate and up interleaved in one stack, the
    clamped gate with alpha 1.702 and limit 7 as transformers' GptOssConfig has them."""
    g = _graph(samples_dir, "gptoss_dynamo.onnx")
    out = PASSES["fuse-moe"](g, PassContext())
    moes = [n for n in out.nodes if n.op is Op.MOE]
    assert len(moes) == 2 and Op.TOP_K not in [n.op for n in out.nodes]
    a = moes[0].attr_dict
    assert (a["router"], a["normalize"], a["activation"], a["bias"]) == (
        "softmax", True, "clamped_silu", True,
    )  # fmt: skip
    assert np.float32(a["alpha"]) == np.float32(1.702) and a["limit"] == 7.0
    # b_router [E], b_gate, b_up [E, I], b_down [E, H] after the weights
    assert [v.type.shape for v in moes[0].inputs[5:]] == [(4,), (4, 48), (4, 48), (4, 64)]
    feeds = _feeds(g)
    want, got = run(g, feeds), run(out, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def _with_bounds(g: Graph, ops: tuple[Op, ...], value: float) -> Graph:
    """g with layer 0's clamp bounds of the given ops (Min: the gate's and the up's upper
    bound, Max: the up's lower) replaced by ±value."""
    clamps = [n for n in g.nodes if n.op in (Op.MIN, Op.MAX) and n.inputs[1].is_const]
    layer0 = {n for n in clamps[:3] if n.op in ops}
    nodes = []
    for n in g.nodes:
        if n in layer0:
            b = n.inputs[1]
            new = type(b).constant(f"{b.name}/{n.name}", np.sign(b.const) * np.float32(value))
            n = Node(n.op, (n.inputs[0], new), n.outputs, n.attrs, n.name, n.origin)
        nodes.append(n)
    return g.replace(nodes)


def test_the_clamp_is_checked_where_it_bites(samples_dir: Path) -> None:
    """The check's second probe is large enough to reach gpt-oss's limit of 7. Layer 0 with
    its bounds at ±700 fuses with limit 700 (limit 7, the other layer's, would clip); with
    only its upper bounds moved (u clipped to [-7, 700], no clamped gate) it is not fused."""
    g = _graph(samples_dir, "gptoss_dynamo.onnx")
    out = PASSES["fuse-moe"](_with_bounds(g, (Op.MIN, Op.MAX), 700.0), PassContext())
    assert [n.attr("limit") for n in out.nodes if n.op is Op.MOE] == [700.0, 7.0]
    ctx = PassContext()
    out = PASSES["fuse-moe"](_with_bounds(g, (Op.MIN,), 700.0), ctx)
    assert [n.attr("limit") for n in out.nodes if n.op is Op.MOE] == [7.0]
    assert any("computes what the block computes" in n for n in ctx.notes)


def _block(g: Graph) -> tuple[list[Node], Value, Value]:
    """Layer 0's block as fuse-moe delimits it: (region, x, output)."""
    fm = fuse_moe_module()
    view = fm.GraphView(g)
    topk = next(n for n in g.nodes if n.op is Op.TOP_K)
    x = fm._viewed(view, fm._router(view, topk).inputs[0])
    routed = fm._block_output(view, topk, x)
    out = fm._with_shared(view, topk, routed) or routed
    return fm._region(view, x, out), x, out


@pytest.mark.parametrize(
    "sample", ["mixtral_dynamo.onnx", "qwen2moe_dynamo.onnx", "gptoss_dynamo.onnx"]
)
def test_the_block_on_a_few_tokens_alone_is_the_whole_blocks_first_tokens(
    samples_dir: Path, sample: str
) -> None:
    """What the shrunk evaluation rests on, on each exporter's block: evaluated on its first 4
    tokens alone, the block gives what the whole 16-token evaluation gives for them, to the
    float32 rounding of the expert matmuls' other summation order (`_rtol`)."""
    fm = fuse_moe_module()
    region, x, out = _block(_graph(samples_dir, sample))
    probe = np.random.default_rng(1).standard_normal(x.type.shape).astype(np.float32)
    h = x.type.shape[-1]
    whole = fm.eval_nodes(region, {x: probe})[out].reshape(-1, h)[:4]
    alone = fm._evaluate_tokenwise(region, x, probe.reshape(-1, h)[:4], out, 4)
    assert isinstance(alone, np.ndarray), alone
    tol = fm._rtol(h, 96) * float(np.max(np.abs(whole)))
    np.testing.assert_allclose(alone, whole, rtol=0, atol=tol)


def test_a_node_that_moves_or_gathers_tokens_is_not_established_token_wise(
    samples_dir: Path,
) -> None:
    """`_keeps_tokens_apart` refuses a Transpose that moves the token axis inward and a gather
    from computed values (it indexes tokens), and keeps a Transpose of the other axes."""
    fm = fuse_moe_module()
    t = Value("t", TensorType(DType.FLOAT32, (16, 2, 64)))
    y = Value("y", TensorType(DType.FLOAT32, (2, 16, 64)))
    idx = Value("i", TensorType(DType.INT64, (16, 1)))
    lead = {t: 1, idx: 1}
    inward = Node(Op.TRANSPOSE, (t,), (y,), (("perm", (1, 0, 2)),), "tr", ())
    inner = Node(Op.TRANSPOSE, (t,), (y,), (("perm", (0, 2, 1)),), "tr", ())
    gather = Node(Op.GATHER_ND, (t, idx), (y,), (("batch_dims", 0),), "g", ())
    assert not fm._keeps_tokens_apart(inward, lead)
    assert fm._keeps_tokens_apart(inner, lead)
    assert not fm._keeps_tokens_apart(gather, lead)
