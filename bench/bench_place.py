"""Placement + routing benchmark on synthetic transformer-shaped instances (WSE-2 usable fabric).

For each N and time budget: greedy and CP-SAT weighted wirelength (Σ bytes × centre Manhattan
distance, bytes·PE), the improvement, CP-SAT's bound and gap, its wall time, then the router on
the CP-SAT placement: max colors at any router vs the per-router lower bound, the palette (colors
the whole routing needs; must fit the budget), lanes and router time.

    PYTHONPATH=. python bench/bench_place.py                  # N = 50 150 400 800, 60 s and 20 s
    PYTHONPATH=. python bench/bench_place.py --budgets 20 --sizes 50 150 --json out.json

Measures, never asserts: numbers depend on the machine (recorded: 2 cores).
"""

from __future__ import annotations

import argparse
import json
import time

from wsecc.place.cpsat import place_cpsat
from wsecc.place.greedy import place_greedy
from wsecc.place.problem import check_placement
from wsecc.place.synthetic import transformer_problem
from wsecc.route.problem import make_routing_problem, validate_routing
from wsecc.route.router import route

COLUMNS = (  # name, width, format
    ("N", 4, "d"),
    ("budget_s", 8, ".0f"),
    ("greedy_wl", 10, ".4g"),
    ("cpsat_wl", 10, ".4g"),
    ("improve_%", 9, ".1f"),
    ("bound", 10, ".4g"),
    ("gap_%", 6, ".1f"),
    ("wall_s", 6, ".1f"),
    ("lanes", 6, "d"),
    ("colors_max", 10, "d"),
    ("color_lb", 8, "d"),
    ("palette", 7, "d"),
    ("route_s", 7, ".1f"),
)


def run_one(n: int, budget: float, seed: int, fill: float) -> dict[str, float | str]:
    """Place N kernels with greedy and CP-SAT (checked legal), route the CP-SAT placement."""
    problem = transformer_problem(n, fill=fill, seed=seed)
    greedy = place_greedy(problem)
    t0 = time.perf_counter()
    cpsat = place_cpsat(problem, time_budget_s=budget, seed=seed)
    wall = time.perf_counter() - t0
    check_placement(problem, cpsat)
    rp = make_routing_problem(problem, cpsat)
    t0 = time.perf_counter()
    routing = route(rp, cpsat)
    route_s = time.perf_counter() - t0
    assert validate_routing(rp, cpsat, routing) == []
    return {
        "N": n,
        "budget_s": budget,
        "greedy_wl": greedy.objective,
        "cpsat_wl": cpsat.objective,
        "improve_%": 100 * (1 - cpsat.objective / greedy.objective),
        "bound": cpsat.bound,
        "gap_%": 100 * cpsat.gap,
        "wall_s": wall,
        "lanes": len(routing.lanes),
        "colors_max": routing.colors_used_max,
        "color_lb": routing.color_lower_bound,
        "palette": max(ln.color for ln in routing.lanes) + 1,
        "route_s": route_s,
        "status": cpsat.status,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[50, 150, 400, 800])
    ap.add_argument("--budgets", type=float, nargs="+", default=[60.0, 20.0])
    ap.add_argument("--fill", type=float, default=0.6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()

    print(" ".join(f"{name:>{width}}" for name, width, _ in COLUMNS), "  status")
    rows = []
    for budget in args.budgets:
        for n in args.sizes:
            row = run_one(n, budget, args.seed, args.fill)
            rows.append(row)
            cells = (f"{row[name]:>{width}{fmt}}" for name, width, fmt in COLUMNS)
            print(" ".join(cells), f"  {row['status']}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
