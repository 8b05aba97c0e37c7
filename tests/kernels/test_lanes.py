"""The one formula for a flow through an edge of n PEs (`wsecc.core.lanes`), and the compile that
uses it: sizing, the router and L0 agree on a flow's link time, and a GPT-2-shaped program
keeps the throughput its sizing balanced (no layernorm starved by a short edge)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest
from wsecc.targets import load_target

from wsecc.core import flow
from wsecc.core.lanes import edge_cycles, lane_bytes, lanes_within, shared_edge_cycles
from wsecc.kernels import KernelKind
from wsecc.kernels.sizing import routed_flow_bytes
from wsecc.place.api import place
from wsecc.place.problem import (
    Placement,
    PlacementProblem,
    Rect,
    tailored,
    validate_placement,
)
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
    # greedy ignores the budget (`wsecc.place.api.place`): the program does not depend on the load
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


WSE3 = load_target("wse3")


def never(*_: object) -> Placement:
    """A `place_again` that fails the test: the flow must not place again."""
    raise AssertionError("placed again")


def boxed_in(problem: PlacementProblem) -> dict[str, Rect]:
    """Pins that box the embedding in: in the fabric's corner, the LM head (751 of the 755
    columns) along its south side, three layernorms along its east side."""
    shape = {k.name: k.shapes[0] for k in problem.kernels}
    e = shape["embed"]
    pins = {"embed": Rect(0, 0, *e), "lm_head": Rect(0, e[1], *shape["lm_head"])}
    x = e[0]
    for name in ("h1.ln1", "h1.ln2", "ln_f"):
        pins[name] = Rect(x, 0, *shape[name])
        x += shape[name][0]
    return pins


SEARCH = flow.Search("greedy", 5.0, 0, False, deadline=0.0)
"""Placing again as these tests do: greedy, 5 s, seed 0."""


def test_lanes_with_no_way_around_are_given_room_by_placing_again(gpt2_graph, monkeypatch) -> None:
    """A placement whose lanes must cross the LM head (its links have no room left in the stage
    time) keeps about half the balanced throughput on the wafer. The flow places it again with
    a free ring around the kernels whose lanes crossed it, the LM head left out, and keeps the
    faster program: at least ON_WAFER_GOAL of balanced, every ring free, the first bound kept."""
    kg = gpt2_graph(layers=2, d=768, heads=12, seq=1024, vocab=50257, name="gpt2-2l")
    sizing = flow.size_regions(kg, WSE3, "mixed")
    problem = flow._problem(kg, sizing, WSE3, "mixed", None)
    pinned = place(replace(problem, pins=boxed_in(problem)), placer="greedy", time_budget_s=5)
    boxed = Placement.of(
        problem, pinned.rects, placer="greedy", bound=1e9, status="", seconds=0.0, seed=0
    )

    work = flow.Work(kg, sizing, WSE3, "mixed", flow.ForThroughput())
    _, first = flow._route_placed(work, problem, boxed, lambda *_: None)
    assert simulate_l0(first).wafer_samples_per_s < 0.6 * first.sizing.samples_per_s

    real = flow._place_again
    monkeypatch.setattr(flow, "_place_again", never)
    every_pinned = replace(problem, pins=dict(boxed.rects))  # no halo can move a pinned kernel
    kept, _, _ = flow._route_checked(work, every_pinned, boxed, SEARCH, lambda *_: None)
    assert kept is boxed

    halos: list[Mapping[str, int]] = []

    def again(
        problem: PlacementProblem, first: Placement, ring: Mapping[str, int], search: flow.Search
    ) -> Placement:
        halos.append(ring)
        return real(problem, first, ring, search)

    monkeypatch.setattr(flow, "_place_again", again)
    said: list[str] = []
    placement, _, program = flow._route_checked(
        work, problem, boxed, SEARCH, lambda _, s: said.append(s)
    )
    assert len(halos) == 1 and "embed" in halos[0] and "lm_head" not in halos[0]
    assert any("placed again with free rings" in s for s in said)
    perf = simulate_l0(program)
    assert perf.wafer_samples_per_s >= flow.ON_WAFER_GOAL * program.sizing.samples_per_s
    assert validate_placement(problem, placement) == []
    assert placement.bound == boxed.bound and "halos around" in placement.status
    for name, m in halos[0].items():
        r = placement.rects[name]
        ring = Rect(r.x - m, r.y - m, r.w + 2 * m, r.h + 2 * m)
        assert not any(ring.overlaps(o) for n, o in placement.rects.items() if n != name)


def test_a_program_at_its_balanced_throughput_is_not_placed_again(
    gpt2_program, monkeypatch
) -> None:
    sizing, program = gpt2_program
    problem = tailored(
        flow._problem(program.kg, sizing, WSE2, "mixed", None), program.placement.rects
    )
    work = flow.Work(program.kg, sizing, WSE2, "mixed", flow.ForThroughput())
    monkeypatch.setattr(flow, "_place_again", never)
    placement, _, _ = flow._route_checked(work, problem, program.placement, SEARCH, lambda *_: None)
    assert placement is program.placement
