"""Lowering and sizing on real-size exports: does each model fit, and how balanced is it?

    python bench/bench_sizing.py bench/models/gpt2-small.onnx:1024 bench/models/bert-base.onnx:128 --target wse2

Prints one markdown row per model: kernels, PEs used, fabric %, max SRAM per PE, bottleneck,
the predicted throughput and the compute-bound ceiling, the bottleneck stage of a plain
work-proportional allocation for comparison, and the seconds lowering + sizing took.
"""

from __future__ import annotations

import argparse
import platform
import time


def row(spec: str, target_name: str, precision: str) -> str:
    from wsecc.passes import DEFAULT_PIPELINE
    from wsecc.targets import load_target

    from wsecc.core.flow import lower_and_size
    from wsecc.frontend.onnx import import_model
    from wsecc.kernels import work_proportional_sizing
    from wsecc.pm import PassManager

    path, _, seq = spec.partition(":")
    target = load_target(target_name)
    graph, _ = import_model(path, batch=1, seq=int(seq or 1024))
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    t0 = time.perf_counter()
    kg, s = lower_and_size(fused, target, precision)
    dt = time.perf_counter() - t0
    wp = work_proportional_sizing(kg, target, precision)
    bn = s.kernel(s.bottleneck)
    return (
        f"| {path.split('/')[-1].removesuffix('.onnx')} | {seq} | {target.name} | {len(kg.kernels)} | {s.pes_used:,} | "
        f"{100 * s.fabric_fraction:.1f}% | {s.max_sram_per_pe:,} | {s.bottleneck} ({bn.cycles_per_sample:,} cyc) | "
        f"{s.samples_per_s:,.1f} / {s.tokens_per_s:,.0f} | {s.ceiling_samples_per_s:,.1f} | "
        f"{wp.kernel(wp.bottleneck).cycles_per_sample:,} cyc | {dt:.2f} |"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("models", nargs="+", help="PATH.onnx:SEQ")
    p.add_argument("--target", default="wse2")
    p.add_argument("--precision", default="mixed")
    a = p.parse_args()
    print(
        f"machine: {platform.machine()}, Python {platform.python_version()}; precision {a.precision}"
    )
    print(
        "| model | seq | target | kernels | PEs used | fabric | max SRAM B/PE | bottleneck | samples/s / tokens/s | ceiling samples/s | work-proportional bottleneck | lower+size s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for m in a.models:
        try:
            print(row(m, a.target, a.precision), flush=True)
        except Exception as e:  # report and continue with the next model
            print(f"| {m} | failed: {type(e).__name__}: {str(e).splitlines()[0]} |", flush=True)


if __name__ == "__main__":
    main()
