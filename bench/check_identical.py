"""Hash the products of a deterministic compile of every bundled sample, to show that a
refactoring leaves them byte-identical (issue 31: "the `--deterministic` compile of every
bundled sample gives byte-identical products before and after").

    python bench/check_identical.py record before.json   # on the starting point
    python bench/check_identical.py record after.json    # after the change
    python bench/check_identical.py compare before.json after.json

Each sample is compiled by the CLI with `--deterministic --seed 1 --time-budget 1 --placer
greedy`; a few also with the default placer (CP-SAT) and in `--mode train` / `--mode generate`.
The hashed products: report.json without its wall-clock fields (`seconds`, `stage_seconds`,
`l1_seconds`, `wall_seconds`, as `Compilation.report(timings=False)` drops them),
fused.ir.txt, kernels.json, sizing.json, placement.json and routing.json. A compile that fails
is recorded by its exit code and last line of error, so a failure must stay the same failure.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
COMMON = ["--deterministic", "--seed", "1", "--time-budget", "1"]
PRODUCTS = (
    "fused.ir.txt",
    "kernels.json",
    "sizing.json",
    "placement.json",
    "routing.json",
)
TIMING_KEYS = frozenset({"seconds", "stage_seconds", "l1_seconds", "wall_seconds"})

EXTRA: list[tuple[str, list[str]]] = [
    ("gpt2_legacy_op17", []),  # the default placer (CP-SAT), deterministic
    ("bert_legacy_op17", []),
    ("gpt2_legacy_op17", ["--placer", "greedy", "--mode", "train"]),
    ("bert_dynamo", ["--placer", "greedy", "--mode", "train"]),
    ("llama_dynamo", ["--placer", "greedy", "--mode", "train", "--execution", "weight-streaming"]),
    ("gpt2_legacy_op17", ["--placer", "greedy", "--mode", "generate", "--context", "32"]),
    ("llama_dynamo", ["--mode", "generate", "--context", "32"]),
    ("mpnet_legacy_op17", ["--placer", "greedy", "--mode", "train"]),
]


def cases() -> list[tuple[str, list[str]]]:
    greedy = [(p.stem, ["--placer", "greedy"]) for p in sorted(SAMPLES.glob("*.onnx"))]
    return greedy + EXTRA


def _drop_timings(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _drop_timings(v) for k, v in obj.items() if k not in TIMING_KEYS}
    if isinstance(obj, list):
        return [_drop_timings(v) for v in obj]
    return obj


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def run_case(stem: str, flags: list[str], tmp: Path) -> dict[str, str]:
    out = tmp / f"{stem}-{_sha(' '.join(flags).encode())}.wsecc"
    cmd = [sys.executable, "-m", "wsecc.cli", "compile", str(SAMPLES / f"{stem}.onnx")]
    proc = subprocess.run(
        [*cmd, *COMMON, *flags, "-o", str(out)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [""])[-1]
        return {"exit": str(proc.returncode), "error": last}
    report = json.loads((out / "report.json").read_text())
    hashes = {"report.json": _sha(json.dumps(_drop_timings(report), sort_keys=True).encode())}
    for name in PRODUCTS:
        path = out / name
        hashes[name] = _sha(path.read_bytes()) if path.is_file() else "-"
    return hashes


def record(path: Path) -> None:
    results: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as d:
        for stem, flags in cases():
            key = f"{stem} {' '.join(flags)}"
            results[key] = run_case(stem, flags, Path(d))
            print(key, results[key].get("report.json", results[key]), flush=True)
    path.write_text(json.dumps(results, indent=1) + "\n")


def compare(before: Path, after: Path) -> int:
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    bad = 0
    for key in sorted(set(a) | set(b)):
        if a.get(key) != b.get(key):
            bad += 1
            print(f"DIFFERS {key}: {a.get(key)} -> {b.get(key)}")
    print(f"{len(a)} cases, {bad} differ")
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "record":
        record(Path(argv[1]))
        return 0
    if len(argv) == 3 and argv[0] == "compare":
        return compare(Path(argv[1]), Path(argv[2]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
