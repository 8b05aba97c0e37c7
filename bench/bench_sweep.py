"""Sweep benchmarks: what shared stages save, and a 200-point sweep on both runners.

    python bench/bench_sweep.py shared MODEL.onnx --seq 1024 [--batches 20]
    python bench/bench_sweep.py measured [--ray]

`shared`: one model over `--batches` batch sizes (1..N), default options (CP-SAT, 10 s budget,
L1), one worker, twice: with the sweep's shared stages (one frontend and one placement for
every batch, numerics being off) and without (each point its own frontend at its batch and its
own placement, as N separate compiles would); prints both wall times and their ratio. `measured`: bench/sweeps/measured.toml (the measured configurations of
measurements.md §1, §2, §4 in train mode on wse2 and wse3, 236 points; `bench/export_models.py
--weightless` makes the models) on the local pool, and with `--ray` on a local Ray cluster too,
then the two tables compared apart from wall times, and the report drawn with the published
figures (bench/sweeps/measured.csv, written by `bench/bench_train.py --write-measured`).
Figures go to stdout; record them in bench/RESULTS.md with the command and the machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

from wsecc.sweep import load_spec, read_table, run_sweep
from wsecc.sweep.report import match_measured, read_measured, write_report

HERE = Path(__file__).resolve().parent
TIMES = ("wall_s", "compile_s")


def shared(model: str, seq: int, batches: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        spec = Path(d) / "spec.toml"
        spec.write_text(
            f'[[models]]\npath = "{Path(model).resolve()}"\nseq = {seq}\n'
            f"[axes]\nbatch = {list(range(1, batches + 1))}\n[fixed]\nvalidate = false\n"
        )
        walls = {}
        for share in (True, False):
            t0 = time.perf_counter()
            s = run_sweep(load_spec(spec), Path(d) / f"share-{share}", workers=1, share=share)
            walls[share] = time.perf_counter() - t0
            print(f"share={share}: {s.ran} points, {s.failed} failed, {walls[share]:.1f} s")
        print(f"shared / separate = {walls[True] / walls[False]:.2f}")


def measured(ray: bool) -> None:
    spec = load_spec(HERE / "sweeps" / "measured.toml")
    out = HERE / "sweeps" / "measured.sweep"
    runs = {"local": out} | ({"ray": out.with_name("measured-ray.sweep")} if ray else {})
    for runner, folder in runs.items():
        shutil.rmtree(folder, ignore_errors=True)
        if runner == "ray" and (out / "cache").is_dir():  # the local run's placements (if any
            shutil.copytree(out / "cache", folder / "cache")  # were made), to save time
        t0 = time.perf_counter()
        s = run_sweep(spec, folder, ray="local" if runner == "ray" else None)
        print(f"{runner}: {s.points} points, {s.failed} failed, {time.perf_counter() - t0:.0f} s")
    if ray:
        a, b = (
            [{k: v for k, v in r.items() if k not in TIMES} for r in read_table(f)]
            for f in runs.values()
        )
        same = sum(x == y for x, y in zip(a, b, strict=True))
        print(f"local vs ray: {same} of {len(a)} rows identical apart from wall times")
    published = HERE / "sweeps" / "measured.csv"
    page = write_report(out, measured=str(published))
    ok = [r for r in read_table(out) if r["status"] == "ok"]
    ratios = [m.ratio for m in match_measured(ok, read_measured(published))]
    within = sum(0.7 <= r <= 1.3 for r in ratios)
    print(f"{page}: {len(ratios)} points matched to a published figure, {within} within ±30%")


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("shared")
    s.add_argument("model")
    s.add_argument("--seq", type=int, default=1024)
    s.add_argument("--batches", type=int, default=20)
    m = sub.add_parser("measured")
    m.add_argument("--ray", action="store_true")
    args = p.parse_args()
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    )
    if args.what == "shared":
        shared(args.model, args.seq, args.batches)
    else:
        measured(args.ray)


if __name__ == "__main__":
    main()
