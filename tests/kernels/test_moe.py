"""The moe kind: its cost and decode step worked by hand from the formulas of
`wsecc.kernels.kinds.moe`, and the bundled Mixtral export compiled with numerics checked.

Tiny32 and wse2, mixed precision: sb = 2, ab = 4 bytes; f = 4 flop/cycle; v = 1 op/cycle;
L = 4 B/cycle; chunk c = min(8, tokens) on tiny32; hop 1, ramp 2 (relay 5), SRAM reads
R = 2 x 64 / 8 = 16 B/cycle. TRANSCENDENTAL_OPS = 8, so GATE_OPS = sigmoid (10) + 2 = 12 and
router_ops(E=4, k=2) = 4 (8 + 3) + 4 x 2 + 2 x 2 = 56.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from wsecc.targets import load_target

from wsecc.kernels import Kernel, KernelKind, kernel_cost
from wsecc.kernels.costs import CostContext, cost_at
from wsecc.kernels.decode import chain, multicast, relay
from wsecc.kernels.kind import breakpoints
from wsecc.kernels.kinds.matmul import GATE_OPS
from wsecc.kernels.kinds.moe import MoeGrid, moe_buffers, moe_decode, moe_grid, router_ops

P = dict(tokens=16, H=64, F=32, E=4, k=2, router="softmax", normalize=True, S=0, shared="none")


def test_constants_of_the_hand_calculations() -> None:
    assert GATE_OPS == 12 and router_ops(4, 2) == 56


def test_moe_cost_on_4x8_by_hand() -> None:
    """4 bands of 2 columns, one expert each: kh = 16, ni = cdiv(32, 2) = 16; the band computes
    Mb = cdiv(16 x 2 x 1, 4) = 8 (token, choice) pairs of the 16 tokens' 32. The router's 4
    columns on the first 4 PE columns, rc = 1 a PE."""
    c = kernel_cost(Kernel("moe", KernelKind.MOE, P), 4, 8, "mixed", load_target("tiny32"))
    assert c.sram.weights == (3 * 16 * 16 + 16 * 1) * 2 == 1568  # one expert + router tile
    # x and decisions of the chunk's 8 tokens, one pair's gate/up partials and h, 8 sums
    assert (
        c.sram.buffers
        == 2 * 8 * 16 * 2 + 2 * 8 * 4 * 2 + 2 * 2 * 16 * 4 + 2 * 16 * 2 + 2 * 8 * 16 * 4
    )
    assert c.sram.buffers == 1984
    router = 2 * 16 * 16 * 1 // 4 + 16 * 56  # a PE's logit MACs, then scoring and choosing
    experts = 2 * 8 * 16 * 3 * 16 // 4 + 8 * 4 * 12  # 3 matrices, silu(g) u on own = 4
    combine = 2 * 8 * 16
    assert c.compute_cycles == router + experts + combine == 4736
    # dispatch x 128, logits gathered 48, decision 32, gate/up partials 256, h back up 64,
    # combine 256
    assert c.link_cycles == 256


def test_moe_cost_counts_the_chosen_experts_not_all_of_them() -> None:
    """Top 1 of 4 does half the expert work of top 2 (the router's the same but for its
    choosing); every expert's weights stay resident either way."""
    t = load_target("tiny32")
    two = kernel_cost(Kernel("m", KernelKind.MOE, P), 4, 8, "mixed", t)
    one = kernel_cost(Kernel("m", KernelKind.MOE, {**P, "k": 1}), 4, 8, "mixed", t)
    assert one.sram.weights == two.sram.weights
    expert_two = two.compute_cycles - (2 * 16 * 16 * 1 // 4 + 16 * router_ops(4, 2))
    expert_one = one.compute_cycles - (2 * 16 * 16 * 1 // 4 + 16 * router_ops(4, 1))
    assert expert_one * 2 == expert_two
    assert Kernel("m", KernelKind.MOE, P).spec.flops(P) == (
        2 * 16 * 64 * 4 + 16 * 56 + 16 * 2 * (6 * 64 * 32 + 32 * 12 + 2 * 64)
    )


def test_moe_decode_step_by_hand() -> None:
    """One token on 4 x 8 of wse2: the busiest band computes cb = 1 (token, choice) pair and
    reads re = 1 expert's tiles (48 KB-class PE: 768 multiply-adds)."""
    ctx = CostContext(load_target("wse2"), "mixed")
    d = moe_decode(P, 4, 8, ctx, 1)
    router = max(2 * 16 // 4, 16 * 2 // 16) + 56  # 16 MACs of W_r a PE, then 56 vector ops
    experts = max(2 * 768 // 4, 768 * 2 // 16) + 1 * 4 * 12
    assert d.compute == router + experts == 496
    # a logit down each router column (4 PEs, 4 B: a two-level tree of 2 groups of 2, a relay,
    # then 2 ramps and 2 hops between the leaders, the logit streamed twice: 13, where the
    # chain takes 3 relays + 1 = 16), the other 3 gathered to column 0 along 4 PEs, gate/up
    # partials down the band (128 B: the chain's 15 + 32, the tree's 11 + 64), W_down along it
    # (2 PEs: a chain), then the combine: 6 hops past the other bands and k = 2 adds (relays)
    assert d.reduction == (5 + (2 * 2 + 2) + 2) + (3 + 3) + (3 * 5 + 32) + (5 + 16) + 6 + 2 * 5
    assert d.reduction == 103
    # x along the row's 8 PEs, the decision up 4, h up 4
    assert d.broadcast == (7 + 8) + (3 + 2) + (3 + 8) == 31
    assert d.bytes_read == (3 * 16 * 16 + 16 * 1) * 2
    assert d.flops == 2 * 64 * 4 + 56 + 2 * (6 * 64 * 32 + 32 * 12 + 128)
    assert d.latency == d.compute + d.reduction + d.broadcast


def test_moe_buffers_of_a_decode_step_and_a_chunk_by_hand() -> None:
    """On 4 x 8 of tiny32 (kh 16, ni 16, k 2): a decode step holds one token's x slice (32 B),
    its decision (8 B), one pair's gate/up partials (128 B) and h (32 B), and one running sum
    (64 B), each double-buffered; a chunk of 8 tokens holds 8 of the per-token ones and still
    one pair's partials and h, whatever the router sends the band."""
    ctx = CostContext(load_target("tiny32"), "mixed")
    one = moe_buffers(P, 4, 8, ctx, 1)
    assert one == 2 * (16 * 2 + 2 * 2 * 2 + 2 * 16 * 4 + 16 * 2 + 16 * 4) == 528
    per_token = 2 * (16 * 2 + 2 * 2 * 2 + 16 * 4)
    assert moe_buffers(P, 4, 8, ctx, 8) == one + 7 * per_token == 1984


def test_gpt_oss_120b_block_buffers_by_hand() -> None:
    """gpt-oss-120B's block (H = F = 2880, E = 128, k = 4) on 480 x 640 of wse3 (the region
    its context-2048 compile chose, `bench/RESULTS.md`): 128 bands of 5 columns, kh = 6,
    ni = 2880 / 5 = 576. The chunk of 8 tokens buffers 12,352 B a PE, 11,520 of it one pair's
    gate/up partials and h; holding every chunk token's partials, as the kind did before,
    would take 74,304 B, more than a PE's SRAM."""
    ctx = CostContext(load_target("wse3"), "mixed")
    g = dict(tokens=2048, H=2880, F=2880, E=128, k=4, router="softmax", normalize=True,
             S=0, shared="none", bias=True, activation="clamped_silu")  # fmt: skip
    got = moe_buffers(g, 480, 640, ctx, 8)
    assert got == 2 * 8 * 6 * 2 + 2 * 8 * 8 * 2 + 2 * 2 * 576 * 4 + 2 * 576 * 2 + 2 * 8 * 6 * 4
    assert got == 12352
    assert 2 * 8 * 6 * 2 + 2 * 8 * 2 * 576 * 4 + 2 * 8 * 6 * 4 == 74304 > 49152
    # a decode step: one expert a band (ep 1), so the busiest band's one pair reads its
    # expert's tiles and biases, column 0 its router column and the router's 128 biases: every
    # weight byte the PE holds
    d = moe_decode(g, 480, 640, ctx, 1)
    c = kernel_cost(Kernel("moe", KernelKind.MOE, g), 480, 640, "mixed", load_target("wse3"))
    assert d.bytes_read == (3 * 6 * 576 + 6 * 1 + (2 * 576 + 6) + 128) * 2 == 23320
    assert d.bytes_read == c.sram.weights


def test_moe_decode_reads_only_the_experts_its_tokens_choose() -> None:
    """Two experts per band (w = 2): one token's two choices may both land in one band, which
    then reads both experts; four tokens read no more than the band holds. (The router's 4
    columns: 2 on each PE column.)"""
    ctx = CostContext(load_target("wse2"), "mixed")
    one_band = (3 * 16 * 32 + 16 * 2) * 2  # kh 16, ni 32 on a 1-column band
    assert moe_decode(P, 4, 2, ctx, 1).bytes_read == (2 * 3 * 16 * 32 + 16 * 2) * 2
    assert moe_decode(P, 4, 2, ctx, 4).bytes_read == (2 * 3 * 16 * 32 + 16 * 2) * 2
    assert moe_decode({**P, "k": 1}, 4, 2, ctx, 1).bytes_read == one_band


def test_sizing_offers_whole_cells() -> None:
    """Rows: H's breakpoints over 1, 2 and 4 cell rows; columns: E / er cells of F's
    breakpoints each (4 cells of up to 8 columns, 2 of up to 16, 1 of up to 32)."""
    k = Kernel("m", KernelKind.MOE, P)
    assert k.spec.shapes is not None
    rows, cols = k.spec.shapes(P, 32, 32)
    for er in (1, 2, 4):
        assert {er * r for r in breakpoints(64, 32 // er)} <= set(rows)
        assert {(4 // er) * c for c in breakpoints(32, 32 // (4 // er))} <= set(cols)
    # fewer columns than experts: one cell row shares cells, or more cell rows fit the width
    assert k.spec.shapes(P, 32, 3)[1] == [1, 2, 3]


def test_the_grid_holds_the_fewest_expert_weights_a_pe() -> None:
    """E = 4 of H = 64 by F = 32. On 8 x 6: one cell row leaves 4 cells of 6 // 4 = 1 column
    (kh 8, ni 32: 256 elements a PE); 2 x 2 cells of 4 x 3 PEs hold kh 16, ni 11 (176); one
    cell column of 4 cells, 2 x 6 each, kh 32, ni 6 (192). On 4 x 8 one cell row and two tie
    at 256, and the tie keeps one (the bands of `test_moe_cost_on_4x8_by_hand`)."""
    assert moe_grid(4, 64, 32, 8, 6) == MoeGrid(er=2, ec=2, hs=4, ws=3, ep=1, kh=16, ni=11)
    assert moe_grid(4, 64, 32, 4, 8) == MoeGrid(er=1, ec=4, hs=4, ws=2, ep=1, kh=16, ni=16)
    g = moe_grid(4, 64, 32, 8, 6)
    assert [g.cell(e) for e in range(4)] == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_moe_cost_on_a_2x2_grid_by_hand() -> None:
    """P on 8 x 6 of tiny32 (mixed): 2 x 2 cells of 4 rows by 3 columns, one expert each,
    kh = 16, ni = cdiv(32, 3) = 11, Mb = cdiv(16 x 2 x 1, 4) = 8 pairs a cell; the router's 4
    columns on PE columns 0-3 of cell row 0, rc = 1."""
    c = kernel_cost(Kernel("moe", KernelKind.MOE, P), 8, 6, "mixed", load_target("tiny32"))
    assert c.sram.weights == (3 * 16 * 11 + 16 * 1) * 2 == 1088  # one expert + router tile
    # the chunk's 8 tokens' x, decisions and sums, one pair's partials and h, and the 8 sums
    # coming north from cell row 1 (PE (0, 0): c_0 = 0)
    assert c.sram.buffers == (
        2 * 8 * 16 * 2 + 2 * 8 * 4 * 2 + 2 * 2 * 11 * 4 + 2 * 11 * 2 + 2 * 8 * 16 * 4
        + 2 * 8 * 16 * 4
    ) == 2908  # fmt: skip
    router = 2 * 16 * 16 * 1 // 4 + 16 * 56
    experts = 2 * 8 * 16 * 3 * 11 // 4 + 8 * 3 * 12  # silu(g) u on own = cdiv(11, 4) = 3
    combine = 2 * 8 * 16
    assert c.compute_cycles == router + experts + combine == 3680  # 4,736 on 4 x 8
    # dispatch along a row 128 and down column c_i 128 (cdiv(4, 6) = 1 slice a column),
    # logits gathered 48, decision 32, gate/up partials 176, h 44, the sums east 256 and
    # north 256
    assert c.link_cycles == 256


def test_moe_decode_and_buffers_on_a_2x2_grid_by_hand() -> None:
    """One token on 8 x 6 of wse2 (f 4, R 16 B/cycle, hop 1, relay 5): cb = re = 1."""
    ctx = CostContext(load_target("wse2"), "mixed")
    d = moe_decode(P, 8, 6, ctx, 1)
    router = max(2 * 16 // 4, 32 // 16) + 56
    experts = max(2 * 528 // 4, 1056 // 16) + 3 * 12  # 3 kh ni = 528 MACs
    assert d.compute == router + experts == 364
    # a logit down each router column (4 PEs, 4 B: the tree of 2 groups of 2, 5 + 6 + 2 = 13,
    # against the chain's 16), 3 gathered along 4 PEs (12 B), gate/up down a cell column (88 B:
    # the chain's 15 + 22 against the tree's 11 + 44), W_down along the cell's 3 columns (64 B:
    # the chain's 10 + 16 against the tree's 5 + 6 + 32), 3 hops past the other cell, k = 2
    # adds; then the cell row 1 sum: 5 hops west in all (to c_i, then on to column 0 in cell
    # row 0: 5 - c_i + c_i), 4 north, 5 east through cell row 0's 6 columns, and its add
    assert d.reduction == (
        (5 + 6 + 2) + (3 + 3) + (15 + 22) + (10 + 16) + 3 + 10 + (5 + 4 + 5 + 5)
    ) == 114  # fmt: skip
    # x along the row's 6 PEs and down 5, the decision along column 0's 8, h up the cell's 4
    assert d.broadcast == (5 + 8) + (4 + 8) + (7 + 2) + (3 + 6) == 43
    assert d.bytes_read == (3 * 16 * 11 + 16 * 1) * 2 == 1088
    assert d.flops == moe_decode(P, 4, 8, ctx, 1).flops  # the work is the mapping's own
    # a decode step's buffers: one token's x, decision, sum and sum from below, one pair's
    assert moe_buffers(P, 8, 6, ctx, 1) == 2 * (16 * 2 + 4 * 2 + 2 * 11 * 4 + 11 * 2 + 2 * 16 * 4)
    assert moe_buffers(P, 8, 6, ctx, 1) == 556


def test_gpt_oss_120b_block_on_4_cell_rows_by_hand() -> None:
    """gpt-oss-120B's block on 400 x 512 of wse3 (mixed, chunk 8): 4 x 32 cells of 100 x 16
    PEs, kh = cdiv(2880, 100) = 29, ni = 2880 / 16 = 180, one expert a cell (3 kh ni = 15,660
    elements a PE; 2 cell rows would hold 3 x 15 x 360 = 16,200, 8 tie at 15,660); the router's
    128 columns one a PE. Weights 32,412 B, buffers 8,496, reserve 8,192: 49,100 of 49,152 B,
    on 204,800 PEs, where one cell row's fewest are 263,680 (412 x 640; 307,200, 480 x 640,
    with the router's whole tile on column 0: `test_gpt_oss_120b_block_buffers_by_hand`)."""
    t = load_target("wse3")
    g = dict(tokens=2048, H=2880, F=2880, E=128, k=4, router="softmax", normalize=True,
             S=0, shared="none", bias=True, activation="clamped_silu")  # fmt: skip
    assert moe_grid(128, 2880, 2880, 400, 512) == MoeGrid(4, 32, 100, 16, 1, 29, 180)
    c = kernel_cost(Kernel("moe", KernelKind.MOE, g), 400, 512, "mixed", t)
    # an expert's tiles, a router column, the gate/up and down bias slices, the router's biases
    assert c.sram.weights == (3 * 29 * 180 + 29 * 1 + (2 * 180 + 29) + 128) * 2 == 32412
    assert c.sram.buffers == 2 * 8 * 29 * 2 + 2 * 8 * 8 * 2 + 2 * 2 * 180 * 4 + 2 * 180 * 2 + 2 * (
        2 * 8 * 29 * 4
    ) == 8496  # fmt: skip
    assert c.sram.total == 49100 <= t.sram.bytes_per_pe
    # a decode step: one expert a cell, so the busiest cell's one pair reads its expert's
    # tiles and biases, column 0 its router column and biases: every weight byte the PE holds
    ctx = CostContext(t, "mixed")
    d = moe_decode(g, 400, 512, ctx, 1)
    assert d.bytes_read == c.sram.weights
    hop = t.link.hop_latency_cycles
    assert d.reduction == (
        # a logit down each router column of cell row 0 (100 PEs, 4 B): a two-level tree of
        # 10 groups of 10, 9 relays, then 9 leader-to-leader steps of 2 ramps and 10 hops, the
        # logit streamed twice: 45 + 126 + 2 = 173, where the chain takes 99 x 5 + 1 = 496
        # (groups of 8, 9, 11 or 12 take 179, 183, 185, 183 before the streaming)
        (9 * 5 + 9 * (2 * 2 + 10) + 2 * 1)
        + multicast(ctx, 128, 127 * 4)  # 127 of them gathered west to column 0
        # one pair's gate/up partials down a cell column (1,440 B, 360 cycles streamed): the
        # chain's 495 + 360 = 855, the tree's 171 + 720 = 891 (and 18 gate outputs a leader)
        + chain(ctx, 100, 2 * 180 * 4)
        # its W_down partials along the cell (16 PEs, 116 B): the tree of 4 groups of 4,
        # 3 relays + 3 x (2 ramps + 4 hops) + 2 x 29 = 97, the chain's 75 + 29 = 104
        + (3 * 5 + 3 * (2 * 2 + 4) + 2 * 29)
        + (512 - 16) * hop  # past the row's other cells
        + 4 * relay(ctx)  # k = 4 adds
        + (511 + 300 + 511) * hop  # west to c_i and on to column 0, north, east
        + 3 * relay(ctx)  # cell rows 3, 2, 1's sums added
    )


def test_gpt_oss_120b_menu_fits_the_block_on_fewer_pes() -> None:
    """Sizing's menu for gpt-oss-120B's block on wse3 (`moe_shapes`, mixed, chunk 8): its
    fewest-PE shape that fits a PE is 400 x 512 on 4 cell rows (204,800 PEs), where one cell
    row does no better than 412 x 640 (263,680): three layers' blocks take 614,400 of a
    wafer's 883,350 PEs."""
    t = load_target("wse3")
    ctx = CostContext(t, "mixed")
    g = dict(tokens=2048, H=2880, F=2880, E=128, k=4, router="softmax", normalize=True,
             S=0, shared="none", bias=True, activation="clamped_silu")  # fmt: skip
    k = Kernel("moe", KernelKind.MOE, g)
    assert k.spec.shapes is not None
    rows, cols = k.spec.shapes(g, t.fabric.program_height, t.fabric.program_width)
    fitting = [
        (h * w, h, w)
        for h in rows
        for w in cols
        if cost_at(k, h, w, ctx).sram.total <= t.sram.bytes_per_pe
    ]
    one_row = [f for f in fitting if moe_grid(128, 2880, 2880, f[1], f[2]).er == 1]
    assert min(fitting) == (204800, 400, 512)
    assert min(one_row) == (263680, 412, 640)
    assert 3 * 204800 <= t.usable_pes


@pytest.mark.parametrize(
    "sample", ["mixtral_dynamo.onnx", "qwen2moe_dynamo.onnx", "gptoss_dynamo.onnx"]
)
def test_the_simulator_follows_the_grid(samples_dir: Path, sample: str) -> None:
    """A sample's blocks (E 4, H 64, F 96 or 48; Qwen2-MoE's sigmoid-gated shared expert,
    gpt-oss's biases) put on 8 x 6: 2 x 2 cells of 4 x 3 PEs (kh 16), the combine summing cell
    row 1 first: the tiled program in fp32 against the reference interpreter on the fused graph
    within the structure check's 2e-5."""
    from dataclasses import replace

    from wsecc.passes import DEFAULT_PIPELINE

    from wsecc.check.numerics import TOLERANCE, make_inputs
    from wsecc.core.flow import lower_and_size
    from wsecc.frontend.onnx import import_model
    from wsecc.interp import run as interp_run
    from wsecc.pm import PassManager
    from wsecc.sim.functional import simulate_functional

    graph, _ = import_model(str(samples_dir / sample), batch=2, seq=16)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    feeds = make_inputs(graph, seed=7, padded=True)
    kg, sizing = lower_and_size(fused, load_target("wse2"), "fp32")
    moe = {k.name: k.params for k in kg.kernels if k.kind == KernelKind.MOE}
    assert moe and all(moe_grid(p["E"], p["H"], p["F"], 8, 6).er == 2 for p in moe.values())
    sizing = replace(
        sizing,
        kernels=tuple(replace(k, h=8, w=6) if k.name in moe else k for k in sizing.kernels),
    )
    got = simulate_functional(fused, kg, sizing, "fp32", feeds)
    want = interp_run(fused, feeds)
    for name, y in got.items():
        err = float(np.max(np.abs(y - want[name])) / np.max(np.abs(want[name])))
        assert err <= TOLERANCE["structure"]["max_rel_err"], (name, err)


def test_a_shared_expert_adds_its_work_on_every_token() -> None:
    """Qwen2-MoE's shared expert, S = 32 over all 8 columns (ns = 4), sigmoid-gated: on top
    of the routed block's figures, 3 kh ns weights and a gate column per PE; its MACs for all
    16 tokens, its gates on own = cdiv(4, 4) = 1 hidden unit, the gate's logit and scale."""
    t = load_target("tiny32")
    routed = kernel_cost(Kernel("m", KernelKind.MOE, P), 4, 8, "mixed", t)
    q = {**P, "S": 32, "shared": "sigmoid"}
    c = kernel_cost(Kernel("m", KernelKind.MOE, q), 4, 8, "mixed", t)
    assert c.sram.weights - routed.sram.weights == (3 * 16 * 4 + 16) * 2
    assert c.sram.buffers - routed.sram.buffers == 2 * 2 * 4 * 4 + 2 * 4 * 2  # partials, h_s
    shared = 2 * 16 * 16 * 3 * 4 // 4 + 16 * 1 * 12 + (2 * 16 * 16 // 4 + 16 * (10 + 16))
    assert c.compute_cycles - routed.compute_cycles == shared
    spec = Kernel("m", KernelKind.MOE, q).spec
    assert spec.flops(q) - spec.flops(P) == 16 * (6 * 64 * 32 + 32 * 12 + 64 + 3 * 64 + 10)
    assert spec.weight_elems(q) - spec.weight_elems(P) == 3 * 64 * 32 + 64
    ctx = CostContext(load_target("wse2"), "mixed")
    assert (
        moe_decode(q, 4, 8, ctx, 1).bytes_read - moe_decode(P, 4, 8, ctx, 1).bytes_read
        == (3 * 16 * 4 + 16) * 2
    )


@pytest.mark.parametrize("precision", ["fp32", "mixed"])
@pytest.mark.parametrize(
    "sample", ["mixtral_dynamo.onnx", "qwen2moe_dynamo.onnx", "gptoss_dynamo.onnx"]
)
def test_moe_samples_compile_to_moe_kernels_and_match_onnxruntime(
    samples_dir: Path, sample: str, precision: str
) -> None:
    import wsecc

    c = wsecc.compile(
        samples_dir / sample,
        seq=16,
        placer="greedy",
        validate=True,
        precision=precision,
    )
    kinds = [k.kind for k in c.kernel_graph.kernels]
    assert kinds.count(KernelKind.MOE) == 2 and KernelKind.GENERIC not in kinds
    assert c.numerics is not None and c.numerics.passed, c.numerics.summary()


@pytest.mark.parametrize(
    "sample", ["mixtral_dynamo.onnx", "gptoss_dynamo.onnx", "llama4_dynamo.onnx"]
)
def test_moe_samples_generate_the_ids_onnxruntime_generates(samples_dir: Path, sample: str) -> None:
    """Generate mode (prompt 8, context 32, fp32): the moe kernels decode token by token and
    the greedy ids equal onnxruntime's (gpt-oss: its layer 0 attends within a window of 8 with
    sinks, so the decode steps past token 8 drop keys; Llama 4: the decode steps cross its
    chunked attention's boundaries at 8, 16 and 24, where layer 0's keys restart)."""
    import wsecc

    c = wsecc.compile(
        samples_dir / sample,
        seq=32,
        prompt=8,
        mode="generate",
        placer="greedy",
        validate=True,
        precision="fp32",
    )
    check = c.generation_check
    assert check is not None and check.passed, check.summary() if check else None
    assert "ids identical" in check.summary()


def test_gpt_oss_biases_and_clamped_gate_by_hand() -> None:
    """gpt-oss's experts on the 4 x 8 of `test_moe_cost_on_4x8_by_hand` (kh 16, ni 16, Mb 8,
    one expert a band): the biases add a gate/up slice (2 ni) and a down slice (kh) per expert
    and the router's E to each PE; their adds are E a token and 2 cdiv(ni, h) + kh a pair; the
    clamped gate costs CLAMPED_GATE_OPS = 12 + 5 per hidden unit, cdiv(16, 4) = 4 on a PE."""
    t = load_target("tiny32")
    plain = kernel_cost(Kernel("m", KernelKind.MOE, P), 4, 8, "mixed", t)
    q = {**P, "bias": True, "activation": "clamped_silu"}
    c = kernel_cost(Kernel("m", KernelKind.MOE, q), 4, 8, "mixed", t)
    assert c.sram.weights - plain.sram.weights == (1 * (2 * 16 + 16) + 4) * 2
    assert c.compute_cycles - plain.compute_cycles == 16 * 4 + 8 * (2 * 4 + 16) + 8 * 4 * 5
    spec = Kernel("m", KernelKind.MOE, q).spec
    assert spec.flops(q) - spec.flops(P) == 16 * 4 + 16 * 2 * (32 * 5 + 2 * 32 + 64)
    assert spec.weight_elems(q) - spec.weight_elems(P) == 4 * (1 + 2 * 32 + 64)
    ctx = CostContext(load_target("wse2"), "mixed")
    d, d0 = moe_decode(q, 4, 8, ctx, 1), moe_decode(P, 4, 8, ctx, 1)
    assert d.bytes_read - d0.bytes_read == (1 * (2 * 16 + 16) + 4) * 2
    assert d.compute - d0.compute == 4 + (2 * 4 + 16) + 4 * 5
