"""What the frontend's modules share: the dtype table, the size caps and reading a tensor's
data (`tensor_array`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from wsecc.errors import FrontendError
from wsecc.ir.core import DType

MAX_TENSOR_BYTES = 16 << 30  # one tensor: larger than any weight of a model that fits a wafer
"""What wsecc may materialize as one array: an input, a weight, a folded constant; and what
onnxruntime may hold as one tensor when numerics run (`Compilation.validate_numerics`)."""

MAX_ACTIVATION_BYTES = 1 << 40
"""A computed tensor's logical size, never materialized whole by compiling (passes' probes have
their own budget): long sequences legitimately pass 16 GiB (GPT-2 13B's attention scores at seq
16384 are 43 GB in fp32), absurd dims do not pass this."""

MAX_MODEL_BYTES = 64 << 30

VALIDATED_MARK = "wsecc-validated"  # marks an external tensor whose location load_model checked
INLINE_MARK = "wsecc-inline"  # marks one of those that the file holds inline (`lazy_weights`)

DTYPES: dict[int, DType] = {
    TensorProto.FLOAT: DType.FLOAT32,
    TensorProto.FLOAT16: DType.FLOAT16,
    TensorProto.DOUBLE: DType.FLOAT64,
    TensorProto.INT64: DType.INT64,
    TensorProto.INT32: DType.INT32,
    TensorProto.INT8: DType.INT8,
    TensorProto.UINT8: DType.UINT8,
    TensorProto.BOOL: DType.BOOL,
}

READ_AS_FLOAT32 = {TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16"}
"""The float types narrower than float32 that the frontend reads as float32 (`read_as_float32`,
`wsecc.frontend.widen`): a file that computes in them is compiled, simulated and checked as
the float32 model its values make (each float16 or bfloat16 value is exact in float32)."""


def widened_text(types: Sequence[str]) -> str:
    """'the file's float16 read as float32': what the frontend did to a file that computes in
    `types` (`ModelInfo.widened`, the report's `model.widened`)."""
    return f"the file's {' and '.join(types)} read as float32"


def tensor_array(t: TensorProto) -> np.ndarray:
    """The tensor's data; raw little-endian bytes are viewed, not copied again, and external
    weights that load_model validated are memory-mapped read-only."""
    if t.data_location == TensorProto.EXTERNAL:
        info = {e.key: e.value for e in t.external_data}
        known = t.data_type in DTYPES or t.data_type in READ_AS_FLOAT32
        if info.get(VALIDATED_MARK) != "1" or not known:
            raise FrontendError(f"tensor {t.name!r}: external data not validated by load_model")
        return np.memmap(
            info["location"],
            dtype=helper.tensor_dtype_to_np_dtype(t.data_type).newbyteorder("<"),
            mode="r",
            offset=int(info["offset"]),
            shape=tuple(t.dims),
        )
    if t.HasField("raw_data") and t.data_type in DTYPES and t.data_type != TensorProto.BOOL:
        dt = DTYPES[t.data_type].numpy.newbyteorder("<")
        return np.frombuffer(t.raw_data, dtype=dt).reshape(tuple(t.dims))
    return numpy_helper.to_array(t)


def left_inline(t: TensorProto) -> bool:
    """Whether `t` is a weight the file stores inline that load_model left there
    (`INLINE_MARK`, `lazy_weights`)."""
    return t.data_location == TensorProto.EXTERNAL and any(
        e.key == INLINE_MARK for e in t.external_data
    )


def as_stored(t: TensorProto) -> TensorProto:
    """`t` as onnx.load reads it: a weight stored inline that load_model left in the file
    (`left_inline`) is a copy with its bytes read in; any other tensor is `t` itself."""
    if not left_inline(t):
        return t
    out = TensorProto()
    out.CopyFrom(t)
    out.ClearField("external_data")
    out.ClearField("data_location")  # unset, as in the file (not set to DEFAULT)
    out.raw_data = np.ascontiguousarray(tensor_array(t)).tobytes()
    return out
