"""ISPD 2020 wafer-placement contest A–D: our Δt / WL / score against the published results.

    PYTHONPATH=. python bench/bench_ispd2020.py [--time-budget 60] [--seed 0] [--deterministic]
                                                [--out DIR] [A B ..]
    PYTHONPATH=. python bench/bench_ispd2020.py --generated [G1 G2 ..]

Prints a markdown table. `--generated` runs the graphs of `wsecc.ispd2020.generate.GENERATED`
(written to DIR as .kgraph) instead of A–D; they have no published results, and the table adds
Δt / LB, Δt_pack / LB (Δt_pack: the least Δt our floorplan packs; the scan may then buy
wirelength with a larger Δt) and our score against a lower bound on the score (size.py). Every solution is written to DIR (default /tmp/ispd2020), re-read and
re-scored legal by our scorer (docs/ispd2020.md has the scoring conventions). Published numbers
(Δt / WL / score) are CU.POKer (ICCAD'20) and the BU kernel-mapping paper (ISPD'22), as collected
in P. Madden's Benchmarker repository; D's Δt 33713 is likely a typo for 33712.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wsecc.ispd2020.generate import GENERATED, render
from wsecc.ispd2020.kgraph import parse_kgraph, read_kgraph
from wsecc.ispd2020.score import read_solution, score_solution, write_solution
from wsecc.ispd2020.solve import SolveOptions, solve

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "ispd2020"

# bench -> ((CU.POKer Δt, WL, score), (BU ISPD'22 Δt, WL, score))
PUBLISHED: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "A": ((34496, 1314, 35810), (34496, 1314, 35810)),
    "B": ((63504, 2639.5, 66143.5), (64512, 1913, 66425)),
    "C": ((64512, 2408, 66920), (64512, 4108, 68620)),
    "D": ((33713, 2722, 36435), (33713, 3588, 37300)),
}


def _triple(t: tuple[float, float, float]) -> str:
    return " / ".join(f"{v:g}" for v in t)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("benches", nargs="*")
    ap.add_argument("--generated", action="store_true", help="the generated graphs, not A–D")
    ap.add_argument("--time-budget", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("/tmp/ispd2020"))
    ap.add_argument(
        "--deterministic",
        action="store_true",
        help="work-based limits: the same result on a loaded machine as on an idle one",
    )
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    mode = ", deterministic" if args.deterministic else ""
    print(f"time budget {args.time_budget:g} s per benchmark, seed {args.seed}{mode}\n")
    if args.generated:
        return _generated(args.benches or sorted(GENERATED), args)
    args.benches = args.benches or sorted(PUBLISHED)
    print(
        "| bench | our Δt | WL | score | time (s) | budget (s) | Δt LB | Δt gap | best published | "
        "vs best | CU.POKer Δt/WL/score | BU'22 Δt/WL/score |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for bench in args.benches:
        graph = read_kgraph(CORPUS / f"{bench}.kgraph")
        result = solve(graph, _options(args))
        out = args.out / f"{bench}.solution"
        write_solution(out, result.solution)
        s = score_solution(graph, read_solution(out))
        if not s.legal:
            print(f"{bench}: ILLEGAL solution: {'; '.join(s.violations)}", file=sys.stderr)
            return 1
        cu, bu = PUBLISHED[bench]
        best = min(cu[2], bu[2])
        print(
            f"| {bench} | {s.delta_t} | {s.wirelength:g} | {s.score:g} | {result.seconds:.1f} | "
            f"{args.time_budget:g} | {result.lower_bound} | {100 * result.gap:.2f}% | {best:g} | "
            f"{s.score - best:+g} | {_triple(cu)} | {_triple(bu)} |",
            flush=True,
        )
    return 0


def _options(args: argparse.Namespace) -> SolveOptions:
    return SolveOptions(
        time_budget_s=args.time_budget, seed=args.seed, deterministic=args.deterministic
    )


def _generated(names: list[str], args: argparse.Namespace) -> int:
    print(
        "| bench | kernels | fabric | our Δt | WL | score | time (s) | area LB | Δt LB (kind) | "
        "Δt / LB | Δt_pack / LB | score LB | score / score LB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        text = render(GENERATED[name])
        (args.out / f"{name}.kgraph").write_text(text)
        graph = parse_kgraph(text, name)
        result = solve(graph, _options(args))
        out = args.out / f"{name}.solution"
        write_solution(out, result.solution)
        s = score_solution(graph, read_solution(out))
        if not s.legal:
            print(f"{name}: ILLEGAL solution: {'; '.join(s.violations)}", file=sys.stderr)
            return 1
        print(
            f"| {name} ({graph.test}) | {len(graph.kernels)} | {graph.width}x{graph.height} | "
            f"{s.delta_t} | {s.wirelength:g} | {s.score:g} | {result.seconds:.1f} | "
            f"{result.area_bound} | {result.lower_bound} ({result.bound_kind}) | "
            f"{s.delta_t / result.lower_bound:.3f} | {result.packable_dt / result.lower_bound:.3f} | "
            f"{result.score_bound:g} | {s.score / result.score_bound:.3f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
