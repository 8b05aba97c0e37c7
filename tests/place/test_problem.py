"""Placement schema: objective, lower bound, JSON round trip, and the validator's messages."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wsecc.place.problem import (
    PlaceFlow,
    PlaceKernel,
    Placement,
    PlacementError,
    PlacementProblem,
    Rect,
    check_placement,
    pairwise_lower_bound,
    tailored,
    validate_placement,
    weighted_wirelength,
    with_halos,
    with_pools,
    without_halos,
)

PROBLEM = PlacementProblem(
    width=20,
    height=10,
    kernels=(
        PlaceKernel("a", ((4, 2),)),
        PlaceKernel("b", ((2, 4), (4, 2))),
        PlaceKernel("c", ((3, 3),)),
    ),
    flows=(PlaceFlow("a", "b", 10.0), PlaceFlow("b", "c", 2.0), PlaceFlow("a", "c", 1.0)),
)
GOOD = {"a": Rect(0, 0, 4, 2), "b": Rect(4, 0, 2, 4), "c": Rect(6, 0, 3, 3)}


def placement(rects: dict[str, Rect], problem: PlacementProblem = PROBLEM) -> Placement:
    return Placement.of(problem, rects, placer="test", bound=0.0, status="", seconds=0.0, seed=0)


def test_weighted_wirelength_is_bytes_times_centre_manhattan_distance():
    # centres: a (2, 1), b (5, 2), c (7.5, 1.5)
    expected = 10 * (3 + 1) + 2 * (2.5 + 0.5) + 1 * (5.5 + 0.5)
    assert weighted_wirelength(PROBLEM, GOOD) == expected
    assert placement(GOOD).objective == expected


def test_pairwise_lower_bound_uses_smallest_shape_sides():
    # a–b: min(4+2, 2+2)/2 = 2; b–c: min(2+3, 2+3)/2 = 2.5; a–c: min(4+3, 2+3)/2 = 2.5
    assert pairwise_lower_bound(PROBLEM) == 10 * 2 + 2 * 2.5 + 1 * 2.5


def test_legal_placement_has_no_violations_and_round_trips():
    p = placement(GOOD)
    assert validate_placement(PROBLEM, p) == []
    check_placement(PROBLEM, p)
    again = Placement.from_json(json.loads(p.dumps()))
    assert again == p
    assert '"seconds"' not in p.dumps(include_timing=False)
    assert p.dumps() == again.dumps()


@pytest.mark.parametrize(
    "rects, message",
    [
        (
            {**GOOD, "c": Rect(5, 1, 3, 3)},
            "kernels 'b' at (x=4, y=0, w=2, h=4) and 'c' at (x=5, y=1, w=3, h=3) overlap",
        ),
        (
            {**GOOD, "c": Rect(18, 0, 3, 3)},
            "kernel 'c' at (x=18, y=0, w=3, h=3) leaves the 20x10 fabric",
        ),
        (
            {**GOOD, "c": Rect(6, -1, 3, 3)},
            "kernel 'c' at (x=6, y=-1, w=3, h=3) leaves the 20x10 fabric",
        ),
        ({"a": GOOD["a"], "b": GOOD["b"]}, "kernel 'c' is not placed"),
        ({**GOOD, "b": Rect(4, 0, 3, 3)}, "kernel 'b' has shape 3x3, allowed: 2x4, 4x2"),
        ({**GOOD, "zz": Rect(10, 5, 1, 1)}, "unknown kernel 'zz' is placed"),
    ],
)
def test_validator_names_each_violation(rects, message):
    bad = Placement(rects, "test", 0.0, 0.0, 0.0, "", 0.0, 0)
    assert message in validate_placement(PROBLEM, bad)
    with pytest.raises(PlacementError, match="illegal placement from 'test'"):
        check_placement(PROBLEM, bad)


def test_validator_checks_pins_and_objective():
    pinned = replace(PROBLEM, pins={"c": Rect(10, 5, 5, 1)})
    assert "kernel 'c' at (x=6, y=0, w=3, h=3) is pinned at (x=10, y=5, w=5, h=1)" in (
        validate_placement(pinned, placement(GOOD, pinned))
    )
    # a pin may have any shape
    ok = {**GOOD, "c": Rect(10, 5, 5, 1)}
    assert validate_placement(pinned, placement(ok, pinned)) == []
    lying = replace(placement(GOOD), objective=1.0)
    assert validate_placement(PROBLEM, lying) == [
        f"objective 1.0 differs from the recomputed wirelength {placement(GOOD).objective}"
    ]


def test_problem_json_round_trip():
    pinned = replace(PROBLEM, pins={"c": Rect(10, 5, 5, 1)})
    assert PlacementProblem.from_json(json.loads(pinned.dumps())) == pinned
    pooled = replace(
        PROBLEM, kernels=(replace(PROBLEM.kernels[0], pool=((2, 4),)), *PROBLEM.kernels[1:])
    )
    assert PlacementProblem.from_json(json.loads(pooled.dumps())) == pooled
    assert "pool" not in PROBLEM.to_json()["kernels"][0]  # none: the JSON is as before


def test_a_placement_is_legal_for_the_problem_tailored_to_the_pool_shapes_it_took():
    a = replace(PROBLEM.kernels[0], pool=((3, 1), (1, 8)))  # menu (4, 2)
    pooled = replace(PROBLEM, kernels=(a, *PROBLEM.kernels[1:]))
    took = {**GOOD, "a": Rect(0, 0, 3, 1)}
    assert validate_placement(pooled, placement(took, pooled)) != []  # the pool is not menu
    assert validate_placement(with_pools(pooled), placement(took, pooled)) == []
    tailor = tailored(pooled, took)
    assert validate_placement(tailor, placement(took, pooled)) == []
    assert tailor.kernel("a").shapes == ((4, 2), (3, 1))  # (1, 8) was not taken: left out
    assert all(k.pool == () for k in tailor.kernels)
    assert tailored(pooled, GOOD).kernel("a").shapes == ((4, 2),)


def test_halos_grow_every_shape_and_leave_pins_and_too_big_shapes_alone():
    a = replace(PROBLEM.kernels[0], shapes=((4, 2), (17, 2)), pool=((3, 1),))
    pinned = replace(PROBLEM, kernels=(a, *PROBLEM.kernels[1:]), pins={"c": Rect(9, 0, 3, 3)})
    grown = with_halos(pinned, {"a": 2, "c": 1, "b": 5})
    assert grown.kernel("a").shapes == ((8, 6),)  # 21x6 leaves the 20-wide fabric: dropped
    assert grown.kernel("a").pool == ((7, 5),)
    assert grown.kernel("c") is pinned.kernel("c")  # pinned: its pin stands
    assert grown.kernel("b") is pinned.kernel("b")  # 12x14 or 14x12: neither fits the 20x10 fabric
    assert with_halos(pinned, {}) == pinned


def test_a_placement_with_halos_is_legal_and_keeps_the_rings_free():
    from wsecc.place.greedy import place_greedy

    halos = {"b": 2}
    grown = place_greedy(with_halos(PROBLEM, halos))
    rects = without_halos(PROBLEM, halos, grown.rects)
    assert validate_placement(PROBLEM, placement(rects)) == []
    assert weighted_wirelength(PROBLEM, rects) == grown.objective  # the same centres
    b = rects["b"]
    ring = Rect(b.x - 2, b.y - 2, b.w + 4, b.h + 4)
    assert not any(ring.overlaps(r) for n, r in rects.items() if n != "b")
    assert (b.w, b.h) in PROBLEM.kernel("b").shapes


# ------------------------------------------------------------------------------ properties

W, H = 40, 30
rect_st = st.builds(
    lambda x, y, w, h: Rect(x, y, min(w, W - x), min(h, H - y)),
    st.integers(0, W - 1),
    st.integers(0, H - 1),
    st.integers(1, 12),
    st.integers(1, 12),
)


def disjoint(rects: list[Rect]) -> list[Rect]:
    kept: list[Rect] = []
    for r in rects:
        if not any(r.overlaps(k) for k in kept):
            kept.append(r)
    return kept


def problem_of(rects: list[Rect]) -> PlacementProblem:
    kernels = tuple(PlaceKernel(f"k{i}", ((r.w, r.h),)) for i, r in enumerate(rects))
    flows = tuple(PlaceFlow(f"k{i}", f"k{i + 1}", 1.0) for i in range(len(rects) - 1))
    return PlacementProblem(W, H, kernels, flows)


@settings(max_examples=150, deadline=None)
@given(st.lists(rect_st, min_size=1, max_size=25))
def test_random_disjoint_rectangles_are_legal(rects):
    rects = disjoint(rects)
    problem = problem_of(rects)
    p = placement({f"k{i}": r for i, r in enumerate(rects)}, problem)
    assert validate_placement(problem, p) == []
    assert p.objective >= pairwise_lower_bound(problem) - 1e-9


@settings(max_examples=150, deadline=None)
@given(st.lists(rect_st, min_size=1, max_size=25), st.data())
def test_any_injected_overlap_is_found(rects, data):
    rects = disjoint(rects)
    victim = data.draw(st.integers(0, len(rects) - 1))
    v = rects[victim]
    # a rectangle sharing at least the victim's PE (x, y) at some corner offset
    x = data.draw(st.integers(max(0, v.x - 3), v.x + v.w - 1))
    y = data.draw(st.integers(max(0, v.y - 3), v.y + v.h - 1))
    intruder = Rect(x, y, max(1, v.x - x + 1), max(1, v.y - y + 1))
    assert intruder.overlaps(v)
    rects = [*rects, intruder]
    problem = problem_of(rects)
    p = placement({f"k{i}": r for i, r in enumerate(rects)}, problem)
    names = {f"k{victim}", f"k{len(rects) - 1}"}
    overlaps = [m for m in validate_placement(problem, p) if m.endswith("overlap")]
    assert any(all(f"'{n}'" in m for n in names) for m in overlaps)
