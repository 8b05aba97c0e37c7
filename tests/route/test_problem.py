"""Routing schema: lane geometry, JSON round trip, and the validator's messages."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wsecc.place.problem import PlaceFlow, PlaceKernel, Placement, PlacementProblem, Rect
from wsecc.route.problem import (
    RoutedLane,
    Routing,
    RoutingProblem,
    _legal,
    _violations,
    crossed_regions,
    decode_path,
    edge_shares,
    encode_path,
    facing_sides,
    link_loads,
    make_routing_problem,
    router_passes,
    validate_routing,
)
from wsecc.route.router import route

# A→B runs east along rows 12..15, C→D runs south along columns 12..15: they must cross.
RECTS = {
    "A": Rect(0, 12, 4, 4),
    "B": Rect(26, 12, 4, 4),
    "C": Rect(12, 0, 4, 4),
    "D": Rect(12, 26, 4, 4),
}
PLACE = PlacementProblem(
    30,
    30,
    tuple(PlaceKernel(n, ((4, 4),), onnx_nodes=(f"/{n}/MatMul",)) for n in RECTS),
    (PlaceFlow("A", "B", 2.0), PlaceFlow("C", "D", 2.0)),
)
PLACEMENT = Placement.of(PLACE, RECTS, placer="test", bound=0, status="", seconds=0, seed=0)


@pytest.fixture(scope="module")
def routed() -> tuple[RoutingProblem, Routing]:
    problem = make_routing_problem(PLACE, PLACEMENT, bytes_per_lane=1.0, max_lanes=2)
    return problem, route(problem, PLACEMENT)


def lanes_with(routing: Routing, index: int = 0, **changes) -> Routing:
    """The routing with lane `index` of flow A->B changed."""
    lanes = tuple(
        replace(ln, **changes) if (ln.flow, ln.index) == ("A->B", index) else ln
        for ln in routing.lanes
    )
    return replace(routing, lanes=lanes)


def test_facing_sides_follow_the_separating_axis():
    assert facing_sides(RECTS["A"], RECTS["B"]) == ("E", "W")
    assert facing_sides(RECTS["B"], RECTS["A"]) == ("W", "E")
    assert facing_sides(RECTS["C"], RECTS["D"]) == ("S", "N")
    # separated only in x, even though the y offset is larger
    assert facing_sides(Rect(0, 0, 2, 40), Rect(3, 30, 2, 2)) == ("E", "W")


def test_lanes_are_capped_by_bytes_and_edges(routed):
    problem, _ = routed
    assert [(f.name, f.lanes, f.onnx_nodes) for f in problem.flows] == [
        ("A->B", 2, ("/A/MatMul", "/B/MatMul")),
        ("C->D", 2, ("/C/MatMul", "/D/MatMul")),
    ]
    assert problem.color_budget == 21
    wide = make_routing_problem(PLACE, PLACEMENT, bytes_per_lane=0.01, max_lanes=16)
    assert {f.lanes for f in wide.flows} == {4}  # the 4-PE facing edge


def test_a_shared_edge_goes_to_the_flows_in_proportion_to_their_bytes():
    """A kernel's 16-PE edge shared by a 14 MB flow and a 2 MB one: 14 and 2 PEs (equal
    shares, 8 and 8, would leave the heavy flow at 8 lanes of the 14 it needs)."""
    big = Rect(0, 0, 4, 16)
    rects = {"S": big, "T": Rect(10, 0, 4, 16), "U": Rect(10, 20, 4, 4)}
    flows = (PlaceFlow("S", "T", 14.0), PlaceFlow("S", "U", 2.0))
    place = PlacementProblem(
        30, 30, tuple(PlaceKernel(n, ((r.w, r.h),)) for n, r in rects.items()), flows
    )
    placement = Placement.of(place, rects, placer="test", bound=0, status="", seconds=0, seed=0)
    problem = make_routing_problem(place, placement, bytes_per_lane=1.0, max_lanes=None)
    assert [f.lanes for f in problem.flows] == [14, 2]
    assert validate_routing(problem, placement, route(problem, placement)) == []


def test_equal_flows_interleave_along_an_edge():
    assert edge_shares(7, (3.0, 3.0, 3.0)) == (0, 1, 2, 0, 1, 2, 0)
    assert edge_shares(4, (0.0, 0.0)) == (0, 1, 0, 1)  # no bytes: equal shares


@given(
    st.integers(1, 60).flatmap(
        lambda n: st.tuples(
            st.just(n), st.lists(st.floats(0, 1e9, allow_nan=False), min_size=1, max_size=n)
        )
    )
)
def test_edge_shares_give_each_flow_a_pe_and_the_rest_max_min_fair(case):
    """Every flow at least one PE, all n PEs given, and no PE could move from one flow to
    another and raise the smallest PEs-per-byte (over flows with bytes); each flow's PEs
    spread along the edge (gaps at most n / its share + the number of flows)."""
    n, weights = case
    owners = edge_shares(n, tuple(weights))
    k = len(weights)
    quota = [owners.count(i) for i in range(k)]
    assert len(owners) == n and min(quota) >= 1
    w = weights if any(weights) else [1.0] * k
    ratio = [q / b for q, b in zip(quota, w, strict=True) if b > 0]
    for i in range(k):
        for j in range(k):
            if i != j and quota[i] > 1 and w[i] > 0 and w[j] > 0:
                moved = [(quota[t] - (t == i) + (t == j)) / w[t] for t in range(k) if w[t] > 0]
                assert min(moved) <= min(ratio) * (1 + 1e-9)
    for i in range(k):
        at = [p for p, o in enumerate(owners) if o == i]
        gaps = [b - a for a, b in zip(at, at[1:], strict=False)]
        assert all(g <= n / quota[i] + k for g in gaps)


def test_legal_routing_round_trips(routed):
    problem, routing = routed
    assert validate_routing(problem, PLACEMENT, routing) == []
    assert Routing.from_json(json.loads(routing.dumps())) == routing
    assert RoutingProblem.from_json(json.loads(json.dumps(problem.to_json()))) == problem
    # straight lanes: 23 hops each (x=3 to x=26), crossing at 4 routers, 2 lanes at each
    assert routing.total_length == 4 * 23
    assert routing.color_lower_bound == 2 and routing.colors_used_max == 2


def test_path_encoding_is_run_length():
    path = ((3, 4), (4, 4), (5, 4), (5, 5), (5, 6), (4, 6))
    assert encode_path(path) == {"start": [3, 4], "moves": "E2 S2 W1"}
    assert decode_path(encode_path(path)) == path


def test_broken_path_is_reported(routed):
    problem, routing = routed
    lane = next(ln for ln in routing.lanes if ln.flow == "A->B" and ln.index == 0)
    broken = lane.path[:5] + lane.path[6:]
    out = validate_routing(problem, PLACEMENT, lanes_with(routing, path=broken))
    assert (
        f"flow 'A->B' lane 0 is broken: {lane.path[4]} -> {lane.path[6]} is not a unit step" in out
    )


def test_path_off_the_fabric_and_off_the_edges_is_reported(routed):
    problem, routing = routed
    out = validate_routing(problem, PLACEMENT, lanes_with(routing, path=((3, 0), (3, -1), (4, -1))))
    assert "flow 'A->B' lane 0 leaves the fabric at (3, -1)" in out
    assert "flow 'A->B' lane 0 starts at (3, 0), not on the E edge of 'A'" in out
    assert "flow 'A->B' lane 0 ends at (4, -1), not on the W edge of 'B'" in out


def test_color_over_budget_is_reported(routed):
    problem, routing = routed
    out = validate_routing(problem, PLACEMENT, lanes_with(routing, color=21))
    assert "flow 'A->B' lane 0 has color 21, outside the budget 0..20" in out


def test_missing_lane_is_reported(routed):
    problem, routing = routed
    lanes = tuple(ln for ln in routing.lanes if (ln.flow, ln.index) != ("C->D", 1))
    assert validate_routing(problem, PLACEMENT, replace(routing, lanes=lanes)) == [
        "flow 'C->D' lane 1 is missing"
    ]


def test_color_conflict_is_reported(routed):
    problem, routing = routed
    one_color = replace(routing, lanes=tuple(replace(ln, color=0) for ln in routing.lanes))
    out = validate_routing(problem, PLACEMENT, one_color)
    assert len(out) == 4  # 2 lanes × 2 lanes crossing
    assert any(
        m.startswith("router (")
        and "flow 'A->B' lane" in m
        and "flow 'C->D' lane" in m
        and m.endswith("share color 0 with different routes")
        for m in out
    )


def test_link_over_capacity_is_reported(routed):
    problem, routing = routed
    lane0 = next(ln for ln in routing.lanes if ln.flow == "A->B" and ln.index == 0)
    out = validate_routing(problem, PLACEMENT, lanes_with(routing, index=1, path=lane0.path))
    assert f"link {lane0.path[0]}->E carries 2 lanes, capacity 1" in out
    # the same flow with the same configuration: no color conflict is claimed
    assert not any("share color" in m for m in out)


def test_extra_and_unknown_lanes_are_reported(routed):
    problem, routing = routed
    lane = routing.lanes[0]
    extra = replace(
        routing, lanes=(*routing.lanes, replace(lane, index=5), replace(lane, flow="X->Y"))
    )
    out = validate_routing(problem, PLACEMENT, extra)
    assert f"flow '{lane.flow}' lane 5 is beyond the flow's 2 lanes" in out
    assert "unknown flow 'X->Y' is routed" in out


def test_crossed_regions_names_the_regions_a_lane_runs_through():
    """A lane from A to B straight through M crosses M (two of its steps lie inside it); its own
    ends and a lane that only touches M's edge from outside do not count."""
    rects = {"A": Rect(0, 0, 2, 4), "M": Rect(4, 0, 3, 4), "B": Rect(9, 0, 2, 4)}
    place = PlacementProblem(
        12,
        6,
        tuple(PlaceKernel(n, ((r.w, r.h),)) for n, r in rects.items()),
        (PlaceFlow("A", "B", 1.0),),
    )
    placement = Placement.of(place, rects, placer="t", bound=0, status="", seconds=0, seed=0)
    through = tuple((x, 1) for x in range(1, 10))  # row 1, across M's columns 4..6
    around = ((1, 3), (1, 4), *((x, 4) for x in range(2, 10)), (9, 3))  # row 4, below M
    routing = Routing.of(
        [RoutedLane("A->B", 0, through, 0), RoutedLane("A->B#2", 0, around, 1)], 21, 1
    )
    assert crossed_regions(routing, placement) == {"A->B": {"M"}}


_STEP = st.sampled_from([(1, 0), (-1, 0), (0, 1), (0, -1)])


@st.composite
def _lanes(draw) -> tuple[RoutedLane, ...]:
    """Lanes of a few flows: walks of unit steps (a rare non-unit step too) from random PEs."""
    lanes = []
    for i in range(draw(st.integers(0, 12))):
        x, y = draw(st.integers(0, 6)), draw(st.integers(0, 6))
        path = [(x, y)]
        for dx, dy in draw(st.lists(_STEP | st.just((2, 1)), max_size=8)):
            x, y = x + dx, y + dy
            path.append((x, y))
        flow, color = draw(st.sampled_from("abc")), draw(st.integers(0, 3))
        lanes.append(RoutedLane(flow, i, tuple(path), color))
    return tuple(lanes)


@settings(max_examples=300, deadline=None)
@given(lanes=_lanes())
def test_routing_figures_count_every_router_pass(lanes):
    # Routing.of counts all passes at once; here one router and one link at a time
    r = Routing.of(lanes, color_budget=8, iterations=0)
    passes = router_passes(r.lanes)
    colors = {at: len({r.lanes[i].color for i, _ in ps}) for at, ps in passes.items()}
    classes = {at: len({(r.lanes[i].flow, cfg) for i, cfg in ps}) for at, ps in passes.items()}
    assert r.color_histogram == dict(sorted(Counter(colors.values()).items()))
    assert r.colors_used_max == max(colors.values(), default=0)
    assert r.color_lower_bound == max(classes.values(), default=0)
    lb = r.color_lower_bound
    assert r.lower_bound_router == min((at for at, n in classes.items() if n == lb), default=(0, 0))
    assert r.link_load_max == max(link_loads(r.lanes).values(), default=0)


@st.composite
def _altered(draw, routing: Routing) -> Routing:
    """`routing` with a few lanes recolored, rerouted by a short walk from their first PE,
    dropped, duplicated or renumbered: legal or not, every rule gets broken now and then."""
    lanes = list(routing.lanes)
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(lanes) - 1))
        ln, what = lanes[i], draw(st.sampled_from(["color", "walk", "drop", "copy", "index"]))
        if what == "color":
            lanes[i] = replace(ln, color=draw(st.integers(0, 22)))
        elif what == "walk":
            x, y = ln.path[0]
            path = [(x, y)]
            for dx, dy in draw(st.lists(_STEP | st.just((2, 1)), max_size=30)):
                x, y = x + dx, y + dy
                path.append((x, y))
            lanes[i] = replace(ln, path=tuple(path))
        elif what == "drop" and len(lanes) > 1:
            del lanes[i]
        elif what == "copy":
            lanes.append(ln)
        elif what == "index":
            lanes[i] = replace(ln, index=draw(st.integers(0, 3)))
    return replace(routing, lanes=tuple(lanes))


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_array_check_passes_exactly_the_routings_without_violations(routed, data):
    """validate_routing returns [] when `_legal` proves a routing legal, without walking it:
    `_legal` must agree with the lane-by-lane walk on every routing, legal or not."""
    problem, routing = routed
    altered = data.draw(_altered(routing))
    assert _legal(problem, PLACEMENT, altered) == (_violations(problem, PLACEMENT, altered) == [])


@given(st.lists(st.integers(0, 2**40), max_size=60), st.integers(1, 5))
@settings(max_examples=100, deadline=None)
def test_runs_are_numpys_unique_with_counts(values, spread):
    """`_runs` (one sort) gives the distinct values, ascending, and their counts, as
    `np.unique(·, return_counts=True)` does; on repeats and on an empty array too."""
    from wsecc.route.problem import _runs

    keys = np.array([v // spread for v in values] * spread, np.int64)
    got, want = _runs(keys), np.unique(keys, return_counts=True)
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
