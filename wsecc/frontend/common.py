"""What the frontend's modules share: the dtype table and the size caps."""

from __future__ import annotations

from onnx import TensorProto

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

DTYPES = {
    TensorProto.FLOAT: DType.FLOAT32,
    TensorProto.FLOAT16: DType.FLOAT16,
    TensorProto.DOUBLE: DType.FLOAT64,
    TensorProto.INT64: DType.INT64,
    TensorProto.INT32: DType.INT32,
    TensorProto.INT8: DType.INT8,
    TensorProto.UINT8: DType.UINT8,
    TensorProto.BOOL: DType.BOOL,
}
