"""How the on-wafer throughput holds across placement seeds: the real-size suite compiled
deterministically at several seeds, each row's on-wafer samples/s against sizing's balanced.

    python bench/bench_on_wafer_seeds.py --models bench/models/weightless --seeds 1,2
    python bench/bench_on_wafer_seeds.py --only gpt2-small --targets wse3 --seeds 0,1,2,3

Each compile runs in a fresh process (`python -m wsecc.cli compile --deterministic --seed N --no-validate
--sim l0`, the default 10 s placement budget). One markdown row per compile: the on-wafer
share of balanced, its limit, whether the flow placed again with halos (`placement.status`),
the wirelength and gap, and the compile's wall seconds.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_suite import HERE, MODELS


def measure(path: Path, seq: int, target: str, seed: int) -> str:
    weights = "inputs" if path.parent.name == "weightless" else "constants"
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        subprocess.run(
            [
                sys.executable, "-m", "wsecc.cli", "compile", str(path), "--seq", str(seq),
                "--target", target, "--deterministic", "--seed", str(seed), "--no-validate",
                "--sim", "l0", "--weights", weights, "-o", f"{out}/o",
            ],
            check=True, capture_output=True,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        rep = json.loads(Path(out, "o", "report.json").read_text())
    perf, placement = rep["performance"], rep["placement"]
    share = perf["on_wafer_samples_per_s"] / rep["sizing"]["samples_per_s"]
    again = "halos" in placement["status"]
    return (
        f"| {path.stem} | {target} | {seed} | {100 * share:.1f}% | {perf['on_wafer_bottleneck']} "
        f"| {'yes' if again else 'no'} | {placement['objective']:.4g} | "
        f"{100 * placement['gap']:.1f}% | {wall:.1f} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=str(HERE / "models"), help="folder of NAME.onnx exports")
    p.add_argument("--only", default=None, help=f"comma-separated subset of {', '.join(MODELS)}")
    p.add_argument("--targets", default="wse2,wse3")
    p.add_argument("--seeds", default="1,2", help="comma-separated placement seeds")
    a = p.parse_args()
    names = a.only.split(",") if a.only else list(MODELS)
    seeds = [int(s) for s in a.seeds.split(",")]
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print(
        "| model | target | seed | on wafer (of balanced) | on-wafer limit | placed again | WL B·PE | gap | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        path = Path(a.models) / f"{name}.onnx"
        if not path.exists():
            print(f"| {name} | | | missing: {path} | | | | | |", flush=True)
            continue
        for target in a.targets.split(","):
            for seed in seeds:
                print(measure(path, MODELS[name], target, seed), flush=True)


if __name__ == "__main__":
    main()
