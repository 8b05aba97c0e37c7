"""How far the placement's lower bounds are from the placements (issue 18, item 3).

    python bench/bench_bounds.py models PATH.onnx:SEQ[:inputs] ... [--target wse2] [--budget 10]
    python bench/bench_bounds.py layers PATH.onnx:SEQ[:inputs] --counts 1 2 4 [--budget 20]
    python bench/bench_bounds.py density PATH.onnx:SEQ[:inputs] ... [--densities 0.55 0.7 0.86]

`models`: one markdown row per model, compiled as `wsecc compile` does up to placement (CP-SAT,
the budget given): kernels, the placement's weighted wirelength, the pairwise separation bound
and its gap (what was reported before issue 18), the separation bound over shape pairs, the
star bound under each split policy (half / smaller / larger), the reported bound with its kind
and gap, and the placement's wall time. `:inputs` compiles a weightless export.

`layers`: the sub-problem of 1, 2, 4 … consecutive transformer layers (L2, L3, …) of the same
sized model, placed by CP-SAT alone, against our bound; then layers 2 and 3 placed one at a time
and joined side by side (best of 4 flips × 2 sides × every offset): a legal placement of the
2-layer problem that says how much of CP-SAT's 2-layer gap is the placement's; then CP-SAT
started from it.

`density`: what one layer costs when it must be packed as densely as the wafer's fill makes
the layers (the price the bounds do not see). The compile's placement split into each layer's
own flows, the joins between layers and the rest; then one layer (L1, the tiled start's
envelope shapes, pools included) packed by CP-SAT alone in a box of each density and aspect
(w/h 1, 2, 4, 8), `--budget` seconds each, against the layer's own lower bound. "OPTIMAL" means
CP-SAT proved the box's least cost.
"""

from __future__ import annotations

import argparse
import math
import platform
import re
import time

from wsecc.place import bounds, tiled
from wsecc.place.cpsat import CpSatOptions, _Data, _Limits, _solve, place_cpsat
from wsecc.place.greedy import greedy_rects
from wsecc.place.problem import (
    PlacementProblem,
    Rect,
    pairwise_lower_bound,
    weighted_wirelength,
    with_pools,
)


def _compile(spec: str, target_name: str, budget: float):  # type: ignore[no-untyped-def]
    from wsecc.passes import DEFAULT_PIPELINE
    from wsecc.targets import load_target

    from wsecc.core.flow import lower_and_size, place_and_route
    from wsecc.frontend.onnx import import_model
    from wsecc.pm import PassManager

    path, seq, *rest = spec.split(":")
    target = load_target(target_name)
    graph, _ = import_model(path, batch=1, seq=int(seq), weights=rest[0] if rest else "constants")
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    kg, sizing = lower_and_size(fused, target, "mixed")
    t0 = time.perf_counter()
    placed = place_and_route(kg, sizing, target, "mixed", placer="cpsat", time_budget_s=budget)
    return placed, time.perf_counter() - t0


def models(args: argparse.Namespace) -> None:
    print(
        "| model | seq | kernels | CP-SAT WL | pairwise bound | gap before | separation | "
        "star half / smaller / larger | reported bound (kind) | gap now | place s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for spec in args.models:
        name = spec.split(":")[0].split("/")[-1].removesuffix(".onnx")
        try:
            placed, wall = _compile(spec, args.target, args.budget)
        except Exception as e:  # noqa: BLE001 - a failed row is reported, the others still run
            print(f"| {name} | failed: {type(e).__name__}: {str(e)[:150]} |", flush=True)
            continue
        p, prob = placed.program.placement, placed.problem
        pw = pairwise_lower_bound(prob)
        stars = " / ".join(f"{bounds.star_bound(prob, k):.4g}" for k in bounds.POLICIES)
        print(
            f"| {name} | {spec.split(':')[1]} | {len(prob.kernels)} | {p.objective:.4g} | "
            f"{pw:.4g} | {100 * (1 - pw / p.objective):.1f}% | "
            f"{bounds.separation_bound(prob):.4g} | {stars} | {p.bound:.4g} ({p.bound_kind}) | "
            f"{100 * p.gap:.1f}% | {wall:.1f} |",
            flush=True,
        )


def _layer(name: str) -> int | None:
    m = re.match(r"L(\d+)\.", name)
    return int(m.group(1)) if m else None


def _sub(p: PlacementProblem, names: set[str]) -> PlacementProblem:
    kernels = tuple(k for k in p.kernels if k.name in names)
    flows = tuple(f for f in p.flows if f.src in names and f.dst in names)
    return PlacementProblem(p.width, p.height, kernels, flows)


def _origin(rects: dict[str, Rect]) -> dict[str, Rect]:
    x0, y0 = min(r.x for r in rects.values()), min(r.y for r in rects.values())
    return {n: Rect(r.x - x0, r.y - y0, r.w, r.h) for n, r in rects.items()}


def _joined(
    p: PlacementProblem, a: dict[str, Rect], b: dict[str, Rect]
) -> tuple[float, dict[str, Rect]]:
    """Least wirelength of `a` with `b` (flipped 4 ways) beside it, right or below."""
    a, b = _origin(a), _origin(b)
    wa, ha = max(r.x + r.w for r in a.values()), max(r.y + r.h for r in a.values())
    wb, hb = max(r.x + r.w for r in b.values()), max(r.y + r.h for r in b.values())
    best: tuple[float, dict[str, Rect]] = (float("inf"), {})
    for fx in (False, True):
        for fy in (False, True):
            fb = {
                n: Rect(wb - r.x - r.w if fx else r.x, hb - r.y - r.h if fy else r.y, r.w, r.h)
                for n, r in b.items()
            }
            for right in (True, False):
                for off in range(-max(hb, wb), max(ha, wa) + 1):
                    dx, dy = (wa, off) if right else (off, ha)
                    rects = _origin(
                        {**a, **{n: Rect(r.x + dx, r.y + dy, r.w, r.h) for n, r in fb.items()}}
                    )
                    if (
                        max(r.x + r.w for r in rects.values()) <= p.width
                        and max(r.y + r.h for r in rects.values()) <= p.height
                    ):
                        wl = weighted_wirelength(p, rects)
                        best = min(best, (wl, rects), key=lambda t: t[0])
    return best


def layers(args: argparse.Namespace) -> None:
    placed, _ = _compile(args.models[0], args.target, args.budget)
    p = placed.problem
    opts = CpSatOptions(full_model_share=0.8)
    print("| layers | kernels | CP-SAT WL | bound (kind) | gap |")
    print("|---|---|---|---|---|")
    for count in args.counts:
        names = {k.name for k in p.kernels if (_layer(k.name) or -1) in range(2, 2 + count)}
        q = _sub(p, names)
        r = place_cpsat(q, time_budget_s=args.budget, options=opts)
        lb = bounds.lower_bound(q)
        print(
            f"| {count} | {len(q.kernels)} | {r.objective:.4g} | {lb.value:.4g} ({lb.kind}) | "
            f"{100 * (1 - lb.value / r.objective):.1f}% |",
            flush=True,
        )
    two = {k.name for k in p.kernels if _layer(k.name) in (2, 3)}
    parts = [{k.name for k in p.kernels if _layer(k.name) == i} for i in (2, 3)]
    placed_parts = [place_cpsat(_sub(p, s), time_budget_s=args.budget / 2).rects for s in parts]
    both = _sub(p, two)
    wl, rects = _joined(both, *placed_parts)
    lb = bounds.lower_bound(both).value
    print(
        f"\nlayers 2 and 3 placed one at a time and joined: WL {wl:.4g}, gap {100 * (1 - lb / wl):.1f}%"
    )
    again = place_cpsat(both, time_budget_s=args.budget, options=opts, initial=rects)
    print(
        f"the joined placement refined by CP-SAT ({args.budget:g} s): WL {again.objective:.4g}, "
        f"gap {100 * (1 - lb / again.objective):.1f}%"
    )


def density(args: argparse.Namespace) -> None:
    for spec in args.models:
        placed, _ = _compile(spec, args.target, args.budget)
        p, placement = placed.problem, placed.program.placement
        rects = placement.rects
        _, layers, _ = tiled.repeating_layers(p)
        layer_of = {n: i for i, layer in enumerate(layers) for n in layer}
        parts = {"own": 0.0, "joins": 0.0, "rest": 0.0}
        for f in p.flows:
            a, b = layer_of.get(f.src), layer_of.get(f.dst)
            part = "rest" if a is None or b is None else "own" if a == b else "joins"
            (ax, ay), (bx, by) = rects[f.src].center2(), rects[f.dst].center2()
            parts[part] += f.bytes_per_sample * (abs(ax - bx) + abs(ay - by)) / 2
        total = sum(parts.values())
        q = with_pools(p)
        env = tiled._envelope(q, layers)
        area = sum(min(w * h for w, h in shapes) for shapes in env)
        one = tiled._sub(q, layers[1], env, q.width, q.height)
        lb = bounds.lower_bound(one)
        name = spec.split(":")[0].split("/")[-1].removesuffix(".onnx")
        print(
            f"\n{name}, {args.target}: WL {total:.4g} (gap {100 * placement.gap:.1f}% to the "
            f"{placement.bound_kind} bound {placement.bound:.4g}) = each layer's own flows "
            f"{parts['own'] / len(layers):.3g} x {len(layers)} ({parts['own'] / total:.0%}) + "
            f"joins {parts['joins'] / total:.0%} + the rest {parts['rest'] / total:.0%}; "
            f"one layer: {len(env)} kernels, {area:,} PEs at least, bound {lb.value:.3g} "
            f"({lb.kind})\n"
        )
        print("| density | box w x h | least cost found | x the layer's bound | CP-SAT |")
        print("|---|---|---|---|---|")
        for d in args.densities:
            for aspect in (1, 2, 4, 8):
                h = math.ceil(math.sqrt(area / d / aspect))
                w = math.ceil(area / d / h)
                if any(all(sw > w or sh > h for sw, sh in shapes) for shapes in env):
                    print(f"| {d:.0%} | {w} x {h} | a kernel has no shape that fits | | |")
                    continue
                box = tiled._sub(q, layers[1], env, w, h)
                stretched = PlacementProblem(w, 4 * h + sum(max(s[1] for s in ss) for ss in env),
                                             box.kernels, box.flows)  # fmt: skip
                _, start = greedy_rects(stretched)
                solved = _solve(_Data.of(box), start, list(range(len(env))), Rect(0, 0, w, h),
                                _Limits(args.budget, 2, 0))  # fmt: skip
                if solved.rects is None:
                    print(f"| {d:.0%} | {w} x {h} | none ({solved.status}) | | |", flush=True)
                    continue
                cost = weighted_wirelength(box, solved.rects)
                print(f"| {d:.0%} | {w} x {h} | {cost:.3g} | {cost / lb.value:.2f} | "
                      f"{solved.status} |", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("what", choices=("models", "layers", "density"))
    ap.add_argument("models", nargs="+", help="PATH.onnx:SEQ[:inputs]")
    ap.add_argument("--target", default="wse2")
    ap.add_argument("--budget", type=float, default=10.0)
    ap.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--densities", type=float, nargs="+", default=[0.55, 0.7, 0.86])
    args = ap.parse_args()
    print(
        f"machine: {platform.machine()}, Python {platform.python_version()}; target {args.target}\n"
    )
    {"models": models, "layers": layers, "density": density}[args.what](args)


if __name__ == "__main__":
    main()
