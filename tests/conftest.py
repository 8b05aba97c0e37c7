from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
CORPUS = ROOT.parent / "shared" / "corpus"
ORT_CORPUS = CORPUS / "onnxruntime-testdata"


@pytest.fixture
def samples_dir() -> Path:
    return SAMPLES


def corpus_file(name: str) -> Path:
    p = ORT_CORPUS / name
    if not p.exists():
        pytest.skip(f"corpus file {p} not present")
    return p
