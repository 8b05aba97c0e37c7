"""Cost models against small cases worked by hand from the docstring formulas.

All on tiny32 (WSE-2 per-PE numbers) in mixed precision unless stated:
sb = 2, ab = 4 bytes; f = 4 flop/cycle; v = 1 op/cycle; L = 4 B/cycle; reserve R = 8192 B;
chunk c = min(8, tokens).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsecc.targets import load_target

from wsecc.kernels import KINDS, Kernel, KernelKind, kernel_cost
from wsecc.kernels.costs import breakpoints, cdiv
from wsecc.kernels.kind import PARAM_CHECKS
from wsecc.sim.functional import BUILDERS

TINY = load_target("tiny32")


def test_every_kind_is_defined_once_and_whole() -> None:
    """Each kind's one definition names known param checks and edges, a cost model with a menu
    for sizing, a tile split over params it has, and (transformer kinds) a functional builder
    in the simulator's table (`wsecc.sim.functional.BUILDERS`); no fused op is claimed by two kinds."""
    contest = {KernelKind.CONV, KernelKind.DBLOCK, KernelKind.CBLOCK}
    assert set(KINDS) == set(KernelKind)
    claimed: dict[object, KernelKind] = {}
    for kind, d in KINDS.items():
        assert d.kind is kind
        assert set(d.params.values()) <= set(PARAM_CHECKS)
        assert {d.in_edge, d.out_edge} <= {"N", "S", "E", "W"}
        assert (d.shapes is None) != (d.frontier is None)
        assert {p for p in d.tile_split if p is not None} <= set(d.params)
        assert (kind in BUILDERS) != (kind in contest)  # simulated, unless a contest kind
        for op in d.lowers:
            assert op not in claimed, (op, kind, claimed[op])
            claimed[op] = kind


def test_split_kinds_size_on_their_tile_split() -> None:
    """Sizing's candidate rows and columns for a kind that splits a param over each axis are
    that param's breakpoints: the SRAM map and sizing read the same split."""
    k = Kernel("fc", KernelKind.LINEAR, dict(tokens=8, K=40, N=24, has_bias=False,
                                              activation="", residual=False))  # fmt: skip
    rows, cols = k.spec.shapes(k.params, 32, 32)
    assert k.spec.tile_split == ("K", "N")
    assert rows == breakpoints(40, 32) and cols == breakpoints(24, 32)


def test_linear_on_4x4_by_hand() -> None:
    k = Kernel(
        "fc",
        KernelKind.LINEAR,
        dict(tokens=16, K=64, N=32, has_bias=True, activation="gelu_tanh", residual=True),
    )
    c = kernel_cost(k, 4, 4, "mixed", TINY)
    # kh = 64/4 = 16, nw = 32/4 = 8, own = cdiv(8, 4) = 2, c = 8, red = 1
    assert c.sram.weights == (16 * 8 + 2) * 2 == 260  # tile + bias slice, fp16
    # 2 c kh sb + 2 c nw ab + 2 c own sb = 512 + 512 + 64
    assert c.sram.buffers == 2 * 8 * 16 * 2 + 2 * 8 * 8 * 4 + 2 * 8 * 2 * 2 == 1088
    assert (c.sram.kv, c.sram.reserve, c.sram.total) == (0, 8192, 260 + 1088 + 8192)
    # MACs cdiv(2 M kh nw, f) = 4096 / 4; epilogue M own (bias 1 + gelu_tanh 15 + residual 1) / v
    assert c.compute_cycles == 2 * 16 * 16 * 8 // 4 + 16 * 2 * 17 == 1024 + 544 == 1568
    # lanes: input M kh sb / L = 128, partial sums M nw ab / L = 128, output M nw sb / L = 64
    assert c.link_cycles == 128
    assert c.cycles_per_sample == 1568
    assert (c.in_bytes_per_sample, c.out_bytes_per_sample) == (16 * 64 * 2 + 16 * 32 * 2, 1024)


def test_linear_on_one_row_has_no_reduction_lane() -> None:
    k = Kernel(
        "fc",
        KernelKind.LINEAR,
        dict(tokens=16, K=64, N=32, has_bias=False, activation="", residual=False),
    )
    c = kernel_cost(k, 1, 4, "fp16", TINY)
    # fp16: sb = ab = 2, f = 8, v = 4; kh = 64, nw = 8: MACs 2 x 16 x 64 x 8 / 8 = 2048
    assert c.compute_cycles == 2048
    # lanes: input 16 x 64 x 2 / 4 = 512; no partial sums (h = 1); output 16 x 8 x 2 / 4 = 64
    assert c.link_cycles == 512
    assert c.sram.weights == 64 * 8 * 2


def test_attention_2_heads_by_hand() -> None:
    k = Kernel(
        "attn",
        KernelKind.ATTENTION,
        dict(seq=16, heads=2, head_dim=8, causal=True, padding_mask=False),
    )
    c = kernel_cost(k, 4, 2, "mixed", TINY)
    # hw = cdiv(2, 2) = 1 head per column, g = 1, sq = 16 queries, sh = 16/4 = 4 keys per PE
    assert c.sram.kv == 1 * 1 * 4 * (2 * 8 * 2) == 128  # one K/V set (causal)
    # query chunk 2 c hw d sb + scores c sh ab + partials 2 c hw (d + 2) ab = 256 + 128 + 640
    assert c.sram.buffers == 2 * 8 * 8 * 2 + 8 * 4 * 4 + 2 * 8 * 10 * 4 == 1024
    # row 0 holds keys 0, 4, 8, 12: 16 + 12 + 8 + 4 = 40 pairs = cdiv(sq (sh + 1), 2)
    pairs = 16 + 12 + 8 + 4
    assert pairs == cdiv(16 * 5, 2) == 40
    # Q K^T + P V: 4 d pairs / f = 320; softmax 11 ops x 40 = 440; merge + normalise
    # hw sq (2 (d + 2) + d) = 16 x 28 = 448
    assert c.compute_cycles == 4 * 8 * 40 // 4 + 11 * 40 + 16 * (2 * 10 + 8) == 1208
    # lanes: query 16 x 8 x 2 / 4 = 64; K/V 2 x 4 x 2 x 8 x 2 / 4 = 64; partials 16 x 10 x 4 / 4
    assert c.link_cycles == 160


def test_bidirectional_attention_double_buffers_kv() -> None:
    k = Kernel(
        "attn",
        KernelKind.ATTENTION,
        dict(seq=16, heads=2, head_dim=8, causal=False, padding_mask=True),
    )
    c = kernel_cost(k, 4, 2, "mixed", TINY)
    assert c.sram.kv == 2 * 1 * 4 * (2 * 8 * 2 + 2) == 272  # 2 sets of K, V and the mask
    pairs = 16 * 4  # every query meets every key on the PE
    assert c.compute_cycles == 4 * 8 * pairs // 4 + 12 * pairs + 16 * 28


def test_a_full_mask_costs_a_mask_row_per_query() -> None:
    """A full [S, S] mask (Megatron's) in place of a padding mask: S·S elements in per sample,
    not S; the chunk's mask rows for the PE's keys buffered; each row's lane carries its keys'
    mask columns with their K/V; the same add per score."""
    params = dict(seq=16, heads=2, head_dim=8, causal=False)
    pad = Kernel("attn", KernelKind.ATTENTION, {**params, "padding_mask": True})
    full = Kernel(
        "attn", KernelKind.ATTENTION, {**params, "padding_mask": False, "full_mask": True}
    )
    p, f = (kernel_cost(k, 4, 2, "mixed", TINY) for k in (pad, full))
    assert f.in_bytes_per_sample - p.in_bytes_per_sample == (16 * 16 - 16) * 2
    assert p.sram.kv - f.sram.kv == 2 * 4 * 2  # no per-key mask element with the keys
    assert f.compute_cycles == p.compute_cycles
    assert f.sram.buffers - p.sram.buffers == 2 * 8 * 4 * 2  # 2 c sh sb, chunks of c = 8
    assert f.link_cycles >= p.link_cycles


def test_a_bias_operand_is_held_like_a_weight() -> None:
    """A constant [H, S, S] bias (MPNet's relative position bias): each PE holds its heads' rows
    for its queries against its keys, hw sq sh elements, in storage precision, with the weights;
    nothing more flows in; one add per score."""
    params = dict(seq=16, heads=2, head_dim=8, causal=False, padding_mask=True)
    plain = Kernel("attn", KernelKind.ATTENTION, params)
    biased = Kernel("attn", KernelKind.ATTENTION, {**params, "bias": True})
    for w, held in ((2, 1 * 16 * 4), (4, 1 * 8 * 4)):  # w = 4: two query groups of 8 queries
        p, b = (kernel_cost(k, 4, w, "mixed", TINY) for k in (plain, biased))
        assert b.sram.weights - p.sram.weights == held * 2  # hw sq sh sb
        assert b.in_bytes_per_sample == p.in_bytes_per_sample
        assert b.link_cycles == p.link_cycles
        assert b.compute_cycles - p.compute_cycles == held  # an add per pair it holds (v = 1)
    assert biased.flops_per_sample - plain.flops_per_sample == 2 * 16 * 16


def test_attention_query_groups_when_wider_than_heads() -> None:
    k = Kernel(
        "attn",
        KernelKind.ATTENTION,
        dict(seq=16, heads=2, head_dim=8, causal=False, padding_mask=False),
    )
    narrow, wide = (kernel_cost(k, 4, w, "mixed", TINY) for w in (2, 4))
    # w = 4 = 2 heads x g = 2 groups: each column sees half the queries, same K/V per PE
    assert wide.sram.kv == narrow.sram.kv
    assert wide.compute_cycles == 4 * 8 * 32 // 4 + 11 * 32 + 8 * 28


def test_layernorm_with_residual_by_hand() -> None:
    k = Kernel("ln", KernelKind.LAYERNORM, dict(rows=16, dim=32, has_residual=True))
    c = kernel_cost(k, 2, 4, "mixed", TINY)
    # dw = 32/4 = 8 features per column, mr = 16/2 = 8 rows per PE, c = 8
    assert c.sram.weights == 2 * 8 * 2 == 32  # gamma, beta
    # 2 c dw sb (inputs 2 + outputs 2) + c stats ab = 1024 + 64
    assert c.sram.buffers == 2 * 8 * 8 * 2 * 4 + 8 * 2 * 4 == 1088
    assert c.compute_cycles == 8 * 8 * (6 + 1) == 448  # mr dw (LAYERNORM_OPS + residual) / v
    # lanes: in = out = 16 x 8 x 2 x 2 / 4 = 128; row all-reduce 2 x 8 x 2 x 4 / 4 = 32
    assert c.link_cycles == 128
    assert c.cycles_per_sample == 448


def test_rmsnorm_is_layernorm_without_beta_and_the_mean() -> None:
    """RMSNorm holds gamma only, keeps one statistic per row (sum x^2) and does RMSNORM_OPS."""
    k = Kernel("rms", KernelKind.RMSNORM, dict(rows=16, dim=32, has_residual=True))
    c = kernel_cost(k, 2, 4, "mixed", TINY)
    assert c.sram.weights == 1 * 8 * 2 == 16  # gamma only, 8 features per column
    assert c.sram.buffers == 2 * 8 * 8 * 2 * 4 + 8 * 1 * 4 == 1056  # one stat per row
    assert c.compute_cycles == 8 * 8 * (3 + 1) == 256  # mr dw (RMSNORM_OPS + residual) / v
    spec = KINDS[KernelKind.RMSNORM]
    assert spec.weight_elems(k.params) == 32 and spec.flops(k.params) == 16 * 32 * 4
    assert spec.grad is not None and spec.grad.saved_elems(k.params) == 16 * (32 + 1)


def test_embedding_by_hand() -> None:
    k = Kernel("emb", KernelKind.EMBEDDING, dict(vocab=1000, dim=64, rows=16, n_tables=2))
    c = kernel_cost(k, 8, 4, "mixed", TINY)
    # vh = 125 table rows, dw = 16 features per PE
    assert c.sram.weights == 125 * 16 * 2
    assert c.sram.buffers == 2 * 8 * 2 * 4 + 2 * 8 * 16 * 2
    assert c.compute_cycles == 16 * 2 * 16  # worst case: all lookups on one PE row
    assert c.link_cycles == max(16 * 2 * 4 // 4, 16 * 16 * 2 // 4) == 128


def test_region_must_be_positive() -> None:
    k = Kernel("sm", KernelKind.SOFTMAX, dict(rows=4, dim=4))
    with pytest.raises(ValueError, match="region 0x3"):
        kernel_cost(k, 0, 3, "mixed", TINY)


def test_breakpoints_are_the_useful_split_sizes() -> None:
    # every v gives a distinct tile size cdiv(12, v), and no smaller v gives the same one
    assert breakpoints(12, 100) == [1, 2, 3, 4, 6, 12]
    assert breakpoints(12, 5) == [1, 2, 3, 4]
    tiles = [cdiv(50257, v) for v in breakpoints(50257, 750)]
    assert len(set(tiles)) == len(tiles)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 300),
    st.integers(1, 300),
    st.integers(1, 32),
    st.integers(1, 32),
    st.sampled_from(["fp32", "mixed", "fp16"]),
)
def test_linear_tiles_cover_the_weights(K: int, N: int, h: int, w: int, precision: str) -> None:
    k = Kernel(
        "fc",
        KernelKind.LINEAR,
        dict(tokens=4, K=K, N=N, has_bias=False, activation="", residual=False),
    )
    c = kernel_cost(k, h, w, precision, TINY)
    assert c.sram.weights * h * w >= k.weight_bytes(precision)
    assert c.compute_cycles * h * w * TINY.flops_per_cycle[precision] >= k.flops_per_sample


def test_a_shape_is_costed_once() -> None:
    """Sizing, the placed sizing, the SRAM map and L0 ask for the same shapes: the model runs
    once per (kernel, shape, context) and every caller gets the same answer."""
    from wsecc.kernels.costs import CostContext, _cost_at, cost_at

    k = Kernel("att", KernelKind.ATTENTION,
               dict(seq=64, heads=4, head_dim=16, causal=True, padding_mask=False))  # fmt: skip
    ctx = CostContext(TINY, "mixed", 8)
    before = _cost_at.cache_info()
    first = cost_at(k, 8, 4, ctx)
    assert cost_at(k, 8, 4, ctx) is first is kernel_cost(k, 8, 4, "mixed", TINY)
    after = _cost_at.cache_info()
    assert after.misses - before.misses <= 1 and after.hits - before.hits >= 2


def test_a_menus_shapes_are_each_shapes_cost() -> None:
    """`costs_over` (sizing's menus: the params sorted once for thousands of shapes) gives
    `cost_at` of every shape, row-major, the very objects the cache holds; in training too."""
    from wsecc.kernels.costs import CostContext, TrainCosts, cost_at, costs_over

    k = Kernel("fc", KernelKind.LINEAR,
               dict(tokens=16, K=64, N=96, has_bias=True, activation="gelu_erf", residual=False))  # fmt: skip
    rows, cols = (1, 2, 5), (3, 4)
    for ctx in (
        CostContext(TINY, "mixed", 8),
        CostContext(TINY, "mixed", 8, TrainCosts(8, {"fc": 3})),
    ):
        got = costs_over(k, rows, cols, ctx)
        want = [cost_at(k, h, w, ctx) for h in rows for w in cols]
        assert [(c.h, c.w) for c in got] == [(h, w) for h in rows for w in cols]
        assert all(a is b for a, b in zip(got, want, strict=True))


def test_grouped_kv_heads_hold_and_carry_fewer_keys_and_rotary_adds_its_work() -> None:
    """Llama's 4 query heads on 2 K/V heads: on one column (hw = 4) the PEs hold kw = 2 K/V
    heads, the K/V lane carries 2 heads; rotating q and k costs ROTARY_OPS per element."""
    base = dict(seq=16, heads=4, head_dim=8, causal=True, padding_mask=False)
    mha = kernel_cost(Kernel("a", KernelKind.ATTENTION, base), 4, 1, "mixed", TINY)
    gqa_k = Kernel("a", KernelKind.ATTENTION, dict(base, kv_heads=2))
    gqa = kernel_cost(gqa_k, 4, 1, "mixed", TINY)
    assert mha.sram.kv == 4 * 4 * (2 * 8 * 2) and gqa.sram.kv == 2 * 4 * (2 * 8 * 2)
    assert gqa.in_bytes_per_sample == 16 * (4 + 2 * 2) * 8 * 2 < mha.in_bytes_per_sample
    rope = Kernel("a", KernelKind.ATTENTION, dict(base, kv_heads=2, rotary_dim=8))
    assert rope.flops_per_sample - gqa_k.flops_per_sample == 3 * 8 * 16 * (4 + 2)
    # the cos and sin rows of its sh = 4 keys are resident
    assert kernel_cost(rope, 4, 1, "mixed", TINY).sram.weights == 2 * 4 * 8 * 2


def test_gated_linear_holds_both_matrices_and_emits_one_output_per_pair() -> None:
    p = dict(tokens=8, K=16, N=8, has_bias=False)
    gated = kernel_cost(Kernel("g", KernelKind.GATED_LINEAR, p), 2, 2, "mixed", TINY)
    plain = kernel_cost(Kernel("l", KernelKind.LINEAR, dict(p, N=16, activation="",
                                                            residual=False)), 2, 2, "mixed", TINY)  # fmt: skip
    assert gated.sram.weights == plain.sram.weights  # K x 2N either way
    assert gated.out_bytes_per_sample == 8 * 8 * 2 == plain.out_bytes_per_sample // 2
