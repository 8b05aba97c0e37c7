from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
CORPUS = ROOT.parent / "shared" / "corpus"
ORT_CORPUS = CORPUS / "onnxruntime-testdata"
ISPD_CORPUS = CORPUS / "ispd2020"


@pytest.fixture
def samples_dir() -> Path:
    return SAMPLES


def corpus_file(name: str) -> Path:
    p = ORT_CORPUS / name
    if not p.exists():
        pytest.skip(f"corpus file {p} not present")
    return p


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
        timeout=120,
    ).stdout
