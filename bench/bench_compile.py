"""Compile time by stage, with the on-wafer throughput and wirelength beside it.

    python bench/bench_compile.py bench/models/gpt2-small.onnx:1024 [MODEL.onnx:SEQ ...]
                                  [--runs 3] [-- EXTRA WSECC COMPILE OPTIONS]

Each run is `wsecc compile MODEL --seq SEQ --no-validate` (the default options otherwise, plus
any after `--`) in a fresh process, so imports and writing the output folder count. One
markdown row per model, medians over `--runs`: the wall time of the process and its CPU time
(user + sys of the compile process and its threads: the load on a shared machine stretches
the wall time far more than the CPU time), the load average when each run began; the stages from
report.json's `stage_seconds` — frontend, passes, sizing, placement (`placement.seconds`),
routing (the "place" stage less placement), simulation — and "other" (the wall time outside
the stages: imports, the report, PNGs, viewer, trace); the on-wafer throughput (L0, samples/s;
generate mode, whose report has none: the decode tokens/s) and the weighted wirelength, so
that speed is never bought with quality; and what CP-SAT's search added to its start and why it stopped (the median run's).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

STAGES = ("frontend", "passes", "sizing", "placement", "routing", "simulation", "other")


def one_run(model: str, seq: int, extra: list[str]) -> dict[str, Any]:
    """One compile in a fresh process: its wall time, stage times and quality figures."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "o"
        argv = ["compile", model, "--seq", str(seq), "--no-validate", "-o", str(out), *extra]
        load = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "wsecc.cli", *argv], check=True, capture_output=True, text=True
        )
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        report = json.loads((out / "report.json").read_text())
    st, placement = report["stage_seconds"], report["placement"]
    stages = {
        "frontend": st.get("frontend", 0.0),
        "passes": st.get("passes", 0.0),
        "sizing": st.get("size", 0.0),
        "placement": placement["seconds"],
        "routing": st.get("place", 0.0) - placement["seconds"],
        "simulation": st.get("simulate", 0.0),
    }
    stages["other"] = wall - sum(st.values())
    return {
        "wall": wall,
        "cpu": cpu,
        "load": load,
        "stages": stages,
        "on_wafer": _on_wafer(report["performance"]),
        "wirelength": placement["objective"],
        "search": placement.get("search"),
    }


def row(spec: str, runs: int, extra: list[str]) -> str:
    """The markdown row of one PATH.onnx:SEQ, medians of `runs` compiles."""
    path, _, seq = spec.partition(":")
    results = sorted((one_run(path, int(seq or 1024), extra) for _ in range(runs)), key=_wall)
    mid = results[len(results) // 2]
    median = {s: statistics.median(r["stages"][s] for r in results) for s in STAGES}
    search = mid["search"]
    added = (
        f"{100 * search['gain']:.1f}% on {search['start']}, {search['windows']} windows, "
        f"{search['stopped']}"
        if search
        else "-"
    )
    cells = [
        Path(path).stem,
        seq,
        f"{statistics.median(_wall(r) for r in results):.1f}",
        f"{statistics.median(r['cpu'] for r in results):.1f}",
        _span([r["load"] for r in results]),
        *(f"{median[s]:.1f}" for s in STAGES),
        f"{statistics.median(r['on_wafer'] for r in results):,.0f}",
        f"{statistics.median(r['wirelength'] for r in results):.4g}",
        added,
    ]
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _on_wafer(performance: dict[str, Any]) -> float:
    """The compile's throughput figure: on-wafer samples/s (L0), or in generate mode, whose
    report has no such figure, the decode tokens/s per system."""
    if "on_wafer_samples_per_s" in performance:
        return float(performance["on_wafer_samples_per_s"])
    return float(performance["tokens_per_s"])


def _span(values: list[float]) -> str:
    """The least and the greatest of `values`, one decimal ("3.2-9.5", or "3.2" if equal)."""
    lo, hi = f"{min(values):.1f}", f"{max(values):.1f}"
    return lo if lo == hi else f"{lo}-{hi}"


def _wall(r: dict[str, Any]) -> float:
    return float(r["wall"])


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="+", help="PATH.onnx:SEQ")
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    load = os.getloadavg()[0]
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load average {load:.1f} at the start; "
        f"`wsecc compile MODEL --seq SEQ --no-validate {' '.join(extra)}`, medians of {a.runs}"
    )
    print(
        "| model | seq | wall s | CPU s | load | "
        + " | ".join(STAGES)
        + " | on-wafer samples/s (generate: tokens/s) | wirelength "
        "B·PE | CP-SAT search (median run) |"
    )
    print("|---" * (len(STAGES) + 8) + "|")
    for m in a.models:
        print(row(m, a.runs, extra), flush=True)


if __name__ == "__main__":
    main()
