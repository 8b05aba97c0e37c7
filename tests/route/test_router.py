"""Router: legal, colored within budget, deterministic; fails loudly naming a router."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsecc.targets import load_target

import wsecc.core.flow as flow
from wsecc.place.greedy import place_greedy
from wsecc.place.problem import PlaceFlow, PlaceKernel, Placement, PlacementProblem, Rect
from wsecc.place.synthetic import chain_problem, transformer_problem
from wsecc.route.compiled import _inside, _link_inside
from wsecc.route.problem import (
    STEPS,
    RoutedLane,
    RoutingError,
    RoutingProblem,
    crossed_regions,
    make_routing_problem,
    validate_routing,
)
from wsecc.route.router import (
    DIRS,
    RouterOptions,
    Tolls,
    _Negotiation,
    _path_inside,
    _polyline,
    _unplaced,
    conflict_graph,
    cut_shortfalls,
    dsatur,
    route,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("lanes", [1, 4, 16])
def test_routes_a_transformer_legally(lanes):
    problem = transformer_problem(60)
    placement = place_greedy(problem)
    rp = make_routing_problem(problem, placement, bytes_per_lane=1.0, max_lanes=lanes)
    routing = route(rp, placement)
    assert validate_routing(rp, placement, routing) == []
    assert routing.color_lower_bound <= routing.colors_used_max <= rp.color_budget
    assert max(ln.color for ln in routing.lanes) < rp.color_budget
    assert routing.link_load_max == 1
    assert sum(routing.color_histogram.values()) == len(
        {p for ln in routing.lanes for p in ln.path}
    )


def test_wider_links_take_several_lanes():
    problem = chain_problem(24, width=120, height=120)
    placement = place_greedy(problem)
    rp = make_routing_problem(problem, placement, bytes_per_lane=1.0, max_lanes=8, link_capacity=2)
    routing = route(rp, placement)
    assert validate_routing(rp, placement, routing) == []
    assert routing.link_load_max <= 2


def _congested() -> tuple[RoutingProblem, Placement]:
    """24 kernels in a chain whose flows do not route within 3 colors."""
    problem = chain_problem(24, width=120, height=120, alt_shapes=True)
    placement = place_greedy(problem)
    rp = make_routing_problem(
        problem, placement, bytes_per_lane=1.0, max_lanes=16, colors_total=24, colors_reserved=21
    )
    return rp, placement


def _congested_outcomes() -> list[object]:
    """The congested chain routed with 24 colors (its routing's text) and over its own 3-color
    budget (the error and the lanes it had, which fail on colors)."""
    rp, placement = _congested()

    def outcome(problem: RoutingProblem) -> object:
        try:
            return route(problem, placement).dumps()
        except RoutingError as e:
            return str(e), sorted(e.paths.items())

    return [outcome(replace(rp, color_budget=24)), outcome(rp)]


def test_congested_instance_over_a_3_color_budget_names_a_router():
    rp, placement = _congested()
    with pytest.raises(RoutingError) as e:
        route(rp, placement)
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith("cannot route within 3 colors: ")
    assert "router (" in message and "budget 3" in message
    assert "flows crossing it: k" in message and "[node_" in message


def test_a_failed_routing_says_where_each_of_its_lanes_ended():
    # the next attempt may start there (`route`'s `warm`): one path per lane, end to end
    rp, placement = _congested()
    with pytest.raises(RoutingError) as e:
        route(rp, placement)
    assert len(e.value.paths) == sum(f.lanes for f in rp.flows)
    for (flow_name, s, t), path in e.value.paths.items():
        assert flow_name in {f.name for f in rp.flows} and path[0] == s and path[-1] == t
        assert all(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 for a, b in pairwise(path))


def test_a_warm_start_routes_only_the_lanes_it_has_no_path_for(monkeypatch):
    # warm from a legal routing of the same problem, but for one flow's lanes and with one
    # path that does not join its lane's ends: the first iteration routes that flow's lanes
    # and the bad one, keeps the others where they were, and the result is legal
    problem = transformer_problem(60)
    placement = place_greedy(problem)
    rp = make_routing_problem(problem, placement, bytes_per_lane=1.0, max_lanes=4)
    routing = route(rp, placement)
    paths = {(ln.flow, ln.path[0], ln.path[-1]): ln.path for ln in routing.lanes}
    dropped = rp.flows[0].name
    bad = next(k for k in paths if k[0] != dropped and len(paths[k]) > 2)
    warm = {k: p for k, p in paths.items() if k[0] != dropped}
    warm[bad] = paths[bad][:-1]  # stops one step short of its destination
    routed: list[tuple[tuple[int, int], tuple[int, int]]] = []
    best_path = _Negotiation.best_path

    def counted(self, s, t, *args):
        routed.append((s, t))
        return best_path(self, s, t, *args)

    monkeypatch.setattr(_Negotiation, "best_path", counted)
    again = route(rp, placement, warm=warm)
    fresh = {(s, t) for (f, s, t) in paths if f == dropped} | {bad[1:]}
    assert again.iterations == 1 and len(routed) == len(fresh) and set(routed) == fresh
    assert validate_routing(rp, placement, again) == []
    kept = {(ln.flow, ln.path[0], ln.path[-1]): ln.path for ln in again.lanes}
    assert all(kept[k] == p for k, p in warm.items() if k != bad)


def _counting_iterations(monkeypatch) -> list[int]:
    """Count the negotiation's iterations that end without a routing (each calls negotiate)."""
    calls: list[int] = []
    negotiate = _Negotiation.negotiate

    def counted(self, hot):
        calls.append(2 if hot else 1)  # 2: the colors phase (routers get history)
        return negotiate(self, hot)

    monkeypatch.setattr(_Negotiation, "negotiate", counted)
    return calls


def test_a_negotiation_that_does_not_converge_stops_early(monkeypatch):
    """3 colors cannot route a chain where 4 lanes meet at a router: the colors over budget
    stop falling, and the router gives up before its 40 iterations, naming a router, one
    iteration past the stall window of the colors phase (whose iterations give routers
    history, `negotiate(hot)` with hot routers)."""
    problem = chain_problem(24, width=120, height=120, alt_shapes=True)
    placement = place_greedy(problem)
    rp = make_routing_problem(
        problem, placement, bytes_per_lane=1.0, max_lanes=16, colors_total=24, colors_reserved=21
    )
    calls = _counting_iterations(monkeypatch)
    opts = RouterOptions()
    with pytest.raises(RoutingError, match=r"^cannot route within 3 colors: .*router \("):
        route(rp, placement, opts)
    assert len(calls) < opts.max_iterations
    assert calls.count(2) == opts.stall_window  # the colors phase's 9th iteration stops it


def test_a_negotiation_that_converges_slowly_still_routes(monkeypatch):
    """With 8 colors the same chain routes after more iterations than the stall window: the
    early stop leaves a negotiation that is still making progress alone."""
    problem = chain_problem(24, width=120, height=120, alt_shapes=True)
    placement = place_greedy(problem)
    rp = make_routing_problem(
        problem, placement, bytes_per_lane=1.0, max_lanes=16, colors_total=24, colors_reserved=16
    )
    calls = _counting_iterations(monkeypatch)
    routing = route(rp, placement)
    assert validate_routing(rp, placement, routing) == []
    assert routing.iterations == len(calls) + 1 > RouterOptions().stall_window


_RUN = """
import sys
from wsecc.place.cpsat import place_cpsat
from wsecc.place.synthetic import chain_problem
from wsecc.route.problem import make_routing_problem
from wsecc.route.router import route
problem = chain_problem(40, alt_shapes=True)
p = place_cpsat(problem, time_budget_s=0.5, seed=3, deterministic=True)
r = route(make_routing_problem(problem, p, bytes_per_lane=4096.0), p)
sys.stdout.write(p.dumps(include_timing=False) + r.dumps())
"""


def test_place_and_route_are_byte_identical_across_processes():
    from conftest import two_fresh_runs

    first, second = two_fresh_runs(_RUN)
    assert first == second and '"lanes"' in first


@settings(max_examples=60, deadline=None)
def _closed_regions(max_size: int) -> st.SearchStrategy[list[tuple[int, int, int, int]]]:
    """Up to `max_size` closed regions (x, y, w, h) in the area of `_uneven`'s networks."""
    rect = st.tuples(st.integers(0, 30), st.integers(0, 20), st.integers(1, 9), st.integers(1, 9))
    return st.lists(rect, max_size=max_size)


@given(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=120),
        )
    )
)
def test_dsatur_colors_properly(graph):
    n, edges = graph
    adj: list[set[int]] = [set() for _ in range(n)]
    for a, b in edges:
        if a != b:
            adj[a].add(b)
            adj[b].add(a)
    colors = dsatur(adj)
    assert all(colors[a] != colors[b] for a in range(n) for b in adj[a])
    assert max(colors) <= max(len(s) for s in adj)  # at most Δ + 1 colors
    assert set(colors) == set(range(max(colors) + 1))


def test_conflict_graph_spares_identical_configurations_of_one_flow():
    a = RoutedLane("f", 0, ((0, 0), (1, 0), (2, 0)), 0)
    b = RoutedLane("f", 1, ((0, 0), (1, 0), (2, 0)), 0)  # same flow, same (in, out) everywhere
    c = RoutedLane("g", 0, ((1, -1), (1, 0), (1, 1)), 0)  # another flow crossing at (1, 0)
    d = RoutedLane("f", 2, ((0, 1), (1, 1), (1, 0), (2, 0)), 0)  # same flow, turns at (1, 0)
    assert conflict_graph((a, b, c, d)) == [{2, 3}, {2, 3}, {0, 1, 3}, {0, 1, 2}]


def test_more_flows_than_edge_pes_still_route():
    # a 1x1 hub feeding three kernels to its east: all three flows leave by the same one-PE edge
    kernels = (PlaceKernel("hub", ((1, 1),)),) + tuple(
        PlaceKernel(f"d{i}", ((2, 2),)) for i in range(3)
    )
    rects = {
        "hub": Rect(2, 5, 1, 1),
        "d0": Rect(8, 1, 2, 2),
        "d1": Rect(8, 5, 2, 2),
        "d2": Rect(8, 9, 2, 2),
    }
    problem = PlacementProblem(
        12, 12, kernels, tuple(PlaceFlow("hub", f"d{i}", 1.0) for i in range(3))
    )
    placement = Placement.of(problem, rects, placer="test", bound=0, status="", seconds=0, seed=0)
    rp = make_routing_problem(problem, placement)
    routing = route(rp, placement)
    assert validate_routing(rp, placement, routing) == []
    assert {ln.path[0] for ln in routing.lanes} == {(2, 5)}


def _uneven(seed: int, area: tuple[int, int, int, int], detour: int, hist: int) -> _Negotiation:
    """A negotiation over `area` whose link costs are uneven: random history below `hist` and
    random usage, at present-congestion factor 3."""
    rng = np.random.default_rng(seed)
    net = _Negotiation(area, 1, RouterOptions(detour=detour))
    net.hist[:] = rng.integers(0, hist, net.hist.shape)
    net.usage[:] = rng.integers(0, 2, net.usage.shape)
    net.pres = 3.0
    net.refresh()
    return net


@pytest.mark.parametrize("seed", range(5))
def test_maze_path_is_a_cheapest_path_in_its_window(seed):
    # the routing area starts off the fabric origin; history makes the costs uneven
    net = _uneven(seed, (3, 2, 30, 20), detour=4, hist=20)
    s, t = (9, 6), (20, 13)

    def cost_of(path):
        assert path[0] == s and path[-1] == t and len(set(path)) == len(path)
        ids = net.link_ids(path)  # KeyError unless every step is a unit step
        return float(net.link_cost(np.unravel_index(ids, net.usage.shape)).sum())

    cost = cost_of(net.maze_path(s, t, float("inf")))

    window = nx.DiGraph()  # the lane's bounding box grown by the detour, plain Dijkstra
    for x in range(s[0] - 4, t[0] + 5):
        for y in range(s[1] - 4, t[1] + 5):
            for k, (dx, dy) in enumerate(STEPS.values()):
                if s[0] - 4 <= x + dx <= t[0] + 4 and s[1] - 4 <= y + dy <= t[1] + 4:
                    w = net.link_cost((k, y - 2, x - 3))
                    window.add_edge((x, y), (x + dx, y + dy), weight=float(w))
    assert cost == pytest.approx(nx.dijkstra_path_length(window, s, t))
    assert cost_of(net.maze_path(s, t, cost + 0.5)) == pytest.approx(cost)
    assert net.maze_path(s, t, cost) is None  # only a cheaper path is returned


def test_a_failed_routing_narrows_only_the_flows_at_its_witness(monkeypatch):
    """The first routing fails at a link two flows cross: the retry takes a quarter of their
    lanes and leaves the third flow's as the bandwidth asked."""
    rects = {"A": Rect(0, 0, 8, 8), "B": Rect(20, 0, 8, 8), "C": Rect(0, 20, 8, 8)}
    place_problem = PlacementProblem(
        40,
        40,
        tuple(PlaceKernel(n, ((8, 8),)) for n in rects),
        (PlaceFlow("A", "B", 6.0), PlaceFlow("B", "C", 6.0), PlaceFlow("C", "A", 6.0)),
    )
    placement = Placement.of(
        place_problem, rects, placer="t", bound=0, status="", seconds=0, seed=0
    )
    tried, warms = [], []
    ended = {(f, (0, 0), (1, 1)): ((0, 0), (1, 0), (1, 1)) for f in ("A->B", "B->C", "C->A")}

    def fake_route(problem, placement, tolls=None, warm=None):
        tried.append(problem)
        warms.append(warm)
        if len(tried) == 1:
            raise RoutingError(
                "cannot route: link (1, 1) going E", flows=["A->B", "B->C"], paths=ended
            )
        return "routed"

    monkeypatch.setattr(flow, "route", fake_route)
    monkeypatch.setattr(flow, "_widened", lambda *args: None)  # no sizing to widen against
    monkeypatch.setattr(flow, "region_tolls", lambda *args: None)  # nor to charge tolls from
    said: list[tuple[str, str]] = []
    rp, routing = flow._route_widest(
        place_problem, placement, None, load_target("wse2"), lambda *s: said.append(s),
        bytes_per_lane=1.0,
    )  # fmt: skip
    assert routing == "routed" and len(tried) == 2
    assert [f.lanes for f in tried[0].flows] == [4, 4, 6]  # B's west edge: 4 PEs each
    assert [f.lanes for f in rp.flows] == [3, 3, 6]
    # the retry starts where the failed attempt's lanes ended, but for the narrowed flows'
    assert warms == [{}, {k: v for k, v in ended.items() if k[0] == "C->A"}]
    assert said == [
        (
            "route",
            "cannot route: link (1, 1) going E...: a quarter fewer lanes for the 2 flows it failed on",
        )
    ]


def _across_a_busy_region() -> tuple[PlacementProblem, Placement]:
    """a -> b with a third kernel's region `busy` straight between them (rows 10–29 of 40)."""
    kernels = tuple(PlaceKernel(n, ((10, 20),)) for n in ("a", "busy", "b"))
    problem = PlacementProblem(60, 40, kernels, (PlaceFlow("a", "b", 1.0, name="a->b"),))
    rects = {"a": Rect(0, 10, 10, 20), "busy": Rect(25, 10, 10, 20), "b": Rect(50, 10, 10, 20)}
    return problem, Placement(rects, "test", 0.0, 0.0, 0.0, "", 0.0, 0)


@pytest.mark.parametrize("room, crosses", [(None, True), (0.2, False), (0.25, True)])
def test_lanes_go_around_a_region_that_has_no_room_for_them(room, crosses):
    problem, placement = _across_a_busy_region()
    rp = make_routing_problem(problem, placement, bytes_per_lane=0.25, max_lanes=4)
    # each lane carries 0.25 bytes; a toll above any detour's length
    tolls = None if room is None else Tolls({"busy": room}, per_link=100.0)
    routing = route(rp, placement, RouterOptions(detour=2, clearance=2), tolls=tolls)
    assert validate_routing(rp, placement, routing) == []
    assert bool(crossed_regions(routing, placement)) == crosses
    if not crosses:  # every lane around, above or below the region, beyond the lanes' detour
        assert len(routing.lanes) == 4
        assert all(any(not 10 <= y < 30 for _, y in ln.path) for ln in routing.lanes)


@given(
    rects=st.lists(
        st.tuples(st.integers(0, 12), st.integers(0, 12), st.integers(1, 6), st.integers(1, 6)),
        max_size=4,
    ),
    start=st.tuples(st.integers(0, 17), st.integers(0, 17)),
    turns=st.lists(st.integers(0, 17), min_size=1, max_size=3),
)
@settings(max_examples=200, deadline=None)
def test_toll_counts_agree_with_the_steps_a_path_takes_inside_regions(rects, start, turns):
    # a path of alternating horizontal and vertical runs; regions may overlap here (each is
    # counted on its own, as `_link_inside` and `_inside` do)
    corners = [start]
    for k, to in enumerate(turns):
        x, y = corners[-1]
        corners.append((to, y) if k % 2 == 0 else (x, to))
    path = np.array(_polyline(corners))
    r = np.array(rects, np.int64).reshape(-1, 4)
    inside = [
        sum(
            x <= p[0] < x + w and y <= p[1] < y + h and x <= q[0] < x + w and y <= q[1] < y + h
            for p, q in zip(path[:-1], path[1:], strict=True)
        )
        for x, y, w, h in rects
    ]
    ids = {STEPS[d]: k for k, d in enumerate(STEPS)}
    on_grid = sum(
        _link_inside(r, ids[(int(q[0] - p[0]), int(q[1] - p[1]))], int(p[1]), int(p[0]))
        for p, q in zip(path[:-1], path[1:], strict=True)
    )
    assert on_grid == sum(inside)
    by_runs = sum(
        _inside(r, a[0], b[0], a[1], False) if a[1] == b[1] else _inside(r, a[1], b[1], a[0], True)
        for a, b in zip(corners[:-1], corners[1:], strict=True)
    )
    assert int(by_runs) == sum(inside)
    boxes = [Rect(*t) for t in rects]
    if not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :]):
        assert _path_inside(r, path) == sum(inside)


def test_widening_checks_each_new_routing_and_keeps_the_least_busy(monkeypatch):
    """A widened routing is checked again (its lanes may cross other regions); of the routings
    tried, the one whose busiest link is least busy is kept, not the last."""
    problem, placement = _across_a_busy_region()
    rp = make_routing_problem(problem, placement, bytes_per_lane=0.25, max_lanes=4)
    wider = [replace(rp, flows=(replace(rp.flows[0], lanes=n),)) for n in (5, 6)]
    busiest = {4: 100, 5: 80, 6: 90}  # lanes of the one flow -> its routing's busiest link
    routed = []

    def fake_route(problem, placement, tolls=None, warm=None):
        routed.append(problem.flows[0].lanes)
        return problem.flows[0].lanes  # stands for the routing

    monkeypatch.setattr(flow, "route", fake_route)
    monkeypatch.setattr(flow, "_kept", lambda *args: {})  # the stand-in has no lanes
    monkeypatch.setattr(flow, "_widened", lambda room, pl, s, t, rp, r: ([*wider, None])[r - 4])
    monkeypatch.setattr(flow, "_busiest_link", lambda rp, r, *args: busiest[r])
    said: list[str] = []
    kept, routing = flow._widest_crossing(
        problem, placement, None, load_target("wse2"), None, rp, 4, said.append
    )
    assert routed == [5, 6] and said == []
    assert (kept, routing) == (wider[0], 5)


@given(
    start=st.tuples(st.integers(0, 19), st.integers(0, 19)),
    turns=st.lists(st.integers(0, 19), min_size=1, max_size=4),
)
@settings(max_examples=100, deadline=None)
def test_polyline_steps_one_pe_at_a_time_through_its_corners(start, turns):
    corners = [start]
    for k, to in enumerate(turns):
        x, y = corners[-1]
        corners.append((to, y) if k % 2 == 0 else (x, to))
    walked = [start]  # the definition: one unit step at a time towards the next corner
    for tx, ty in corners[1:]:
        while walked[-1] != (tx, ty):
            x, y = walked[-1]
            walked.append((x + (tx > x) - (tx < x), y + (ty > y) - (ty < y)))
    assert _polyline(corners) == tuple(walked)
    with pytest.raises(ValueError, match="share no row or column"):
        _polyline([(0, 0), (1, 1)])


@given(
    path=st.lists(st.integers(0, 3), max_size=12),
    at=st.tuples(st.integers(12, 16), st.integers(12, 16)),
    seed=st.integers(0, 3),
)
@settings(max_examples=100, deadline=None)
def test_commit_recomputes_the_prefix_sums_of_every_line_it_changes(path, at, seed):
    """After a lane is committed and ripped up on uneven costs, the prefix sums are those of
    every line recomputed, to the bit: a commit recomputes the row of each E/W link and the
    column of each S/N link it changes (leaving out one of them fails this)."""
    net = _uneven(seed, (2, 1, 30, 30), detour=4, hist=5)
    points = [(at[0], at[1])]
    for k in path:  # a walk (may revisit a router, so no link twice: keep the first visit)
        dx, dy = STEPS[DIRS[k]]
        points.append((points[-1][0] + dx, points[-1][1] + dy))
    ids = list(dict.fromkeys(net.link_ids(points)))
    before = net.usage.copy()
    for delta in (+1, -1, +1):
        net.commit(ids, delta)
        got = [p.copy() for p in net.prefix]
        net.sum_every_line()
        for a, b in zip(got, net.prefix, strict=True):
            assert np.array_equal(a, b)
    assert int((net.usage - before).sum()) == len(ids)


@given(path=st.lists(st.sampled_from([*STEPS.values(), (2, 0), (1, 1)]), max_size=10))
@settings(max_examples=100, deadline=None)
def test_link_ids_number_each_step_by_its_direction_and_router(path):
    """Link id = direction index · H · W + (y − y0) · W + (x − x0); a step that is not a unit
    step is a KeyError."""
    net = _Negotiation((2, 1, 30, 30), 1, RouterOptions())
    points = [(15, 14)]
    for dx, dy in path:
        points.append((points[-1][0] + dx, points[-1][1] + dy))
    steps = [(b[0] - a[0], b[1] - a[1]) for a, b in zip(points, points[1:], strict=False)]
    if any(s not in STEPS.values() for s in steps):
        with pytest.raises(KeyError):
            net.link_ids(points)
        return
    dirs = {v: k for k, v in enumerate(STEPS.values())}
    want = [
        dirs[s] * 30 * 30 + (a[1] - 1) * 30 + a[0] - 2 for s, a in zip(steps, points, strict=False)
    ]
    assert net.link_ids(points) == want


def _whole_window(box, s, t, cost_to_beat):
    """`_within_reach` undone: the maze search over the lane's whole window."""
    return box


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("slack", [0.5, 2.0, 7.0, 40.0])
def test_maze_path_over_the_part_within_reach_is_the_whole_windows(seed, slack, monkeypatch):
    """`maze_path` searches only the PEs a path cheaper than the pattern could reach: on uneven
    costs, for budgets from just above the cheapest cost to far above it, it returns the very
    path (or None) that the search over the lane's whole window returns."""
    import wsecc.route.router as router

    net = _uneven(seed, (3, 2, 60, 40), detour=16, hist=4)
    s, t = (20, 12), (31, 19)
    best = net.maze_path(s, t, float("inf"))
    assert best is not None
    ids = net.link_ids(best)
    cost = float(net.link_cost(np.unravel_index(ids, net.usage.shape)).sum())
    got = [net.maze_path(s, t, cost + slack), net.maze_path(s, t, cost)]
    monkeypatch.setattr(router, "_within_reach", _whole_window)
    assert got == [net.maze_path(s, t, cost + slack), net.maze_path(s, t, cost)]
    assert got[0] == best and got[1] is None


def test_a_congested_routing_is_the_same_with_the_search_within_reach(monkeypatch):
    """The congested chain (24 kernels, 16 lanes a flow: its negotiation takes the maze search)
    routes to byte-identical lanes and colors whether each search covers its whole window or
    the part within reach; and over a 3-color budget it fails with its lanes at the same ends."""
    import wsecc.route.router as router

    fast = _congested_outcomes()
    assert isinstance(fast[0], str) and isinstance(fast[1], tuple)  # routes; fails on colors
    monkeypatch.setattr(router, "_within_reach", _whole_window)
    assert fast == _congested_outcomes()


def _two_lanes_in_a_row() -> tuple[RoutingProblem, Placement]:
    """One PE, a, feeding b and c straight east of it in its row: both lanes leave a's one
    edge PE and run east along row 3."""
    kernels = tuple(PlaceKernel(k, ((1, 1),)) for k in "abc")
    rects = {"a": Rect(1, 3, 1, 1), "b": Rect(6, 3, 1, 1), "c": Rect(12, 3, 1, 1)}
    problem = PlacementProblem(16, 8, kernels, (PlaceFlow("a", "b", 1.0), PlaceFlow("a", "c", 1.0)))
    placement = Placement.of(problem, rects, placer="test", bound=0, status="", seconds=0, seed=0)
    return make_routing_problem(problem, placement), placement


def test_a_boundary_short_of_links_proves_the_routing_fails():
    # without a detour each lane's window is row 3 alone: both must cross the boundaries
    # between columns 1 and 6 going east in that row, one link each at capacity 1
    rp, placement = _two_lanes_in_a_row()
    narrow = RouterOptions(detour=0)
    short = cut_shortfalls(rp, placement, narrow)
    assert [(c.axis, c.direction, c.at) for c in short] == [("x", "E", x) for x in range(1, 6)]
    assert {(c.lanes, c.short, c.flows) for c in short} == {(2, 1, ("a->b", "a->c"))}
    with pytest.raises(RoutingError):
        route(rp, placement, narrow)
    # one row of detour gives the second lane a way round: no boundary is short, and it routes
    assert cut_shortfalls(rp, placement, RouterOptions(detour=1)) == []
    routing = route(rp, placement, RouterOptions(detour=1))
    assert validate_routing(rp, placement, routing) == []


@pytest.mark.parametrize("lanes", [1, 4, 16])
def test_no_boundary_is_short_where_the_router_routes(lanes):
    problem = transformer_problem(60)
    placement = place_greedy(problem)
    rp = make_routing_problem(problem, placement, bytes_per_lane=1.0, max_lanes=lanes)
    route(rp, placement)  # routes (test_routes_a_transformer_legally)
    assert cut_shortfalls(rp, placement) == []


def test_a_failure_the_boundaries_do_not_show():
    # necessary, not sufficient: the congested chain fails on colors with every boundary able
    # to carry its lanes, as Llama 3.1 8B's first attempt fails on links (bench/RESULTS.md)
    rp, placement = _congested()
    assert cut_shortfalls(rp, placement) == []
    with pytest.raises(RoutingError):
        route(rp, placement)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 8), st.integers(0, 4)), max_size=12),
    st.integers(1, 3),
)
def test_unplaced_spans_are_those_no_assignment_places(spans, capacity):
    # against a maximum matching of spans to (position, slot) pairs
    spans = [(lo, lo + n) for lo, n in spans]
    g = nx.Graph()
    g.add_nodes_from(range(len(spans)))
    for i, (lo, hi) in enumerate(spans):
        g.add_edges_from((i, (p, k)) for p in range(lo, hi + 1) for k in range(capacity))
    matched = len(nx.bipartite.maximum_matching(g, top_nodes=range(len(spans)))) // 2
    assert _unplaced(spans, capacity) == len(spans) - matched


@pytest.mark.parametrize("hot", [[], [(5, 4), (9, 12)]])
def test_negotiate_updates_the_costs_as_a_recomputation_of_every_link_would(hot):
    # it touches only the overused links' history and base cost unless routers got history;
    # the costs and prefix sums must be those of the whole formula, to the bit
    rng = np.random.default_rng(7)
    nets = [_Negotiation((3, 2, 30, 20), 1, RouterOptions()) for _ in range(2)]
    usage = rng.integers(0, 4, nets[0].usage.shape)
    hist = rng.integers(0, 5, nets[0].hist.shape) * 0.75
    node_hist = rng.integers(0, 3, nets[0].node_hist.shape) * 1.0
    for net in nets:
        net.usage[:] = usage
        net.hist[:] = hist
        net.node_hist[:] = node_hist
        net.refresh()
    fast, whole = nets
    fast.negotiate(hot)
    whole.hist += whole.opts.history_step * np.maximum(0, whole.usage - whole.cap)
    for x, y in hot:
        whole.node_hist[y - whole.y0, x - whole.x0] += whole.opts.history_step
    whole.pres *= whole.opts.pres_mult
    whole.refresh()
    assert fast.pres == whole.pres
    for name in ("hist", "node_hist", "into", "base"):
        assert np.array_equal(getattr(fast, name), getattr(whole, name)), name
    for k, (a, b) in enumerate(zip(fast.prefix, whole.prefix, strict=True)):
        assert np.array_equal(a, b)
        # and both are the running sums of `link_cost`'s formula, link by link
        sums = np.cumsum(fast.link_cost((k,)), axis=1 if k < 2 else 0)
        assert np.array_equal(a[:, 1:] if k < 2 else a[1:], sums)


def _pattern_by_numpy(net, s, t, hvh_first, shut):
    """The corners of the cheapest pattern, from the prefix sums in numpy: every jog's cost
    as the three runs' prefix differences plus the toll of its steps inside `near`."""
    box, near = net.window(s, t, shut)
    (x1, y1), (x2, y2) = net.local(s), net.local(t)
    pe, pw, ps, pn = net.prefix

    def h(y, a, b):
        return np.where(b >= a, pe[y, b] - pe[y, a], pw[y, a + 1] - pw[y, b + 1])

    def v(x, a, b):
        return np.where(b >= a, ps[b, x] - ps[a, x], pn[a + 1, x] - pn[b + 1, x])

    def steps(a, b, at, vertical):
        a, b, at = np.broadcast_arrays(*(np.atleast_1d(v) for v in (a, b, at)))
        runs = zip(a.tolist(), b.tolist(), at.tolist(), strict=True)
        return np.array([_inside(near, i, j, k, vertical) for i, j, k in runs])

    cs, rs = np.arange(box[0], box[2] + 1), np.arange(box[1], box[3] + 1)
    hvh = h(y1, x1, cs) + v(cs, y1, y2) + h(y2, cs, x2)
    vhv = v(x1, y1, rs) + h(rs, x1, x2) + v(x2, rs, y2)
    if len(near):
        hvh = hvh + net.toll * (
            steps(x1, cs, y1, False) + steps(y1, y2, cs, True) + steps(cs, x2, y2, False)
        )
        vhv = vhv + net.toll * (
            steps(y1, rs, x1, True) + steps(x1, x2, rs, False) + steps(rs, y2, x2, True)
        )
    i, j = int(np.argmin(hvh)), int(np.argmin(vhv))
    if hvh[i] < vhv[j] or (hvh[i] == vhv[j] and hvh_first):
        corners = [(x1, y1), (int(cs[i]), y1), (int(cs[i]), y2), (x2, y2)]
    else:
        corners = [(x1, y1), (x1, int(rs[j])), (x2, int(rs[j])), (x2, y2)]
    return _polyline([(x + net.x0, y + net.y0) for x, y in corners])


@given(
    seed=st.integers(0, 2**16),
    ends=st.tuples(*[st.integers(0, 29)] * 4),
    hvh_first=st.booleans(),
    closed=_closed_regions(max_size=3),
    flat=st.booleans(),
)
@settings(max_examples=150, deadline=None)
def test_the_compiled_pattern_is_the_numpy_formulas_choice(seed, ends, hvh_first, closed, flat):
    """`_Negotiation.pattern` (compiled) picks the jog the numpy formula over the prefix sums
    picks, ties included: on costs that tie everywhere (`flat`: no history, no usage) and on
    uneven ones, with and without closed regions and a toll."""
    net = _uneven(seed, (3, 2, 40, 30), detour=4, hist=1 if flat else 6)
    if flat:
        net.usage[:] = 0
        net.refresh()
    net.toll = 1.0
    s, t = (3 + ends[0], 2 + ends[1] % 30), (3 + ends[2], 2 + ends[3] % 30)
    shut = np.array(closed, np.int64).reshape(-1, 4)
    assert net.pattern(s, t, hvh_first, shut) == _pattern_by_numpy(net, s, t, hvh_first, shut)


def _window_dijkstra(net, s, t, shut):
    """The cheapest cost from s to t over the lane's whole window by scipy's Dijkstra (no
    target to stop at), each link costing `link_cost` plus the toll per closed region holding
    both its routers; and a function giving a path's cost the same way."""
    from scipy.sparse import coo_array
    from scipy.sparse.csgraph import dijkstra

    (x0, y0, x1, y1), near = net.window(s, t, shut)
    w, h = x1 + 1 - x0, y1 + 1 - y0

    def link(k, x, y):  # area coordinates
        dx, dy = STEPS[DIRS[k]]
        ends = [(x, y), (x + dx, y + dy)]
        inside = sum(
            all(rx <= a < rx + rw and ry <= b < ry + rh for a, b in ends)
            for rx, ry, rw, rh in near.tolist()
        )
        return float(net.link_cost((k, y, x))) + net.toll * inside

    rows, cols, costs = [], [], []
    for y in range(y0, y1 + 1):
        for x in range(x0, x1 + 1):
            for k, (dx, dy) in enumerate(STEPS.values()):
                if x0 <= x + dx <= x1 and y0 <= y + dy <= y1:
                    rows.append((y - y0) * w + x - x0)
                    cols.append((y + dy - y0) * w + x + dx - x0)
                    costs.append(link(k, x, y))
    graph = coo_array((costs, (rows, cols)), shape=(w * h, w * h)).tocsr()
    (sx, sy), (tx, ty) = net.local(s), net.local(t)
    dist = dijkstra(graph, indices=(sy - y0) * w + sx - x0)

    def cost_of(path):
        return sum(
            link(DIRS.index(next(d for d, st_ in STEPS.items() if st_ == (b[0] - a[0], b[1] - a[1]))),
                 *net.local(a))
            for a, b in pairwise(path)
        )  # fmt: skip

    return float(dist[(ty - y0) * w + tx - x0]), cost_of


@given(
    seed=st.integers(0, 2**16),
    ends=st.tuples(*[st.integers(0, 24)] * 4),
    pres=st.sampled_from([0.5, 1.5, 3.375]),
    closed=_closed_regions(max_size=3),
    slack=st.sampled_from([None, 0.0, 0.25, 3.0]),
)
@settings(max_examples=120, deadline=None)
def test_the_search_stopping_at_its_target_costs_what_dijkstra_over_the_window_does(
    seed, ends, pres, closed, slack
):
    """`maze_path` (A*, stopping at its target, over the part of the window within reach) finds
    a path as cheap as scipy's Dijkstra over the lane's whole window, on random uneven costs
    with closed regions and a toll; and, given a budget, returns a path exactly when the
    cheapest costs less. The link costs here are multiples of 1/8, so every sum is exact."""
    net = _uneven(seed, (3, 2, 32, 26), detour=3, hist=6)
    net.pres, net.toll = pres, 1.0
    net.refresh()
    s, t = (3 + ends[0] % 32, 2 + ends[1]), (3 + ends[2] % 32, 2 + ends[3])
    shut = np.array(closed, np.int64).reshape(-1, 4)
    best, cost_of = _window_dijkstra(net, s, t, shut)
    budget = float("inf") if slack is None else best + slack
    path = net.maze_path(s, t, budget, shut)
    if s == t or budget <= best:
        assert path is None or s == t
        return
    assert path is not None and path[0] == s and path[-1] == t
    (x0, y0, x1, y1), _ = net.window(s, t, shut)
    assert all(x0 <= x - 3 <= x1 and y0 <= y - 2 <= y1 for x, y in path)  # inside the window
    assert len(set(path)) == len(path)
    assert cost_of(path) == best


def _scipy_maze_path(net, s, t, cost_to_beat, shut):
    """The search `maze_path` made before it was compiled: scipy's Dijkstra over the reduced
    link costs of the part of the window within reach, each PE's links in E, W, S, N order
    (a link leaving the box a self-loop), with the limit cost_to_beat − h(s)."""
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import dijkstra

    from wsecc.route.router import _within_reach

    box, near = net.window(s, t, shut)
    (sx, sy), (tx, ty) = net.local(s), net.local(t)
    x0, y0, x1, y1 = _within_reach(box, (sx, sy), (tx, ty), cost_to_beat)
    w, h = x1 + 1 - x0, y1 + 1 - y0
    cost = net.link_cost((slice(None), slice(y0, y0 + h), slice(x0, x0 + w)))
    if len(near):
        inside = np.zeros_like(cost)
        for k in range(4):
            for y in range(h):
                for x in range(w):
                    inside[k, y, x] = _link_inside(near, k, y + y0, x + x0)
        cost = cost + net.toll * inside
    sx, sy, tx, ty = sx - x0, sy - y0, tx - x0, ty - y0
    xs, ys = np.arange(w), np.arange(h)
    east, west = (np.abs(xs + d - tx) - np.abs(xs - tx) for d in (1, -1))
    south, north = (np.abs(ys + d - ty) - np.abs(ys - ty) for d in (1, -1))
    reduced = np.stack(
        [cost[0] + east, cost[1] + west, cost[2] + south[:, None], cost[3] + north[:, None]],
        axis=-1,
    )
    node = np.arange(w * h).reshape(h, w)
    nbr = node[..., None] + np.array([dx + dy * w for dx, dy in STEPS.values()])
    nbr[:, -1, 0], nbr[:, 0, 1], nbr[-1, :, 2], nbr[0, :, 3] = (
        node[:, -1],
        node[:, 0],
        node[-1],
        node[0],
    )
    graph = csr_array((reduced.reshape(-1), nbr.reshape(-1), np.arange(0, nbr.size + 1, 4)),
                      shape=(w * h, w * h))  # fmt: skip
    src, dst, h_src = sy * w + sx, ty * w + tx, abs(sx - tx) + abs(sy - ty)
    dist, pred = dijkstra(graph, indices=src, limit=max(0.0, cost_to_beat - h_src),
                          return_predecessors=True)  # fmt: skip
    if not dist[dst] + h_src < cost_to_beat:
        return None
    path = [dst]
    while path[-1] != src:
        path.append(int(pred[path[-1]]))
    return tuple((net.x0 + x0 + v % w, net.y0 + y0 + v // w) for v in reversed(path))


@given(
    seed=st.integers(0, 2**16),
    ends=st.tuples(*[st.integers(0, 24)] * 4),
    flat=st.booleans(),
    closed=_closed_regions(max_size=2),
    slack=st.sampled_from([None, 0.5, 4.0]),
)
@settings(max_examples=100, deadline=None)
def test_the_search_takes_the_path_scipys_dijkstra_takes(seed, ends, flat, closed, slack):
    """`maze_path` stops at its target, yet returns the very path scipy's Dijkstra over the
    whole reduced-cost graph returns, equal-cost ties included (which keeps every routing the
    same as before the search was compiled): on costs that tie everywhere (`flat`) and on
    uneven ones, with closed regions and a toll, with and without a budget."""
    net = _uneven(seed, (3, 2, 32, 26), detour=3, hist=1 if flat else 5)
    if flat:
        net.usage[:] = 0
    net.pres, net.toll = 1.5, 1.0
    net.refresh()
    s, t = (3 + ends[0] % 32, 2 + ends[1]), (3 + ends[2] % 32, 2 + ends[3])
    shut = np.array(closed, np.int64).reshape(-1, 4)
    free = float(abs(s[0] - t[0]) + abs(s[1] - t[1]))
    budget = float("inf") if slack is None else free * 1.5 + slack
    assert net.maze_path(s, t, budget, shut) == _scipy_maze_path(net, s, t, budget, shut)


def test_a_congested_routing_is_the_one_scipys_search_gave(monkeypatch):
    """The congested chain (its negotiation takes hundreds of maze searches) routes with 24
    colors, and fails over 3 with its lanes at the same ends, exactly as when every search was
    scipy's Dijkstra over the reduced-cost graph (`_scipy_maze_path`): the compiled search that
    stops at its target changed how long routing takes, not what it routes."""
    compiled = _congested_outcomes()
    assert isinstance(compiled[0], str) and isinstance(compiled[1], tuple)

    searches = []

    def scipys(self, s, t, cost_to_beat, shut=None):
        searches.append(1)
        shut = np.zeros((0, 4), np.int64) if shut is None else shut
        return _scipy_maze_path(self, s, t, cost_to_beat, shut)

    monkeypatch.setattr(_Negotiation, "maze_path", scipys)
    assert compiled == _congested_outcomes()
    assert len(searches) > 100
