"""Frontend + passes on real-size exports: seconds per stage and peak memory.

    python bench/bench_frontend.py bench/models/gpt2-small.onnx --seq 1024

Prints one markdown row per model: load, bind+fold, convert, passes, total seconds, peak RSS.
Each model runs in a fresh process so peak memory is its own.
"""

from __future__ import annotations

import argparse
import platform
import resource
import subprocess
import sys
import time


def measure(path: str, batch: int, seq: int) -> str:
    from wsecc.passes import DEFAULT_PIPELINE

    from wsecc.frontend import onnx as fe
    from wsecc.pm import PassManager

    t = [time.perf_counter()]
    model = fe.load_model(path)
    t.append(time.perf_counter())
    bindings = fe.resolve_bindings(model, batch, seq, {})
    folded, weights = fe.fold(fe.bind_dims(model, bindings))
    t.append(time.perf_counter())
    graph = fe.to_graph(folded, weights)
    t.append(time.perf_counter())
    fused, _ = PassManager(DEFAULT_PIPELINE).run(graph)
    t.append(time.perf_counter())
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    d = [b - a for a, b in zip(t, t[1:], strict=False)]
    return (
        f"| {path.split('/')[-1]} | {batch}x{seq} | {len(graph.nodes)} -> {len(fused.nodes)} | "
        f"{d[0]:.1f} | {d[1]:.1f} | {d[2]:.1f} | {d[3]:.1f} | {t[-1] - t[0]:.1f} | {rss_gb:.2f} |"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("models", nargs="+")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(measure(a.models[0], a.batch, a.seq))
        return
    print(f"machine: {platform.processor() or platform.machine()}, {platform.python_version()}")
    print(
        "| model | batch x seq | ops (folded -> fused) | load s | bind+fold s | convert s | passes s | total s | peak RSS GB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for m in a.models:
        cmd = [sys.executable, __file__, m, "--batch", str(a.batch), "--seq", str(a.seq), "--child"]
        out = subprocess.run(cmd, capture_output=True, text=True)
        print(out.stdout.strip() or f"| {m} | failed: {out.stderr.strip().splitlines()[-1:]} |")


if __name__ == "__main__":
    main()
