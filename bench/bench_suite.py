"""The benchmark suite: every real-size model compiled end to end on WSE-2 and WSE-3.

    python bench/bench_suite.py                       # all models, both targets
    python bench/bench_suite.py --only gpt2-small --targets wse2 --budget 30
    python bench/bench_suite.py --export              # export missing models first (needs torch)
    python bench/bench_suite.py --models bench/models/weightless   # weightless exports
                                                      # (export_models.py --weightless)

Each (model, target) compiles in a fresh process (`wsecc.compile`, CP-SAT placement with
`--budget` seconds, L1 simulation, numerics off: these models are far past the size the
functional simulation runs in seconds), so its peak RSS is its own. One markdown row per run:
compile seconds per stage, peak memory, kernels, PEs used, SRAM max per PE, colors max vs
budget, CP-SAT gap (and the bound it is measured to) and improvement over the greedy placement of the same regions, throughput,
latency, utilization, the bottleneck, and L1's throughput against L0's.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = {  # name: sequence length it is compiled at
    "gpt2-small": 1024,
    "gpt2-medium": 1024,
    "gpt2-large": 1024,
    "gpt2-xl": 1024,
    "bert-base": 512,
    "bert-large": 512,
    "cerebras-gpt-111m": 2048,
    "cerebras-gpt-256m": 2048,
    "cerebras-gpt-590m": 2048,
    "cerebras-gpt-1.3b": 2048,
}
COLUMNS = (
    "model | seq | target | compile s (frontend / passes / size / place / simulate) | peak GB | "
    "kernels | PEs used | replicas | SRAM max B/PE | colors max / budget | CP-SAT gap (bound kind) | vs greedy | "
    "samples/s | tokens/s | latency ms | utilization | bottleneck | L1 vs L0 | "
    "balanced samples/s | on wafer samples/s (of balanced) | on-wafer limit"
)


def measure(path: str, seq: int, target: str, budget: float) -> dict:
    """One compile in this process; the figures of one row."""
    import wsecc
    from wsecc.place.api import place
    from wsecc.place.problem import PlacementError

    t0 = time.perf_counter()
    weights = "inputs" if Path(path).parent.name == "weightless" else "constants"
    c = wsecc.compile(
        path, seq=seq, target=target, placer="cpsat", time_budget_s=budget, validate=False,
        weights=weights,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    try:  # greedy on the problem placed (its menus hold the pool shapes the placer took)
        greedy: float | None = place(c.problem, placer="greedy", time_budget_s=budget).objective
    except PlacementError:
        greedy = None  # greedy does not pack them; the tiled start did
    rep = c.report()
    perf = rep["performance"]
    return {
        "wall": wall,
        "stages": rep["stage_seconds"],
        "peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,
        "kernels": len(rep["kernels"]),
        "pes_used": rep["sizing"]["pes_used"],
        "fabric": rep["sizing"]["fabric_fraction"],
        "replicas": f"{rep['replicas']['k']} ({rep['replicas']['reason']})",
        "sram_max": rep["sram"]["max_bytes"],
        "colors": f"{rep['routing']['colors_max']} / {rep['routing']['color_budget']}",
        "gap": rep["placement"]["gap"],
        "bound_kind": rep["placement"].get("bound_kind", ""),
        "vs_greedy": None if greedy is None else 1 - c.placement.objective / greedy,
        "samples_per_s": perf["samples_per_s"],
        "tokens_per_s": perf["tokens_per_s"],
        "latency_s": perf["latency_s"],
        "utilization": perf["utilization"],
        "bottleneck": perf["bottleneck"],
        "on_wafer": f"{perf['on_wafer_bottleneck']} ({perf['on_wafer_samples_per_s']:,.0f}/s)",
        "l1_vs_l0": perf.get("l1_vs_l0", {}).get("throughput_rel_diff"),
        "balanced": rep["sizing"]["samples_per_s"],
        "on_wafer_samples_per_s": perf["on_wafer_samples_per_s"],
        "on_wafer_limit": perf["on_wafer_bottleneck"],
    }


def _vs(improvement: float | None) -> str:
    return "greedy does not pack" if improvement is None else f"{100 * improvement:+.1f}%"


def row(name: str, seq: int, target: str, r: dict) -> str:
    st = r["stages"]
    stages = " / ".join(
        f"{st.get(k, 0):.1f}" for k in ("frontend", "passes", "size", "place", "simulate")
    )
    l1 = "-" if r["l1_vs_l0"] is None else f"{100 * r['l1_vs_l0']:+.1f}%"
    return (
        f"| {name} | {seq} | {target} | {r['wall']:.1f} ({stages}) | {r['peak_gb']:.2f} | "
        f"{r['kernels']} | {r['pes_used']:,} ({100 * r['fabric']:.0f}%) | {r['replicas']} | "
        f"{r['sram_max']:,} | "
        f"{r['colors']} | {100 * r['gap']:.1f}% ({r.get('bound_kind') or '?'}) | {_vs(r['vs_greedy'])} | "
        f"{r['samples_per_s']:,.1f} | {r['tokens_per_s']:,.0f} | {1e3 * r['latency_s']:.3f} | "
        f"{100 * r['utilization']:.1f}% | {r['bottleneck']}; on wafer {r['on_wafer']} | {l1} | "
        f"{r['balanced']:,.0f} | {r['on_wafer_samples_per_s']:,.0f} "
        f"({r['on_wafer_samples_per_s'] / r['balanced']:.0%}) | {r['on_wafer_limit']} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--models", default=str(HERE / "models"), help="folder of NAME.onnx exports")
    p.add_argument("--only", default=None, help=f"comma-separated subset of {', '.join(MODELS)}")
    p.add_argument("--targets", default="wse2,wse3")
    p.add_argument("--budget", type=float, default=60.0, help="CP-SAT seconds per compile")
    p.add_argument("--export", action="store_true", help="export missing models (needs torch)")
    p.add_argument(
        "--one", nargs=4, metavar=("PATH", "SEQ", "TARGET", "BUDGET"), help=argparse.SUPPRESS
    )
    a = p.parse_args()
    if a.one:  # the child process: print one JSON result
        print(json.dumps(measure(a.one[0], int(a.one[1]), a.one[2], float(a.one[3]))))
        return
    names = a.only.split(",") if a.only else list(MODELS)
    folder = Path(a.models)
    missing = [n for n in names if not (folder / f"{n}.onnx").exists()]
    if missing and a.export:
        subprocess.run(
            [
                sys.executable,
                str(HERE / "export_models.py"),
                "--out",
                str(folder),
                "--only",
                ",".join(missing),
            ],
            check=True,
        )
    print(f"machine: {platform.machine()}, 2 cores, Python {platform.python_version()}; "
          f"CP-SAT budget {a.budget:.0f} s, precision mixed, L1 simulation")  # fmt: skip
    print(f"| {COLUMNS} |")
    print("|" + "---|" * (COLUMNS.count("|") + 1))
    for name in names:
        path = folder / f"{name}.onnx"
        for target in a.targets.split(","):
            if not path.exists():
                print(
                    f"| {name} | - | {target} | not exported (bench/export_models.py) |", flush=True
                )
                continue
            args = [str(path), str(MODELS[name]), target, str(a.budget)]
            done = subprocess.run(
                [sys.executable, __file__, "--one", *args], capture_output=True, text=True
            )
            if done.returncode != 0:
                err = (done.stderr.strip().splitlines() or ["?"])[-1][:200]
                print(f"| {name} | {MODELS[name]} | {target} | failed: {err} |", flush=True)
                continue
            print(
                row(name, MODELS[name], target, json.loads(done.stdout.splitlines()[-1])),
                flush=True,
            )


if __name__ == "__main__":
    main()
