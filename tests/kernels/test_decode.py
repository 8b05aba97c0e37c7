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
    assert reductions(ctx, 2, 64) == (Reduction("chain", 1, 2, 2, 5 + 16),)
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
    assert r == Reduction("tree", 30, 30, 4, 145 + 986 + 32)
    assert r.cycles == 1163 and r.ends == 30
    # 16 PEs, 16 B: groups of 4, 3 relays + 3 x (2 ramps + 4 hops) + 2 x 4 = 47, the chain 79
    assert reduce(ctx, 16, 16) == Reduction("tree", 4, 4, 4, 15 + 24 + 8)


def test_a_color_budget_without_room_for_the_tree_keeps_the_chain() -> None:
    t = load_target("wse3")
    three = replace(t, colors=replace(t.colors, reserved=t.colors.total - 3))
    ctx = CostContext(three, "mixed")
    assert ctx.target.color_budget == 3
    assert reductions(ctx, 900, 64) == (Reduction("chain", 1, 900, 2, 4511),)


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
