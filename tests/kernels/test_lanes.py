"""The one formula for a flow through an edge of n PEs (`wsecc.lanes`), and the compile that
uses it: sizing, the router and L0 agree on a flow's link time, and a GPT-2-shaped program
keeps the throughput its sizing balanced (no layernorm starved by a short edge)."""

from __future__ import annotations

import pytest
from wsecc.targets import load_target

from wsecc import flow
from wsecc.kernels import KernelKind
from wsecc.kernels.sizing import routed_flow_bytes
from wsecc.lanes import edge_cycles, lane_bytes, lanes_within, shared_edge_cycles
from wsecc.sim.perf import FLOW, build_pipeline, simulate_l0

WSE2 = load_target("wse2")


@pytest.mark.parametrize("b", [1, 3, 4, 1000, 1_572_864, 14_155_776])
@pytest.mark.parametrize("t", [1, 7, 1000, 117_760])
def test_lanes_within_is_the_inverse_of_edge_cycles(b: int, t: int) -> None:
    n = lanes_within(b, lane_bytes(t, 4))
    assert edge_cycles(b, n, 4) <= t or n == 1
    if n > 1:  # one lane fewer does not make it
        assert edge_cycles(b, n - 1, 4) > t


def test_shared_edge_by_hand() -> None:
    # two equal flows on 4 PEs: 2 lanes each, 1000 B over 2 x 4 B/cycle
    assert shared_edge_cycles([1000, 1000], 4, 4) == 125
    # 3000 + 1000 B on 4 PEs: 3 + 1 lanes, 250 cycles each
    assert shared_edge_cycles([3000, 1000], 4, 4) == 250
    # three flows on 2 PEs: one PE carries the two largest, one after the other
    assert shared_edge_cycles([400, 300, 200], 2, 4) == 175
    assert shared_edge_cycles([], 3, 4) == 0
    # a longer edge never takes longer
    times = [shared_edge_cycles([1_572_864] * 4, n, 4) for n in range(1, 40)]
    assert times == sorted(times, reverse=True)


@pytest.fixture(scope="module")
def gpt2_program(gpt2_graph):
    """A GPT-2-small-shaped program of two layers (real widths, seq 1024, the full vocabulary)
    sized, placed (greedy) and routed on WSE-2."""
    kg = gpt2_graph(layers=2, d=768, heads=12, seq=1024, vocab=50257, name="gpt2-2l")
    sizing = flow.size_regions(kg, WSE2, "mixed")
    placed = flow.place_and_route(kg, sizing, WSE2, "mixed", placer="greedy", time_budget_s=5)
    return sizing, placed.program


def test_l0_charges_a_flow_what_the_router_gave_it(gpt2_program) -> None:
    """Every routed flow's L0 stage is edge_cycles(bytes, its lanes, L), and the lanes the router
    gave it are those that carry its bytes within sizing's stage time (or more)."""
    _, program = gpt2_program
    pipe = build_pipeline(program, host_io=False)
    T, L = program.sizing.stage_cycles, WSE2.link_bytes_per_cycle
    flows = [s for s in pipe.stages if s.kind == FLOW]
    assert flows
    for s in flows:
        assert s.cycles_per_sample == edge_cycles(s.bytes_per_sample, s.lanes, L), s.name
        assert s.lanes >= lanes_within(s.bytes_per_sample, lane_bytes(T, L)), s.name
        assert s.cycles_per_sample <= T, s.name


def test_no_layernorm_starved_and_throughput_as_balanced(gpt2_program) -> None:
    """The layernorms' regions carry their flows: each is sized with a side long enough for
    every flow in and out at the stage time, and the placed, routed program sustains at least 90%
    of sizing's balanced throughput on the wafer."""
    sizing, program = gpt2_program
    T, L = sizing.stage_cycles, WSE2.link_bytes_per_cycle
    flows = routed_flow_bytes(program.kg, "mixed")
    lns = [k for k in program.kg.kernels if k.kind is KernelKind.LAYERNORM]
    assert lns
    for k in lns:
        ks = program.sizing.kernel(k.name)
        need = sum(lanes_within(b, lane_bytes(T, L)) for b in flows[k.name])
        assert min(ks.h, ks.w) >= need, (k.name, ks.h, ks.w, need)
    perf = simulate_l0(program)
    assert perf.wafer_samples_per_s >= 0.9 * sizing.samples_per_s, perf.wafer_bottleneck
