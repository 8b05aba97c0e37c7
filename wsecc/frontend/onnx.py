"""The ONNX frontend — the only module that imports `onnx`.

    load_model(path)            hardened read: external data confined to the model's folder
    bind_dims(model, ...)       every symbolic input dim bound to an int, or one error naming all
    fold(model)                 constants and shape subgraphs folded by onnxscript's optimizer;
                                the weights are taken out of `model` and returned beside it
    to_graph(model, weights)    ONNX -> wsecc Graph; one error lists every unsupported op
    import_model(path, ...)     all four, in that order

Security rules for external data (see reference/onnx-exports.md §4.3): a relative location only;
no `..`; every path component below the model folder must not be a symlink; the resolved file
must lie inside the model folder, be a regular file with a single hard link, and hold
`offset + length` bytes where `length` equals the tensor's declared size. Declared tensor sizes
are checked against a cap before anything is allocated.

Before anything reads the graph, load_model also checks what onnx.checker would (less its demand
for topological order): supported IR and opset versions, UTF-8 strings, every value defined
exactly once and only read where defined, no cycle, tensor-typed and shaped inputs, and each
supported ai.onnx node against its ONNX schema (attribute types, arity).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import stat
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from wsecc.errors import FrontendError
from wsecc.ir.core import DType, Graph, IRError, Node, Op, TensorType, Value, make_attrs
from wsecc.ir.rules import infer_types

MAX_TENSOR_BYTES = 16 << 30  # one tensor: larger than any weight of a model that fits a wafer
MAX_MODEL_BYTES = 64 << 30
FOLD_LIMIT = 1 << 16  # elements: operands of shape arithmetic the converter folds itself

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

_DTYPES = {
    TensorProto.FLOAT: DType.FLOAT32,
    TensorProto.FLOAT16: DType.FLOAT16,
    TensorProto.DOUBLE: DType.FLOAT64,
    TensorProto.INT64: DType.INT64,
    TensorProto.INT32: DType.INT32,
    TensorProto.INT8: DType.INT8,
    TensorProto.UINT8: DType.UINT8,
    TensorProto.BOOL: DType.BOOL,
}


@dataclass(frozen=True)
class ModelInfo:
    """What the frontend learned about the file: opsets, bindings, input/output names."""

    path: str
    opset: int
    producer: str
    bindings: dict[str, int] = field(default_factory=dict)
    raw_ops: dict[str, int] = field(default_factory=dict)


# ================================================================ loading


def load_model(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """Read an ONNX file safely (see the module docstring). Raises FrontendError."""
    p = Path(path)
    if not p.exists():
        raise FrontendError(f"{p}: no such file")
    if not p.is_file():
        raise FrontendError(f"{p}: not a regular file")
    if p.stat().st_size > MAX_MODEL_BYTES:
        raise FrontendError(f"{p}: file is larger than {MAX_MODEL_BYTES >> 30} GiB")
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as e:  # protobuf raises DecodeError, RuntimeError, ... on garbage
        raise FrontendError(
            f"{p}: not a valid ONNX file ({type(e).__name__}); is it truncated or corrupt?"
        ) from None
    if model.ir_version <= 0 and not model.opset_import and not model.HasField("graph"):
        raise FrontendError(f"{p}: not an ONNX model (no ir_version, opset_import or graph)")
    _check_model(model, p.name)
    base = p.resolve().parent
    tensors = _graph_tensors(model.graph)
    for f in model.functions:  # inlined into the graph when it is folded
        tensors += _node_tensors(f.node)
    n_weights = len(model.graph.initializer)  # they come first in `tensors`
    for k, t in enumerate(tensors):
        _check_declared_size(t, p)
        if t.data_location == TensorProto.EXTERNAL:
            _load_external(t, base, p, mappable=k < n_weights)
    return model


def _graph_tensors(g: onnx.GraphProto) -> list[TensorProto]:
    """The graph's initializers first, then every other tensor it holds."""
    out = list(g.initializer)
    for s in g.sparse_initializer:
        out += [s.values, s.indices]
    return out + _node_tensors(g.node)


def _node_tensors(nodes: Sequence[onnx.NodeProto]) -> list[TensorProto]:
    """Every tensor held by the nodes' attributes, subgraphs included."""
    out: list[TensorProto] = []
    for n in nodes:
        for a in n.attribute:
            sparse = list(a.sparse_tensors)
            graphs = list(a.graphs)
            if a.HasField("t"):
                out.append(a.t)
            if a.HasField("sparse_tensor"):
                sparse.append(a.sparse_tensor)
            if a.HasField("g"):
                graphs.append(a.g)
            out += a.tensors
            for sp in sparse:
                out += [sp.values, sp.indices]
            for g in graphs:
                out += _graph_tensors(g)
    return out


# ---------------------------------------------------------------- validation


def _check_model(model: onnx.ModelProto, where: str) -> None:
    """What a model must be before anything reads its graph (see the module docstring)."""
    _check_strings(model, where)
    _check_versions(model, where)
    g = model.graph
    if not g.node:
        raise FrontendError(f"{where}: the graph has no nodes; nothing to compile")
    if not g.output:
        raise FrontendError(f"{where}: the graph has no outputs; nothing to compile")
    if g.sparse_initializer:
        raise FrontendError(
            f"{where}: sparse initializer {g.sparse_initializer[0].values.name!r}: sparse tensors "
            "are not supported; store it as a dense initializer"
        )
    _check_inputs(g, where)
    check_past_inputs(model)  # refused anyway, and the reason to give first (old ones break SSA)
    _check_definitions(g, where)
    _check_acyclic(g, where)
    _check_schemas(model, where)


def _check_strings(msg: Any, where: str, path: str = "model") -> None:
    """Every string field is valid UTF-8 (protobuf hands back bytes when it is not)."""
    if isinstance(msg, TensorProto):  # ListFields would copy the tensor's data: names only
        fields = [(msg.DESCRIPTOR.fields_by_name[f], getattr(msg, f)) for f in _TENSOR_TEXT]
    else:
        fields = msg.ListFields()
    for fd, value in fields:
        values = value if _repeated(fd) else [value]
        for k, v in enumerate(values):
            at = f"{path}.{fd.name}" + (f"[{k}]" if _repeated(fd) else "")
            if fd.type == fd.TYPE_STRING and isinstance(v, bytes):
                raise FrontendError(
                    f"{where}: {at} is not valid UTF-8 ({v[:32]!r}); the file is corrupt"
                )
            if fd.type == fd.TYPE_MESSAGE:
                _check_strings(v, where, at)


_TENSOR_TEXT = ("name", "doc_string", "external_data")


def _repeated(fd: Any) -> bool:
    flag = getattr(fd, "is_repeated", None)  # protobuf >= 5 (a property; `label` is deprecated)
    if flag is None:
        return bool(fd.label == fd.LABEL_REPEATED)
    return bool(flag() if callable(flag) else flag)


def _check_versions(model: onnx.ModelProto, where: str) -> None:
    if not 1 <= model.ir_version <= onnx.IR_VERSION:
        raise FrontendError(
            f"{where}: ONNX IR version {model.ir_version} is not one this onnx "
            f"({onnx.__version__}) reads (1..{onnx.IR_VERSION}); the file is corrupt or needs a "
            "newer onnx"
        )
    opsets: dict[str, int] = {}
    for o in model.opset_import:
        domain = o.domain or "ai.onnx"
        if domain in opsets:
            raise FrontendError(
                f"{where}: opset_import lists domain {domain!r} twice (versions {opsets[domain]} "
                f"and {o.version}); the file is corrupt"
            )
        opsets[domain] = o.version
    newest = onnx.defs.onnx_opset_version()
    if "ai.onnx" not in opsets:
        raise FrontendError(f"{where}: opset_import has no ONNX (ai.onnx) opset; re-export it")
    if not 1 <= opsets["ai.onnx"] <= newest:
        raise FrontendError(
            f"{where}: ONNX opset {opsets['ai.onnx']} does not exist (onnx {onnx.__version__} "
            f"knows 1..{newest}); the file is corrupt or needs a newer onnx"
        )
    for domain, version in opsets.items():
        if version < 1:
            raise FrontendError(f"{where}: opset {version} of domain {domain!r} is not positive")


def _check_inputs(g: onnx.GraphProto, where: str) -> None:
    inits = {t.name for t in g.initializer}
    real = [i for i in g.input if i.name not in inits]
    if not real:
        raise FrontendError(
            f"{where}: the graph has no inputs (it computes constants); nothing to compile"
        )
    for i in real:
        kind = i.type.WhichOneof("value")
        if kind != "tensor_type":
            raise FrontendError(
                f"{where}: input {i.name!r} is {'untyped' if kind is None else 'a ' + kind}; "
                "wsecc compiles tensor inputs only"
            )
        t = i.type.tensor_type
        if t.elem_type not in _DTYPES:
            raise FrontendError(
                f"{where}: input {i.name!r} has element type {_dtype_name(t.elem_type)}; wsecc "
                f"supports {', '.join(_dtype_name(d) for d in _DTYPES)}"
            )
        if not t.HasField("shape"):
            raise FrontendError(
                f"{where}: input {i.name!r} has no shape (unknown rank); re-export it with "
                "input shapes (symbolic dims are fine)"
            )
        for ax, d in enumerate(t.shape.dim):
            if d.HasField("dim_value") and d.dim_value < 0:
                raise FrontendError(
                    f"{where}: input {i.name!r} declares dim {ax} as {d.dim_value}; dims cannot "
                    "be negative"
                )


def _copy_node(n: onnx.NodeProto) -> onnx.NodeProto:
    out = onnx.NodeProto()
    out.CopyFrom(n)
    return out


def _check_constant(n: onnx.NodeProto, version: int, where: str) -> None:
    """A Constant has no inputs, one output and one value attribute of the schema's type,
    whose field for that type is the one set."""
    attrs = onnx.defs.get_schema("Constant", version).attributes
    a = n.attribute[0] if len(n.attribute) == 1 else None
    if (
        a is None
        or n.input
        or len(n.output) != 1
        or a.name not in attrs
        or attrs[a.name].type != getattr(onnx.defs.OpSchema.AttrType, _attr_type_name(a.type), 0)
    ):
        raise FrontendError(
            f"{where}: Constant {n.name!r} must have no inputs, one output and one attribute "
            f"of {', '.join(sorted(attrs))} with its ONNX type; the file is corrupt"
        )
    field = _SCALAR_FIELDS.get(a.type)
    if field is not None and not a.HasField(field):
        raise FrontendError(f"{where}: Constant {n.name!r}: attribute {a.name!r} holds no value")


def _attr_type_name(t: int) -> str:
    try:
        return str(onnx.AttributeProto.AttributeType.Name(t))
    except ValueError:
        return f"#{t}"


_SCALAR_FIELDS = {
    onnx.AttributeProto.FLOAT: "f",
    onnx.AttributeProto.INT: "i",
    onnx.AttributeProto.STRING: "s",
    onnx.AttributeProto.TENSOR: "t",
    onnx.AttributeProto.SPARSE_TENSOR: "sparse_tensor",
}


def _dtype_name(elem_type: int) -> str:
    try:
        return str(TensorProto.DataType.Name(elem_type))
    except ValueError:
        return f"#{elem_type} (unknown)"


def _check_definitions(g: onnx.GraphProto, where: str) -> None:
    """Static single assignment: each value defined once, read only if defined somewhere."""
    what: dict[str, str] = {}

    def define(name: str, by: str) -> None:
        if name in what:
            raise FrontendError(
                f"{where}: value {name!r} is defined twice ({what[name]} and {by}); the file is "
                "corrupt"
            )
        what[name] = by

    for t in g.initializer:
        define(t.name, "an initializer")
    for i in g.input:
        if what.get(i.name) != "an initializer":  # old exporters list initializers as inputs
            define(i.name, "a graph input")
    for n in g.node:
        for o in n.output:
            if o:
                define(o, f"node {n.name!r}")
    for n in g.node:
        for x in n.input:
            if x and x not in what:
                raise FrontendError(
                    f"{where}: node {n.name!r} ({n.op_type}) reads {x!r}, which no node, input "
                    "or initializer defines; the file is corrupt or incomplete"
                )
    listed: set[str] = set()
    for o in g.output:
        if o.name in listed:
            raise FrontendError(
                f"{where}: graph output {o.name!r} is listed twice; the file is corrupt"
            )
        listed.add(o.name)
        if o.name not in what:
            raise FrontendError(
                f"{where}: graph output {o.name!r} is not defined by any node, input or "
                "initializer; the file is corrupt or incomplete"
            )


def _check_acyclic(g: onnx.GraphProto, where: str) -> None:
    produced = {o: i for i, n in enumerate(g.node) for o in n.output if o}
    preds = [sorted({produced[x] for x in n.input if x in produced}) for n in g.node]
    waiting = [len(p) for p in preds]
    users: list[list[int]] = [[] for _ in g.node]
    for i, p in enumerate(preds):
        for j in p:
            users[j].append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    while ready:
        for u in users[ready.pop()]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    stuck = {i for i, w in enumerate(waiting) if w > 0}
    if not stuck:
        return
    i, seen = min(stuck), set()
    while i not in seen:  # walk back through stuck predecessors until one repeats: a cycle
        seen.add(i)
        i = next(j for j in preds[i] if j in stuck)
    n = g.node[i]
    raise FrontendError(
        f"{where}: the graph has a cycle through node {n.name!r} ({n.op_type}); the file is corrupt"
    )


def _check_schemas(model: onnx.ModelProto, where: str) -> None:
    """Each supported ai.onnx node matches its ONNX schema at the model's opset: the op exists
    there, attributes have the right types and names, the operand counts fit. Unsupported
    nodes are left to `unsupported_ops`, which lists them all in one error."""
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = model.ir_version
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    ctx.opset_imports = opsets
    for n in model.graph.node:
        key = _key(n)
        if key[0] or key not in CONVERTERS:
            continue
        if n.op_type == "Constant":  # check_node would look for its external data in the cwd
            _check_constant(n, opsets[""], where)
            continue
        if n.domain:  # "ai.onnx": the schema registry knows it only as ""
            n = _copy_node(n)
            n.domain = ""
        try:
            onnx.checker.check_node(n, ctx)
        except onnx.checker.ValidationError as e:
            raise FrontendError(
                f"{where}: node {n.name!r} ({n.op_type}): {str(e).splitlines()[0]}; the file is "
                "corrupt or does not match its opset"
            ) from None


def _declared_bytes(t: TensorProto) -> int:
    n = 1
    for d in t.dims:
        if d < 0:
            raise FrontendError(f"tensor {t.name!r} declares a negative dim {list(t.dims)}")
        n *= d
        if n > MAX_TENSOR_BYTES:
            break
    try:
        item = helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
    except (KeyError, ValueError, TypeError):
        raise FrontendError(f"tensor {t.name!r} has unknown data_type {t.data_type}") from None
    return n * item


def _check_declared_size(t: TensorProto, path: Path) -> None:
    nbytes = _declared_bytes(t)
    if nbytes > MAX_TENSOR_BYTES:
        raise FrontendError(
            f"{path.name}: tensor {t.name!r} declares dims {list(t.dims)} "
            f"(over {MAX_TENSOR_BYTES >> 30} GiB); refusing to allocate it"
        )
    if t.data_location != TensorProto.EXTERNAL and t.HasField("raw_data"):
        if len(t.raw_data) != nbytes:
            raise FrontendError(
                f"{path.name}: tensor {t.name!r} holds {len(t.raw_data)} bytes "
                f"but its dims {list(t.dims)} need {nbytes}"
            )


def _load_external(t: TensorProto, base: Path, path: Path, mappable: bool = True) -> None:
    """Validate and read (or, for a large initializer, prepare to map) a tensor's external data.
    Only initializers may stay mapped: tensors in attributes (a Constant's value) are copied by
    the folder, which would drop the mark that they were validated."""
    info = {e.key: e.value for e in t.external_data}
    loc = info.get("location", "")
    where = f"{path.name}: external data of tensor {t.name!r}"
    if not loc:
        raise FrontendError(f"{where} has no location")
    if "\0" in loc:
        raise FrontendError(f"{where}: location {loc!r} contains a NUL byte")
    if t.HasField("raw_data") or _has_typed_data(t):
        raise FrontendError(
            f"{where}: the tensor also holds inline data; it must be one or the other"
        )
    rel = Path(loc)
    if rel.is_absolute() or loc.startswith(("/", "\\")) or (len(loc) > 1 and loc[1] == ":"):
        raise FrontendError(
            f"{where}: location {loc!r} is absolute; it must be inside the model folder"
        )
    if ".." in rel.parts:
        raise FrontendError(f"{where}: location {loc!r} leaves the model folder through '..'")
    cur = base
    for part in rel.parts:
        cur = cur / part
        if cur.is_symlink():
            raise FrontendError(
                f"{where}: {cur.relative_to(base)} is a symlink; refusing to follow it"
            )
    target = cur.resolve()
    if base not in target.parents:
        raise FrontendError(f"{where}: location {loc!r} resolves outside the model folder")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(target, flags)  # O_NONBLOCK: opening a FIFO must not wait for a writer
    except OSError as e:
        raise FrontendError(f"{where}: cannot open {loc!r} ({e.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FrontendError(f"{where}: {loc!r} is not a regular file")
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if st.st_nlink > 1:
            raise FrontendError(f"{where}: {loc!r} has {st.st_nlink} hard links; refusing it")
        try:
            offset = int(info.get("offset", "0"))
            want = _declared_bytes(t)
            length = int(info.get("length", str(want)))
        except ValueError:
            raise FrontendError(f"{where}: offset/length are not integers") from None
        if offset < 0:
            raise FrontendError(f"{where}: offset {offset} is negative")
        if length != want:
            raise FrontendError(f"{where}: length {length} differs from the declared {want} bytes")
        if offset + length > st.st_size:
            raise FrontendError(
                f"{where}: needs bytes {offset}..{offset + length} but {loc!r} has {st.st_size}"
            )
        if mappable and length > _MAP_BYTES:  # a weight: mapped when converted, never copied
            del t.external_data[:]
            for key, value in (("location", str(target)), ("offset", str(offset)), (_MAPPED, "1")):
                e = t.external_data.add()
                e.key, e.value = key, value
            return
        f.seek(offset)
        t.raw_data = f.read(length)
    del t.external_data[:]
    t.data_location = TensorProto.DEFAULT


def _has_typed_data(t: TensorProto) -> bool:
    fields = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")
    return any(len(getattr(t, f)) for f in fields)


_MAP_BYTES = 1 << 16
"""External tensors larger than this stay on disk, validated, and are memory-mapped read-only
when converted (`_array`): the weights of a 6.5 GB GPT-2 XL are then paged in from the file
instead of being copied into protobuf, then into numpy. Smaller ones (shape data the folder
reads) are read in."""
_MAPPED = "wsecc-validated"  # marks an external tensor whose location load_model checked


# ================================================================ binding


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
        item = _DTYPES[t.elem_type].itemsize if t.elem_type in _DTYPES else 1
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


def fold(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[TensorProto]]:
    """Fold constants and shape subgraphs with onnxscript's optimizer (shapes must be static).

    Returns the folded model without its weights, and the weights it still reads (pass both
    to `to_graph`). Weights take no part in shape arithmetic, so the optimizer sees them as
    typed graph inputs: it never copies gigabytes of parameters, and a lookup into a weight
    table (the position embedding at constant positions) stays a lookup rather than becoming
    a new constant. The weights are *taken out* of `model` (moving them is free; copying them
    back into a protobuf costs about a second per 500 MB).
    """
    m, big = _without_weights(model)
    weights = {t.name: t for t in big}
    try:
        with _quiet_libraries():
            folded = _fold_constants(m)
    except Exception as e:  # the optimizer raises a variety of errors on hostile graphs
        raise FrontendError(
            f"constant folding failed ({_causes(e)}); the graph is malformed or uses ONNX "
            "features wsecc does not support"
        ) from None
    keep = [i for i in folded.graph.input if i.name not in weights]
    inputs = {i.name for i in model.graph.input} - set(weights)
    extra = [i.name for i in keep if i.name not in inputs]
    if extra:  # the optimizer renames a weight or input that a graph output passes through
        raise FrontendError(
            f"a graph output passes {extra[0].removesuffix('_orig')!r} through unchanged; "
            "wsecc compiles outputs computed by the graph only"
        )
    used = {x for n in folded.graph.node for x in n.input} | {o.name for o in folded.graph.output}
    del folded.graph.input[:]
    folded.graph.input.extend(keep)
    return folded, [t for name, t in weights.items() if name in used]


_WEIGHT_ELEMS = 1024  # initializers larger than this are weights, not shape data


def _causes(e: BaseException) -> str:
    """The optimizer wraps the real error in pass errors: name the node it was folding (if
    any) and the innermost cause."""
    chain: list[BaseException] = []
    while e is not None and len(chain) < 20:
        chain.append(e)
        e = e.__cause__ or e.__context__  # type: ignore[assignment]
    node = next((str(x) for x in chain if "for node" in str(x)), "")
    root = chain[-1]
    text = f"{type(root).__name__}: {str(root).splitlines()[0] if str(root) else ''}"
    return f"{node.splitlines()[0]}: {text}" if node else text


@contextlib.contextmanager
def _quiet_libraries() -> Iterator[None]:
    """onnxscript and onnx_ir log (and warn) about the graphs they fold, on stderr; wsecc turns
    what matters into its own one-line errors, so their records are dropped while they run."""
    loggers = [logging.getLogger(name) for name in ("onnxscript", "onnx_ir")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


def _fold_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxscript's `optimize` without its pattern rewriter: inline, fold constants (with node
    shape inference) and drop dead nodes to a fixed point, then lift and deduplicate constants.

    The rewriter's rules are left out: our passes match semantics themselves, and its matcher
    walks the whole graph per candidate (quadratic: 50 s of the 55 s of folding GPT-2 large).
    """
    import onnx_ir as ir
    import onnx_ir.passes.common as common
    from onnxscript.optimizer import constant_folding

    m = ir.serde.deserialize_model(model)
    ir.passes.Sequential(
        common.InlinePass(),
        ir.passes.PassManager(
            [
                constant_folding.FoldConstantsPass(
                    shape_inference=True,
                    input_size_limit=_WEIGHT_ELEMS,
                    output_size_limit=1 << 20,
                    should_fold=lambda node: None,
                ),
                common.RemoveUnusedNodesPass(),
            ],
            steps=3,
            early_stop=True,
        ),
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common.LiftSubgraphInitializersToMainGraphPass(),
        common.DeduplicateInitializersPass(),
        common.CommonSubexpressionEliminationPass(),
        common.OutputFixPass(),
        common.NameFixPass(),
    )(m)
    return ir.serde.serialize_model(m)


def _elems(t: TensorProto) -> int:
    n = 1
    for d in t.dims:
        n *= d
    return n


def _without_weights(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[TensorProto]]:
    """A copy whose large initializers are typed graph inputs instead, and those initializers,
    taken out of `model` (which keeps its small ones; no tensor data is copied)."""
    graph = model.graph
    small = [t for t in graph.initializer if _elems(t) <= _WEIGHT_ELEMS]
    big = [t for t in graph.initializer if _elems(t) > _WEIGHT_ELEMS]
    del graph.initializer[:]
    graph.initializer.extend(small)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.input.extend(
        helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in big
    )
    return m, big


# ================================================================ conversion


class _Converter:
    """Walks ONNX nodes in topological order, emitting IR nodes with static types."""

    def __init__(self, model: onnx.ModelProto, weights: Sequence[TensorProto] = ()) -> None:
        self.model = model
        self.weights = weights
        self.opset = {o.domain or "": o.version for o in model.opset_import}
        self.env: dict[str, Value] = {}
        self.nodes: list[Node] = []
        self.used_names: set[str] = set()
        self.onnx_node: onnx.NodeProto | None = None

    # -- values
    def fresh(self, base: str) -> str:
        name, i = base, 0
        while name in self.used_names:
            i += 1
            name = f"{base}.{i}"
        self.used_names.add(name)
        return name

    def const(self, arr: np.ndarray, base: str) -> Value:
        return Value.constant(self.fresh(base), np.asarray(arr))

    def beta(self, n: onnx.NodeProto, i: int, gamma: Value) -> Value:
        """Operand i (a LayerNorm's β) when present, else zeros shaped and typed like γ."""
        if len(n.input) > i and n.input[i]:
            return self.get(n.input[i])
        return self.const(np.zeros(gamma.type.shape, gamma.type.dtype.numpy), "zero_beta")

    def get(self, name: str) -> Value:
        if name not in self.env:
            raise FrontendError(f"value {name!r} is used but never defined (dangling input)")
        return self.env[name]

    def const_input(self, n: onnx.NodeProto, i: int, what: str) -> np.ndarray | None:
        if i >= len(n.input) or not n.input[i]:
            return None
        v = self.get(n.input[i])
        if not v.is_const:
            raise FrontendError(
                f"{n.op_type} node {n.name!r}: its {what} input is not constant after binding "
                "the dims; this graph needs dynamic shapes, which wsecc does not support"
            )
        return v.const

    # -- emission
    def emit(
        self,
        op: Op,
        inputs: Sequence[Value],
        attrs: Mapping[str, Any] | None = None,
        out_names: Sequence[str] | None = None,
        n_out: int | None = None,
    ) -> list[Value]:
        a = make_attrs(attrs)
        where = self.onnx_node.name if self.onnx_node is not None else "?"
        try:
            types = infer_types(op, [v.type for v in inputs], dict(a))
        except (IRError, KeyError, TypeError, ValueError) as e:
            raise FrontendError(
                f"node {where!r} ({op.name}): {e}; a valid export fails here when the bound dims "
                "exceed what it supports (a learned position table of N rows caps --seq at N): "
                "bind smaller --batch/--seq/--dim, or check the export"
            ) from None
        for t in types:  # math.prod: numpy's int64 product wraps around on absurd shapes
            if math.prod(t.shape) * t.dtype.itemsize > MAX_TENSOR_BYTES:
                raise FrontendError(
                    f"node {where!r} ({op.name}) would make a {t.dtype.value}{list(t.shape)} "
                    f"tensor, over {MAX_TENSOR_BYTES >> 30} GiB; check the bound dims "
                    "(--batch, --seq, --dim) and the node's shape operands"
                )
        names = list(out_names or [])
        base = (self.onnx_node.name if self.onnx_node is not None else op.value) or op.value
        outs = []
        for i, t in enumerate(types):
            nm = names[i] if i < len(names) and names[i] else f"{base}:{i}"
            outs.append(Value(self.fresh(nm), t))
        origin = (
            (self.onnx_node.name,) if self.onnx_node is not None and self.onnx_node.name else ()
        )
        self.nodes.append(Node(op, tuple(inputs), tuple(outs), a, outs[0].name, origin))
        return outs

    def _fold_small(self, mark: int, outs: list[Value]) -> list[Value]:
        """Evaluate just-emitted nodes whose operands are all small constants.

        The optimizer folds nearly all shape arithmetic; what it leaves (it skips some
        Where/Equal/ConstantOfShape chains) must still become constants, because shape operands
        of Reshape/Expand/Slice have to be static here.
        """
        new = self.nodes[mark:]
        small = all(
            v.is_const and v.type.size <= (64 if v.type.dtype.is_float else FOLD_LIMIT)
            for n in new
            for v in n.inputs
        )  # integer shape arithmetic and scalar fills; never a lookup into a weight table
        if not new or not small:
            return outs
        from wsecc.ir.rules import evaluate_op

        folded: dict[Value, Value] = {}
        for n in new:
            args = [folded.get(v, v).const for v in n.inputs]
            try:
                results = evaluate_op(n.op, args, n.attr_dict)  # type: ignore[arg-type]
            except (IRError, ValueError, TypeError, IndexError, ZeroDivisionError) as e:
                where = n.origin[0] if n.origin else n.name
                raise FrontendError(f"node {where!r} ({n.op.name}): {e}") from None
            for v, r in zip(n.outputs, results, strict=True):
                folded[v] = Value.constant(
                    v.name, np.asarray(r, v.type.dtype.numpy).reshape(v.type.shape)
                )
        del self.nodes[mark:]
        return [folded.get(v, v) for v in outs]

    def bind(self, n: onnx.NodeProto, values: Sequence[Value]) -> None:
        for name, v in zip(n.output, values, strict=False):
            if name:
                self.env[name] = v

    # -- the walk
    def run(self) -> Graph:
        g = self.model.graph
        for t in (*g.initializer, *self.weights):
            self.env[t.name] = Value.constant(self.fresh(t.name), _array(t))
        inputs = []
        for inp in g.input:
            if inp.name in self.env:
                continue
            tt = inp.type.tensor_type
            if tt.elem_type not in _DTYPES:
                raise FrontendError(
                    f"input {inp.name!r} has unsupported element type {tt.elem_type}"
                )
            shape = tuple(d.dim_value for d in tt.shape.dim)
            v = Value(self.fresh(inp.name), TensorType(_DTYPES[tt.elem_type], shape))
            self.env[inp.name] = v
            inputs.append(v)
        order = _topological(g)
        unsupported = unsupported_ops(self.model)
        if unsupported:
            raise FrontendError(f"{len(unsupported)} unsupported ops: " + ", ".join(unsupported))
        for n in order:
            self.onnx_node = n
            mark = len(self.nodes)
            outs = CONVERTERS[_key(n)](self, n, _attrs(n))
            self.bind(n, self._fold_small(mark, outs))
        self.onnx_node = None
        live = set(inputs)  # values computed from an input
        for node in self.nodes:
            if any(v in live for v in node.inputs):
                live.update(node.outputs)
        for o in g.output:
            if self.get(o.name) not in live:
                raise FrontendError(
                    f"graph output {o.name!r} is a constant (it depends on no input); wsecc "
                    "compiles outputs computed from the inputs: drop it from the outputs"
                )
        outputs = []
        for o in g.output:
            v = self.get(o.name)
            if v.is_const or v in outputs or v in inputs:
                v = self.emit(Op.IDENTITY, [v], out_names=[o.name])[0]
            outputs.append(v)
        return _rename_outputs(
            Graph(tuple(inputs), tuple(outputs), tuple(self.nodes), g.name or "main"),
            [o.name for o in g.output],
        )


def _array(t: TensorProto) -> np.ndarray:
    """The tensor's data; raw little-endian bytes are viewed, not copied again, and external
    weights that load_model validated are memory-mapped read-only."""
    if t.data_location == TensorProto.EXTERNAL:
        info = {e.key: e.value for e in t.external_data}
        if info.get(_MAPPED) != "1" or t.data_type not in _DTYPES:
            raise FrontendError(f"tensor {t.name!r}: external data not validated by load_model")
        return np.memmap(
            info["location"],
            dtype=_DTYPES[t.data_type].numpy.newbyteorder("<"),
            mode="r",
            offset=int(info["offset"]),
            shape=tuple(t.dims),
        )
    if t.HasField("raw_data") and t.data_type in _DTYPES and t.data_type != TensorProto.BOOL:
        dt = _DTYPES[t.data_type].numpy.newbyteorder("<")
        return np.frombuffer(t.raw_data, dtype=dt).reshape(tuple(t.dims))
    return numpy_helper.to_array(t)


def _rename_outputs(g: Graph, names: list[str]) -> Graph:
    """Graph outputs keep their ONNX names (they are what users and onnxruntime call them)."""
    taken = {v.name for n in g.nodes for v in n.outputs} | {v.name for v in g.inputs}
    taken |= {v.name for v in g.constants()}
    mapping: dict[Value, Value] = {}
    for v, want in zip(g.outputs, names, strict=True):
        if v.name != want and want not in taken:
            mapping[v] = Value(want, v.type)
    if not mapping:
        return g
    nodes = []
    for n in g.nodes:
        ins = tuple(mapping.get(v, v) for v in n.inputs)
        outs = tuple(mapping.get(v, v) for v in n.outputs)
        nodes.append(Node(n.op, ins, outs, n.attrs, n.name, n.origin))
    return Graph(g.inputs, tuple(mapping.get(v, v) for v in g.outputs), tuple(nodes), g.name)


def _topological(g: onnx.GraphProto) -> list[onnx.NodeProto]:
    """Nodes in a topological order (ONNX requires one; onnxruntime re-sorts; we do too)."""
    produced = {o: i for i, n in enumerate(g.node) for o in n.output if o}
    seen_out: set[str] = set()
    for n in g.node:
        for o in n.output:
            if o and o in seen_out:
                raise FrontendError(f"value {o!r} is produced by two nodes (duplicate name)")
            seen_out.add(o)
    state = [0] * len(g.node)
    order: list[onnx.NodeProto] = []
    for root in range(len(g.node)):
        if state[root]:
            continue
        stack = [(root, 0)]
        while stack:
            i, k = stack.pop()
            if k == 0:
                if state[i] == 2:
                    continue
                state[i] = 1
            deps = [produced[x] for x in g.node[i].input if x in produced]
            if k < len(deps):
                stack.append((i, k + 1))
                j = deps[k]
                if state[j] == 1:
                    raise FrontendError(f"graph has a cycle through node {g.node[j].name!r}")
                if state[j] == 0:
                    stack.append((j, 0))
            else:
                state[i] = 2
                order.append(g.node[i])
    return order


def _attrs(n: onnx.NodeProto) -> dict[str, Any]:
    out = {}
    for a in n.attribute:
        try:
            v = helper.get_attribute_value(a)
        except Exception:
            raise FrontendError(f"node {n.name!r}: attribute {a.name!r} is malformed") from None
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        out[a.name] = v
    return out


# ---------------------------------------------------------------- converters

Converter = Callable[[_Converter, onnx.NodeProto, dict[str, Any]], list[Value]]
CONVERTERS: dict[tuple[str, str], Converter] = {}


def _conv(*names: str, domain: str = "") -> Callable[[Converter], Converter]:
    def deco(fn: Converter) -> Converter:
        for nm in names:
            CONVERTERS[(domain, nm)] = fn
        return fn

    return deco


def _ins(c: _Converter, n: onnx.NodeProto) -> list[Value]:
    return [c.get(x) for x in n.input if x]


def _axis(n: onnx.NodeProto, axis: int, rank: int) -> int:
    """`axis` as a non-negative axis; ONNX allows [-rank, rank)."""
    if not -rank <= axis < rank:
        raise FrontendError(f"{n.op_type} {n.name!r}: axis {axis} is out of range for rank {rank}")
    return axis % rank


def _check_indices(n: onnx.NodeProto, idx: Value, sizes: Sequence[int]) -> None:
    """Constant indices (the last axis of `idx` runs over `sizes` if there are several) lie
    in [-size, size): a file can make them anything, and a lookup out of range is undefined."""
    if idx.type.size and 0 in sizes:
        raise FrontendError(f"{n.op_type} {n.name!r}: gathers from a dim of size 0")
    if not idx.is_const or not idx.type.size:
        return
    cols = np.asarray(idx.const).reshape(-1, len(sizes))
    for j, size in enumerate(sizes):
        lo, hi = int(cols[:, j].min()), int(cols[:, j].max())
        if lo < -size or hi >= size:
            hint = (
                f" (if these are positions, the model holds {size}: bind --seq {size} or less)"
                if hi >= size and lo >= 0
                else ""
            )
            raise FrontendError(
                f"{n.op_type} {n.name!r}: index {hi if hi >= size else lo} is out of range for "
                f"a dim of size {size}{hint}"
            )


def _attr_int(a: dict[str, Any], key: str, default: int) -> int:
    v = a.get(key, default)
    if not isinstance(v, int) or isinstance(v, bool):
        raise FrontendError(f"attribute {key!r} must be an int, got {type(v).__name__}")
    return v


_SIMPLE: dict[str, Op] = {
    "Add": Op.ADD, "Sub": Op.SUB, "Mul": Op.MUL, "Div": Op.DIV, "Pow": Op.POW,
    "And": Op.AND, "Or": Op.OR, "Xor": Op.XOR, "Equal": Op.EQUAL, "Less": Op.LESS,
    "LessOrEqual": Op.LESS_EQUAL, "Greater": Op.GREATER, "GreaterOrEqual": Op.GREATER_EQUAL,
    "Neg": Op.NEG, "Abs": Op.ABS, "Sqrt": Op.SQRT, "Reciprocal": Op.RECIPROCAL, "Exp": Op.EXP,
    "Log": Op.LOG, "Erf": Op.ERF, "Tanh": Op.TANH, "Sigmoid": Op.SIGMOID, "Relu": Op.RELU,
    "Not": Op.NOT, "IsNaN": Op.ISNAN, "IsInf": Op.ISINF, "Identity": Op.IDENTITY,
    "Where": Op.WHERE, "MatMul": Op.MATMUL,
}  # fmt: skip


@_conv(*_SIMPLE)
def _simple(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    return c.emit(_SIMPLE[n.op_type], _ins(c, n), out_names=n.output)


@_conv("Max", "Min", "Sum")
def _variadic(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    op = {"Max": Op.MAX, "Min": Op.MIN, "Sum": Op.ADD}[n.op_type]
    xs = _ins(c, n)
    acc = xs[0]
    for x in xs[1:]:
        acc = c.emit(op, [acc, x])[0]
    if len(xs) == 1:
        acc = c.emit(Op.IDENTITY, [acc])[0]
    return [acc]


@_conv("Mod")
def _mod(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    return c.emit(Op.MOD, _ins(c, n), {"fmod": bool(a.get("fmod", 0))}, n.output)


@_conv("Dropout")
def _dropout(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    if len(n.output) > 1 and n.output[1]:
        raise FrontendError(
            f"Dropout {n.name!r}: its mask output is used; training graphs are not supported"
        )
    return c.emit(Op.DROPOUT, [c.get(n.input[0])], out_names=n.output)


@_conv("Cast")
def _cast(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    to = a.get("to")
    if to not in _DTYPES:
        raise FrontendError(f"Cast {n.name!r}: unsupported target type {to}")
    return c.emit(Op.CAST, [c.get(n.input[0])], {"to": _DTYPES[to].value}, n.output)


@_conv("CastLike")
def _cast_like(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    x, like = c.get(n.input[0]), c.get(n.input[1])
    return c.emit(Op.CAST, [x], {"to": like.type.dtype.value}, n.output)


@_conv("Constant")
def _constant(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    if "value" in a:
        arr = numpy_helper.to_array(a["value"])
    elif "value_float" in a:
        arr = np.array(a["value_float"], np.float32)
    elif "value_floats" in a:
        arr = np.array(a["value_floats"], np.float32)
    elif "value_int" in a:
        arr = np.array(a["value_int"], np.int64)
    elif "value_ints" in a:
        arr = np.array(a["value_ints"], np.int64)
    else:
        raise FrontendError(f"Constant {n.name!r}: unsupported value attribute {sorted(a)}")
    return [Value.constant(c.fresh(n.output[0]), arr)]


@_conv("Shape")
def _shape(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    shape = np.array(c.get(n.input[0]).type.shape, np.int64)
    r = len(shape)
    start, end = a.get("start", 0), a.get("end", r)
    return [Value.constant(c.fresh(n.output[0]), shape[slice(*slice(start, end).indices(r))])]


@_conv("Size")
def _size(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    return [Value.constant(c.fresh(n.output[0]), np.array(c.get(n.input[0]).type.size, np.int64))]


@_conv("ConstantOfShape")
def _constant_of_shape(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    shape = c.const_input(n, 0, "shape")
    fill = numpy_helper.to_array(a["value"]) if "value" in a else np.zeros(1, np.float32)
    shape_t = tuple(int(d) for d in np.asarray(shape).reshape(-1))
    if (
        any(d < 0 for d in shape_t)
        or int(np.prod(shape_t, dtype=np.float64)) * fill.itemsize > MAX_TENSOR_BYTES
    ):
        raise FrontendError(f"ConstantOfShape {n.name!r}: absurd shape {shape_t}")
    return [Value.constant(c.fresh(n.output[0]), np.full(shape_t, fill.reshape(-1)[0], fill.dtype))]


@_conv("Range")
def _range(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    start, limit, delta = (
        c.const_input(n, i, w) for i, w in enumerate(("start", "limit", "delta"))
    )
    lo, hi, step = start.item(), limit.item(), delta.item()  # type: ignore[union-attr]
    if step == 0:
        raise FrontendError(f"Range {n.name!r}: delta is 0")
    count = max(0, math.ceil((hi - lo) / step))
    if count * start.dtype.itemsize > MAX_TENSOR_BYTES:  # type: ignore[union-attr]
        raise FrontendError(
            f"Range {n.name!r}: {count:,} elements, over {MAX_TENSOR_BYTES >> 30} GiB; check the "
            "bound dims (--batch, --seq, --dim)"
        )
    arr = np.arange(lo, hi, step, dtype=start.dtype)  # type: ignore[union-attr]
    return [Value.constant(c.fresh(n.output[0]), arr)]


@_conv("Gemm")
def _gemm(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    attrs = {
        "alpha": float(a.get("alpha", 1.0)),
        "beta": float(a.get("beta", 1.0)),
        "trans_a": bool(a.get("transA", 0)),
        "trans_b": bool(a.get("transB", 0)),
    }
    return c.emit(Op.GEMM, _ins(c, n), attrs, n.output)


@_conv("Einsum")
def _einsum(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    return c.emit(Op.EINSUM, _ins(c, n), {"equation": a["equation"].replace(" ", "")}, n.output)


def _reshape_to(c: _Converter, n: onnx.NodeProto, x: Value, shape: Sequence[int]) -> list[Value]:
    return c.emit(Op.RESHAPE, [x], {"shape": tuple(int(d) for d in shape)}, n.output)


@_conv("Reshape")
def _reshape(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    x = c.get(n.input[0])
    want = [int(d) for d in np.asarray(c.const_input(n, 1, "shape")).reshape(-1)]
    allowzero = a.get("allowzero", 0)
    if not allowzero and any(d == 0 and i >= x.type.rank for i, d in enumerate(want)):
        raise FrontendError(
            f"Reshape {n.name!r}: target {want} copies (0) a dim that the input {x.type.shape} "
            "does not have"
        )
    shape = [x.type.shape[i] if (d == 0 and not allowzero) else d for i, d in enumerate(want)]
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise FrontendError(f"Reshape {n.name!r}: invalid target shape {want}")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
        if known == 0 or x.type.size % known:
            raise FrontendError(f"Reshape {n.name!r}: cannot reshape {x.type.shape} to {want}")
        shape[shape.index(-1)] = x.type.size // known
    return _reshape_to(c, n, x, shape)


@_conv("Flatten")
def _flatten(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    x = c.get(n.input[0])
    r, ax = x.type.rank, _attr_int(a, "axis", 1)
    if not -r <= ax <= r:  # Flatten's axis may equal the rank
        raise FrontendError(f"Flatten {n.name!r}: axis {ax} is out of range for rank {r}")
    ax = ax + r if ax < 0 else ax
    lead = int(np.prod(x.type.shape[:ax], dtype=np.int64))
    return _reshape_to(c, n, x, [lead, x.type.size // max(lead, 1) if lead else 0])


def _axes(c: _Converter, n: onnx.NodeProto, a: dict[str, Any], idx: int) -> list[int] | None:
    if "axes" in a:
        return [int(v) for v in a["axes"]]
    arr = c.const_input(n, idx, "axes")
    return None if arr is None else [int(v) for v in np.asarray(arr).reshape(-1)]


@_conv("Squeeze")
def _squeeze(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    x = c.get(n.input[0])
    r = x.type.rank
    axes = _axes(c, n, a, 1)
    drop = (
        {_axis(n, ax, r) for ax in axes}
        if axes is not None
        else {i for i, d in enumerate(x.type.shape) if d == 1}
    )
    if any(x.type.shape[i] != 1 for i in drop):
        raise FrontendError(f"Squeeze {n.name!r}: axes {sorted(drop)} of {x.type.shape} are not 1")
    return _reshape_to(c, n, x, [d for i, d in enumerate(x.type.shape) if i not in drop])


@_conv("Unsqueeze")
def _unsqueeze(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    x = c.get(n.input[0])
    axes = _axes(c, n, a, 1) or []
    r = x.type.rank + len(axes)
    ins = sorted(_axis(n, ax, r) for ax in axes)
    if len(set(ins)) != len(ins):
        raise FrontendError(f"Unsqueeze {n.name!r}: axes {axes} repeat an axis")
    shape = list(x.type.shape)
    for ax in ins:
        shape.insert(ax, 1)
    return _reshape_to(c, n, x, shape)


@_conv("Transpose")
def _transpose(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    x = c.get(n.input[0])
    perm = tuple(a.get("perm", range(x.type.rank - 1, -1, -1)))
    return c.emit(Op.TRANSPOSE, [x], {"perm": perm}, n.output)


@_conv("Expand")
def _expand(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    shape = tuple(int(d) for d in np.asarray(c.const_input(n, 1, "shape")).reshape(-1))
    return c.emit(Op.EXPAND, [c.get(n.input[0])], {"shape": shape}, n.output)


@_conv("Tile")
def _tile(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    reps = tuple(int(d) for d in np.asarray(c.const_input(n, 1, "repeats")).reshape(-1))
    return c.emit(Op.TILE, [c.get(n.input[0])], {"repeats": reps}, n.output)


@_conv("Concat")
def _concat(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    xs = [v for v in _ins(c, n) if v.type.size or v.type.rank != 1]
    return c.emit(Op.CONCAT, xs, {"axis": _attr_int(a, "axis", 0)}, n.output)


@_conv("Slice")
def _slice(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    x = c.get(n.input[0])
    if "starts" in a:  # opset < 10
        starts, ends = list(a["starts"]), list(a["ends"])
        axes = list(a.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = [int(v) for v in np.asarray(c.const_input(n, 1, "starts")).reshape(-1)]
        ends = [int(v) for v in np.asarray(c.const_input(n, 2, "ends")).reshape(-1)]
        ax = c.const_input(n, 3, "axes")
        axes = list(range(len(starts))) if ax is None else [int(v) for v in ax.reshape(-1)]
        st = c.const_input(n, 4, "steps")
        steps = [1] * len(starts) if st is None else [int(v) for v in st.reshape(-1)]
    r = x.type.rank
    attrs = {
        "starts": tuple(starts),
        "ends": tuple(ends),
        "axes": tuple(_axis(n, ax, r) for ax in axes),
        "steps": tuple(steps),
    }
    return c.emit(Op.SLICE, [x], attrs, n.output)


@_conv("Split")
def _split(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    x = c.get(n.input[0])
    ax = _axis(n, _attr_int(a, "axis", 0), x.type.rank)
    dim = x.type.shape[ax]
    sizes: list[int] | None = None
    if "split" in a:
        sizes = [int(v) for v in a["split"]]
    elif len(n.input) > 1 and n.input[1]:
        sizes = [int(v) for v in np.asarray(c.const_input(n, 1, "split")).reshape(-1)]
    if sizes is None:
        k = a.get("num_outputs", len(n.output))
        chunk = -(-dim // k)
        sizes = [min(chunk, dim - i * chunk) for i in range(k)]
    return c.emit(Op.SPLIT, [x], {"axis": ax, "sizes": tuple(sizes)}, n.output)


@_conv("Gather")
def _gather(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    data, idx = c.get(n.input[0]), c.get(n.input[1])
    ax = _axis(n, _attr_int(a, "axis", 0), data.type.rank)
    _check_indices(n, idx, [data.type.shape[ax]])
    return c.emit(Op.GATHER, [data, idx], {"axis": ax}, n.output)


@_conv("GatherElements")
def _gather_elements(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    data, idx = c.get(n.input[0]), c.get(n.input[1])
    ax = _axis(n, _attr_int(a, "axis", 0), data.type.rank)
    _check_indices(n, idx, [data.type.shape[ax]])
    return c.emit(Op.GATHER_ELEMENTS, _ins(c, n), {"axis": ax}, n.output)


@_conv("GatherND")
def _gather_nd(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    data, idx = c.get(n.input[0]), c.get(n.input[1])
    b = _attr_int(a, "batch_dims", 0)
    k = idx.type.shape[-1] if idx.type.rank else 0
    if not 0 <= b < min(data.type.rank, idx.type.rank) or not 1 <= k <= data.type.rank - b:
        raise FrontendError(
            f"GatherND {n.name!r}: indices {idx.type.shape} with batch_dims {b} do not fit data "
            f"{data.type.shape}"
        )
    _check_indices(n, idx, data.type.shape[b : b + k])
    return c.emit(Op.GATHER_ND, _ins(c, n), {"batch_dims": b}, n.output)


@_conv("ReduceMean", "ReduceSum", "ReduceMax")
def _reduce(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    op = {"ReduceMean": Op.REDUCE_MEAN, "ReduceSum": Op.REDUCE_SUM, "ReduceMax": Op.REDUCE_MAX}[
        n.op_type
    ]
    x = c.get(n.input[0])
    axes = _axes(c, n, a, 1)
    if not axes:
        if a.get("noop_with_empty_axes", 0):
            return c.emit(Op.IDENTITY, [x], out_names=n.output)
        axes = list(range(x.type.rank))
    attrs = {
        "axes": tuple(sorted(_axis(n, ax, x.type.rank) for ax in axes)),
        "keepdims": bool(a.get("keepdims", 1)),
    }
    return c.emit(op, [x], attrs, n.output)


@_conv("CumSum")
def _cumsum(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    x = c.get(n.input[0])
    ax = _axis(n, int(np.asarray(c.const_input(n, 1, "axis")).reshape(-1)[0]), x.type.rank)
    attrs = {
        "axis": ax,
        "exclusive": bool(a.get("exclusive", 0)),
        "reverse": bool(a.get("reverse", 0)),
    }
    return c.emit(Op.CUMSUM, [x], attrs, n.output)


@_conv("Softmax")
def _softmax(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    x = c.get(n.input[0])
    legacy = c.opset.get("", 13) < 13
    ax = _axis(n, _attr_int(a, "axis", 1 if legacy else -1), x.type.rank)
    if legacy and ax != x.type.rank - 1:
        raise FrontendError(
            f"Softmax {n.name!r}: opset<13 softmax over axis {ax} of rank {x.type.rank} (2-D coercion) is not supported"
        )
    return c.emit(Op.SOFTMAX, [x], {"axis": ax}, n.output)


@_conv("LayerNormalization")
def _layer_norm(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    x, gamma = c.get(n.input[0]), c.get(n.input[1])
    if _axis(n, _attr_int(a, "axis", -1), x.type.rank) != x.type.rank - 1:
        raise FrontendError(f"LayerNormalization {n.name!r}: only the last axis is supported")
    if any(o for o in n.output[1:]):
        raise FrontendError(
            f"LayerNormalization {n.name!r}: mean/inv-std outputs are not supported"
        )
    beta = c.beta(n, 2, gamma)
    return c.emit(
        Op.LAYER_NORM,
        [x, gamma, beta],
        {"epsilon": float(a.get("epsilon", 1e-5)), "has_skip": False},
        n.output[:1],
    )


@_conv("Gelu")
@_conv("Gelu", domain="com.microsoft")
def _gelu(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    return c.emit(
        Op.GELU, [c.get(n.input[0])], {"approximate": a.get("approximate", "none")}, n.output
    )


# ---------------------------------------------------------------- com.microsoft contrib ops


@_conv("FastGelu", "BiasGelu", domain="com.microsoft")
def _bias_gelu(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    xs = _ins(c, n)
    x = c.emit(Op.ADD, xs)[0] if len(xs) == 2 else xs[0]
    approx = "tanh" if n.op_type == "FastGelu" else "none"
    return c.emit(Op.GELU, [x], {"approximate": approx}, n.output)


@_conv("SkipLayerNormalization", domain="com.microsoft")
def _skip_layer_norm(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    x, skip, gamma = c.get(n.input[0]), c.get(n.input[1]), c.get(n.input[2])
    beta = c.beta(n, 3, gamma)
    if len(n.input) > 4 and n.input[4]:
        x = c.emit(Op.ADD, [x, c.get(n.input[4])])[0]
    if any(len(n.output) > i and n.output[i] for i in (1, 2)):
        raise FrontendError(
            f"SkipLayerNormalization {n.name!r}: mean/inv-std outputs are not supported"
        )
    emit_sum = len(n.output) > 3 and bool(n.output[3])
    outs = c.emit(
        Op.LAYER_NORM,
        [x, skip, gamma, beta],
        {"epsilon": float(a.get("epsilon", 1e-12)), "has_skip": True, "emit_sum": emit_sum},
        [n.output[0]] + ([n.output[3]] if emit_sum else []),
    )
    return [outs[0], outs[0], outs[0], outs[1]] if emit_sum else outs


@_conv("EmbedLayerNormalization", domain="com.microsoft")
def _embed_layer_norm(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    def opt(i: int) -> Value | None:
        return c.get(n.input[i]) if len(n.input) > i and n.input[i] else None

    ids, seg_ids, word, pos, seg, gamma, beta = (opt(i) for i in range(7))
    mask, pos_ids = opt(7), opt(8)
    assert (
        ids is not None
        and word is not None
        and pos is not None
        and gamma is not None
        and beta is not None
    )
    b, s = ids.type.shape
    if pos_ids is None:
        pos_ids = c.const(
            np.broadcast_to(np.arange(s, dtype=np.int32), (b, s)).copy(), "position_ids"
        )
    pairs = [ids, word, pos_ids, pos] + (
        [seg_ids, seg] if seg_ids is not None and seg is not None else []
    )
    emb = c.emit(Op.EMBEDDING, pairs)[0]
    y = c.emit(
        Op.LAYER_NORM,
        [emb, gamma, beta],
        {"epsilon": float(a.get("epsilon", 1e-12)), "has_skip": False},
        [n.output[0]],
    )[0]
    if mask is not None:
        mask_index = c.emit(
            Op.REDUCE_SUM,
            [c.emit(Op.CAST, [mask], {"to": "i32"})[0]],
            {"axes": (1,), "keepdims": False},
        )[0]
    else:
        mask_index = c.const(np.full((b,), s, np.int32), "mask_index")
    return [y, mask_index, emb]


@_conv("Attention", domain="com.microsoft")
def _ms_attention(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    if len(n.input) > 4 and n.input[4]:
        raise FrontendError(
            f"Attention {n.name!r} has a past input: decoder-with-past graphs are not supported"
        )
    if any(len(n.input) > i and n.input[i] for i in (5, 6, 7)) or (
        len(n.output) > 1 and n.output[1]
    ):
        raise FrontendError(
            f"Attention {n.name!r}: attention_bias/past/present operands are not supported"
        )
    x, w, bias = c.get(n.input[0]), c.get(n.input[1]), c.get(n.input[2])
    heads = _attr_int(a, "num_heads", 0)
    sizes = list(a.get("qkv_hidden_sizes", [w.type.shape[1] // 3] * 3))
    if len(set(sizes)) != 1 or sizes[0] % max(heads, 1):
        raise FrontendError(
            f"Attention {n.name!r}: unequal qkv_hidden_sizes {sizes} are not supported"
        )
    d = sizes[0]
    dh = d // heads
    qkv = c.emit(Op.LINEAR, [x, w, bias], {"activation": "none", "has_bias": True})[0]
    mask = c.get(n.input[3]) if len(n.input) > 3 and n.input[3] else None
    kind = "none"
    if mask is not None:
        kind = {1: "key_length", 2: "key_padding"}.get(mask.type.rank, "")
        if not kind:
            raise FrontendError(
                f"Attention {n.name!r}: a {mask.type.rank}-D mask_index is not supported"
            )
    scale = float(a.get("scale", 0.0)) or 1.0 / float(np.sqrt(dh))
    attrs = {
        "num_heads": heads, "head_dim": dh, "q_offset": 0, "k_offset": d, "v_offset": 2 * d,
        "scale": scale, "causal": bool(a.get("unidirectional", 0)), "mask": kind,
        "fill": float(a.get("mask_filter_value", -10000.0)), "nan_to_zero": False,
    }  # fmt: skip
    return c.emit(
        Op.ATTENTION, [qkv, qkv, qkv] + ([mask] if mask is not None else []), attrs, n.output[:1]
    )


# ================================================================ entry point


def to_graph(model: onnx.ModelProto, weights: Sequence[TensorProto] = ()) -> Graph:
    """Convert a bound, folded model (with `weights` beside its initializers, as `fold` returns
    them) to the wsecc Graph (raises FrontendError)."""
    return _Converter(model, weights).run()


def raw_op_histogram(model: onnx.ModelProto) -> dict[str, int]:
    hist: dict[str, int] = {}
    for n in model.graph.node:
        key = n.op_type if not n.domain or n.domain == "ai.onnx" else f"{n.domain}.{n.op_type}"
        hist[key] = hist.get(key, 0) + 1
    return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))


def import_model(
    path: str | os.PathLike[str],
    *,
    batch: int | None = None,
    seq: int | None = None,
    dims: Mapping[str, int] | None = None,
) -> tuple[Graph, ModelInfo]:
    """Load, bind, fold and convert. Returns the graph and what was learned on the way."""
    model = load_model(path)
    check_past_inputs(model)
    bindings = resolve_bindings(model, batch, seq, dims)
    info = ModelInfo(
        path=str(path),
        opset=next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0),
        producer=f"{model.producer_name} {model.producer_version}".strip(),
        bindings=bindings,
        raw_ops=raw_op_histogram(model),
    )
    declared = {o.name: o.type.tensor_type.elem_type for o in model.graph.output}
    folded, weights = fold(bind_dims(model, bindings))
    del model
    graph = to_graph(folded, weights)
    for v in graph.outputs:  # folding re-infers output types: compare with what the file said
        want = declared.get(v.name, 0)
        if want and _DTYPES.get(want) is not v.type.dtype:
            raise FrontendError(
                f"output {v.name!r} is declared {_dtype_name(want)} but computes "
                f"{v.type.dtype.value}; the file is inconsistent"
            )
    del weights, folded  # the weights now live in the graph's constants only
    return graph, info


def unsupported_ops(model: onnx.ModelProto) -> list[str]:
    """Every node whose (domain, op_type) has no converter, as 'OpType 'node-name''."""
    return sorted(
        {
            f"{n.op_type}{'' if not n.domain else ' (' + n.domain + ')'} {n.name!r}"
            for n in model.graph.node
            if _key(n) not in CONVERTERS
        }
    )


def _key(n: onnx.NodeProto) -> tuple[str, str]:
    return ("" if n.domain in ("", "ai.onnx") else n.domain, n.op_type)
