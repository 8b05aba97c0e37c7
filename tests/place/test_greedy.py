"""Greedy placer: always legal on chain/transformer instances, clear errors when it cannot fit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wsecc.place.greedy import (
    _Skyline,
    bottom_left_step,
    flow_order,
    greedy_variants,
    place_greedy,
)
from wsecc.place.problem import (
    PlaceFlow,
    PlaceKernel,
    PlacementError,
    PlacementProblem,
    Rect,
    validate_placement,
)
from wsecc.place.synthetic import chain_problem, transformer_problem


@pytest.mark.parametrize("n", [24, 96, 300])
def test_greedy_is_legal_on_chains_with_residuals(n):
    problem = chain_problem(n, alt_shapes=True)
    p = place_greedy(problem)
    assert validate_placement(problem, p) == []
    assert p.bound <= p.objective
    assert p.status.startswith("heuristic:")


@pytest.mark.parametrize("fill", [0.5, 0.7])
def test_greedy_is_legal_on_wafer_scale_transformers(fill):
    problem = transformer_problem(400, fill=fill)
    assert validate_placement(problem, place_greedy(problem)) == []


def test_greedy_keeps_the_best_variant():
    problem = chain_problem(96)
    p = place_greedy(problem)
    from wsecc.place.problem import weighted_wirelength

    legal = [
        weighted_wirelength(problem, r) for _, r in greedy_variants(problem) if isinstance(r, dict)
    ]
    assert p.objective == min(legal)


def test_greedy_avoids_pins():
    problem = replace(
        chain_problem(40), pins={"k5": Rect(80, 80, 30, 30), "k20": Rect(0, 150, 50, 10)}
    )
    p = place_greedy(problem)
    assert validate_placement(problem, p) == []
    assert p.rects["k5"] == Rect(80, 80, 30, 30)


def test_too_much_area_names_the_shortfall():
    kernels = tuple(PlaceKernel(f"k{i}", ((10, 10),)) for i in range(5))
    problem = PlacementProblem(20, 20, kernels, ())
    with pytest.raises(
        PlacementError, match=r"kernels need 500 PEs, usable fabric has 400 \(125% fill\)"
    ):
        place_greedy(problem)


def test_unpackable_shapes_say_why():
    # 3 kernels 11x11 on 21x21: area 363 ≤ 441 but two never fit side by side
    kernels = tuple(PlaceKernel(f"k{i}", ((11, 11),)) for i in range(3))
    with pytest.raises(
        PlacementError, match=r"kernels need 363 PEs, usable fabric has 441 .*found no room"
    ):
        place_greedy(PlacementProblem(21, 21, kernels, ()))


def test_malformed_problem_is_reported():
    problem = PlacementProblem(
        10, 10, (PlaceKernel("a", ((20, 1),)),), (PlaceFlow("a", "ghost", 1.0),)
    )
    with pytest.raises(PlacementError) as e:
        place_greedy(problem)
    assert "flow a->ghost names unknown kernel 'ghost'" in str(e.value)
    assert "kernel 'a': no shape of 20x1 fits the 10x10 fabric" in str(e.value)


def test_flow_order_is_topological_and_survives_cycles():
    kernels = tuple(PlaceKernel(n, ((1, 1),)) for n in "dcba")
    flows = (
        PlaceFlow("a", "b", 1),
        PlaceFlow("b", "c", 1),
        PlaceFlow("c", "b", 1),
        PlaceFlow("c", "d", 1),
    )
    order = flow_order(PlacementProblem(10, 10, kernels, flows))
    assert sorted(order) == list("abcd")
    assert order.index("a") < order.index("b") and order.index("c") < order.index("d")


def _bottom_left_by_column(sky: _Skyline, shapes, prev_cx2: int) -> Rect | None:
    """`bottom_left_step`'s rule, one column and shape at a time with `_Skyline.drop`: least
    (y + h, |2x + w − prev|), then the earlier shape, the lower unobstructed top, the lower x."""
    found = []
    for s, (w, h) in enumerate(shapes):
        for x in range(sky.width - w + 1):
            y = sky.drop(x, w, h)
            if y is not None:
                free = int(sky.top[x : x + w].max()) + h
                found.append(((y + h, abs(2 * x + w - prev_cx2), s, free, x), Rect(x, y, w, h)))
    return min(found, key=lambda f: f[0])[1] if found else None


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_bottom_left_step_takes_the_least_key_over_every_column(data):
    # all columns scored at once (pins pushing down included) = the rule column by column
    W, H = data.draw(st.integers(3, 30)), data.draw(st.integers(3, 30))
    pins = {}
    for i in range(data.draw(st.integers(0, 3))):
        w, h = data.draw(st.integers(1, W)), data.draw(st.integers(1, H))
        x, y = data.draw(st.integers(0, W - w)), data.draw(st.integers(0, H - h))
        pins[f"p{i}"] = Rect(x, y, w, h)
    sky = _Skyline(W, H, pins)
    sky.top[:] = data.draw(st.lists(st.integers(0, H // 2), min_size=W, max_size=W))
    shapes = tuple(
        data.draw(st.lists(st.tuples(st.integers(1, W), st.integers(1, H)), min_size=1, max_size=3))
    )
    prev = data.draw(st.integers(0, 2 * W))
    assert bottom_left_step(sky, shapes, prev) == _bottom_left_by_column(sky, shapes, prev)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_bottom_left_step_with_a_rectangle_as_wide_as_the_skyline(data):
    # the tiled start's layer blocks fill a strip's width: one window, taken without the
    # sliding view; the same rule, pins pushing down included
    W, H = data.draw(st.integers(1, 30)), data.draw(st.integers(1, 30))
    pins = {}
    for i in range(data.draw(st.integers(0, 3))):
        w, h = data.draw(st.integers(1, W)), data.draw(st.integers(1, H))
        x, y = data.draw(st.integers(0, W - w)), data.draw(st.integers(0, H - h))
        pins[f"p{i}"] = Rect(x, y, w, h)
    sky = _Skyline(W, H, pins)
    sky.top[:] = data.draw(st.lists(st.integers(0, H), min_size=W, max_size=W))
    heights = data.draw(st.lists(st.integers(1, H), min_size=1, max_size=3))
    shapes = tuple((W, h) for h in heights)
    prev = data.draw(st.integers(0, 2 * W))
    assert bottom_left_step(sky, shapes, prev) == _bottom_left_by_column(sky, shapes, prev)


@given(st.lists(st.integers(0, 60), min_size=1, max_size=80), st.data())
def test_window_max_is_the_highest_of_each_window(top, data):
    """`_window_max` (by doubling) against its definition: the highest of every w consecutive
    columns, left to right, for every width from 1 to the skyline's; the skyline unchanged."""
    from wsecc.place.greedy import _window_max

    w = data.draw(st.integers(1, len(top)))
    sky = np.array(top)
    got = _window_max(sky, w)
    assert got.tolist() == [max(top[i : i + w]) for i in range(len(top) - w + 1)]
    assert sky.tolist() == top
