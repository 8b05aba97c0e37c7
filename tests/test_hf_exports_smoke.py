"""Every tiny Hugging Face export loads and runs in onnxruntime (which combinations export)."""

import numpy as np
import pytest
from hf_exports import EXPORTERS, FAMILIES, example_inputs, export_path

ort = pytest.importorskip("onnxruntime")


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("family", FAMILIES)
def test_export_runs_in_onnxruntime(family: str, exporter: str) -> None:
    session = ort.InferenceSession(
        str(export_path(family, exporter)), providers=["CPUExecutionProvider"]
    )
    outputs = session.run(None, example_inputs(family, batch=2, sequence=16, pad_last_row=True))
    for meta, value in zip(session.get_outputs(), outputs, strict=True):
        assert value.shape[0] == 2, meta.name
        assert np.isfinite(value).all(), f"{meta.name} has non-finite values"
