"""Greedy vs CP-SAT placement, and routing, on real models (sized on a target).

    python bench/bench_place_models.py bench/models/gpt2-small.onnx:1024 --target wse2 --budget 60

One markdown row per model: kernels, greedy and CP-SAT weighted wirelength (bytes·PE), the
improvement, CP-SAT's bound and gap, its wall time, colors max per router vs the lower bound.
"""

from __future__ import annotations

import argparse
import platform
import time


def row(spec: str, target_name: str, budget: float) -> str:
    from wsecc.passes import DEFAULT_PIPELINE
    from wsecc.targets import load_target

    from wsecc.core.flow import lower_and_size, place_and_route
    from wsecc.frontend.onnx import import_model
    from wsecc.pm import PassManager

    path, _, seq = spec.partition(":")
    target = load_target(target_name)
    graph, _ = import_model(path, batch=1, seq=int(seq or 1024))
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    kg, sizing = lower_and_size(fused, target, "mixed")
    g = place_and_route(kg, sizing, target, "mixed", placer="greedy", time_budget_s=budget).program
    t0 = time.perf_counter()
    c = place_and_route(kg, g.sizing, target, "mixed", placer="cpsat", time_budget_s=budget).program
    wall = time.perf_counter() - t0
    gp, cp, r = g.placement, c.placement, c.routing
    imp = 100 * (1 - cp.objective / gp.objective)
    return (
        f"| {path.split('/')[-1].removesuffix('.onnx')} | {seq} | {len(kg.kernels)} | {gp.objective:.4g} | {cp.objective:.4g} | "
        f"{imp:.1f}% | {cp.bound:.4g} | {100 * cp.gap:.1f}% | {wall:.1f} s ({budget:.0f} s budget) | "
        f"{r.colors_used_max} / {r.color_lower_bound} |"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("models", nargs="+", help="PATH.onnx:SEQ")
    p.add_argument("--target", default="wse2")
    p.add_argument("--budget", type=float, default=60.0)
    a = p.parse_args()
    print(
        f"machine: {platform.machine()}, 2 cores, Python {platform.python_version()}; target {a.target}, precision mixed"
    )
    print(
        "| model | seq | kernels | greedy WL | CP-SAT WL | improvement | bound | gap | CP-SAT wall | colors max / LB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m in a.models:
        try:
            print(row(m, a.target, a.budget), flush=True)
        except Exception as e:
            print(
                f"| {m} | failed: {type(e).__name__}: {str(e).splitlines()[0][:200]} |", flush=True
            )


if __name__ == "__main__":
    main()
