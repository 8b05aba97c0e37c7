"""The cluster bound: short cycles placed exactly in the plane; never above a brute-force
optimum, above the star bound where a cycle's kernels cannot all lie against each other."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from place.test_bounds import brute_force_optimum, small_problems

from wsecc.place.bounds import lower_bound
from wsecc.place.clusters import Cluster, cluster_bound, clusters, cycles
from wsecc.place.cpsat import cluster_values
from wsecc.place.problem import PlaceFlow, PlaceKernel, PlacementProblem


def _problem(
    shapes: list[tuple[tuple[int, int], ...]],
    flows: list[tuple[int, int, float]],
    w: int = 40,
    h: int = 40,
) -> PlacementProblem:
    kernels = tuple(PlaceKernel(f"k{i}", s) for i, s in enumerate(shapes))
    return PlacementProblem(
        w, h, kernels, tuple(PlaceFlow(f"k{i}", f"k{j}", b) for i, j, b in flows)
    )


def test_each_short_cycle_is_found_once():
    # a square k0-k1-k2-k3 with the diagonal k0-k2: two triangles and the square
    p = _problem([((1, 1),)] * 4, [(0, 1, 1), (1, 2, 1), (2, 3, 1), (3, 0, 1), (0, 2, 1)])
    found = sorted(tuple(c) for c in cycles(p))
    assert found == [("k0", "k1", "k2"), ("k0", "k1", "k2", "k3"), ("k0", "k2", "k3")]
    assert cycles(p, max_len=3) == [["k0", "k1", "k2"], ["k0", "k2", "k3"]]


def test_clusters_take_each_pair_once_heaviest_cycle_first():
    # two triangles sharing k0 (a bow tie), and a square k0-k1-k5-k3 across them
    edges = [(0, 1, 5), (1, 2, 5), (2, 0, 5), (0, 3, 2), (3, 4, 2), (4, 0, 2), (3, 5, 1), (5, 1, 1)]
    p = _problem([((1, 1),)] * 6, edges)
    found = [(sorted(c), sorted(mine)) for c, mine in clusters(p, max_len=4)]
    assert found == [
        (["k0", "k1", "k2"], [("k0", "k1"), ("k0", "k2"), ("k1", "k2")]),
        (["k0", "k3", "k4"], [("k0", "k3"), ("k0", "k4"), ("k3", "k4")]),
    ]  # the square's ring shares k0-k1 and k0-k3 with them
    # five kernels may hold more: the 5-cycle k0-k2-k1-k5-k3 with its chords goes first
    assert sorted(clusters(p)[0][0]) == ["k0", "k1", "k2", "k3", "k5"]


def test_a_layernorm_feeding_three_linears_that_feed_attention_costs_more_than_its_stars():
    """BERT's LN -> Q, K, V -> attention (1x1 hub, 3x1 bars, a 3x1 attention): Q, K and V must
    lie against both ends, which no star sees; the cluster's value is the brute-force optimum
    here (whole-PE and half-PE placements tie)."""
    shapes = [((1, 1),), ((3, 1), (1, 3)), ((3, 1), (1, 3)), ((3, 1), (1, 3)), ((3, 1),)]
    flows = [(0, 1, 1.0), (0, 2, 1.0), (0, 3, 1.0), (1, 4, 1.0), (2, 4, 1.0), (3, 4, 1.0)]
    cluster = Cluster(tuple(shapes), tuple(flows))
    (value,) = cluster_values([cluster], seconds=5.0)
    star = lower_bound(cluster.problem(40, 40)).value
    optimum = brute_force_optimum(cluster.problem(3, 5))  # Q, K, V stacked: room enough
    assert star < value <= optimum + 1e-9
    assert value == optimum


shape = st.tuples(st.integers(1, 2), st.integers(1, 2))


@st.composite
def small_clusters(draw: st.DrawFn) -> Cluster:
    """A ring of 3 kernels (some sharing their shapes and flows: twins), maybe a chord (the
    brute force is fast enough for 3 on their plane; 4 and 5 are tested above and below)."""
    n = 3
    menus = [tuple(draw(st.lists(shape, min_size=1, max_size=2, unique=True))) for _ in range(2)]
    shapes = tuple(draw(st.sampled_from(menus)) for _ in range(n))
    ring = [(i, (i + 1) % n) for i in range(n)]
    chords = [
        e for e in itertools.combinations(range(n), 2) if e not in ring and e[::-1] not in ring
    ]
    chosen = ring + draw(
        st.lists(st.sampled_from(chords), unique=True, max_size=1) if chords else st.just([])
    )
    weight = draw(st.integers(1, 3))
    pairs = tuple(
        sorted(
            (min(i, j), max(i, j), float(weight if draw(st.booleans()) else 1)) for i, j in chosen
        )
    )
    return Cluster(shapes, pairs)


@settings(max_examples=30, deadline=None)
@given(small_clusters())
def test_a_cluster_value_is_at_most_the_brute_force_optimum(cluster: Cluster):
    """Whatever the twins and the anchor: the reductions keep an optimum inside the model."""
    side = sum(max(max(w, h) for w, h in s) for s in cluster.shapes)
    optimum = brute_force_optimum(cluster.problem(side, side))
    (value,) = cluster_values([cluster], seconds=5.0)
    assert value <= optimum + 1e-9
    assert value >= optimum - sum(b for _, _, b in cluster.pairs)  # at most half a PE per axis off


@settings(max_examples=30, deadline=None)
@given(small_problems())
def test_the_cluster_bound_is_between_the_star_bound_and_the_brute_force_optimum(problem):
    opt = brute_force_optimum(problem)
    if opt == float("inf"):
        return
    bound = cluster_bound(problem, lambda cs: cluster_values(cs, seconds=2.0))
    assert lower_bound(problem).value <= bound.value <= opt + 1e-9


def test_the_same_cycle_in_every_layer_is_solved_once():
    # three copies of a triangle, named so that each is found in another rotation
    shapes, flows = [], []
    for copy in range(3):
        base = len(shapes)
        shapes += [((1, 1),), ((2, 1), (1, 2)), ((3, 1),)]
        order = [(0, 1), (1, 2), (2, 0)]
        flows += [(base + a, base + b, 2.0) for a, b in order]
        if copy:  # a join to the copy before, so the copies are one graph
            flows.append((base - 1, base, 1.0))
    p = _problem(shapes, flows)
    asked: list[int] = []

    def solve(cs):
        asked.append(len(cs))
        return cluster_values(cs, seconds=2.0)

    bound = cluster_bound(p, solve)
    assert asked == [1]
    assert bound.kind == "cluster" and bound.value > lower_bound(p).value


def test_kernels_with_the_same_shapes_but_other_flows_are_not_twins():
    """a and b are both 1x1, but a lies between the hub and c while b sits on the hub: ordering
    them as if they were interchangeable would cut every optimum."""
    shapes = [((3, 1),), ((1, 1),), ((1, 1),), ((2, 1),)]
    flows = [(0, 1, 3.0), (1, 3, 3.0), (0, 2, 1.0), (0, 3, 1.0)]
    cluster = Cluster(tuple(shapes), tuple(flows))
    assert cluster.twins(hub=0) == []
    (value,) = cluster_values([cluster], seconds=5.0)
    assert value <= brute_force_optimum(cluster.problem(7, 3)) + 1e-9


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(small_problems())
def test_the_cluster_bound_is_at_most_the_brute_force_optimum_many_cases(problem):
    test_the_cluster_bound_is_between_the_star_bound_and_the_brute_force_optimum.hypothesis.inner_test(
        problem
    )


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(small_clusters())
def test_a_cluster_value_is_at_most_the_brute_force_optimum_many_cases(cluster):
    test_a_cluster_value_is_at_most_the_brute_force_optimum.hypothesis.inner_test(cluster)


def test_the_cpsat_placer_reports_the_cluster_bound_when_it_is_the_best():
    """place_cpsat spends its `bound_share` on the clusters: the BERT-like miniature's bound is
    the cluster's, above star, below the placement (deterministic mode: the full model does
    not prove it within its work quota); with no share the cluster bound is not computed."""
    from wsecc.place.cpsat import CpSatOptions, place_cpsat

    shapes = [((1, 1),), ((3, 1), (1, 3)), ((3, 1), (1, 3)), ((3, 1), (1, 3)), ((3, 1),)]
    flows = [(0, 1, 1.0), (0, 2, 1.0), (0, 3, 1.0), (1, 4, 1.0), (2, 4, 1.0), (3, 4, 1.0)]
    p = _problem(shapes, flows, w=9, h=9)
    star = lower_bound(p).value
    placed = place_cpsat(p, time_budget_s=2.0, deterministic=True)
    assert placed.bound_kind == "cluster" and star < placed.bound <= placed.objective
    plain = place_cpsat(
        p, time_budget_s=2.0, deterministic=True, options=CpSatOptions(bound_share=0.0)
    )
    assert plain.bound_kind in {"star", "separation", "cpsat", "optimal"}
