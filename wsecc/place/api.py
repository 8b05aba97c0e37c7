"""One entry point for every placer: `place(problem, placer=..., ...)`."""

from __future__ import annotations

from collections.abc import Callable

from wsecc.place.greedy import place_greedy
from wsecc.place.manual import place_manual
from wsecc.place.problem import Placement, PlacementError, PlacementProblem

Placer = Callable[[PlacementProblem, float, int, bool], Placement]


def _cpsat(p: PlacementProblem, budget: float, seed: int, deterministic: bool) -> Placement:
    # imported on first use: ortools (and the pandas it imports) takes seconds to load, and a
    # compile with the greedy placer, `wsecc --help` or a reloaded folder never need it
    from wsecc.place.cpsat import place_cpsat

    return place_cpsat(p, time_budget_s=budget, seed=seed, deterministic=deterministic)


PLACERS: dict[str, Placer] = {
    "greedy": lambda p, budget, seed, det: place_greedy(p, seed=seed),
    "cpsat": _cpsat,
    "manual": lambda p, budget, seed, det: place_manual(p, seed=seed),
}


def place(
    problem: PlacementProblem,
    *,
    placer: str,
    time_budget_s: float,
    seed: int = 0,
    deterministic: bool = False,
) -> Placement:
    """Place `problem` with the named placer ("greedy", "cpsat" or "manual").

    Every placer honours `problem.pins` (add pins from a file with
    `wsecc.place.manual.with_pins(problem, load_pins(path))`). Guarantees: the result is legal
    for `problem` (`validate_placement` returns []), or PlacementError is raised. Greedy and
    manual ignore the budget (they take well under a second); CP-SAT returns within it.
    """
    try:
        run = PLACERS[placer]
    except KeyError:
        raise PlacementError(
            f"unknown placer '{placer}'; choose one of {', '.join(sorted(PLACERS))}"
        ) from None
    return run(problem, time_budget_s, seed, deterministic)
