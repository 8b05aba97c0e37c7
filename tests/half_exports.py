"""Half-precision versions of float32 ONNX exports (`to_half`), written as the real tools write
them, without needing the tools: torch exporting `model.half()` (every float weight and
constant in float16, Cast(to=FLOAT) as Cast(to=FLOAT16), the graph's float inputs and outputs
float16) and onnxconverter-common's `convert_float_to_float16(keep_io_types=True)` (the same
inside, the graph's float inputs and outputs kept float32 behind Casts).

Values beyond the half type's range are clamped to its largest finite value, as
onnxconverter-common clamps them (to 1e4) and as torch's `finfo(float16).min` mask fill is:
the float32 exports fill masks with -3.4e38, which float16 would hold as -inf. onnxruntime's CPU
kernels run every op of the bundled exports in float16 (onnxruntime 1.32), so no op is kept in
float32 behind Casts, as onnxconverter-common's op block list would."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper


def to_half(
    model: onnx.ModelProto, *, keep_io_types: bool = False, half: int = TensorProto.FLOAT16
) -> onnx.ModelProto:
    """A copy of `model` that computes in `half` (FLOAT16 or BFLOAT16): see the module doc."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    _halve(g, half)
    floats = [vi for vi in (*g.input, *g.output) if vi.type.tensor_type.elem_type == 1]
    if not keep_io_types:
        for vi in floats:
            vi.type.tensor_type.elem_type = half
        return out
    inputs = {vi.name for vi in g.input}
    head, tail = [], []
    for vi in floats:
        inner = f"{vi.name}_half"
        _rename_reads(g, vi.name, inner)
        if vi.name in inputs:
            head.append(helper.make_node("Cast", [vi.name], [inner], to=half))
            continue
        for n in g.node:
            n.output[:] = [inner if o == vi.name else o for o in n.output]
        tail.append(helper.make_node("Cast", [inner], [vi.name], to=TensorProto.FLOAT))
    nodes = [*head, *g.node, *tail]
    del g.node[:]
    g.node.extend(nodes)
    return out


def save_half(src: Path, dst: Path, **options: object) -> Path:
    """`to_half` of the file `src`, saved as `dst`."""
    onnx.save(to_half(onnx.load(src), **options), dst)  # type: ignore[arg-type]
    return dst


def _halve(g: onnx.GraphProto, half: int) -> None:
    """Float32 weights, constants and Cast targets of `g` (subgraphs too) made `half`."""
    del g.value_info[:]
    for t in g.initializer:
        _halve_tensor(t, half)
    for n in g.node:
        for a in n.attribute:
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = half
            elif a.type == AttributeProto.TENSOR:
                _halve_tensor(a.t, half)
            elif a.type == AttributeProto.GRAPH:
                _halve(a.g, half)
                for vi in (*a.g.input, *a.g.output):
                    if vi.type.tensor_type.elem_type == TensorProto.FLOAT:
                        vi.type.tensor_type.elem_type = half


def _halve_tensor(t: TensorProto, half: int) -> None:
    if t.data_type != TensorProto.FLOAT:
        return
    dtype = helper.tensor_dtype_to_np_dtype(half)
    limit = float(ml_dtypes.finfo(dtype).max)
    a = np.clip(numpy_helper.to_array(t), -limit, limit).astype(dtype)
    t.CopyFrom(numpy_helper.from_array(a, t.name))


def _rename_reads(g: onnx.GraphProto, old: str, new: str) -> None:
    """Every read of `old` in `g` and its subgraphs made a read of `new`."""
    for n in g.node:
        n.input[:] = [new if x == old else x for x in n.input]
        for a in n.attribute:
            if a.type == AttributeProto.GRAPH:
                _rename_reads(a.g, old, new)
