"""A float type read as a wider one, in the ONNX model itself (`widen_floats`).

The frontend reads a file that computes in float16 or bfloat16 as float32 (`read_as_float32`),
so that every stage sees the same float32 model: the IR, the passes, sizing, the reference
interpreter, the simulator and onnxruntime's reference run (`wsecc.check.numerics`). Each float16 and
bfloat16 value is exact in float32, so the widened model holds the file's own weights; what the
file loses by computing in float16 is not in it (a wafer's mixed precision, float16 operands and
float32 sums, is what the numerics' mixed check models). The numerics check widens float32 to
float64 the same way for its double-precision reference (`OrtWithWeights(float64=True)`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import onnx.inliner
from onnx import TensorProto, helper, numpy_helper

from wsecc.frontend.common import READ_AS_FLOAT32, tensor_array
from wsecc.frontend.load import graph_tensors

TYPE_ATTRIBUTES = {
    "Cast": "to",
    "EyeLike": "dtype",
    "Bernoulli": "dtype",
    "RandomNormal": "dtype",
    "RandomNormalLike": "dtype",
    "RandomUniform": "dtype",
    "RandomUniformLike": "dtype",
}
"""The ai.onnx ops told by an attribute which element type to make, and that attribute. The
rest make the type of their inputs (CastLike, ConstantOfShape's and Constant's tensors)."""

FLOAT_BY_DEFAULT = frozenset({"RandomNormal", "RandomUniform"})
"""Ops of `TYPE_ATTRIBUTES` that make float32 when the attribute is absent."""


def widen_floats(model: onnx.ModelProto, narrow: int, wide: int) -> onnx.ModelProto | None:
    """`model` with every `narrow` float (a TensorProto data type) made `wide`, or None when it
    holds none (and `model` is left as it was): initializers, tensors in attributes (Constant,
    ConstantOfShape, sparse ones' values), the type an op is told to make (`TYPE_ATTRIBUTES`:
    Cast(to=...), EyeLike, Random*), graph inputs and outputs (sequence and optional types
    too), in subgraphs too; the value_info of a widened model is dropped (onnxruntime and the
    folder infer it again). Widening float32 also widens what makes float32 by default:
    Constant's value_float(s), ConstantOfShape without a value, `FLOAT_BY_DEFAULT`.

    `model` is changed in place, unless it has local functions and something to widen: they
    are inlined first, into a copy (a function's Cast may take its type from the caller's
    attribute). No op is rewritten:
    where onnxruntime has no `wide` kernel for one (a double Erf), the widened model fails to
    load there. Weights that load_model left on disk are read (`tensor_array`) and held in
    memory, widened."""
    if not _holds(model, narrow):
        return None
    if model.functions:
        model = onnx.inliner.inline_local_functions(model)
    sites = _sites(model.graph, narrow)
    dtype = helper.tensor_dtype_to_np_dtype(wide)
    for t in sites.tensors:
        t.CopyFrom(numpy_helper.from_array(tensor_array(t).astype(dtype), t.name))
    for tt in sites.types:
        tt.elem_type = wide
    for a in sites.made:
        a.i = wide
    for n in sites.defaults:
        _make_wide(n, wide)
    for g in sites.graphs:
        del g.value_info[:]
    return model


def narrow_floats(model: onnx.ModelProto) -> tuple[str, ...]:
    """The names of the types of `READ_AS_FLOAT32` that `model` holds ('float16', ...): what
    `read_as_float32` widens. Reads no tensor's data (a model loaded without its external data
    will do); leaves `model` as it is."""
    return tuple(name for narrow, name in READ_AS_FLOAT32.items() if _holds(model, narrow))


def read_as_float32(model: onnx.ModelProto) -> tuple[onnx.ModelProto, tuple[str, ...]]:
    """`model` with its float16 and bfloat16 read as float32 (`widen_floats`, each type in
    turn), and the names of the types it held ('float16', 'bfloat16'); `model` itself and ()
    when it holds neither."""
    widened: list[str] = []
    for narrow, name in READ_AS_FLOAT32.items():
        wider = widen_floats(model, narrow, TensorProto.FLOAT)
        if wider is not None:
            model = wider
            widened.append(name)
    return model, tuple(widened)


@dataclass(frozen=True)
class _Sites:
    """Where a model holds a float type (`_sites`): what `widen_floats` changes."""

    graphs: list[onnx.GraphProto]  # every graph, subgraphs too: their value_info is dropped
    tensors: list[TensorProto]
    types: list[Any]  # TypeProto.Tensor and TypeProto.SparseTensor: what holds an elem_type
    made: list[onnx.AttributeProto]  # Cast's `to`, EyeLike's `dtype`, ... (`TYPE_ATTRIBUTES`)
    defaults: list[onnx.NodeProto]  # nodes that make float32 by default (`_float_by_default`)

    def __bool__(self) -> bool:
        return bool(self.tensors or self.types or self.made or self.defaults)


def _holds(model: onnx.ModelProto, narrow: int) -> bool:
    """Whether `model` holds `narrow` in its graph or in its local functions' bodies (looked at
    without inlining them: that copies the model)."""
    bodies = [helper.make_graph(f.node, f.name, [], []) for f in model.functions]
    return any(_sites(g, narrow) for g in [model.graph, *bodies])


def _sites(graph: onnx.GraphProto, narrow: int) -> _Sites:
    """Where `graph` and its subgraphs hold `narrow`: tensors of that type, declared types, the
    type attributes that name it; for float32, the nodes that make it by default."""
    graphs = _graphs(graph)
    nodes = [n for g in graphs for n in g.node if n.domain in ("", "ai.onnx")]
    made = [a for n in nodes for a in n.attribute if a.name == TYPE_ATTRIBUTES.get(n.op_type)]
    return _Sites(
        graphs,
        [t for t in graph_tensors(graph) if t.data_type == narrow],
        [t for tp in _type_protos(graphs) for t in _tensor_types(tp) if t.elem_type == narrow],
        [a for a in made if a.i == narrow],
        [n for n in nodes if narrow == TensorProto.FLOAT and _float_by_default(n)],
    )


def _graphs(g: onnx.GraphProto) -> list[onnx.GraphProto]:
    """`g` and its subgraphs (an If's branches, a Loop's body), theirs too."""
    out = [g]
    for n in g.node:
        for a in n.attribute:
            for sub in [*([a.g] if a.HasField("g") else []), *a.graphs]:
                out += _graphs(sub)
    return out


def _type_protos(graphs: list[onnx.GraphProto]) -> list[onnx.TypeProto]:
    """The types `graphs` declare: their inputs' and outputs', and type attributes'
    (Optional's)."""
    out = [vi.type for g in graphs for vi in (*g.input, *g.output)]
    for a in (a for g in graphs for n in g.node for a in n.attribute):
        out += [*([a.tp] if a.HasField("tp") else []), *a.type_protos]
    return out


def _tensor_types(tp: onnx.TypeProto) -> list[Any]:
    """The tensor types (dense or sparse: what holds an element type) in `tp`, also inside a
    sequence, optional or map type."""
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        return [getattr(tp, kind)]
    if kind in ("sequence_type", "optional_type"):
        return _tensor_types(getattr(tp, kind).elem_type)
    if kind == "map_type":
        return _tensor_types(tp.map_type.value_type)
    return []


def _float_by_default(n: onnx.NodeProto) -> bool:
    """Whether `n` makes float32 for want of an attribute saying otherwise."""
    names = {a.name for a in n.attribute}
    if n.op_type in FLOAT_BY_DEFAULT:
        return TYPE_ATTRIBUTES[n.op_type] not in names
    if n.op_type == "ConstantOfShape":
        return "value" not in names
    return n.op_type == "Constant" and bool(names & {"value_float", "value_floats"})


def _make_wide(n: onnx.NodeProto, wide: int) -> None:
    """`n` (`_float_by_default`) told to make `wide`: the attribute it lacked, or its
    value_float(s) as a `wide` tensor."""
    dtype = helper.tensor_dtype_to_np_dtype(wide)
    if n.op_type in FLOAT_BY_DEFAULT:
        n.attribute.append(helper.make_attribute(TYPE_ATTRIBUTES[n.op_type], wide))
    elif n.op_type == "ConstantOfShape":
        zero = numpy_helper.from_array(np.zeros(1, dtype))
        n.attribute.append(helper.make_attribute("value", zero))
    else:
        a = n.attribute[0]
        value = np.array(a.f if a.name == "value_float" else list(a.floats), dtype)
        n.ClearField("attribute")
        n.attribute.append(helper.make_attribute("value", numpy_helper.from_array(value)))
