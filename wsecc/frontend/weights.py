"""Weights that a file lists as graph inputs (`--weights inputs`): which inputs they are, the
one error when they come without the flag, and the data-less constants that stand for them.

A weightless export — a model built on torch's meta device, exported with the dynamo exporter
and saved without its initializers (docs/frontend.md, "Models bigger than this machine") — lists every
parameter as a graph input with a static shape and no data. An input is taken as a weight when

- its element type is a float and every dim is a number (nothing --batch/--seq/--dim binds), and
- some node reads it where a parameter goes, directly or through a view (Transpose, Cast,
  Reshape, Identity, Unsqueeze, Squeeze, Flatten, Expand): `PARAMETER_SLOTS` — the right operand of
  MatMul, the B and C of Gemm, the table of Gather or GatherND (experts' weight stacks), the scale and bias of LayerNormalization
  (and of the contrib ops onnxruntime fuses), or a 0-d or 1-d operand of Add, Sub, Mul, Div or
  Concat (a bias or a scale: activations have batch and sequence dims; gpt-oss's attention
  sinks, one logit per head, are concatenated to the scores).

Model data — input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds — is
integer, or has symbolic dims, or feeds indices and activations, so it is never taken.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import onnx

from wsecc.errors import FrontendError
from wsecc.frontend.common import DTYPES
from wsecc.ir.arrays import placeholder

PARAMETER_SLOTS: Mapping[str, frozenset[int]] = {
    "MatMul": frozenset({1}),
    "Gemm": frozenset({1, 2}),
    "Gather": frozenset({0}),
    "GatherND": frozenset({0}),  # a mixture of experts' weight stacks [E, ., .]
    "LayerNormalization": frozenset({1, 2}),
    "SkipLayerNormalization": frozenset({2, 3, 4}),
    "EmbedLayerNormalization": frozenset({2, 3, 4, 5, 6}),
    "Attention": frozenset({1, 2}),
    "FastGelu": frozenset({1}),
    "BiasGelu": frozenset({1}),
}
"""op type -> the operand positions that hold parameters."""

_BIAS_OPS = frozenset({"Add", "Sub", "Mul", "Div", "Concat"})  # a 0-d/1-d float: bias, scale
_VIEWS = frozenset(
    {"Transpose", "Cast", "Reshape", "Identity", "Unsqueeze", "Squeeze", "Flatten", "Expand"}
)


def weight_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph inputs that are weights by the rule of the module docstring, in input order."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    users: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for n in g.node:
        for k, x in enumerate(n.input):
            if x:
                users.setdefault(x, []).append((n, k))

    def read_as_parameter(name: str, rank: int) -> bool:
        todo, seen = [name], set()
        while todo:
            v = todo.pop()
            for n, k in users.get(v, ()):
                if k in PARAMETER_SLOTS.get(n.op_type, ()) or (
                    n.op_type in _BIAS_OPS and rank <= 1
                ):
                    return True
                if n.op_type in _VIEWS and k == 0 and n.output[0] not in seen:
                    seen.add(n.output[0])
                    todo.append(n.output[0])
        return False

    out = []
    for i in g.input:
        t = i.type.tensor_type
        if i.name in inits or t.elem_type not in DTYPES or not DTYPES[t.elem_type].is_float:
            continue
        dims = t.shape.dim
        if not all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
            continue
        if read_as_parameter(i.name, len(dims)):
            out.append(i)
    return out


def _elems(info: onnx.ValueInfoProto) -> int:
    n = 1
    for d in info.type.tensor_type.shape.dim:
        n *= d.dim_value
    return n


def check_weights(
    model: onnx.ModelProto, found: Sequence[onnx.ValueInfoProto], as_inputs: bool, where: str
) -> None:
    """The one-line errors: weight inputs without `--weights inputs` in a file that holds no
    weight data (its parameters are mostly inputs), and `--weights inputs` on a file that has no
    weight inputs."""
    if as_inputs and not found:
        raise FrontendError(
            f"{where}: --weights inputs, but no graph input is a weight (a float input with a "
            "static shape read as a MatMul/Gemm/Gather/LayerNorm parameter or a bias); its "
            "weights are in the file: drop --weights inputs"
        )
    if as_inputs or not found:
        return
    stored = sum(
        int(np.prod(t.dims, dtype=np.int64))
        for t in model.graph.initializer
        if t.data_type in DTYPES and DTYPES[t.data_type].is_float and len(t.dims) > 0
    )
    listed = sum(_elems(i) for i in found)
    if listed > stored:
        first = found[0]
        shape = "x".join(str(d.dim_value) for d in first.type.tensor_type.shape.dim)
        raise FrontendError(
            f"{where}: {len(found)} graph inputs are weights without data ({first.name!r} "
            f"[{shape}], ...: a weightless export); pass --weights inputs to compile it from "
            "their shapes (numerics are skipped)"
        )


def placeholders(found: Sequence[onnx.ValueInfoProto]) -> dict[str, np.ndarray]:
    """A data-less constant for each weight input: its dtype and shape, one element of memory,
    a value no other weight has (`wsecc.ir.arrays.placeholder`)."""
    out: dict[str, np.ndarray] = {}
    count: dict[int, int] = {}
    for i in found:
        t = i.type.tensor_type
        dt = DTYPES[t.elem_type].numpy
        k = count[t.elem_type] = count.get(t.elem_type, -1) + 1
        try:
            out[i.name] = placeholder(dt, tuple(d.dim_value for d in t.shape.dim), k)
        except ValueError as e:
            raise FrontendError(f"weight input {i.name!r}: {e}") from None
    return out
