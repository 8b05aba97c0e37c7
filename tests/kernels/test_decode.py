"""Decode reductions (`wsecc.kernels.decode.reduce`): the chain or a two-level tree, worked by hand.

On wse2 and wse3 alike: hop 1 cycle, ramp 2 cycles, relay = 2 ramp + hop = 5 cycles a PE of a
chain, L = 4 B a cycle on a link; mixed precision: sb 2, ab 4, f 4, v 1, R 16 B a cycle (wse2).

    chain(n, bytes)   = (n - 1) relay + cdiv(bytes, L)
    tree(n, g, bytes) = (g - 1) relay + (cdiv(n, g) - 1) (2 ramp + g hop) + 2 cdiv(bytes, L)
"""

from __future__ import annotations

from dataclasses import replace

from wsecc.targets import load_target

from wsecc.kernels.costs import CostContext
from wsecc.kernels.decode import Reduction, reduce, reductions
from wsecc.kernels.kinds.matmul import linear_decode
from wsecc.kernels.kinds.rowwise import RMSNORM


def _ctx(target: str = "wse2") -> CostContext:
    return CostContext(load_target(target), "mixed")


def test_short_lines_keep_the_chain() -> None:
    ctx = _ctx()
    # two PEs: one relay and the vector; there is no tree of two groups of more than one
    assert reductions(ctx, 2, 64) == (Reduction("chain", 1, 2, 5 + 16),)
    # three PEs, 4 B: the chain's 2 relays + 1 = 11; the best tree (a group of 2, then a
    # leader 2 hops on) 5 + (2 ramps + 2 hops) + 2 x 1 = 13
    chain, tree = reductions(ctx, 3, 4)
    assert (chain.cycles, tree.cycles) == (11, 13)
    assert reduce(ctx, 3, 4) == chain
    # four PEs, 16 B: 15 + 4 = 19 either way; a tie keeps the chain (two colors, not four)
    chain, tree = reductions(ctx, 4, 16)
    assert chain.cycles == tree.cycles == 19
    assert reduce(ctx, 4, 16).mapping == "chain"
    # a long vector on a short line: the tree streams it twice (15 + 64 against 11 + 128)
    assert reduce(ctx, 4, 256).cycles == 15 + 64


def test_tall_lines_take_the_tree() -> None:
    ctx = _ctx("wse3")
    # 900 PEs, 64 B (16 cycles on a link): the chain's 899 relays, 4,495 + 16 = 4,511
    assert reductions(ctx, 900, 64)[0].cycles == 4511
    # 30 groups of 30: 29 relays (145), then 29 leader steps of 2 ramps + 30 hops (986), the
    # vector streamed twice (32). Groups of 29 (32 groups: 140 + 31 x 33 = 1,163) or 31
    # (30 groups: 150 + 29 x 35 = 1,165) are slower before the streaming.
    r = reduce(ctx, 900, 64)
    assert r == Reduction("tree", 30, 30, 145 + 986 + 32)
    assert r.cycles == 1163 and r.ends == 30
    # 16 PEs, 16 B: groups of 4, 3 relays + 3 x (2 ramps + 4 hops) + 2 x 4 = 47, the chain 79
    assert reduce(ctx, 16, 16) == Reduction("tree", 4, 4, 15 + 24 + 8)


def test_a_color_budget_without_room_for_the_tree_keeps_the_chain() -> None:
    t = load_target("wse3")
    three = replace(t, colors=replace(t.colors, reserved=t.colors.total - 3))
    ctx = CostContext(three, "mixed")
    assert ctx.target.color_budget == 3
    assert reductions(ctx, 900, 64) == (Reduction("chain", 1, 900, 4511),)


def test_linear_decode_takes_the_tree_on_a_tall_region_by_hand() -> None:
    """K 64 x N 8 on 16 x 2 PEs of wse2: kh 4, nw 4; the column's partials 4 x 4 B = 16 B."""
    p = {"tokens": 1, "K": 64, "N": 8, "has_bias": True, "activation": "", "residual": False}
    d = linear_decode(p, 16, 2, _ctx(), 1)
    # 16 multiply-adds at f = 4 (8) or 32 B at R = 16 (2); bias on cdiv(4, 4 leaders) = 1 output
    assert d.compute == 8 + 1
    # the tree of 4 groups of 4 (47), where the chain takes 15 x 5 + 4 = 79
    assert d.reduction == 15 + 3 * (2 * 2 + 4) + 2 * 4 == 47
    # x (4 x 2 B) along the 2 columns; one output (2 B) a leader down the 16 rows
    assert d.broadcast == (1 + 2) + (15 + 1)
    assert d.latency == 9 + 47 + 19


def test_linear_decode_weighs_the_trees_epilogue_against_its_reduction() -> None:
    """K 16 x N 3 with bias and residual on 4 x 1 PEs of wse2: kh 4, nw 3, 12 B of partials.
    The tree reduces faster (2 groups of 2: 5 + 6 + 2 x 3 = 17 against the chain's 15 + 3 =
    18) but leaves cdiv(3, 2) = 2 outputs to each of its 2 leaders, 2 ops each (bias, residual),
    where the chain's 4 rows finish 1 each: 6 + 4 + 17 + 6 = 33 against 6 + 2 + 18 + 6 = 32."""
    p = {"tokens": 1, "K": 16, "N": 3, "has_bias": True, "activation": "", "residual": True}
    d = linear_decode(p, 4, 1, _ctx(), 1)
    assert (d.compute, d.reduction, d.broadcast) == (6 + 2, 18, 2 + (3 + 1))
    assert d.latency == 32


def test_rmsnorm_decode_on_a_long_row_by_hand() -> None:
    """RMSNorm of 64 features on 1 x 16 PEs of wse2: dw 4, 3 ops each; its statistic (4 B, 1
    cycle) reduced along the 16 PEs by the tree of 4 groups of 4 (15 + 24 + 2 = 41, the chain
    75 + 1 = 76) and multicast back from the end (15 + 1); the row in and out down one row."""
    assert RMSNORM.decode is not None
    n = RMSNORM.decode({"rows": 1, "dim": 64, "has_residual": False}, 1, 16, _ctx(), 1)
    assert (n.compute, n.reduction, n.broadcast) == (4 * 3, 41 + 16, 2 + 2)


def test_moe_gate_up_keeps_the_chain_when_the_trees_gates_cost_more() -> None:
    """A block of 4 experts (H 64, F 24, top 2) on 9 x 16 PEs of wse2: 4 bands of 4 columns,
    hs 9 rows, kh 8, ni 6; one (token, choice) pair in the busiest band (cb 1)."""
    from wsecc.kernels.kinds.moe import moe_decode, moe_grid

    assert moe_grid(4, 64, 24, 9, 16).hs == 9
    p = dict(tokens=16, H=64, F=24, E=4, k=2, router="softmax", normalize=True, S=0,
             shared="none")  # fmt: skip
    d = moe_decode(p, 9, 16, _ctx(), 1)
    # gate/up partials, 2 x 6 x 4 B = 48 B (12 cycles), down 9 rows: the chain 8 x 5 + 12 = 52
    # and its 9 rows finish cdiv(6, 9) = 1 output each (12 gate ops): 64; the tree of 3 groups
    # of 3 reduces faster, 2 x 5 + 2 x (2 ramps + 3 hops) + 2 x 12 = 48, but leaves cdiv(6, 3)
    # = 2 outputs to each leader (24 gate ops): 72. The chain is taken.
    # The rest: the logits (4 B) down 9 rows by the tree, 10 + 14 + 2 = 26 (the chain 41); 3
    # gathered along 4 PEs, 3 + 3; W_down (8 x 4 B) along the band's 4 columns by the chain,
    # 15 + 8 = 23 (the tree 5 + 6 + 16 = 27); 12 hops past the other bands; k = 2 adds.
    assert d.reduction == 26 + (3 + 3) + 52 + 23 + 12 + 2 * 5 == 129
    # the router's 8 multiply-adds (4 cycles at f) and 56 ops; 144 expert multiply-adds (72)
    # and the chain's 12 gate ops
    assert d.compute == 4 + 56 + 72 + 12
