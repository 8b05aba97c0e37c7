"""Performance simulation of compiled models: L0 (analytical) and L1 (event-level) on WSE-2 and WSE-3.

    python bench/bench_sim_perf.py                                  # every bench/models/*.onnx
    python bench/bench_sim_perf.py bench/models/gpt2-small.onnx:1024 --targets wse2

Each model is compiled (import -> passes -> lower and size -> greedy place -> route, precision
mixed) in its own process, once per target. One markdown row per model and target: L0 throughput
and latency with host I/O, utilization of the fabric and of the PEs used, the bottleneck stage,
the slowest on-wafer stage (host I/O left out) and the rate it allows, L1's difference from L0
(throughput / latency), L1's wall time, the delay-matching (skew) buffers L1 added, and what L1
gives without them. Default sequence length: 512 for BERT models, 1024 otherwise. Models whose
weights exceed --max-weights-gb are skipped: the frontend peaks at about 4x the weight bytes
(bench/RESULTS.md, issue 2).
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import time
from pathlib import Path

MODELS = Path(__file__).resolve().parent / "models"
COLUMNS = (
    "model", "seq", "target", "kernels", "L0 samples/s (tokens/s)", "latency us",
    "util. fabric / used", "bottleneck", "on-wafer bottleneck (samples/s)", "L1 vs L0 thr / lat",
    "L1 s", "skew buffers", "L1 without skew buffers", "compile s",
)  # fmt: skip


def rows(spec: str, targets: list[str], samples: int, placer: str, budget: float) -> None:
    from wsecc.passes import DEFAULT_PIPELINE
    from wsecc.targets import load_target

    from wsecc.core.flow import lower_and_size, place_and_route
    from wsecc.frontend.onnx import import_model
    from wsecc.pm import PassManager
    from wsecc.sim.events import simulate_l1
    from wsecc.sim.perf import SimulationError

    path, _, seq = spec.partition(":")
    name = Path(path).name.removesuffix(".onnx")
    graph, _ = import_model(path, batch=1, seq=int(seq))
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    for tname in targets:
        try:
            target = load_target(tname)
            t0 = time.perf_counter()
            kg, sizing = lower_and_size(fused, target, "mixed")
            p = place_and_route(kg, sizing, target, "mixed", placer=placer, time_budget_s=budget)
            compile_s = time.perf_counter() - t0
            r = simulate_l1(p.program, samples=samples)
            try:
                bare = simulate_l1(p.program, samples=samples, skew_buffers=False)
                no_skew = f"{bare.throughput_rel_diff:+.1%} thr"
            except SimulationError as e:
                no_skew = str(e).split(":")[0]  # "deadlock at cycle N"
            l0 = r.l0
            cells = [
                name, seq, tname, len(kg.kernels),
                f"{l0.samples_per_s:,.1f} ({l0.tokens_per_s:,.0f})", f"{l0.latency_s * 1e6:,.0f}",
                f"{l0.utilization:.1%} / {l0.utilization_used:.1%}", l0.bottleneck,
                f"{l0.wafer_bottleneck} ({l0.wafer_bottleneck_kind}, {l0.wafer_samples_per_s:,.0f})",
                f"{r.throughput_rel_diff:+.1%} / {r.latency_rel_diff:+.1%}", f"{r.seconds:.1f}",
                f"{len(r.skew_buffers)} edges, {sum(s.bytes for s in r.skew_buffers) / 1e6:.2f} MB",
                no_skew, f"{compile_s:.0f}",
            ]  # fmt: skip
            print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)
        except Exception as e:  # a row per failure, the table goes on
            print(f"| {name} | {seq} | {tname} | failed: {type(e).__name__}: {str(e)[:160]} |")


def default_specs() -> list[str]:
    return [
        f"{p}:{512 if p.name.startswith('bert') else 1024}" for p in sorted(MODELS.glob("*.onnx"))
    ]


def weights_gb(path: str) -> float:
    p = Path(path)
    return sum(f.stat().st_size for f in (p, p.with_name(p.name + ".data")) if f.exists()) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", help="PATH.onnx:SEQ (default: every bench/models/*.onnx)")
    ap.add_argument("--targets", default="wse2,wse3")
    ap.add_argument("--samples", type=int, default=3, help="L1 samples")
    ap.add_argument("--placer", default="greedy")
    ap.add_argument("--budget", type=float, default=20.0, help="CP-SAT seconds")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per model")
    ap.add_argument("--max-weights-gb", type=float, default=4.0)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    targets = a.targets.split(",")
    if a.one:
        rows(a.models[0], targets, a.samples, a.placer, a.budget)
        return
    print(
        f"machine: {platform.machine()}, 2 cores, Python {platform.python_version()}; "
        f"precision mixed, placer {a.placer}, L1 {a.samples} samples"
    )
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for spec in a.models or default_specs():
        path = spec.partition(":")[0]
        if weights_gb(path) > a.max_weights_gb:
            print(f"| {Path(path).stem} | skipped: {weights_gb(path):.1f} GB of weights |")
            continue
        cmd = [sys.executable, __file__, spec, "--one", "--targets", a.targets,
               "--samples", str(a.samples), "--placer", a.placer, "--budget", str(a.budget)]  # fmt: skip
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
            text = out.stdout.strip() or f"| {spec} | failed: {out.stderr.strip()[-200:]} |"
        except subprocess.TimeoutExpired:
            text = f"| {spec} | failed: over {a.timeout:.0f} s |"
        print(text, flush=True)


if __name__ == "__main__":
    main()
