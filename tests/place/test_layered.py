"""Layered start: legal, deterministic, and as CP-SAT's start never worse than greedy's."""

from __future__ import annotations

from dataclasses import replace

from wsecc.place.cpsat import place_cpsat
from wsecc.place.greedy import greedy_rects
from wsecc.place.layered import layered_rects
from wsecc.place.problem import Placement, validate_placement, weighted_wirelength
from wsecc.place.synthetic import chain_problem, transformer_problem


def _legal(problem, rects) -> list[str]:
    p = Placement.of(problem, rects, placer="layered", bound=0.0, status="", seconds=0.0, seed=0)
    return validate_placement(problem, p)


def test_layered_beats_greedy_on_a_dense_layered_problem():
    # 8 identical 7-kernel layers between an embedding and a large head, 75% fill: only
    # greedy's bottom-left fits, and it smears each layer across the fabric width.
    problem = transformer_problem(58, fill=0.75)
    _, greedy = greedy_rects(problem)
    layered = layered_rects(problem)
    assert layered is not None and _legal(problem, layered) == []
    assert weighted_wirelength(problem, layered) < weighted_wirelength(problem, greedy)
    assert layered_rects(problem) == layered  # deterministic


def test_cpsat_starts_from_the_better_of_greedy_and_layered():
    for problem in (transformer_problem(58, fill=0.75), transformer_problem(44, fill=0.6)):
        _, greedy = greedy_rects(problem)
        layered = layered_rects(problem) or greedy
        start = min(weighted_wirelength(problem, r) for r in (greedy, layered))
        p = place_cpsat(problem, time_budget_s=1.0, deterministic=True)
        assert validate_placement(problem, p) == []
        assert p.objective <= start


def test_layered_declines_pinned_problems():
    problem = chain_problem(6, width=40, height=40)
    pinned = replace(problem, pins={"k0": greedy_rects(problem)[1]["k0"]})
    assert layered_rects(pinned) is None  # pins are left to greedy


def test_a_stopped_layered_start_keeps_its_best_so_far():
    # `stop` (a caller's time budget) is asked before each packing once one was found: asked
    # never, the result is the whole search's; yes after m asks, the best of the first m + 1
    # packings, legal, never better than the whole search's
    problem = transformer_problem(58, fill=0.75)
    whole = layered_rects(problem)
    assert layered_rects(problem, lambda: False) == whole
    asked: list[int] = []

    def after(m: int):
        def stop() -> bool:
            asked.append(m)
            return asked.count(m) > m

        return stop

    found = [layered_rects(problem, after(m)) for m in range(3)]
    assert [asked.count(m) for m in range(3)] == [1, 2, 3]  # it stopped when told to
    costs = [weighted_wirelength(problem, r) for r in found]
    assert all(r is not None and _legal(problem, r) == [] for r in found)
    assert costs == sorted(costs, reverse=True)  # more tries, never worse
    assert costs[-1] >= weighted_wirelength(problem, whole)
