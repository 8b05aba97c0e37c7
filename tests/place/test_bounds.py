"""Lower bounds on the weighted wirelength: never above a brute-force optimum, tight where known."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wsecc.place.bounds import Neighbour, lower_bound, separation_bound, star_bound, star_value
from wsecc.place.problem import PlaceFlow, PlaceKernel, PlacementProblem, Rect


def brute_force_optimum(problem: PlacementProblem) -> float:
    """Least weighted wirelength over every legal integer placement (any allowed shape)."""
    names = [k.name for k in problem.kernels]
    options = {
        k.name: [
            Rect(x, y, w, h)
            for w, h in k.shapes
            for x in range(problem.width - w + 1)
            for y in range(problem.height - h + 1)
        ]
        for k in problem.kernels
    }
    # flows whose later endpoint (in `names` order) is kernel i: their cost is known once i is
    later = {
        n: [f for f in problem.flows if max(names.index(f.src), names.index(f.dst)) == i]
        for i, n in enumerate(names)
    }
    best = float("inf")

    def place(i: int, rects: dict[str, Rect], cost: float) -> None:
        nonlocal best
        if i == len(names):
            best = min(best, cost)
            return
        for r in options[names[i]]:
            if any(r.overlaps(o) for o in rects.values()):
                continue
            rects[names[i]] = r
            add = 0.0
            for f in later[names[i]]:
                (sx, sy), (dx, dy) = rects[f.src].center2(), rects[f.dst].center2()
                add += f.bytes_per_sample * (abs(sx - dx) + abs(sy - dy)) / 2
            if cost + add < best:  # every flow costs ≥ 0: a partial sum ≥ best cannot win
                place(i + 1, rects, cost + add)
            del rects[names[i]]

    place(0, {}, 0.0)
    return best


def all_bounds(problem: PlacementProblem) -> list[float]:
    return [separation_bound(problem), lower_bound(problem).value] + [
        star_bound(problem, p) for p in ("half", "smaller", "larger")
    ]


def test_chain_of_equal_squares_on_a_strip_is_tight():
    # four 2x2 squares on a 8x2 strip: the optimum is each neighbour pair touching, 3 × 2
    kernels = tuple(PlaceKernel(f"k{i}", ((2, 2),)) for i in range(4))
    flows = tuple(PlaceFlow(f"k{i}", f"k{i + 1}", 5.0) for i in range(3))
    problem = PlacementProblem(8, 2, kernels, flows)
    assert brute_force_optimum(problem) == 30.0
    assert separation_bound(problem) == 30.0
    assert lower_bound(problem).value == 30.0


def test_star_sees_that_three_neighbours_cannot_all_touch_a_small_kernel():
    # a 1x1 hub with three 3x1 bars: separation says 1 each; at most two can lie flat against it
    star = star_value([(1, 1)], [Neighbour(1.0, ((3, 1),))] * 3)
    assert star > 3 * 1.0
    kernels = (PlaceKernel("hub", ((1, 1),)),) + tuple(
        PlaceKernel(f"b{i}", ((3, 1),)) for i in range(3)
    )
    flows = tuple(PlaceFlow("hub", f"b{i}", 1.0) for i in range(3))
    problem = PlacementProblem(5, 5, kernels, flows)
    opt = brute_force_optimum(problem)
    assert separation_bound(problem) < star_bound(problem, "smaller") <= opt


def test_star_of_four_unit_squares_around_a_unit_square_is_the_floor():
    # four 1x1 neighbours, one per side: each at distance 1, the optimum
    assert star_value([(1, 1)], [Neighbour(1.0, ((1, 1),))] * 4) == 4.0


shape = st.tuples(st.integers(1, 3), st.integers(1, 3))


@st.composite
def small_problems(draw: st.DrawFn) -> PlacementProblem:
    n = draw(st.integers(2, 4))
    width, height = draw(st.integers(4, 5)), draw(st.integers(3, 4))
    kernels = []
    for i in range(n):
        shapes = draw(st.lists(shape, min_size=1, max_size=2, unique=True))
        kernels.append(PlaceKernel(f"k{i}", tuple(shapes)))
    pairs = list(itertools.combinations(range(n), 2))
    chosen = draw(st.lists(st.sampled_from(pairs), min_size=1, max_size=len(pairs), unique=True))
    flows = tuple(PlaceFlow(f"k{i}", f"k{j}", float(draw(st.integers(1, 9)))) for i, j in chosen)
    return PlacementProblem(width, height, tuple(kernels), flows)


@settings(max_examples=60, deadline=None)
@given(small_problems())
def test_every_bound_is_at_most_the_brute_force_optimum(problem: PlacementProblem):
    opt = brute_force_optimum(problem)
    if opt == float("inf"):  # the rectangles do not fit: nothing to bound
        return
    for bound in all_bounds(problem):
        assert bound <= opt + 1e-9


@settings(max_examples=25, deadline=None)
@given(
    st.lists(shape, min_size=1, max_size=2, unique=True),
    st.lists(
        st.tuples(st.floats(0.1, 5.0), st.lists(shape, min_size=1, max_size=2, unique=True)),
        min_size=1,
        max_size=3,
    ),
)
def test_star_value_is_at_most_the_best_star_placement(v_shapes, nbrs):
    # the star alone (hub plus neighbours, weights on hub–neighbour pairs only) on a roomy grid
    kernels = (PlaceKernel("v", tuple(v_shapes)),) + tuple(
        PlaceKernel(f"u{i}", tuple(s)) for i, (_, s) in enumerate(nbrs)
    )
    flows = tuple(PlaceFlow("v", f"u{i}", w) for i, (w, _) in enumerate(nbrs))
    problem = PlacementProblem(6, 6, kernels, flows)
    star = star_value(v_shapes, [Neighbour(w, tuple(s)) for w, s in nbrs])
    assert star <= brute_force_optimum(problem) + 1e-9


def test_placers_report_the_best_bound_and_its_kind():
    from wsecc.place.cpsat import place_cpsat
    from wsecc.place.greedy import place_greedy
    from wsecc.place.synthetic import chain_problem

    problem = chain_problem(8, width=60, height=60, seed=1)
    own = lower_bound(problem)
    greedy = place_greedy(problem)
    assert (greedy.bound, greedy.bound_kind) == (own.value, own.kind)
    cpsat = place_cpsat(problem, time_budget_s=1.0, deterministic=True)
    assert cpsat.bound_kind in {"separation", "star", "cluster", "cpsat", "optimal"}
    assert own.value <= cpsat.bound <= cpsat.objective


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(small_problems())
def test_every_bound_is_at_most_the_brute_force_optimum_many_cases(problem: PlacementProblem):
    test_every_bound_is_at_most_the_brute_force_optimum.hypothesis.inner_test(problem)
