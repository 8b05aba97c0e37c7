"""Loading an ONNX file, hardened (`load_model`).

Security rules for external data (see reference/onnx-exports.md §4.3): a relative location only;
no `..`; every path component below the model folder must not be a symlink; the resolved file
must lie inside the model folder, be a regular file with a single hard link, and hold
`offset + length` bytes where `length` equals the tensor's declared size. Declared tensor sizes
are checked against a cap before anything is allocated.

Before anything reads the graph, load_model also checks what onnx.checker would (less its demand
for topological order): supported IR and opset versions, UTF-8 strings, every value defined
exactly once and only read where defined, no cycle, tensor-typed and shaped inputs, and each
supported ai.onnx node against its ONNX schema (attribute types, arity).

Large weights are not copied: external ones stay on disk, validated, and are memory-mapped when
converted; with `lazy_weights=True` (the compile's frontend) so are those stored inline, which
`wsecc.frontend.inline` leaves out of what protobuf parses."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import onnx
from onnx import TensorProto, helper

from wsecc.errors import FrontendError
from wsecc.frontend.common import (
    DTYPES,
    INLINE_MARK,
    MAX_MODEL_BYTES,
    MAX_TENSOR_BYTES,
    READ_AS_FLOAT32,
    VALIDATED_MARK,
    tensor_array,
)
from wsecc.frontend.convert import CONVERTERS, op_key
from wsecc.frontend.generation import generation_io
from wsecc.frontend.inline import InlineWeight, parse_leaving_weights


def load_model(path: str | os.PathLike[str], *, lazy_weights: bool = False) -> onnx.ModelProto:
    """Read an ONNX file safely (see the module docstring). Raises FrontendError.

    Large weights stored as external data stay on disk, validated, and are memory-mapped when
    converted (`tensor_array`). `lazy_weights=True` treats large weights stored inline in the
    file the same way (`wsecc.frontend.inline`: no copy of them into protobuf), marked as
    external data at their place in the file: for a model that is converted, not saved again
    (the compile's frontend, `import_model`); `read_mapped` reads them in."""
    p = Path(path)
    if not p.exists():
        raise FrontendError(f"{p}: no such file")
    if not p.is_file():
        raise FrontendError(f"{p}: not a regular file")
    if p.stat().st_size > MAX_MODEL_BYTES:
        raise FrontendError(f"{p}: file is larger than {MAX_MODEL_BYTES >> 30} GiB")
    model, inline = _parse(p, lazy_weights)
    if model.ir_version <= 0 and not model.opset_import and not model.HasField("graph"):
        raise FrontendError(f"{p}: not an ONNX model (no ir_version, opset_import or graph)")
    _check_model(model, p.name)
    base = p.resolve().parent
    tensors = graph_tensors(model.graph)
    for f in model.functions:  # inlined into the graph when it is folded
        tensors += _node_tensors(f.node)
    n_weights = len(model.graph.initializer)  # they come first in `tensors`
    for k, t in enumerate(tensors):
        if k in inline:
            _map_inline(t, inline[k], p)
            continue
        _check_declared_size(t, p)
        if t.data_location == TensorProto.EXTERNAL:
            _load_external(t, base, p, mappable=k < n_weights)
    return model


def _parse(p: Path, lazy_weights: bool) -> tuple[onnx.ModelProto, dict[int, InlineWeight]]:
    """The file's model, with `lazy_weights` its large inline weights left in the file
    (`parse_leaving_weights`: where each lies, by its index among the initializers) when the
    file allows it, else all of it as onnx.load reads it."""
    try:
        left = parse_leaving_weights(p, _MAP_BYTES + 1) if lazy_weights else None
    except OSError as e:
        raise FrontendError(f"{p}: cannot read it ({e.strerror})") from None
    if left is not None:
        return left
    try:
        return onnx.load(str(p), load_external_data=False), {}
    except Exception as e:  # protobuf raises DecodeError, RuntimeError, ... on garbage
        raise FrontendError(
            f"{p}: not a valid ONNX file ({type(e).__name__}); is it truncated or corrupt?"
        ) from None


def _map_inline(t: TensorProto, w: InlineWeight, path: Path) -> None:
    """Check an initializer whose raw data `_parse` left in the file as `_check_declared_size`
    checks one held inline, then mark it as a validated external tensor at its place in the file
    (memory-mapped when converted, like the weights `_load_external` leaves on disk). A type
    that `tensor_array` does not map has its bytes read in instead, as onnx.load would have."""
    _check_declared_size(t, path, held=w.length)
    if t.data_type not in DTYPES and t.data_type not in READ_AS_FLOAT32:
        with open(path, "rb") as f:
            f.seek(w.offset)
            t.raw_data = f.read(w.length)
        return
    for key, value in (
        ("location", str(path.resolve())),
        ("offset", str(w.offset)),
        (VALIDATED_MARK, "1"),
        (INLINE_MARK, "1"),  # `as_stored` reads it in where a tensor must be as onnx.load gives it
    ):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    t.data_location = TensorProto.EXTERNAL


def read_mapped(model: onnx.ModelProto) -> None:
    """Read into `model` the weights load_model left on disk (memory-mapped when converted:
    `tensor_array`), so that it serializes whole (onnxruntime takes it as bytes)."""
    for t in graph_tensors(model.graph):
        if t.data_location == TensorProto.EXTERNAL:
            t.raw_data = tensor_array(t).tobytes()
            del t.external_data[:]
            t.data_location = TensorProto.DEFAULT


def graph_tensors(g: onnx.GraphProto) -> list[TensorProto]:
    """The graph's initializers first, then every other tensor it holds (in its nodes'
    attributes and subgraphs too)."""
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
                out += graph_tensors(g)
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
    generation_io(model)  # past inputs wsecc cannot bind: the reason to give first
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
        if t.elem_type not in DTYPES and t.elem_type not in READ_AS_FLOAT32:  # read as float32
            raise FrontendError(
                f"{where}: input {i.name!r} has element type {dtype_name(t.elem_type)}; wsecc "
                f"supports {', '.join(dtype_name(d) for d in [*DTYPES, *READ_AS_FLOAT32])}"
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


def dtype_name(elem_type: int) -> str:
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
                f"{where}: value {name!r} is defined twice ({what[name]} and {by}), which ONNX "
                "forbids (onnxruntime keeps the later one, with a warning): export the model "
                "again, or give each definition its own name"
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
        key = op_key(n)
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


def _check_declared_size(t: TensorProto, path: Path, held: int | None = None) -> None:
    """The tensor's dims within the cap, and the bytes it holds inline (its raw_data, or `held`
    of them left in the file: `_map_inline`) as many as they need."""
    nbytes = _declared_bytes(t)
    if nbytes > MAX_TENSOR_BYTES:
        raise FrontendError(
            f"{path.name}: tensor {t.name!r} declares dims {list(t.dims)} "
            f"(over {MAX_TENSOR_BYTES >> 30} GiB); refusing to allocate it"
        )
    if held is None and t.data_location != TensorProto.EXTERNAL and t.HasField("raw_data"):
        held = len(t.raw_data)
    if held is not None and held != nbytes:
        raise FrontendError(
            f"{path.name}: tensor {t.name!r} holds {held} bytes "
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
            for key, value in (
                ("location", str(target)),
                ("offset", str(offset)),
                (VALIDATED_MARK, "1"),
            ):
                entry = t.external_data.add()
                entry.key, entry.value = key, value
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
when converted (`tensor_array`): the weights of a 6.5 GB GPT-2 XL are then paged in from the file
instead of being copied into protobuf, then into numpy. Smaller ones (shape data the folder
reads) are read in."""


# ================================================================ binding
