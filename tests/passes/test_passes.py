"""Each pass and rule: IR text in, IR text out — plus a case where the rule must not fire."""

from __future__ import annotations

import numpy as np
import pytest
from wsecc.passes import PASSES, PassContext

from wsecc.interp import run
from wsecc.ir.core import Graph, Op
from wsecc.ir.printer import format_graph, parse_graph
from wsecc.ir.verify import verify


def apply(name: str, text: str) -> tuple[str, PassContext]:
    ctx = PassContext()
    g = parse_graph(text)
    verify(g)
    out = PASSES[name](g, ctx)
    verify(out)
    # the pass computes the same function
    rng = np.random.default_rng(0)
    feeds = {
        v.name: rng.standard_normal(v.type.shape).astype(v.type.dtype.numpy)
        for v in g.inputs
        if v.type.dtype.is_float
    }
    feeds |= {
        v.name: np.ones(v.type.shape, v.type.dtype.numpy)
        for v in g.inputs
        if not v.type.dtype.is_float
    }
    a, b = run(g, feeds), run(out, feeds)
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-6)
    return format_graph(out), ctx


def body(text: str) -> list[str]:
    """The node lines of a printed graph, constants and names left out."""
    return [
        ln.strip().split(" name=")[0]
        for ln in text.splitlines()
        if " = " in ln and " = const " not in ln
    ]


def test_canonicalize_drops_identity_orders_operands_folds_weight_transpose():
    out, _ = apply(
        "canonicalize",
        """graph g(%x: f32[2,3]) {
          %w = const f32[2,3] [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
          %b = const f32[2] [0.5, -0.5]
          %wt: f32[3,2] = transpose(%w) {'perm': (1, 0)}
          %i: f32[2,3] = identity(%x)
          %m: f32[2,2] = matmul(%i, %wt)
          %y: f32[2,2] = add(%b, %m)
          return %y
        }""",
    )
    assert body(out) == ["%m: f32[2,2] = matmul(%x, %wt)", "%y: f32[2,2] = add(%m, %b)"]
    assert "%wt = const f32[3,2] [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]" in out


def test_canonicalize_rewrites_gemm():
    out, _ = apply(
        "canonicalize",
        """graph g(%x: f32[2,3]) {
          %w = const f32[2,3] [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
          %c = const f32[2] [0.5, -0.5]
          %y: f32[2,2] = gemm(%x, %w, %c) {'alpha': 1.0, 'beta': 1.0, 'trans_a': False, 'trans_b': True}
          return %y
        }""",
    )
    assert body(out) == ["%y/mm: f32[2,2] = matmul(%x, %w.T)", "%y: f32[2,2] = add(%y/mm, %c)"]


LINEAR_IN = """graph g(%x: f32[2,4,3]) {
  %w = const f32[3,2] [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
  %b = const f32[2] [0.5, -0.5]
  %m: f32[2,4,2] = matmul(%x, %w)
  %y: f32[2,4,2] = add(%m, %b)
  return %y
}"""


def test_fuse_linear():
    out, _ = apply("fuse-linear", LINEAR_IN)
    assert body(out) == [
        "%y: f32[2,4,2] = linear(%x, %w, %b) {'activation': 'none', 'has_bias': True}"
    ]


def test_fuse_linear_does_not_fire_on_activation_matmul():
    out, ctx = apply(
        "fuse-linear",
        LINEAR_IN.replace("%x: f32[2,4,3]) {", "%x: f32[2,4,3], %w2: f32[3,2]) {").replace(
            "matmul(%x, %w)", "matmul(%x, %w2)"
        ),
    )
    assert "linear(" not in out
    assert any("weight is not a constant matrix" in n for n in ctx.notes)


GELU_ERF = """graph g(%x: f32[4,8]) {
  %s2 = const f32[] 1.4142135381698608
  %one = const f32[] 1.0
  %half = const f32[] 0.5
  %d: f32[4,8] = div(%x, %s2)
  %e: f32[4,8] = erf(%d)
  %a: f32[4,8] = add(%e, %one)
  %m: f32[4,8] = mul(%x, %a)
  %y: f32[4,8] = mul(%m, %half)
  return %y
}"""


def test_fuse_gelu_erf_form():
    out, _ = apply("fuse-gelu", GELU_ERF)
    assert body(out) == ["%y: f32[4,8] = gelu(%x) {'approximate': 'none'}"]


def test_fuse_gelu_tanh_form_with_x_times_x_times_x():
    out, _ = apply(
        "fuse-gelu",
        """graph g(%x: f32[4,8]) {
          %c = const f32[] 0.044714998453855515
          %k = const f32[] 0.7978845834732056
          %one = const f32[] 1.0
          %half = const f32[] 0.5
          %x2: f32[4,8] = mul(%x, %x)
          %x3: f32[4,8] = mul(%x2, %x)
          %t0: f32[4,8] = mul(%x3, %c)
          %t1: f32[4,8] = add(%x, %t0)
          %t2: f32[4,8] = mul(%t1, %k)
          %t3: f32[4,8] = tanh(%t2)
          %t4: f32[4,8] = add(%t3, %one)
          %hx: f32[4,8] = mul(%x, %half)
          %y: f32[4,8] = mul(%hx, %t4)
          return %y
        }""",
    )
    assert body(out) == ["%y: f32[4,8] = gelu(%x) {'approximate': 'tanh'}"]


def test_fuse_gelu_does_not_fire_when_the_function_differs():
    out, ctx = apply("fuse-gelu", GELU_ERF.replace("1.4142135381698608", "1.5"))
    assert "gelu(" not in out
    assert any("no region around it computes GELU" in n for n in ctx.notes)


def test_gelu_folds_into_linear_epilogue():
    text = LINEAR_IN.replace("return %y", "%z: f32[2,4,2] = tanh(%y)\n  return %z")
    lin, _ = apply("fuse-linear", text)
    out, _ = apply("fuse-gelu", lin)
    assert body(out) == [
        "%z: f32[2,4,2] = linear(%x, %w, %b) {'activation': 'tanh', 'has_bias': True}"
    ]


LAYERNORM = """graph g(%a: f32[2,3,4], %r: f32[2,3,4]) {
  %two = const f32[] 2.0
  %eps = const f32[] 9.999999747378752e-06
  %gamma = const f32[4] [1.0, 2.0, 0.5, 1.5]
  %beta = const f32[4] [0.1, 0.0, -0.2, 0.3]
  %x: f32[2,3,4] = add(%a, %r)
  %mean: f32[2,3,1] = reduce_mean(%x) {'axes': (2,), 'keepdims': True}
  %d: f32[2,3,4] = sub(%x, %mean)
  %p: f32[2,3,4] = pow(%d, %two)
  %var: f32[2,3,1] = reduce_mean(%p) {'axes': (2,), 'keepdims': True}
  %ve: f32[2,3,1] = add(%var, %eps)
  %sd: f32[2,3,1] = sqrt(%ve)
  %n: f32[2,3,4] = div(%d, %sd)
  %g: f32[2,3,4] = mul(%n, %gamma)
  %y: f32[2,3,4] = add(%g, %beta)
  %z: f32[2,3,4] = add(%y, %x)
  return %z
}"""


def test_fuse_layernorm_decomposed_with_residual_sum_used_on():
    out, _ = apply("fuse-layernorm", LAYERNORM)
    assert body(out) == [
        "%y: f32[2,3,4], %x: f32[2,3,4] = layer_norm(%a, %r, %gamma, %beta) "
        "{'emit_sum': True, 'epsilon': 9.999999747378752e-06, 'has_skip': True}",
        "%z: f32[2,3,4] = add(%y, %x)",
    ]


def test_fuse_layernorm_does_not_fire_over_another_axis():
    text = LAYERNORM.replace("'axes': (2,)", "'axes': (1,)").replace("f32[2,3,1]", "f32[2,1,4]")
    out, ctx = apply("fuse-layernorm", text)
    assert "layer_norm(" not in out
    assert any("not a mean over the last axis" in n for n in ctx.notes)


def _attention_text(bias: str) -> str:
    # B=1, S=4, 2 heads of 2: q, k, v are slices of a packed [1, 4, 12] input
    return f"""graph g(%qkv: f32[1,4,12], %mask: i64[1,4]) {{
      %scale = const f32[] 0.7071067690849304
      %one = const f32[] 1.0
      %neg = const f32[] {bias}
      %q0: f32[1,4,4], %k0: f32[1,4,4], %v0: f32[1,4,4] = split(%qkv) {{'axis': 2, 'sizes': (4, 4, 4)}}
      %q1: f32[1,4,2,2] = reshape(%q0) {{'shape': (1, 4, 2, 2)}}
      %q: f32[1,2,4,2] = transpose(%q1) {{'perm': (0, 2, 1, 3)}}
      %k1: f32[1,4,2,2] = reshape(%k0) {{'shape': (1, 4, 2, 2)}}
      %kt: f32[1,2,2,4] = transpose(%k1) {{'perm': (0, 2, 3, 1)}}
      %v1: f32[1,4,2,2] = reshape(%v0) {{'shape': (1, 4, 2, 2)}}
      %v: f32[1,2,4,2] = transpose(%v1) {{'perm': (0, 2, 1, 3)}}
      %s: f32[1,2,4,4] = matmul(%q, %kt)
      %ss: f32[1,2,4,4] = mul(%s, %scale)
      %m1: i64[1,1,1,4] = reshape(%mask) {{'shape': (1, 1, 1, 4)}}
      %mf: f32[1,1,1,4] = cast(%m1) {{'to': 'f32'}}
      %inv: f32[1,1,1,4] = sub(%one, %mf)
      %bias: f32[1,1,1,4] = mul(%inv, %neg)
      %sb: f32[1,2,4,4] = add(%ss, %bias)
      %p: f32[1,2,4,4] = softmax(%sb) {{'axis': 3}}
      %o: f32[1,2,4,2] = matmul(%p, %v)
      %ot: f32[1,4,2,2] = transpose(%o) {{'perm': (0, 2, 1, 3)}}
      %y: f32[1,4,4] = reshape(%ot) {{'shape': (1, 4, 4)}}
      return %y
    }}"""


def test_fuse_attention_classic_bert_mask():
    out, _ = apply("fuse-attention", _attention_text("-10000.0"))
    assert body(out) == [
        "%y: f32[1,4,4] = attention(%qkv, %qkv, %qkv, %mask) {'causal': False, 'fill': -10000.0, "
        "'head_dim': 2, 'k_offset': 4, 'mask': 'key_padding', 'nan_to_zero': False, 'num_heads': 2, "
        "'q_offset': 0, 'scale': 0.7071067690849304, 'v_offset': 8, 'window': 0}"
    ]


def test_fuse_attention_distilbert_mask_expanded_over_the_heads():
    """DistilBERT (transformers 4.57) fills scores where mask == 0, the condition expanded to
    [B, heads, S, S] before the Where: the same key-padding mask in every head."""
    bert = """      %m1: i64[1,1,1,4] = reshape(%mask) {'shape': (1, 1, 1, 4)}
      %mf: f32[1,1,1,4] = cast(%m1) {'to': 'f32'}
      %inv: f32[1,1,1,4] = sub(%one, %mf)
      %bias: f32[1,1,1,4] = mul(%inv, %neg)
      %sb: f32[1,2,4,4] = add(%ss, %bias)
"""
    distilbert = """      %zero = const i64[] 0
      %eq: bool[1,4] = equal(%mask, %zero)
      %e1: bool[1,1,1,4] = reshape(%eq) {'shape': (1, 1, 1, 4)}
      %e: bool[1,2,4,4] = expand(%e1) {'shape': (1, 2, 4, 4)}
      %sb: f32[1,2,4,4] = where(%e, %neg, %ss)
"""
    text = _attention_text("-3.4028234663852886e+38")
    assert bert in text
    out, _ = apply("fuse-attention", text.replace(bert, distilbert))
    assert body(out) == [
        "%y: f32[1,4,4] = attention(%qkv, %qkv, %qkv, %mask) {'causal': False, "
        "'fill': -3.4028234663852886e+38, 'head_dim': 2, 'k_offset': 4, 'mask': 'key_padding', "
        "'nan_to_zero': False, 'num_heads': 2, 'q_offset': 0, 'scale': 0.7071067690849304, "
        "'v_offset': 8, 'window': 0}"
    ]


def test_fuse_attention_does_not_fire_on_a_soft_bias():
    out, ctx = apply("fuse-attention", _attention_text("-3.0"))
    assert "attention(" not in out
    assert any("additive bias is not a mask" in n for n in ctx.notes)


MEGATRON_MASK = """      %mr: f32[1,1,4,6] = slice(%mask) {'axes': (2,), 'ends': (4,), 'starts': (0,), 'steps': (1,)}
      %m: f32[1,1,4,4] = slice(%mr) {'axes': (3,), 'ends': (4,), 'starts': (0,), 'steps': (1,)}
      %kept: f32[1,2,4,4] = mul(%ss, %m)
      %inv: f32[1,1,4,4] = sub(%one, %m)
      %drop: f32[1,1,4,4] = mul(%inv, %c)
      %sb: f32[1,2,4,4] = sub(%kept, %drop)
"""


def _megatron_text(mask: str = MEGATRON_MASK) -> str:
    """Megatron's attention (B=1, S=4, 2 heads of 2): a per-query float mask [B, 1, max, max]
    (max 6) the caller fills, read at its [S, S] corner m and applied as scores·m − c·(1 − m)."""
    text = _attention_text("-10000.0").replace("%mask: i64[1,4]", "%mask: f32[1,1,6,6]")
    bert = text[text.index("      %m1:") : text.index("      %p:")]
    return text.replace(bert, mask).replace(
        "%neg = const f32[] -10000.0", "%c = const f32[] 10000.0"
    )


def _fuse_with_random_masks(text: str) -> tuple[str, PassContext]:
    """fuse-attention on `text`, the result checked against the input graph on random 0/1
    masks (each query keeps its own key)."""
    ctx = PassContext()
    g = parse_graph(text)
    out = PASSES["fuse-attention"](g, ctx)
    verify(out)
    rng = np.random.default_rng(3)
    for _ in range(3):
        mask = (rng.random((1, 1, 6, 6)) < 0.5).astype(np.float32)
        mask[0, 0, np.arange(6), np.arange(6)] = 1
        feeds = {"qkv": rng.standard_normal((1, 4, 12)).astype(np.float32), "mask": mask}
        np.testing.assert_allclose(run(out, feeds)["y"], run(g, feeds)["y"], rtol=1e-5, atol=1e-6)
    return format_graph(out), ctx


def test_fuse_attention_megatron_mask_is_a_full_mask():
    out, _ = _fuse_with_random_masks(_megatron_text())
    assert body(out) == [
        "%y/mask_corner: f32[1,1,4,4] = slice(%mask) {'axes': (2, 3,), 'ends': (4, 4,), "
        "'starts': (0, 0,), 'steps': (1, 1,)}",
        "%y/mask: f32[1,4,4] = reshape(%y/mask_corner) {'shape': (1, 4, 4,)}",
        "%y: f32[1,4,4] = attention(%qkv, %qkv, %qkv, %y/mask) {'causal': False, 'fill': -10000.0, "
        "'head_dim': 2, 'k_offset': 4, 'mask': 'full', 'nan_to_zero': False, 'num_heads': 2, "
        "'q_offset': 0, 'scale': 0.7071067690849304, 'v_offset': 8, 'window': 0}",
    ]


def test_fuse_attention_megatron_mask_commuted():
    """m·scores, and the masked fill as −(1 − m)·c added rather than subtracted."""
    commuted = (
        MEGATRON_MASK.replace("mul(%ss, %m)", "mul(%m, %ss)")
        .replace("sub(%one, %m)", "sub(%m, %one)")
        .replace("mul(%inv, %c)", "mul(%c, %inv)")
        .replace("sub(%kept, %drop)", "add(%kept, %drop)")
    )
    out, _ = _fuse_with_random_masks(_megatron_text(commuted))
    assert "'mask': 'full'" in out and "'fill': -10000.0" in out


MEGATRON_TRANSPOSED = MEGATRON_MASK.replace(
    "      %m: f32[1,1,4,4] = slice(%mr)", "      %mt: f32[1,1,4,4] = slice(%mr)"
).replace(
    "      %kept:", "      %m: f32[1,1,4,4] = transpose(%mt) {'perm': (0, 1, 3, 2)}\n      %kept:"
)


@pytest.mark.parametrize(
    "mask,reason",
    [
        # scores·m alone: the masked pairs score 0, which softmax does not drop
        (
            MEGATRON_MASK[: MEGATRON_MASK.index("      %kept")]
            + "      %sb: f32[1,2,4,4] = mul(%ss, %m)\n",
            "no later term masks the zeros",
        ),
        # the mask read with queries and keys swapped is not mask[b, query, key]
        (MEGATRON_TRANSPOSED, "mask does not mean 'full mask'"),
    ],
)
def test_fuse_attention_does_not_fire_on_what_is_not_a_megatron_mask(mask, reason):
    g = parse_graph(_megatron_text(mask))
    ctx = PassContext()
    out = format_graph(PASSES["fuse-attention"](g, ctx))
    assert "attention(" not in out
    (note,) = ctx.notes
    assert reason in note and "\n" not in note


def _bloom_attention_text(positions: str) -> str:
    """BLOOM's form (B=1, S=4, 2 heads of 2): scores baddbmm'd in [B·heads, S, S] with the
    ALiBi bias slope_h × position, the positions (cumsum(mask) - 1)·mask, then reshaped to
    [B, heads, S, S] and given the key-padding mask; p·v in [B·heads, S, dh] again."""
    return f"""graph g(%qkv: f32[1,4,12], %mask: i64[1,4]) {{
      %scale = const f32[] 0.7071067690849304
      %one = const f32[] 1.0
      %one_i = const i64[] 1
      %neg = const f32[] -3.4028234663852886e+38
      %slopes = const f32[2,1] [[0.25], [0.0625]]
      %cs: i64[1,4] = cumsum(%mask) {{'axis': 1, 'exclusive': False, 'reverse': False}}
      %cs1: i64[1,4] = sub(%cs, %one_i)
      %pos: i64[1,4] = mul(%cs1, %mask)
      %pos2: i64[1,4] = {positions}
      %pu: i64[1,1,4] = reshape(%pos2) {{'shape': (1, 1, 4)}}
      %pf: f32[1,1,4] = cast(%pu) {{'to': 'f32'}}
      %al: f32[1,2,4] = mul(%pf, %slopes)
      %alibi: f32[2,1,4] = reshape(%al) {{'shape': (2, 1, 4)}}
      %q0: f32[1,4,4], %k0: f32[1,4,4], %v0: f32[1,4,4] = split(%qkv) {{'axis': 2, 'sizes': (4, 4, 4)}}
      %q1: f32[1,4,2,2] = reshape(%q0) {{'shape': (1, 4, 2, 2)}}
      %q2: f32[1,2,4,2] = transpose(%q1) {{'perm': (0, 2, 1, 3)}}
      %q: f32[2,4,2] = reshape(%q2) {{'shape': (2, 4, 2)}}
      %k1: f32[1,4,2,2] = reshape(%k0) {{'shape': (1, 4, 2, 2)}}
      %k2: f32[1,2,4,2] = transpose(%k1) {{'perm': (0, 2, 1, 3)}}
      %k3: f32[2,4,2] = reshape(%k2) {{'shape': (2, 4, 2)}}
      %kt: f32[2,2,4] = transpose(%k3) {{'perm': (0, 2, 1)}}
      %v1: f32[1,4,2,2] = reshape(%v0) {{'shape': (1, 4, 2, 2)}}
      %v2: f32[1,2,4,2] = transpose(%v1) {{'perm': (0, 2, 1, 3)}}
      %v: f32[2,4,2] = reshape(%v2) {{'shape': (2, 4, 2)}}
      %s: f32[2,4,4] = matmul(%q, %kt)
      %ss: f32[2,4,4] = mul(%s, %scale)
      %sa: f32[2,4,4] = add(%ss, %alibi)
      %s4: f32[1,2,4,4] = reshape(%sa) {{'shape': (1, 2, 4, 4)}}
      %m1: i64[1,1,1,4] = reshape(%mask) {{'shape': (1, 1, 1, 4)}}
      %mf: f32[1,1,1,4] = cast(%m1) {{'to': 'f32'}}
      %inv: f32[1,1,1,4] = sub(%one, %mf)
      %bias: f32[1,1,1,4] = mul(%inv, %neg)
      %sb: f32[1,2,4,4] = add(%s4, %bias)
      %p: f32[1,2,4,4] = softmax(%sb) {{'axis': 3}}
      %p3: f32[2,4,4] = reshape(%p) {{'shape': (2, 4, 4)}}
      %o: f32[2,4,2] = matmul(%p3, %v)
      %o4: f32[1,2,4,2] = reshape(%o) {{'shape': (1, 2, 4, 2)}}
      %ot: f32[1,4,2,2] = transpose(%o4) {{'perm': (0, 2, 1, 3)}}
      %y: f32[1,4,4] = reshape(%ot) {{'shape': (1, 4, 4)}}
      return %y
    }}"""


def test_fuse_attention_alibi_in_heads_batched_scores():
    text = _bloom_attention_text("identity(%pos)")
    out, _ = apply("fuse-attention", text)
    assert body(out) == [
        "%y: f32[1,4,4] = attention(%qkv, %qkv, %qkv, %mask) {'alibi': (0.25, 0.0625,), "
        "'causal': False, 'fill': -3.4028234663852886e+38, 'head_dim': 2, 'k_offset': 4, "
        "'mask': 'key_padding', 'nan_to_zero': False, 'num_heads': 2, 'q_offset': 0, "
        "'scale': 0.7071067690849304, 'v_offset': 8, 'window': 0}"
    ]
    # padded keys shift the positions of the keys after them: left padding and a hole
    rng = np.random.default_rng(1)
    qkv = rng.standard_normal((1, 4, 12)).astype(np.float32)
    for mask in ([[0, 1, 1, 1]], [[1, 0, 1, 1]]):
        feeds = {"qkv": qkv, "mask": np.array(mask, np.int64)}
        want = run(parse_graph(text), feeds)["y"]
        np.testing.assert_allclose(run(parse_graph(out), feeds)["y"], want, rtol=1e-5, atol=1e-6)


def test_fuse_attention_does_not_fire_on_a_bias_not_linear_in_the_key_position():
    out, ctx = apply("fuse-attention", _bloom_attention_text("mul(%pos, %pos)"))
    assert "attention(" not in out
    assert any("is not a mask, nor ALiBi" in n for n in ctx.notes)


# MPNet's relative position bias, folded to a constant [1, heads, S, S] (B=1, 2 heads, S=4)
_PB = [[[0.5 * ((k - q) % 3) - 0.25 * h for k in range(4)] for q in range(4)] for h in range(2)]


def _mpnet_attention_text(bias_term: str = "") -> str:
    """The BERT-mask attention with a constant position bias %pb added to the scaled scores
    before the mask (MPNet's), or the %pbm that `bias_term` makes from it."""
    text = _attention_text("-3.4028234663852886e+38")
    pb = f"      %pb = const f32[1,2,4,4] {[_PB]}\n"
    add = bias_term + f"      %sp: f32[1,2,4,4] = add(%ss, {'%pbm' if bias_term else '%pb'})\n"
    text = text.replace("      %m1:", pb + add + "      %m1:")
    return text.replace("add(%ss, %bias)", "add(%sp, %bias)")


def test_fuse_attention_constant_bias_becomes_a_bias_operand():
    """A bias that is neither a mask nor ALiBi but a constant per head, query and key becomes
    the attention's bias operand [H, Sq, Sk], and the fused graph computes what the graph did,
    padded keys included."""
    text = _mpnet_attention_text()
    out, _ = apply("fuse-attention", text)
    assert body(out) == [
        "%y: f32[1,4,4] = attention(%qkv, %qkv, %qkv, %mask, %pb/bias) {'causal': False, "
        "'fill': -3.4028234663852886e+38, 'has_bias': True, 'head_dim': 2, 'k_offset': 4, "
        "'mask': 'key_padding', 'nan_to_zero': False, 'num_heads': 2, 'q_offset': 0, "
        "'scale': 0.7071067690849304, 'v_offset': 8, 'window': 0}"
    ]
    g = PASSES["fuse-attention"](parse_graph(text), PassContext())
    (att,) = [n for n in g.nodes if n.op is Op.ATTENTION]
    np.testing.assert_array_equal(att.inputs[4].const, np.float32(_PB))
    _computes_as(g, text, [[1, 1, 1, 1]], [[1, 1, 0, 0]], [[1, 0, 1, 1]])


def _computes_as(fused: Graph, text: str, *masks: list[list[int]]) -> None:
    """`fused` computes what the graph `text` does, under each of the key-padding `masks`."""
    rng = np.random.default_rng(1)
    for mask in masks:
        feeds = {"qkv": rng.standard_normal((1, 4, 12)).astype(np.float32), "mask": np.array(mask)}
        want = run(parse_graph(text), feeds)["y"]
        np.testing.assert_allclose(run(fused, feeds)["y"], want, rtol=1e-5, atol=1e-6)


def test_fuse_attention_bias_the_folder_left_as_a_lookup_of_constants():
    """At long sequences the folder leaves MPNet's bias as ops (its [S, S, heads] lookup is over
    the folder's output limit): an Embedding of constant bucket ids into the learned [buckets,
    heads] table, permuted to [1, heads, S, S]. A function of constants alone, it is a bias
    operand like the folded one (an Embedding among a term's ancestors meant data before)."""
    buckets = [[(k - q) % 3 for k in range(4)] for q in range(4)]
    term = f"""      %bucket = const i64[4,4] {buckets}
      %table = const f32[3,2] [[0.5, -0.25], [0.0, 0.75], [-1.0, 0.25]]
      %e: f32[4,4,2] = embedding(%bucket, %table)
      %et: f32[2,4,4] = transpose(%e) {{'perm': (2, 0, 1)}}
      %pbm: f32[1,2,4,4] = reshape(%et) {{'shape': (1, 2, 4, 4)}}
"""
    text = _mpnet_attention_text(term)
    out, _ = apply("fuse-attention", text)
    assert "'has_bias': True" in out and "softmax" not in out
    g = PASSES["fuse-attention"](parse_graph(text), PassContext())
    _computes_as(g, text, [[1, 1, 1, 1]], [[1, 1, 0, 0]], [[1, 0, 1, 1]])


def test_fuse_attention_a_lower_rank_bias_broadcasts_against_the_scores():
    """MPT's ALiBi is a constant [heads, 1, S] (slope × key index, whatever the padding), added
    to the [B, heads, S, S] scores: numpy broadcasting aligns it on the right, so it is a
    bias operand like MPNet's (it failed to evaluate before, aligned against a [B, 1, S, S]
    mask)."""
    slopes = [[[-0.5 * k for k in range(4)]], [[-0.25 * k for k in range(4)]]]
    term = f"""      %alibi = const f32[2,1,4] {slopes}
      %pbm: f32[2,1,4] = identity(%alibi)
"""
    text = _mpnet_attention_text(term)
    out, _ = apply("fuse-attention", text)
    assert "'has_bias': True" in out and "softmax" not in out and "alibi" not in out
    g = PASSES["fuse-attention"](parse_graph(text), PassContext())
    _computes_as(g, text, [[1, 1, 1, 1]], [[0, 1, 1, 1]], [[1, 0, 1, 1]], [[1, 0, 0, 1]])


def test_fuse_attention_does_not_fire_on_a_bias_that_moves_with_the_mask():
    """The same bias scaled by the mask input: with every key kept it is the constant, but it
    depends on a graph input, so it is no bias operand (nor a mask, nor ALiBi)."""
    scaled = """      %mk: i64[1,1,1,4] = reshape(%mask) {'shape': (1, 1, 1, 4)}
      %mkf: f32[1,1,1,4] = cast(%mk) {'to': 'f32'}
      %pbm: f32[1,2,4,4] = mul(%pb, %mkf)
"""
    out, ctx = apply("fuse-attention", _mpnet_attention_text(scaled))
    assert "attention(" not in out
    (note,) = ctx.notes
    assert "is not a mask, nor ALiBi" in note and "nor a constant bias per head" in note


def test_fuse_embedding_and_lm_head():
    text = """graph g(%ids: i64[1,3]) {
      %wte = const f32[4,2] [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]
      %wpe = const f32[3,2] [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]
      %pos = const i64[1,3] [[0, 1, 2]]
      %head = const f32[2,4] [[1.0, 3.0, 5.0, 7.0], [2.0, 4.0, 6.0, 8.0]]
      %t: f32[1,3,2] = gather(%wte, %ids) {'axis': 0}
      %p: f32[1,3,2] = gather(%wpe, %pos) {'axis': 0}
      %h: f32[1,3,2] = add(%t, %p)
      %logits: f32[1,3,4] = linear(%h, %head) {'activation': 'none', 'has_bias': False}
      return %logits
    }"""
    emb, _ = apply("fuse-embedding", text)
    assert body(emb)[0] == "%h: f32[1,3,2] = embedding(%ids, %wte, %pos, %wpe)"
    out, _ = apply("fuse-lm-head", emb)
    assert (
        body(out)[1]
        == "%logits: f32[1,3,4] = lm_head(%h, %head) {'activation': 'none', 'has_bias': False, 'tied': True}"
    )


def test_fuse_embedding_takes_folded_lookups_and_constants_in():
    """ALBERT called without token types: the frontend folded their lookup of a zero buffer to
    a constant, and positions are a lookup at constant ids. Both join the token lookup: one
    embedding reading the ids, no kernel without an input."""
    text = """graph g(%ids: i64[1,3]) {
      %wte = const f32[4,2] [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]]
      %wpe = const f32[3,2] [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]
      %pos = const i64[1,3] [[0, 1, 2]]
      %types = const f32[1,3,2] [[[0.01, 0.02], [0.01, 0.02], [0.01, 0.02]]]
      %t: f32[1,3,2] = gather(%wte, %ids) {'axis': 0}
      %tt: f32[1,3,2] = add(%t, %types)
      %p: f32[1,3,2] = gather(%wpe, %pos) {'axis': 0}
      %h: f32[1,3,2] = add(%tt, %p)
      return %h
    }"""
    out, _ = apply("fuse-embedding", text)
    assert body(out) == ["%h: f32[1,3,2] = embedding(%ids, %wte, %tt/rows, %tt/table, %pos, %wpe)"]


def test_fuse_embedding_folds_a_lookup_of_constants_alone():
    text = """graph g(%x: f32[1,3,2]) {
      %wpe = const f32[3,2] [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]]
      %pos = const i64[1,3] [[0, 1, 2]]
      %p: f32[1,3,2] = gather(%wpe, %pos) {'axis': 0}
      %y: f32[1,3,2] = mul(%x, %p)
      return %y
    }"""
    out, _ = apply("fuse-embedding", text)
    assert body(out) == ["%y: f32[1,3,2] = mul(%x, %p)"]


@pytest.mark.parametrize("name", sorted(PASSES))
def test_every_pass_is_a_pure_function_of_its_input(name):
    g = parse_graph(LINEAR_IN)
    before = format_graph(g, full=True)
    PASSES[name](g, PassContext())
    assert format_graph(g, full=True) == before


@pytest.mark.parametrize(
    ("sample", "causal", "mask"),
    [
        ("bert_legacy_op14", False, "key_padding"),
        ("bert_dynamo", False, "key_padding"),
        ("gpt2_legacy_op17", True, "key_padding"),
        ("gpt2_dynamo", True, "key_padding"),
    ],
)
def test_fuse_attention_decides_the_same_at_batch_1_and_3(sample, causal, mask):
    """The head-layout probes run on one batch row and the mask probe once per mask: what
    they decide (offsets, mask meaning, fill) does not depend on the bound batch."""
    from conftest import SAMPLES
    from wsecc.passes import DEFAULT_PIPELINE

    from wsecc.frontend.onnx import import_model
    from wsecc.ir.core import Op
    from wsecc.pm import PassManager

    def attentions(batch: int) -> list[dict]:
        graph, _ = import_model(SAMPLES / f"{sample}.onnx", batch=batch, seq=16)
        fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
        return [n.attr_dict for n in fused.nodes if n.op is Op.ATTENTION]

    one, three = attentions(1), attentions(3)
    assert len(one) == 2  # both layers fused
    assert one == three
    assert {(a["causal"], a["mask"]) for a in one} == {(causal, mask)}


def test_fuse_attention_does_not_fire_when_the_heads_layout_moves_the_batch_axis():
    # B=2: q swaps batch and sequence, then reshapes as if it had not, so q's heads mix the
    # two samples (one batch row alone would look like a head split)
    text = """graph g(%qkv: f32[2,4,12]) {
      %scale = const f32[] 0.7071067690849304
      %q0: f32[2,4,4], %k0: f32[2,4,4], %v0: f32[2,4,4] = split(%qkv) {'axis': 2, 'sizes': (4, 4, 4)}
      %qs: f32[4,2,4] = transpose(%q0) {'perm': (1, 0, 2)}
      %q1: f32[2,4,2,2] = reshape(%qs) {'shape': (2, 4, 2, 2)}
      %q: f32[2,2,4,2] = transpose(%q1) {'perm': (0, 2, 1, 3)}
      %k1: f32[2,4,2,2] = reshape(%k0) {'shape': (2, 4, 2, 2)}
      %kt: f32[2,2,2,4] = transpose(%k1) {'perm': (0, 2, 3, 1)}
      %v1: f32[2,4,2,2] = reshape(%v0) {'shape': (2, 4, 2, 2)}
      %v: f32[2,2,4,2] = transpose(%v1) {'perm': (0, 2, 1, 3)}
      %s: f32[2,2,4,4] = matmul(%q, %kt)
      %ss: f32[2,2,4,4] = mul(%s, %scale)
      %p: f32[2,2,4,4] = softmax(%ss) {'axis': 3}
      %o: f32[2,2,4,2] = matmul(%p, %v)
      %ot: f32[2,4,2,2] = transpose(%o) {'perm': (0, 2, 1, 3)}
      %y: f32[2,4,4] = reshape(%ot) {'shape': (2, 4, 4)}
      return %y
    }"""
    out, ctx = apply("fuse-attention", text)
    assert "attention(" not in out
    assert any("does not split heads" in n for n in ctx.notes)
    # the same layout without the swap is a head split
    fused, _ = apply(
        "fuse-attention", text.replace("(1, 0, 2)", "(0, 1, 2)").replace("f32[4,2,4]", "f32[2,4,4]")
    )
    assert "attention(" in fused


def test_a_mask_too_large_to_probe_is_a_one_line_error(monkeypatch, samples_dir, capsys) -> None:
    """The mask's meaning is checked on values of the bound shape [B, 1, S, S], a block of
    query rows at a time past the probe budget; a mask that adds a bias to the kept scores
    (MPNet's relative positions) is not probed by rows, and the compile says so, not the OOM
    killer."""
    import wsecc.passes.fuse_attention as fa

    from wsecc.cli import main

    monkeypatch.setattr(fa, "MASK_PROBE_BYTES", 64 << 10)
    mpnet = samples_dir / "mpnet_legacy_op17.onnx"
    assert main(["compile", str(mpnet), "--seq", "128", "--placer", "greedy", "--no-validate",
                 "--batch", "2"]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the progress lines
    assert err.startswith("wsecc: error: fuse-attention:") and "[2, 1, 128, 128]" in err, err
    assert "adds a bias" in err and "compile at a shorter --seq" in err


def _causal_text(s: int) -> str:
    """GPT-2 as the dynamo exporter writes it at seq `s`: one head of 2, the causal part from
    two position ranges compared ([1, 1, S, S]), the key padding gathered from the mask input,
    the pair kept where both hold, the dropped scores filled with float32's lowest."""
    pos = list(range(s))
    return f"""graph g(%qkv: f32[1,{s},6], %mask: i64[1,{s}]) {{
      %scale = const f32[] 0.7071067690849304
      %zero = const f32[] 0.0
      %low = const f32[] -3.4028234663852886e+38
      %qpos = const i64[1,1,{s},1] {[[[[p] for p in pos]]]}
      %kpos = const i64[1,1,1,{s}] {[[[pos]]]}
      %q0: f32[1,{s},2], %k0: f32[1,{s},2], %v0: f32[1,{s},2] = split(%qkv) {{'axis': 2, 'sizes': (2, 2, 2)}}
      %q: f32[1,1,{s},2] = reshape(%q0) {{'shape': (1, 1, {s}, 2)}}
      %k: f32[1,1,{s},2] = reshape(%k0) {{'shape': (1, 1, {s}, 2)}}
      %kt: f32[1,1,2,{s}] = transpose(%k) {{'perm': (0, 1, 3, 2)}}
      %v: f32[1,1,{s},2] = reshape(%v0) {{'shape': (1, 1, {s}, 2)}}
      %sc: f32[1,1,{s},{s}] = matmul(%q, %kt)
      %ss: f32[1,1,{s},{s}] = mul(%sc, %scale)
      %le: bool[1,1,{s},{s}] = less_equal(%kpos, %qpos)
      %mb: bool[1,{s}] = cast(%mask) {{'to': 'bool'}}
      %mr: bool[1,1,1,{s}] = reshape(%mb) {{'shape': (1, 1, 1, {s})}}
      %keep: bool[1,1,{s},{s}] = and(%le, %mr)
      %bias: f32[1,1,{s},{s}] = where(%keep, %zero, %low)
      %sb: f32[1,1,{s},{s}] = add(%ss, %bias)
      %p: f32[1,1,{s},{s}] = softmax(%sb) {{'axis': 3}}
      %o: f32[1,1,{s},2] = matmul(%p, %v)
      %y: f32[1,{s},2] = reshape(%o) {{'shape': (1, {s}, 2)}}
      return %y
    }}"""


def test_a_mask_too_large_to_probe_whole_is_probed_a_block_of_rows_at_a_time(monkeypatch):
    """GPT-2 13B's mask at seq 51200 is 2.6 GB as bool, 11 GB with the probe's intermediates:
    past the budget the probe checks every query row, a block of rows at a time, and decides
    what the whole probe decides while holding less than one S x S mask (here 4 MiB at 2048)."""
    import tracemalloc

    import wsecc.passes.fuse_attention as fa

    s = 2048
    text = _causal_text(s)
    whole = PASSES["fuse-attention"](parse_graph(text), PassContext())
    monkeypatch.setattr(fa, "MASK_PROBE_BYTES", 1 << 20)
    monkeypatch.setattr(fa, "MASK_BLOCK_BYTES", 256 << 10)
    g = parse_graph(text)
    tracemalloc.start()
    by_rows = PASSES["fuse-attention"](g, PassContext())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert body(format_graph(by_rows)) == body(format_graph(whole))
    (att,) = [n for n in by_rows.nodes if n.op is Op.ATTENTION]
    assert att.attr("causal") and att.attr("mask") == "key_padding" and att.attr("window") == 0
    assert peak < s * s, peak  # under one [S, S] bool mask, where the whole probe holds 8


def test_a_mask_that_is_not_causal_is_not_fused_by_rows_either(monkeypatch):
    """Probing by rows decides as the whole probe: a mask that keeps the pairs above the
    diagonal (keys after the query) is neither full, causal nor a causal window."""
    import wsecc.passes.fuse_attention as fa

    monkeypatch.setattr(fa, "MASK_PROBE_BYTES", 2 << 10)  # over the layout's 1.5 KiB
    monkeypatch.setattr(fa, "MASK_BLOCK_BYTES", 1 << 10)
    text = _causal_text(64).replace("less_equal(%kpos, %qpos)", "less_equal(%qpos, %kpos)")
    ctx = PassContext()
    out = PASSES["fuse-attention"](parse_graph(text), ctx)
    assert not any(n.op is Op.ATTENTION for n in out.nodes)
    assert any("neither full, causal nor a causal window" in n for n in ctx.notes), ctx.notes


def test_a_fold_larger_than_the_bound_stays_a_node(monkeypatch):
    """canonicalize folds layout ops of constants, but not into a constant over FOLD_MAX_BYTES
    (a causal mask the bound sequence makes); a weight without data is viewed, any size."""
    import wsecc.ir.arrays as arrays

    monkeypatch.setattr(arrays, "FOLD_MAX_BYTES", 64)
    text = """graph g(%x: i64[4,4]) {
      %r = const i64[1,4] [[0, 1, 2, 3]]
      %e: i64[4,4] = expand(%r) {'shape': (4, 4)}
      %y: i64[4,4] = add(%x, %e)
      return %y
    }"""
    out, _ = apply("canonicalize", text)
    assert [ln.split(" = ")[1].split("(")[0] for ln in body(out)] == ["expand", "add"]
    monkeypatch.setattr(arrays, "FOLD_MAX_BYTES", 128)  # 4 x 4 x 8 bytes fits: folded
    out, _ = apply("canonicalize", text)
    assert [ln.split(" = ")[1].split("(")[0] for ln in body(out)] == ["add"]


RMSNORM = """graph g(%a: f32[2,3,4], %r: f32[2,3,4]) {
  %two = const f32[] 2.0
  %eps = const f32[] 9.999999974752427e-07
  %gamma = const f32[4] [1.0, 2.0, 0.5, 1.5]
  %x: f32[2,3,4] = add(%a, %r)
  %p: f32[2,3,4] = pow(%x, %two)
  %ms: f32[2,3,1] = reduce_mean(%p) {'axes': (2,), 'keepdims': True}
  %ve: f32[2,3,1] = add(%ms, %eps)
  %sd: f32[2,3,1] = sqrt(%ve)
  %rs: f32[2,3,1] = reciprocal(%sd)
  %n: f32[2,3,4] = mul(%x, %rs)
  %y: f32[2,3,4] = mul(%n, %gamma)
  %z: f32[2,3,4] = add(%y, %x)
  return %z
}"""


def test_fuse_layernorm_rmsnorm_with_residual_sum_used_on():
    out, _ = apply("fuse-layernorm", RMSNORM)
    assert body(out) == [
        "%y: f32[2,3,4], %x: f32[2,3,4] = rms_norm(%a, %r, %gamma) "
        "{'emit_sum': True, 'epsilon': 9.999999974752427e-07, 'has_skip': True}",
        "%z: f32[2,3,4] = add(%y, %x)",
    ]


def test_fuse_layernorm_does_not_fire_on_multiplying_by_the_rms():
    out, ctx = apply("fuse-layernorm", RMSNORM.replace("mul(%x, %rs)", "mul(%x, %sd)"))
    assert "rms_norm(" not in out
    assert any("no region from it computes LayerNorm or RMSNorm" in n for n in ctx.notes)


SWIGLU = """graph g(%x: f32[2,3,4]) {
  %wg = const f32[4,2] [[0.5, -1.0], [1.5, 0.25], [-0.5, 2.0], [1.0, -0.75]]
  %wu = const f32[4,2] [[1.0, 0.5], [-0.25, 1.25], [0.75, -1.5], [2.0, 0.1]]
  %g: f32[2,3,2] = linear(%x, %wg) {'activation': 'none', 'has_bias': False}
  %s: f32[2,3,2] = sigmoid(%g)
  %a: f32[2,3,2] = mul(%g, %s)
  %u: f32[2,3,2] = linear(%x, %wu) {'activation': 'none', 'has_bias': False}
  %y: f32[2,3,2] = mul(%a, %u)
  return %y
}"""


def test_fuse_swiglu_gate_and_up_become_one_gated_linear():
    out, _ = apply("fuse-swiglu", SWIGLU)
    assert body(out) == [
        "%y: f32[2,3,2] = gated_linear(%x, %wg, %wu) {'activation': 'silu', 'has_bias': False}"
    ]


def test_fuse_swiglu_does_not_fire_on_a_sigmoid_gate():
    # GLU: sigmoid(x W) * (x W'), not SiLU
    out, ctx = apply("fuse-swiglu", SWIGLU.replace("mul(%a, %u)", "mul(%s, %u)"))
    assert "gated_linear(" not in out
    assert any("SiLU" in n for n in ctx.notes)


def test_fuse_swiglu_gives_a_split_linears_origins_in_graph_order(samples_dir) -> None:
    """ModernBERT's Wi Linear cut by two Slices into gate and up: each gated_linear's origin
    lists them in graph order, every run (a set of nodes iterates by address)."""
    from wsecc.core import chain

    job = chain.job(samples_dir / "modernbert_legacy_op17.onnx", seq=16)
    graph = chain.fuse(chain.load(job)).graph
    origins = [n.origin for n in graph.nodes if n.op is Op.GATED_LINEAR]
    assert len(origins) == 2
    for i, origin in enumerate(origins):
        cuts = [o for o in origin if o.startswith(f"/model/layers.{i}/mlp/Slice")]
        assert cuts == [f"/model/layers.{i}/mlp/Slice", f"/model/layers.{i}/mlp/Slice_1"]


def _partial_rotary_text(form: str, rd: int, passed: str = "%{x}p") -> str:
    """GPT-NeoX-style attention (B=1, S=4, 2 heads of 8, q, k, v slices of a packed input) with
    q and k rotated over their first `rd` dims, rotate-half or interleaved (GPT-J's rotate every
    two), the rest concatenated back unchanged: `passed` is the pass-through operand."""
    s, dh = 4, 8
    angles = np.arange(s)[:, None] / 10000 ** (np.arange(0, rd, 2) / rd)
    emb = np.concatenate([angles, angles], 1) if form == "half" else np.repeat(angles, 2, 1)
    r, h = rd // 2, rd
    if form == "half":  # (-x2, x1) over the halves of x[..., :rd]
        rotate = f"""%{{x}}1: f32[1,2,4,{r}] = slice(%{{x}}r) {{{{'axes': (3,), 'starts': (0,), 'ends': ({r},), 'steps': (1,)}}}}
      %{{x}}2: f32[1,2,4,{r}] = slice(%{{x}}r) {{{{'axes': (3,), 'starts': ({r},), 'ends': ({h},), 'steps': (1,)}}}}
      %{{x}}n: f32[1,2,4,{r}] = neg(%{{x}}2)
      %{{x}}o: f32[1,2,4,{h}] = concat(%{{x}}n, %{{x}}1) {{{{'axis': -1}}}}"""
    else:  # (-x[2i+1], x[2i]) stacked on a new last axis and flattened
        rotate = f"""%{{x}}1: f32[1,2,4,{r}] = slice(%{{x}}r) {{{{'axes': (3,), 'starts': (0,), 'ends': ({h},), 'steps': (2,)}}}}
      %{{x}}2: f32[1,2,4,{r}] = slice(%{{x}}r) {{{{'axes': (3,), 'starts': (1,), 'ends': ({h},), 'steps': (2,)}}}}
      %{{x}}n: f32[1,2,4,{r}] = neg(%{{x}}2)
      %{{x}}n1: f32[1,2,4,{r},1] = reshape(%{{x}}n) {{{{'shape': (1, 2, 4, {r}, 1)}}}}
      %{{x}}11: f32[1,2,4,{r},1] = reshape(%{{x}}1) {{{{'shape': (1, 2, 4, {r}, 1)}}}}
      %{{x}}st: f32[1,2,4,{r},2] = concat(%{{x}}n1, %{{x}}11) {{{{'axis': -1}}}}
      %{{x}}o: f32[1,2,4,{h}] = reshape(%{{x}}st) {{{{'shape': (1, 2, 4, {h})}}}}"""
    rope = f"""%{{x}}s: f32[1,4,2,8] = reshape(%{{x}}0) {{{{'shape': (1, 4, 2, 8)}}}}
      %{{x}}: f32[1,2,4,8] = transpose(%{{x}}s) {{{{'perm': (0, 2, 1, 3)}}}}
      %{{x}}r: f32[1,2,4,{h}] = slice(%{{x}}) {{{{'axes': (3,), 'starts': (0,), 'ends': ({h},), 'steps': (1,)}}}}
      %{{x}}p: f32[1,2,4,{dh - h}] = slice(%{{x}}) {{{{'axes': (3,), 'starts': ({h},), 'ends': ({dh},), 'steps': (1,)}}}}
      {rotate}
      %{{x}}c: f32[1,2,4,{h}] = mul(%{{x}}r, %cos)
      %{{x}}sn: f32[1,2,4,{h}] = mul(%{{x}}o, %sin)
      %{{x}}e: f32[1,2,4,{h}] = add(%{{x}}c, %{{x}}sn)
      %{{x}}y: f32[1,2,4,8] = concat(%{{x}}e, {passed}) {{{{'axis': -1}}}}"""
    if rd == dh:  # full rotary: no slices, no concat
        cut = ("%{x}r:", "%{x}p:", "%{x}y:")
        rope = "\n".join(ln for ln in rope.splitlines() if not ln.strip().startswith(cut))
        rope = rope.replace("%{x}r", "%{x}").replace("%{x}e", "%{x}y")
    table = lambda t: str(np.round(t, 6).astype(np.float32).tolist())  # noqa: E731
    return f"""graph g(%qkv: f32[1,4,48]) {{
      %scale = const f32[] 0.3535533845424652
      %cos = const f32[4,{h}] {table(np.cos(emb))}
      %sin = const f32[4,{h}] {table(np.sin(emb))}
      %q0: f32[1,4,16], %k0: f32[1,4,16], %v0: f32[1,4,16] = split(%qkv) {{'axis': 2, 'sizes': (16, 16, 16)}}
      {rope.format(x="q")}
      {rope.format(x="k")}
      %kt: f32[1,2,8,4] = transpose(%ky) {{'perm': (0, 1, 3, 2)}}
      %v1: f32[1,4,2,8] = reshape(%v0) {{'shape': (1, 4, 2, 8)}}
      %v: f32[1,2,4,8] = transpose(%v1) {{'perm': (0, 2, 1, 3)}}
      %sc: f32[1,2,4,4] = matmul(%qy, %kt)
      %ss: f32[1,2,4,4] = mul(%sc, %scale)
      %p: f32[1,2,4,4] = softmax(%ss) {{'axis': 3}}
      %o: f32[1,2,4,8] = matmul(%p, %v)
      %ot: f32[1,4,2,8] = transpose(%o) {{'perm': (0, 2, 1, 3)}}
      %y: f32[1,4,16] = reshape(%ot) {{'shape': (1, 4, 16)}}
      return %y
    }}"""


@pytest.mark.parametrize("form", ["half", "interleaved"])
@pytest.mark.parametrize("rd", [4, 8])
def test_fuse_attention_partial_rotary(form, rd):
    """GPT-NeoX, Phi, StableLM, CodeGen and GPT-J rotate the first rotary_dim dims of each head
    and concatenate the rest back unchanged: one attention rotating `rd` of the 8 dims, its
    tables [S, head_dim] with cos 1 and sin 0 past rd (the interpreter checks the function)."""
    text = _partial_rotary_text(form, rd)
    out, _ = apply("fuse-attention", text)
    (attn,) = [ln for ln in body(out) if "attention(" in ln]
    assert attn.startswith("%y: f32[1,4,16] = attention(%qkv, %qkv, %qkv, %")
    assert f"'rotary': '{form}', 'rotary_dim': {rd}," in attn
    fused = PASSES["fuse-attention"](parse_graph(text), PassContext())
    (node,) = [n for n in fused.nodes if n.op.value == "attention"]
    cos, sin = (v.const for v in node.inputs[3:])
    assert cos.shape == sin.shape == (4, 8)
    assert (cos[:, rd:] == 1).all() and (sin[:, rd:] == 0).all()


def test_fuse_attention_does_not_fire_when_the_passed_dims_change():
    """A "pass-through" that is negated is no rotation of the first dims."""
    text = _partial_rotary_text("half", 4, passed="%{x}pn")
    text = text.replace("      %qy:", "      %qpn: f32[1,2,4,4] = neg(%qp)\n      %qy:").replace(
        "      %ky:", "      %kpn: f32[1,2,4,4] = neg(%kp)\n      %ky:"
    )
    out, ctx = apply("fuse-attention", text)
    assert "attention(" not in out
    assert any("not a rotary embedding" in n for n in ctx.notes)


def _interleaved_qkv_text(weight: str) -> str:
    """GPT-NeoX's fused query_key_value (B=1, S=4, 2 heads of 4): its output is [heads, 3, dh]
    per token, so each head's q, k and v sit together and no head split takes q side by side."""
    rng = np.random.default_rng(1)
    w, b = rng.standard_normal((8, 24)).round(3), rng.standard_normal(24).round(3)
    const = f"%w = const f32[8,24] {w.tolist()}" if weight == "const" else ""
    return f"""graph g(%x: f32[1,4,8]{", %w: f32[8,24]" if weight != "const" else ""}) {{
      {const}
      %b = const f32[24] {b.tolist()}
      %scale = const f32[] 0.5
      %qkv: f32[1,4,24] = linear(%x, %w, %b) {{'activation': 'none', 'has_bias': True}}
      %h: f32[1,4,2,12] = reshape(%qkv) {{'shape': (1, 4, 2, 12)}}
      %t: f32[1,2,4,12] = transpose(%h) {{'perm': (0, 2, 1, 3)}}
      %q: f32[1,2,4,4] = slice(%t) {{'axes': (3,), 'starts': (0,), 'ends': (4,), 'steps': (1,)}}
      %k: f32[1,2,4,4] = slice(%t) {{'axes': (3,), 'starts': (4,), 'ends': (8,), 'steps': (1,)}}
      %v: f32[1,2,4,4] = slice(%t) {{'axes': (3,), 'starts': (8,), 'ends': (12,), 'steps': (1,)}}
      %kt: f32[1,2,4,4] = transpose(%k) {{'perm': (0, 1, 3, 2)}}
      %s: f32[1,2,4,4] = matmul(%q, %kt)
      %ss: f32[1,2,4,4] = mul(%s, %scale)
      %p: f32[1,2,4,4] = softmax(%ss) {{'axis': 3}}
      %o: f32[1,2,4,4] = matmul(%p, %v)
      %ot: f32[1,4,2,4] = transpose(%o) {{'perm': (0, 2, 1, 3)}}
      %y: f32[1,4,8] = reshape(%ot) {{'shape': (1, 4, 8)}}
      return %y
    }}"""


def test_fuse_attention_reorders_an_interleaved_fused_qkv_linear():
    """The Linear's weight and bias columns are permuted to q | k | v heads side by side."""
    text = _interleaved_qkv_text("const")
    out, _ = apply("fuse-attention", text)
    assert body(out) == [
        "%qkv/heads: f32[1,4,24] = linear(%x, %qkv/heads/weight, %qkv/heads/bias) {'activation': 'none', "
        "'has_bias': True}",
        "%y: f32[1,4,8] = attention(%qkv/heads, %qkv/heads, %qkv/heads) {'causal': False, "
        "'fill': -1e999, 'head_dim': 4, 'k_offset': 8, 'mask': 'none', 'nan_to_zero': False, "
        "'num_heads': 2, 'q_offset': 0, 'scale': 0.5, 'v_offset': 16, 'window': 0}",
    ]
    fused = PASSES["fuse-attention"](parse_graph(text), PassContext())
    w = next(v.const for n in fused.nodes for v in n.inputs if v.name == "qkv/heads/weight")
    original = parse_graph(text)
    w0 = next(v.const for n in original.nodes for v in n.inputs if v.name == "w")
    # head 1's q is columns 12..15 of the [heads, 3, dh] layout, k of head 0 columns 4..7
    assert np.array_equal(w[:, 4:8], w0[:, 12:16]) and np.array_equal(w[:, 8:12], w0[:, 4:8])


def test_fuse_attention_reorders_two_layers_that_share_one_bias():
    """An untrained GPT-NeoX or BLOOM stores its zero QKV biases once for every layer: each
    layer's reordered copy is its own value, and the graph stays valid IR."""
    one = _interleaved_qkv_text("const")
    head, _, rest = one.partition("%qkv:")
    layer = "      %qkv:" + rest.rsplit("return", 1)[0]
    second = layer.replace("%x", "%y").replace("%w", "%w2")
    for name in ("qkv", "h", "t", "q", "k", "v", "kt", "s", "ss", "p", "o", "ot", "y"):
        second = second.replace(f"%{name}:", f"%{name}2:").replace(f"%{name})", f"%{name}2)")
        second = second.replace(f"%{name},", f"%{name}2,")
    second = second.replace("%y2)", "%y)").replace("(%y2,", "(%y,").replace("%w2,", "%w2,")
    w2 = head.split("%w = const")[1].split("\n")[0]
    text = head + f"%w2 = const{w2}\n" + layer + second + "      return %y2\n    }"
    out, _ = apply("fuse-attention", text)
    linears = [ln for ln in body(out) if "linear(" in ln]
    assert (
        len(linears) == 2 and "%qkv/heads/bias" in linears[0] and "%qkv2/heads/bias" in linears[1]
    )


def test_a_weight_without_data_is_reordered_without_being_expanded():
    """`--weights inputs` makes weights uniform placeholders (one element of memory): permuting
    their columns leaves them as they are, not a dense copy (GPT-NeoX-20B's fused QKV would be
    0.45 GB per layer in fp32, 44 layers)."""
    from wsecc.ir.arrays import is_uniform, placeholder

    graph = parse_graph(_interleaved_qkv_text("const"))
    w = next(v for n in graph.nodes for v in n.inputs if v.name == "w")
    object.__setattr__(
        w, "const", placeholder(np.dtype(np.float32), (8, 24), 7)
    )  # as --weights inputs
    fused = PASSES["fuse-attention"](graph, PassContext())
    heads = next(v.const for n in fused.nodes for v in n.inputs if v.name == "qkv/heads/weight")
    assert heads is not None and is_uniform(heads) and heads.shape == (8, 24)


def test_fuse_attention_does_not_reorder_a_linear_with_weights_from_inputs():
    out, ctx = apply("fuse-attention", _interleaved_qkv_text("input"))
    assert "attention(" not in out
    assert any(
        "does not split heads side by side, and its Linear's weight or bias is not a constant" in n
        for n in ctx.notes
    )


def test_fuse_attention_falcon_multi_query_gathers_its_key_and_value_head():
    """Falcon's fused query_key_value holds 2 query heads, then one key and one value head; it
    takes those with a Gather at a constant index, and the MatMuls broadcast the single key
    and value head over the query heads (multi-query: one K/V head)."""
    out, _ = apply(
        "fuse-attention",
        """graph g(%qkv: f32[1,4,16]) {
          %scale = const f32[] 0.5
          %ik = const i64[1] [-2]
          %iv = const i64[1] [-1]
          %h: f32[1,4,4,4] = reshape(%qkv) {'shape': (1, 4, 4, 4)}
          %q0: f32[1,4,2,4] = slice(%h) {'axes': (2,), 'starts': (0,), 'ends': (-2,), 'steps': (1,)}
          %k0: f32[1,4,1,4] = gather(%h, %ik) {'axis': 2}
          %v0: f32[1,4,1,4] = gather(%h, %iv) {'axis': 2}
          %q: f32[1,2,4,4] = transpose(%q0) {'perm': (0, 2, 1, 3)}
          %kt: f32[1,1,4,4] = transpose(%k0) {'perm': (0, 2, 3, 1)}
          %v: f32[1,1,4,4] = transpose(%v0) {'perm': (0, 2, 1, 3)}
          %s: f32[1,2,4,4] = matmul(%q, %kt)
          %ss: f32[1,2,4,4] = mul(%s, %scale)
          %p: f32[1,2,4,4] = softmax(%ss) {'axis': 3}
          %o: f32[1,2,4,4] = matmul(%p, %v)
          %ot: f32[1,4,2,4] = transpose(%o) {'perm': (0, 2, 1, 3)}
          %y: f32[1,4,8] = reshape(%ot) {'shape': (1, 4, 8)}
          return %y
        }""",
    )
    assert body(out) == [
        "%y: f32[1,4,8] = attention(%qkv, %qkv, %qkv) {'causal': False, 'fill': -1e999, "
        "'head_dim': 4, 'k_offset': 8, 'kv_heads': 1, 'mask': 'none', 'nan_to_zero': False, "
        "'num_heads': 2, 'q_offset': 0, 'scale': 0.5, 'v_offset': 12, 'window': 0}"
    ]


def _capped_scores_text(cap: str, c: float = 50.0) -> str:
    """One head of 4 over 4 positions, scores scaled by 0.5, then `cap` (IR lines from %ss to
    %sc) with the scalar %c = c, then softmax."""
    return f"""graph g(%x: f32[1,4,8]) {{
      %scale = const f32[] 0.5
      %c = const f32[] {c}
      %q0: f32[1,4,4], %k0: f32[1,4,4] = split(%x) {{'axis': 2, 'sizes': (4, 4)}}
      %q1: f32[1,4,1,4] = reshape(%q0) {{'shape': (1, 4, 1, 4)}}
      %q: f32[1,1,4,4] = transpose(%q1) {{'perm': (0, 2, 1, 3)}}
      %k1: f32[1,4,1,4] = reshape(%k0) {{'shape': (1, 4, 1, 4)}}
      %kt: f32[1,1,4,4] = transpose(%k1) {{'perm': (0, 2, 3, 1)}}
      %v: f32[1,1,4,4] = transpose(%k1) {{'perm': (0, 2, 1, 3)}}
      %s: f32[1,1,4,4] = matmul(%q, %kt)
      %ss: f32[1,1,4,4] = mul(%s, %scale)
      {cap}
      %p: f32[1,1,4,4] = softmax(%sc) {{'axis': 3}}
      %o: f32[1,1,4,4] = matmul(%p, %v)
      %ot: f32[1,4,1,4] = transpose(%o) {{'perm': (0, 2, 1, 3)}}
      %y: f32[1,4,4] = reshape(%ot) {{'shape': (1, 4, 4)}}
      return %y
    }}"""


_SOFTCAP = """%sd: f32[1,1,4,4] = div(%ss, %c)
      %st: f32[1,1,4,4] = tanh(%sd)
      %sc: f32[1,1,4,4] = mul(%st, %c)"""


@pytest.mark.parametrize("c", [0.25, 50.0])
def test_fuse_attention_soft_capped_scores(c):
    """Gemma 2's tanh(s / c) · c on the scores becomes the attention's `softcap` c, its scale
    the one below the Tanh times c (`apply` checks the function: at c = 0.25 the cap bites,
    scores of the unit-normal inputs reach several units); a plain scalar Mul still fuses as a
    scale."""
    out, _ = apply("fuse-attention", _capped_scores_text(_SOFTCAP, c))
    (line,) = [ln for ln in out.splitlines() if "attention(" in ln]
    assert f"'softcap': {float(np.float32(c))}" in line and "'scale': 0.5" in line
    plain, _ = apply("fuse-attention", _capped_scores_text("%sc: f32[1,1,4,4] = mul(%ss, %c)"))
    assert "attention(" in plain and "softcap" not in plain


def test_fuse_attention_leaves_a_second_tanh_in_the_scores():
    """One soft-cap per attention: with a Tanh below it the softmax is not fused (lowering then
    names the Tanh left outside a fused op)."""
    twice = """%s0: f32[1,1,4,4] = tanh(%ss)
      %sd: f32[1,1,4,4] = div(%s0, %c)
      %st: f32[1,1,4,4] = tanh(%sd)
      %sc: f32[1,1,4,4] = mul(%st, %c)"""
    out, _ = apply("fuse-attention", _capped_scores_text(twice))
    assert "attention(" not in out and "softmax(" in out


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_fuse_swiglu_geglu_gate(approximate):
    """GeGLU (Gemma: tanh GELU; ModernBERT: exact) is a gated linear with a GELU gate."""
    text = SWIGLU.replace(
        "  %s: f32[2,3,2] = sigmoid(%g)\n  %a: f32[2,3,2] = mul(%g, %s)\n",
        f"  %a: f32[2,3,2] = gelu(%g) {{'approximate': '{approximate}'}}\n",
    )
    out, _ = apply("fuse-swiglu", text)
    act = "gelu_tanh" if approximate == "tanh" else "gelu"
    assert body(out) == [
        f"%y: f32[2,3,2] = gated_linear(%x, %wg, %wu) {{'activation': '{act}', 'has_bias': False}}"
    ]


def test_fuse_swiglu_cuts_a_fused_gate_up_projection():
    """Phi-3's gate_up: one Linear whose output a Split halves, SiLU of the first half times
    the second: one gated linear with the weight's column halves."""
    text = """graph g(%x: f32[2,3,4]) {
  %w = const f32[4,4] [[0.5, -1.0, 1.0, 0.5], [1.5, 0.25, -0.25, 1.25], [-0.5, 2.0, 0.75, -1.5], [1.0, -0.75, 2.0, 0.1]]
  %gu: f32[2,3,4] = linear(%x, %w) {'activation': 'none', 'has_bias': False}
  %g: f32[2,3,2], %u: f32[2,3,2] = split(%gu) {'axis': 2, 'sizes': (2, 2)}
  %s: f32[2,3,2] = sigmoid(%g)
  %a: f32[2,3,2] = mul(%g, %s)
  %y: f32[2,3,2] = mul(%u, %a)
  return %y
}"""
    out, _ = apply("fuse-swiglu", text)
    assert body(out) == [
        "%y: f32[2,3,2] = gated_linear(%x, %g/weight, %u/weight) {'activation': 'silu', "
        "'has_bias': False}"
    ]


def test_fuse_layernorm_parallel_block_sums_two_skips():
    """GPT-NeoX: x + attention + MLP in one Add chain before the next norm: one norm, three
    operands summed, the sum still emitted for the stream."""
    text = """graph g(%x: f32[1,2,4], %a: f32[1,2,4], %m: f32[1,2,4]) {
  %gamma = const f32[4] [1.0, 0.5, 2.0, 1.5]
  %beta = const f32[4] [0.1, 0.2, 0.3, 0.4]
  %am: f32[1,2,4] = add(%a, %m)
  %y: f32[1,2,4], %s: f32[1,2,4] = layer_norm(%x, %am, %gamma, %beta) {'emit_sum': True, 'epsilon': 1e-05, 'has_skip': True}
  %z: f32[1,2,4] = mul(%y, %s)
  return %z
}"""
    out, _ = apply("fuse-layernorm", text)
    assert body(out)[0].startswith("%y: f32[1,2,4], %s: f32[1,2,4] = layer_norm(%x, %a, %m, ")


def test_fuse_embedding_padding_derived_positions():
    """RoBERTa's positions, cumsum(ids != pad) · (ids != pad) + pad, computed from the token ids,
    become the embedding's padded_positions."""
    text = """graph g(%ids: i64[1,4]) {
  %pad = const i64[] 1
  %wte = const f32[6,2] [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0], [9.0, 1.0], [2.0, 3.0]]
  %wpe = const f32[6,2] [[0.1, 0.2], [0.3, 0.4], [0.5, 0.6], [0.7, 0.8], [0.9, 1.0], [1.1, 1.2]]
  %eq: bool[1,4] = equal(%ids, %pad)
  %keep: bool[1,4] = not(%eq)
  %k: i32[1,4] = cast(%keep) {'to': 'i32'}
  %c: i32[1,4] = cumsum(%k) {'axis': 1, 'exclusive': False, 'reverse': False}
  %ck: i32[1,4] = mul(%c, %k)
  %c64: i64[1,4] = cast(%ck) {'to': 'i64'}
  %pos: i64[1,4] = add(%c64, %pad)
  %t: f32[1,4,2] = gather(%wte, %ids) {'axis': 0}
  %p: f32[1,4,2] = gather(%wpe, %pos) {'axis': 0}
  %h: f32[1,4,2] = add(%t, %p)
  return %h
}"""
    out, _ = apply("fuse-embedding", text)
    assert body(out) == [
        "%h: f32[1,4,2] = embedding(%ids, %wte, %ids, %wpe) {'padded_positions': (1, 1,)}"
    ]


def _rope_angles(base: float, s: int = 4, rd: int = 8) -> np.ndarray:
    """Rotate-half's [s, rd] angles at positions 0..s-1 for a rotary base (theta)."""
    angles = np.arange(s)[:, None] / base ** (np.arange(0, rd, 2) / rd)
    return np.concatenate([angles, angles], 1)


def _with_rope_tables(text: str, emb: np.ndarray) -> list[str]:
    """`text`'s lines with its %cos and %sin constants made cos(emb) and sin(emb) (emb's
    shape), rounded to 6 digits as the exporters' float32 tables print."""

    def const(name: str, t: np.ndarray) -> str:
        shape = ",".join(map(str, emb.shape))
        return f"      %{name} = const f32[{shape}] {np.round(t, 6).astype(np.float32).tolist()}"

    return [
        const("cos", np.cos(emb))
        if ln.strip().startswith("%cos =")
        else const("sin", np.sin(emb))
        if ln.strip().startswith("%sin =")
        else ln
        for ln in text.splitlines()
    ]


def _two_rotary_attentions_text(base_a: float, base_b: float) -> str:
    """Two attentions over one packed input, alike but for their rotary tables' base (theta):
    the second is the first with every name prefixed `b_`, its tables made from `base_b`."""
    import re

    def one(base: float, prefix: str) -> list[str]:
        lines = _with_rope_tables(_partial_rotary_text("half", 8), _rope_angles(base))
        lines = lines[1:-2]  # the body: no header, no return, no closing brace
        return [re.sub(r"%(?!qkv\b)(\w+)", rf"%{prefix}\1", ln) for ln in lines]

    body_a, body_b = one(base_a, ""), one(base_b, "b_")
    return "\n".join(
        [
            "graph g(%qkv: f32[1,4,48]) {",
            *body_a,
            *body_b,
            "      %z: f32[1,4,16] = add(%y, %b_y)",
            "      return %z",
            "    }",
        ]
    )


def _rope_tables_of(text: str) -> list[tuple[np.ndarray, np.ndarray]]:
    fused = PASSES["fuse-attention"](parse_graph(text), PassContext())
    attns = [n for n in fused.nodes if n.op is Op.ATTENTION]
    return [(n.inputs[3].const, n.inputs[4].const) for n in attns]


def test_fuse_attention_keeps_each_attentions_own_rotary_tables():
    """Two attentions that differ only in their rotary tables' base (10000 and 500000, as Llama
    2 and Llama 3 write them) each get their own cos/sin operands: the evaluation, remembered
    across the layers that share one structure, tells two different tables apart."""
    text = _two_rotary_attentions_text(10000.0, 500000.0)
    out, _ = apply("fuse-attention", text)  # the interpreter checks each attention's function
    assert sum("attention(" in ln for ln in body(out)) == 2
    (cos_a, sin_a), (cos_b, sin_b) = _rope_tables_of(text)
    for base, cos, sin in ((10000.0, cos_a, sin_a), (500000.0, cos_b, sin_b)):
        emb = _rope_angles(base)
        np.testing.assert_allclose(cos, np.round(np.cos(emb), 6), atol=1e-6)
        np.testing.assert_allclose(sin, np.round(np.sin(emb), 6), atol=1e-6)
    assert not np.allclose(sin_a, sin_b, atol=1e-4)
    # the same base twice: one table for both
    (cos_1, _), (cos_2, _) = _rope_tables_of(_two_rotary_attentions_text(10000.0, 10000.0))
    np.testing.assert_array_equal(cos_1, cos_2)


@pytest.mark.parametrize("form", ["half", "interleaved"])
@pytest.mark.parametrize("rd", [4, 8])
def test_fuse_attention_rotary_one_slice_probe_gives_the_whole_probes_tables(form, rd, monkeypatch):
    """Probing one [S, dh] slice of a slice-wise rotary region (rotate-half: Slice, Neg, Concat
    of the last axis, tables broadcast over batch and heads) gives the tables that probing every
    batch row and head gives, to float32: what is fused does not depend on the shortcut."""
    import wsecc.passes.fuse_attention as fa

    text = _partial_rotary_text(form, rd)
    fast = _rope_tables_of(text)
    monkeypatch.setattr(fa, "_slicewise", lambda rope, rank: False)
    slow = _rope_tables_of(text)
    assert len(fast) == len(slow) == 1
    for a, b in zip(fast[0], slow[0], strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def test_fuse_attention_rotary_tables_that_differ_by_head_do_not_fuse():
    """A table with a head axis (here [1, 2, S, dh], head 1's angles twice head 0's) is no rotary
    embedding shared by the heads: the region is not slice-wise, every head is probed, and the
    attention is not fused, as before the one-slice shortcut."""
    emb = _rope_angles(10000.0)
    per_head = np.stack([emb, 2 * emb])[None]  # [1, 2, 4, 8]
    lines = _with_rope_tables(_partial_rotary_text("half", 8), per_head)
    out, ctx = apply("fuse-attention", "\n".join(lines))
    assert "attention(" not in out
    assert any("differ across batch rows or heads" in n for n in ctx.notes)
