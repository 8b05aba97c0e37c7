"""Binding symbolic dims: every symbolic input dim bound to an int (`resolve_bindings`,
`bind_dims`), or one error naming all that are left."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import onnx

from wsecc.errors import FrontendError
from wsecc.frontend.common import DTYPES, MAX_TENSOR_BYTES

BATCH_NAMES = frozenset({"batch", "batch_size", "batchsize", "bs", "n", "b", "batch_dim"})
SEQ_NAMES = frozenset(
    {
        "sequence",
        "sequence_length",
        "sequence_len",
        "seq",
        "seq_len",
        "seq_length",
        "seqlen",
        "s",
        "length",
        "max_seq_len",
        "num_tokens",
        "tokens",
        "input_length",
    }
)


def _unbound_dims(
    model: onnx.ModelProto,
) -> Iterator[tuple[str, str, onnx.TensorShapeProto.Dimension]]:
    """(dim name, 'input[axis]', the dim) for every input dim without a positive value;
    an unnamed dim is named by its place."""
    inits = {i.name for i in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        for ax, d in enumerate(inp.type.tensor_type.shape.dim):
            if not (d.HasField("dim_value") and d.dim_value > 0):
                place = f"{inp.name}[{ax}]"
                yield d.dim_param or place, place, d


def symbolic_dims(model: onnx.ModelProto) -> dict[str, list[str]]:
    """Symbolic dim name -> the 'input[axis]' places it appears."""
    out: dict[str, list[str]] = {}
    for name, place, _ in _unbound_dims(model):
        out.setdefault(name, []).append(place)
    return out


def check_past_inputs(model: onnx.ModelProto) -> None:
    inits = {i.name for i in model.graph.initializer}
    past = [
        i.name
        for i in model.graph.input
        if i.name not in inits and ("past" in i.name.lower() or "cache" in i.name.lower())
    ]
    if past:
        raise FrontendError(
            f"graph has past key/value inputs ({', '.join(past[:4])}{', ...' if len(past) > 4 else ''}): "
            "decoder-with-past graphs are not supported; export without use_cache (no past inputs)"
        )


def resolve_bindings(
    model: onnx.ModelProto,
    batch: int | None = None,
    seq: int | None = None,
    dims: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """Map every symbolic input dim to a value, or raise one error naming all unbound dims."""
    dims = dict(dims or {})
    bound: dict[str, int] = {}
    unbound: list[str] = []
    for name, places in symbolic_dims(model).items():
        key = name.lower()
        if name in dims:
            bound[name] = dims[name]
        elif batch is not None and key in BATCH_NAMES:
            bound[name] = batch
        elif seq is not None and key in SEQ_NAMES:
            bound[name] = seq
        else:
            unbound.append(f"{name} (at {', '.join(places)})")
    if unbound:
        raise FrontendError(
            "unbound dims: " + "; ".join(unbound) + " — bind each with --dim NAME=VALUE "
            "(--batch N and --seq N bind only the usual batch and sequence names)"
        )
    for name, v in bound.items():
        if not isinstance(v, int) or v <= 0:
            raise FrontendError(f"dim {name} must be bound to a positive integer, got {v!r}")
    _check_input_sizes(model, bound)
    return bound


def _check_input_sizes(model: onnx.ModelProto, bound: Mapping[str, int]) -> None:
    """No input may exceed MAX_TENSOR_BYTES once its dims are bound (before anything is
    allocated for it, and before a dim overflows int64)."""
    inits = {i.name for i in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        t = inp.type.tensor_type
        shape = [
            d.dim_value
            if d.HasField("dim_value") and d.dim_value > 0
            else bound[d.dim_param or f"{inp.name}[{ax}]"]  # named as in `_unbound_dims`
            for ax, d in enumerate(t.shape.dim)
        ]
        item = DTYPES[t.elem_type].itemsize if t.elem_type in DTYPES else 1
        if math.prod(shape) * item > MAX_TENSOR_BYTES:
            raise FrontendError(
                f"input {inp.name!r} would have shape {shape}, over "
                f"{MAX_TENSOR_BYTES >> 30} GiB; bind smaller dims (--batch, --seq, --dim)"
            )


def bind_dims(model: onnx.ModelProto, bindings: Mapping[str, int]) -> onnx.ModelProto:
    """Make `model`'s input dims static, in place (no copy of the weights), and return it.

    Stale value_info and output shapes are dropped; initializers that old exporters also list
    as graph inputs become plain constants."""
    m = model
    for name, _, d in list(_unbound_dims(m)):
        d.Clear()
        d.dim_value = bindings[name]
    inits = {i.name for i in m.graph.initializer}
    del m.graph.value_info[:]
    for out in m.graph.output:
        out.type.tensor_type.ClearField("shape")
    keep = [i for i in m.graph.input if i.name not in inits]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    return m


# ================================================================ folding
