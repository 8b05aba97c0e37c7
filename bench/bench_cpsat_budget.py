"""Does CP-SAT return within its wall-clock budget? A 600-kernel chain on the WSE-2 fabric at a
few budgets: the wall time, the overshoot, and that the result is legal.

    PYTHONPATH=. python bench/bench_cpsat_budget.py [--kernels 600] [--budgets 1 3 10]

Measures, never asserts (the figure depends on the machine): recorded in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import platform
import time

from wsecc.place.cpsat import place_cpsat
from wsecc.place.problem import validate_placement
from wsecc.place.synthetic import chain_problem


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=600)
    ap.add_argument("--budgets", type=float, nargs="+", default=[1.0, 3.0, 10.0])
    args = ap.parse_args()
    problem = chain_problem(args.kernels, width=750, height=994)
    print(f"machine: {platform.machine()}, Python {platform.python_version()}")
    print("| kernels | budget s | wall s | overshoot | legal |")
    print("|---|---|---|---|---|")
    for budget in args.budgets:
        t0 = time.perf_counter()
        p = place_cpsat(problem, time_budget_s=budget)
        wall = time.perf_counter() - t0
        legal = validate_placement(problem, p) == []
        print(f"| {args.kernels} | {budget:g} | {wall:.2f} | {100 * (wall / budget - 1):+.0f}% "
              f"| {'yes' if legal else 'NO'} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
