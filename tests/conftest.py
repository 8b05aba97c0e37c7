from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
DATA = ROOT / "tests" / "data"  # inputs nobody here wrote, vendored: tests/data/README.md
ORT_CORPUS = DATA / "onnxruntime"
ISPD_CORPUS = DATA / "ispd2020"


@pytest.fixture
def samples_dir() -> Path:
    return SAMPLES


def corpus_file(name: str) -> Path:
    return ORT_CORPUS / name


def stdout_of_fresh_process(code: str) -> str:
    """Run Python `code` in a new interpreter (repo root on the path) and return its stdout;
    determinism tests compare two of these."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
        # only ends a hung run, never decides a result: deterministic CP-SAT's own wall-clock
        # guard is 300 s at least (`CpSatOptions.wall_guard_floor_s`)
        timeout=600,
    ).stdout


def two_fresh_runs(code: str) -> tuple[str, str]:
    """The stdout of `code` in two new interpreters, for a determinism test (deterministic
    CP-SAT promises the same bytes whatever the machine's load, or fails: no retry, no skip)."""
    return stdout_of_fresh_process(code), stdout_of_fresh_process(code)


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    """Say how many tests skipped for want of the export tools, and how to run them: a skip
    should never pass unseen."""
    skipped = terminalreporter.stats.get("skipped", [])
    torchless = [
        r for r in skipped if "torch" in str(r.longrepr) or "transformers" in str(r.longrepr)
    ]
    if torchless:
        terminalreporter.write_line(
            f"{len(torchless)} tests skipped: they export Hugging Face models and need torch and "
            "transformers (pip install -e '.[export]')",
            yellow=True,
        )
