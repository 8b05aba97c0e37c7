"""`wsecc ispd2020 BENCH.kgraph [-o BENCH.solution] [--time-budget S] [--png F] [--html F]`.

Solves one ISPD 2020 benchmark, writes the contest solution, prints Δt, WL, score, the Δt lower
bound and gap, and the run time; on request draws the placement (PNG) and writes the placement
viewer page. Bad input: one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wsecc.ispd2020.draw import viewer_page
from wsecc.ispd2020.kgraph import KGraphError, read_kgraph
from wsecc.ispd2020.score import write_solution
from wsecc.ispd2020.solve import SolveOptions, solve
from wsecc.view.png import draw_contest_placement


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error (no usage dump), still exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"wsecc ispd2020: error: {message} (see wsecc ispd2020 --help)", file=sys.stderr)
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="wsecc ispd2020",
        description="Size and place an ISPD 2020 wafer-scale placement benchmark (.kgraph).",
    )
    p.add_argument("kgraph", type=Path, help="benchmark file, e.g. A.kgraph")
    p.add_argument("-o", "--output", type=Path, help="solution file (default: BENCH.solution)")
    p.add_argument("--time-budget", type=float, default=60.0, metavar="S", help="seconds (60)")
    p.add_argument("--seed", type=int, default=0, metavar="N")
    p.add_argument("--deterministic", action="store_true", help="reproducible placer runs")
    p.add_argument("--png", type=Path, metavar="FILE", help="draw the placement to FILE")
    p.add_argument(
        "--html", type=Path, metavar="FILE", help="write the placement viewer page to FILE"
    )
    p.add_argument("-v", "--verbose", action="store_true", help="print the solver's steps")
    return p


def main_ispd2020(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2)
        return int(exc.code or 0)
    if args.time_budget <= 0:
        print("wsecc ispd2020: error: --time-budget must be positive", file=sys.stderr)
        return 2
    try:
        graph = read_kgraph(args.kgraph)
    except KGraphError as exc:
        print(f"wsecc ispd2020: error: {exc}", file=sys.stderr)
        return 2
    opts = SolveOptions(
        time_budget_s=args.time_budget, seed=args.seed, deterministic=args.deterministic
    )
    try:
        result = solve(graph, opts)
    except ValueError as exc:  # e.g. kernels that fit the fabric at no Δt
        print(f"wsecc ispd2020: error: {args.kgraph.name}: {exc}", file=sys.stderr)
        return 2
    out = args.output or args.kgraph.with_suffix(".solution")
    try:
        write_solution(out, result.solution)
    except OSError as exc:
        print(f"wsecc ispd2020: error: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if args.verbose:
        print("\n".join(result.log))
    s = result.score
    print(f"{graph.source}: {len(graph.kernels)} kernels on {graph.width}x{graph.height}")
    print(f"  Δt        {s.delta_t}")
    print(f"  WL        {s.wirelength:g}")
    print(f"  score     {s.score:g}   (= {graph.wdeltat:g}·Δt + {graph.wlength:g}·WL)")
    if graph.wadapter:
        print(f"  warning   wadapter={graph.wadapter:g} but ADAPT is not modelled (counted as 0)")
    print(f"  Δt bound  {result.lower_bound}   ({result.bound_kind}; gap {100 * result.gap:.2f}%)")
    print(f"  time      {result.seconds:.1f} s (budget {args.time_budget:g} s)")
    print(f"  solution  {out}")
    for path, label, write in (
        (args.png, "picture", lambda p: draw_contest_placement(graph, s, p)),
        (args.html, "viewer", lambda p: p.write_text(viewer_page(graph, result.solution, s))),
    ):
        if path is None:
            continue
        try:
            write(path)
        except OSError as exc:
            print(
                f"wsecc ispd2020: error: cannot write {path}: {exc.strerror or exc}",
                file=sys.stderr,
            )
            return 2
        print(f"  {label:<9} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main_ispd2020())
