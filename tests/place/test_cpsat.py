"""CP-SAT placer: legal, never worse than greedy, above its bound, on budget, reproducible."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from wsecc.place.api import place
from wsecc.place.cpsat import place_cpsat
from wsecc.place.greedy import place_greedy
from wsecc.place.problem import PlacementError, Rect, validate_placement
from wsecc.place.synthetic import chain_problem, transformer_problem

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("n, budget", [(24, 2.0), (96, 2.0), (300, 3.0)])
def test_cpsat_beats_or_ties_greedy_and_respects_its_bound(n, budget):
    problem = chain_problem(n, alt_shapes=True)
    greedy = place_greedy(problem)
    p = place_cpsat(problem, time_budget_s=budget, seed=1)
    assert validate_placement(problem, p) == []
    assert p.objective <= greedy.objective
    assert p.bound <= p.objective
    assert p.bound >= greedy.bound  # never weaker than the pairwise bound
    assert p.gap == pytest.approx((p.objective - p.bound) / p.objective)
    assert p.placer == "cpsat" and p.status.split()[0] in ("FEASIBLE", "OPTIMAL")


def test_cpsat_proves_a_tiny_instance_optimal():
    problem = chain_problem(4, width=20, height=20)
    p = place_cpsat(problem, time_budget_s=5.0)
    assert p.status.startswith("OPTIMAL")
    assert p.bound == p.objective and p.gap == 0.0


def test_pins_are_fixed_obstacles():
    problem = replace(
        chain_problem(30), pins={"k3": Rect(90, 90, 20, 20), "k17": Rect(0, 0, 15, 40)}
    )
    p = place_cpsat(problem, time_budget_s=1.5)
    assert validate_placement(problem, p) == []
    assert p.rects["k3"] == Rect(90, 90, 20, 20) and p.rects["k17"] == Rect(0, 0, 15, 40)


_RUN = """
import sys
from wsecc.place.cpsat import place_cpsat
from wsecc.place.synthetic import transformer_problem
p = place_cpsat(transformer_problem(60), time_budget_s=1.0, seed=7, deterministic=True)
sys.stdout.write(p.dumps(include_timing=False))
"""


def test_deterministic_mode_is_byte_identical_across_processes():
    from conftest import two_fresh_runs

    first, second = two_fresh_runs(_RUN)
    assert first == second and '"placer": "cpsat"' in first


def test_place_dispatches_and_rejects_unknown_placers():
    problem = transformer_problem(20)
    for name in ("greedy", "cpsat", "manual"):
        p = place(problem, placer=name, time_budget_s=0.5, seed=0)
        assert p.placer == name and validate_placement(problem, p) == []
    with pytest.raises(
        PlacementError, match="unknown placer 'sa'; choose one of cpsat, greedy, manual"
    ):
        place(problem, placer="sa", time_budget_s=1.0)
