"""Simulation benchmarks. Functional part: the fabric-order simulator against onnxruntime.

    python bench/bench_sim.py samples/*.onnx bench/models/gpt2-small.onnx:1x128 --precision mixed

Each model is PATH.onnx[:BATCHxSEQ] (default 2x16). Prints one markdown row per model and
precision: onnxruntime's time (session creation, and the best of --repeat runs on a live session;
graph optimizations off, as `wsecc.check.numerics.ort_run` runs it), the simulator's time (loading the
program — weights rounded and tiled — and the best of --repeat runs), the ratios, and the largest
max-rel-err and smallest PCC over the outputs. Inputs: `make_inputs(seed=0, padded=True)`.
onnxruntime runs with its default thread count unless --ort-threads is given; the simulator
splits each kernel over every CPU (wsecc.sim.functional), its BLAS calls each on one thread.
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any


def _best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def functional_rows(
    spec: str, precisions: list[str], repeat: int, ort_threads: int = 0
) -> list[str]:
    import onnxruntime as ort
    from wsecc.passes import DEFAULT_PIPELINE
    from wsecc.targets import load_target

    from wsecc.check.numerics import compare, make_inputs
    from wsecc.core.flow import lower_and_size
    from wsecc.frontend.onnx import import_model
    from wsecc.pm import PassManager
    from wsecc.sim.functional import compile_functional

    path, _, shape = spec.partition(":")
    batch, seq = (int(d) for d in (shape or "2x16").split("x"))
    graph, _ = import_model(path, batch=batch, seq=seq)
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    feeds = make_inputs(graph, seed=0, padded=True)

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    so.intra_op_num_threads = ort_threads  # 0: onnxruntime's default
    t0 = time.perf_counter()
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    ort_load = time.perf_counter() - t0
    wanted = {i.name for i in sess.get_inputs()}
    names = [o.name for o in sess.get_outputs()]
    ort_feeds = {k: v for k, v in feeds.items() if k in wanted}
    ort_run_s, ref = _best(lambda: sess.run(names, ort_feeds), repeat)
    ref = dict(zip(names, ref, strict=True))

    rows = []
    for precision in precisions:
        kg, sizing = lower_and_size(fused, load_target("wse2"), precision)
        load_s, program = _best(partial(compile_functional, fused, kg, sizing, precision), 1)
        run_s, got = _best(partial(program.run, feeds), repeat)
        errs = [compare(n, got[n], r, precision) for n, r in ref.items()]
        del program, got  # one program's weights in memory at a time
        rows.append(
            f"| {Path(path).stem} | {batch}x{seq} | {precision} | {ort_load * 1e3:,.1f} | "
            f"{ort_run_s * 1e3:,.2f} | {load_s * 1e3:,.1f} | {run_s * 1e3:,.2f} | "
            f"{run_s / ort_run_s:.1f}x | {(load_s + run_s) / (ort_load + ort_run_s):.2f}x | "
            f"{max(e.max_rel_err for e in errs):.2e} | {min(e.pcc for e in errs):.6f} | "
            f"{'pass' if all(e.passed for e in errs) else 'FAIL'} |"
        )
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("models", nargs="+", help="PATH.onnx[:BATCHxSEQ]")
    p.add_argument("--precision", action="append", help="fp32, mixed, fp16 (repeatable)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--ort-threads", type=int, default=0, help="onnxruntime intra-op threads")
    a = p.parse_args()
    precisions = a.precision or ["fp32", "mixed"]
    threads = a.ort_threads or "default"
    print(
        f"machine: {platform.machine()}, Python {platform.python_version()}; target wse2; "
        f"onnxruntime threads: {threads}"
    )
    print(
        "| model | batch x seq | precision | ORT load ms | ORT run ms | sim load ms | sim run ms "
        "| run ratio | load+run ratio | max rel err | min PCC | verdict |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for m in a.models:
        try:
            for r in functional_rows(m, precisions, a.repeat, a.ort_threads):
                print(r, flush=True)
        except Exception as e:  # report and continue with the next model
            print(f"| {m} | failed: {type(e).__name__}: {str(e).splitlines()[0]} |", flush=True)


if __name__ == "__main__":
    main()
