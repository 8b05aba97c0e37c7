"""The onnxruntime reference: a file onnxruntime cannot run is the user's one-line error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from wsecc.errors import WseccError
from wsecc.numerics import ort_run


def test_a_file_onnxruntime_cannot_load_is_a_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"\x08\x07not a protobuf at all")
    with pytest.raises(WseccError, match=r"onnxruntime cannot run model.onnx .*--no-validate") as e:
        ort_run(bad, {})
    assert "\n" not in str(e.value)


def test_inputs_onnxruntime_rejects_are_a_one_line_error(samples_dir: Path) -> None:
    feeds = {"input_ids": np.zeros((1, 4), np.float32)}  # token ids must be integers
    with pytest.raises(WseccError, match="onnxruntime cannot run gpt2_legacy_op17.onnx"):
        ort_run(samples_dir / "gpt2_legacy_op17.onnx", feeds)
