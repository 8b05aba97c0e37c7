"""Conversion of a bound, folded ONNX model to the wsecc IR (`to_graph`): one converter per
(domain, op type) in `CONVERTERS`; one error lists every unsupported op (`unsupported_ops`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from wsecc.errors import FrontendError
from wsecc.frontend.common import DTYPES, MAX_ACTIVATION_BYTES, MAX_TENSOR_BYTES, tensor_array
from wsecc.ir.arrays import foldable_size
from wsecc.ir.core import Graph, IRError, Node, Op, TensorType, Value, make_attrs
from wsecc.ir.rules import evaluate_op, infer_types

FOLD_LIMIT = 1 << 16  # elements: operands of shape arithmetic the converter folds itself


class _Converter:
    """Walks ONNX nodes in topological order, emitting IR nodes with static types."""

    def __init__(
        self,
        model: onnx.ModelProto,
        weights: Sequence[TensorProto] = (),
        placeholders: Mapping[str, np.ndarray] | None = None,
    ) -> None:
        self.model = model
        self.weights = weights
        self.placeholders = dict(placeholders or {})
        self.opset = {o.domain or "": o.version for o in model.opset_import}
        self.env: dict[str, Value] = {}
        self.nodes: list[Node] = []
        self.used_names: set[str] = set()
        self.onnx_node: onnx.NodeProto | None = None

    # -- values
    @functools.cached_property
    def read_names(self) -> frozenset[str]:
        """The names some node or the graph's outputs read. An optional output outside it is
        not computed, whatever it is called: folding may name the empty ones (onnx-ir names
        SkipLayerNormalization's unused mean and inv-std 'v', 'v_1')."""
        g = self.model.graph
        return frozenset({x for m in g.node for x in m.input} | {o.name for o in g.output})

    @functools.cached_property
    def readers(self) -> dict[str, list[onnx.NodeProto]]:
        """The nodes that read each value, by its ONNX name."""
        out: dict[str, list[onnx.NodeProto]] = {}
        for m in self.model.graph.node:
            for x in dict.fromkeys(m.input):
                if x:
                    out.setdefault(x, []).append(m)
        return out

    def only_matmuls_read(self, name: str) -> bool:
        """Whether `name` is read, only as a MatMul operand, and is no graph output."""
        readers = self.readers.get(name, [])
        outputs = {o.name for o in self.model.graph.output}
        return bool(readers) and name not in outputs and all(m.op_type == "MatMul" for m in readers)

    def read(self, n: onnx.NodeProto, i: int) -> bool:
        """Whether output `i` of `n` exists and is read."""
        return len(n.output) > i and n.output[i] in self.read_names

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
        lazy: bool = False,
    ) -> list[Value]:
        """Append `op` on `inputs` and return its typed outputs. Each output's logical size is
        held to MAX_ACTIVATION_BYTES unless `lazy` (`_expert_gather`: a value no pass
        materializes whole)."""
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
        for t in types if not lazy else ():  # math.prod: numpy's int64 wraps on absurd shapes
            if math.prod(t.shape) * t.dtype.itemsize > MAX_ACTIVATION_BYTES:
                raise FrontendError(
                    f"node {where!r} ({op.name}) would make a {t.dtype.value}{list(t.shape)} "
                    f"tensor, over {MAX_ACTIVATION_BYTES >> 40} TiB; check the bound dims "
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
        if not all(
            foldable_size(v.type.shape, v.type.dtype.itemsize) for n in new for v in n.outputs
        ):
            return outs  # data the bound dims make (a causal mask), not shape arithmetic
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
            self.env[t.name] = Value.constant(self.fresh(t.name), tensor_array(t))
        for name, data in self.placeholders.items():  # weight inputs: shapes, no data
            self.env[name] = Value.constant(self.fresh(name), data)
        inputs = []
        for inp in g.input:
            if inp.name in self.env:
                continue
            tt = inp.type.tensor_type
            if tt.elem_type not in DTYPES:
                raise FrontendError(
                    f"input {inp.name!r} has unsupported element type {tt.elem_type}"
                )
            shape = tuple(d.dim_value for d in tt.shape.dim)
            v = Value(self.fresh(inp.name), TensorType(DTYPES[tt.elem_type], shape))
            self.env[inp.name] = v
            inputs.append(v)
        order = _topological(g)
        unsupported = unsupported_ops(self.model)
        if unsupported:
            raise FrontendError(f"{len(unsupported)} unsupported ops: " + ", ".join(unsupported))
        for n in order:
            self.onnx_node = n
            mark = len(self.nodes)
            outs = CONVERTERS[op_key(n)](self, n, _attrs(n))
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


@_conv("Clip")
def _clip(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    """Clip(x, lo, hi) as Max(x, lo) then Min(., hi), each bound only where given (an input
    from opset 11, an attribute before): gpt-oss's clamped SwiGLU clips its gate and up."""
    x = c.get(n.input[0])
    if c.opset.get("", 0) < 11:
        lo = np.asarray(a["min"], x.type.dtype.numpy) if "min" in a else None
        hi = np.asarray(a["max"], x.type.dtype.numpy) if "max" in a else None
        bounds = [(Op.MAX, None if lo is None else c.const(lo, "clip_min"))]
        bounds.append((Op.MIN, None if hi is None else c.const(hi, "clip_max")))
    else:
        named = [n.input[i] if len(n.input) > i and n.input[i] else "" for i in (1, 2)]
        bounds = [
            (op, c.get(b) if b else None) for op, b in zip((Op.MAX, Op.MIN), named, strict=True)
        ]
    steps = [(op, b) for op, b in bounds if b is not None]
    if not steps:
        return c.emit(Op.IDENTITY, [x], out_names=n.output)
    for op, b in steps[:-1]:
        x = c.emit(op, [x, b])[0]
    return c.emit(steps[-1][0], [x, steps[-1][1]], out_names=n.output)


@_conv("Mod")
def _mod(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    return c.emit(Op.MOD, _ins(c, n), {"fmod": bool(a.get("fmod", 0))}, n.output)


@_conv("Dropout")
def _dropout(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    if c.read(n, 1):
        raise FrontendError(
            f"Dropout {n.name!r}: its mask output is used; training graphs are not supported"
        )
    return c.emit(Op.DROPOUT, [c.get(n.input[0])], out_names=n.output)


@_conv("Cast")
def _cast(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    to = a.get("to")
    if to not in DTYPES:
        raise FrontendError(f"Cast {n.name!r}: unsupported target type {to}")
    return c.emit(Op.CAST, [c.get(n.input[0])], {"to": DTYPES[to].value}, n.output)


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
    lazy = ax == 0 and _expert_gather(c, n, data, idx)
    return c.emit(Op.GATHER, [data, idx], {"axis": ax}, n.output, lazy=lazy)


@_conv("GatherElements")
def _gather_elements(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    data, idx = c.get(n.input[0]), c.get(n.input[1])
    ax = _axis(n, _attr_int(a, "axis", 0), data.type.rank)
    _check_indices(n, idx, [data.type.shape[ax]])
    return c.emit(Op.GATHER_ELEMENTS, _ins(c, n), {"axis": ax}, n.output)


@_conv("ScatterElements")
def _scatter_elements(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    data, idx = c.get(n.input[0]), c.get(n.input[1])
    ax = _axis(n, _attr_int(a, "axis", 0), data.type.rank)
    if a.get("reduction", "none") != "none":
        raise FrontendError(
            f"ScatterElements {n.name!r}: reduction {a['reduction']!r} is not supported (only none)"
        )
    _check_indices(n, idx, [data.type.shape[ax]])
    return c.emit(Op.SCATTER_ELEMENTS, _ins(c, n), {"axis": ax}, n.output)


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
    lazy = b == 0 and k == 1 and _expert_gather(c, n, data, idx)
    return c.emit(Op.GATHER_ND, _ins(c, n), {"batch_dims": b}, n.output, lazy=lazy)


def _expert_gather(c: _Converter, n: onnx.NodeProto, data: Value, idx: Value) -> bool:
    """Whether `n` (gathering whole slices along data's first axis) is a mixture-of-experts
    expert gather: a stacked weight (a constant or a `--weights inputs` placeholder, rank 3 or
    more: experts first) gathered by computed ids (the router's TopK), read by MatMuls only.

    Such a value is never materialized: fuse-moe replaces the pattern by a kernel that reads
    the stack and the ids, and its check evaluates the gathered weights lazily. onnxruntime
    would hold it when numerics run: `wsecc.check.checks.too_large` skips them, saying why.
    So its logical size (Mixtral 8x7B at 2,048 tokens: f32[4096, 28672, 4096], 1.75 TiB) is
    not held to MAX_ACTIVATION_BYTES; the MatMul's output still is."""
    return (
        data.is_const
        and data.type.rank >= 3
        and not idx.is_const
        and c.only_matmuls_read(n.output[0])
    )


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


@_conv("TopK")
def _top_k(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    x = c.get(n.input[0])
    k = c.const_input(n, 1, "k")
    ax = _axis(n, _attr_int(a, "axis", -1), x.type.rank)
    if (
        k is None
        or np.asarray(k).size != 1
        or not 0 <= int(np.asarray(k).reshape(-1)[0]) <= (x.type.shape[ax])
    ):
        raise FrontendError(f"TopK {n.name!r}: k must be one constant in [0, {x.type.shape[ax]}]")
    attrs = {
        "k": int(np.asarray(k).reshape(-1)[0]),
        "axis": ax,
        "largest": bool(_attr_int(a, "largest", 1)),
        "sorted": bool(_attr_int(a, "sorted", 1)),
    }
    return c.emit(Op.TOP_K, [x], attrs, n.output)


@_conv("LayerNormalization")
def _layer_norm(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    x, gamma = c.get(n.input[0]), c.get(n.input[1])
    if _axis(n, _attr_int(a, "axis", -1), x.type.rank) != x.type.rank - 1:
        raise FrontendError(f"LayerNormalization {n.name!r}: only the last axis is supported")
    if c.read(n, 1) or c.read(n, 2):
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
    if c.read(n, 1) or c.read(n, 2):
        raise FrontendError(
            f"SkipLayerNormalization {n.name!r}: mean/inv-std outputs are not supported"
        )
    emit_sum = c.read(n, 3)
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
    # A past input is what the frontend bound a generation graph's cache to: empty (its
    # present, the past grown by this step's keys, is then an output nobody reads)
    if len(n.input) > 4 and n.input[4] and c.get(n.input[4]).type.size != 0:
        raise FrontendError(
            f"Attention {n.name!r} has a past input that is not empty: wsecc binds a "
            "generation graph's past to length 0 (a past input must be a graph input)"
        )
    if any(len(n.input) > i and n.input[i] for i in (5, 6, 7)) or c.read(n, 1):
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
        kind = {1: "key_length", 2: "key_padding", 3: "full", 4: "full"}.get(mask.type.rank, "")
        if not kind:
            raise FrontendError(
                f"Attention {n.name!r}: a {mask.type.rank}-D mask_index is not supported"
            )
        if kind == "full":
            mask = _full_mask_index(c, n, mask, x.type.shape[1])
    scale = float(a.get("scale", 0.0)) or 1.0 / float(np.sqrt(dh))
    attrs = {
        "num_heads": heads, "head_dim": dh, "q_offset": 0, "k_offset": d, "v_offset": 2 * d,
        "scale": scale, "causal": bool(a.get("unidirectional", 0)), "mask": kind,
        "fill": float(a.get("mask_filter_value", -10000.0)), "nan_to_zero": False,
    }  # fmt: skip
    return c.emit(
        Op.ATTENTION, [qkv, qkv, qkv] + ([mask] if mask is not None else []), attrs, n.output[:1]
    )


@_conv("MoE", domain="com.microsoft")
def _ms_moe(c: _Converter, n: onnx.NodeProto, a: dict[str, Any]) -> list[Value]:
    """onnxruntime's MoE (as onnxruntime-genai writes it) as the `moe` op: softmax over the
    router_probs input (logits, x·W_r + b_r, which the op reads from the router's MatMul), the
    top k, renormalised with normalize_routing_weights; fc1 [E, 2I, H] holding gate and up
    interleaved (swiglu_fusion 1) or side by side (2), fc2 [E, H, I], optional biases; the
    swiglu activation G·σ(alpha G)·(L + beta), clamped at swiglu_limit when given. What the
    moe kernel does not compute (another activation, FC3, the sparse mixer) is refused."""
    name = f"MoE {n.name!r}"
    act, fusion = a.get("activation_type", "relu"), _attr_int(a, "swiglu_fusion", 0)
    if isinstance(act, bytes):
        act = act.decode()
    if act != "swiglu" or fusion not in (1, 2):
        raise FrontendError(
            f"{name}: activation_type {act!r} with swiglu_fusion {fusion} is not supported; "
            "wsecc's moe kernel computes SwiGLU experts with fc1 holding gate and up "
            "(activation_type swiglu, swiglu_fusion 1 or 2)"
        )
    if _attr_int(a, "use_sparse_mixer", 0) or any(len(n.input) > i and n.input[i] for i in (6, 7)):
        raise FrontendError(f"{name}: the sparse mixer and fc3 are not supported")
    alpha, beta = float(a.get("activation_alpha", 1.0)), float(a.get("activation_beta", 0.0))
    limit = a.get("swiglu_limit")
    if limit is None and (alpha, beta) == (1.0, 0.0):
        activation: dict[str, Any] = {"activation": "silu"}
    elif limit is not None and float(limit) > 0 and beta == 1.0:
        activation = {"activation": "clamped_silu", "alpha": alpha, "limit": float(limit)}
    else:
        raise FrontendError(
            f"{name}: swiglu with alpha {alpha}, beta {beta}, limit {limit} is neither SwiGLU "
            "(alpha 1, beta 0, no limit) nor gpt-oss's clamped form (beta 1, a limit)"
        )
    x = c.get(n.input[0])
    wr, br = _moe_router(c, n, x)

    def weight(i: int) -> np.ndarray | None:
        if len(n.input) <= i or not n.input[i]:
            return None
        v = c.get(n.input[i])
        if v.const is None:
            raise FrontendError(f"{name}: input {i} ({n.input[i]!r}) is not a constant")
        return np.asarray(v.const)

    fc1, b1, fc2, b2 = weight(2), weight(3), weight(4), weight(5)
    assert fc1 is not None and fc2 is not None
    e, h = wr.shape[1], x.type.shape[-1]
    if fc1.ndim != 3 or fc1.shape[0] != e or fc1.shape[2] != h or fc1.shape[1] % 2:
        raise FrontendError(f"{name}: fc1 must be [E={e}, 2 I, H={h}], got {list(fc1.shape)}")
    i = fc1.shape[1] // 2
    if fc2.shape != (e, h, i):
        raise FrontendError(f"{name}: fc2 must be [E, H, I] = {[e, h, i]}, got {list(fc2.shape)}")
    gate, up = (
        (slice(0, None, 2), slice(1, None, 2)) if fusion == 1 else (slice(0, i), slice(i, None))
    )
    ws = [
        fc1[:, gate, :].transpose(0, 2, 1),
        fc1[:, up, :].transpose(0, 2, 1),
        fc2.transpose(0, 2, 1),
    ]
    attrs: dict[str, Any] = {
        "k": _attr_int(a, "k", 1), "router": "softmax",
        "normalize": bool(_attr_int(a, "normalize_routing_weights", 0)), "shared": "none",
        **activation,
    }  # fmt: skip
    if br is not None or b1 is not None or b2 is not None:
        dt = fc1.dtype
        b1 = np.zeros((e, 2 * i), dt) if b1 is None else b1
        ws += [
            np.zeros(e, dt) if br is None else br,
            b1[:, gate],
            b1[:, up],
            np.zeros((e, h), dt) if b2 is None else b2,
        ]
        attrs["bias"] = True
    consts = [c.const(np.ascontiguousarray(w), f"{n.name}/moe") for w in ws]
    return c.emit(Op.MOE, [x, c.const(wr, f"{n.name}/router"), *consts], attrs, n.output[:1])


def _moe_router(c: _Converter, n: onnx.NodeProto, x: Value) -> tuple[np.ndarray, np.ndarray | None]:
    """(W_r [H, E], b_r [E] or None) of the MatMul (+ Add) that computes a MoE's router_probs
    from its input x (or a Reshape of x), or a FrontendError: the moe kernel computes its router."""
    producer = {o: m for m in c.nodes for o in m.outputs}
    logits = c.get(n.input[1])
    m, bias = producer.get(logits), None
    if m is not None and m.op is Op.ADD:
        const = [v for v in m.inputs if v.const is not None and v.type.rank == 1]
        other = [v for v in m.inputs if v.const is None]
        if len(const) == 1 and len(other) == 1:
            bias = np.asarray(const[0].const)
            m = producer.get(other[0])
    if m is not None and m.op is Op.MATMUL and m.inputs[1].const is not None:
        xr = m.inputs[0]
        view = producer.get(xr)
        if xr is x or (view is not None and view.op is Op.RESHAPE and view.inputs[0] is x):
            w = np.asarray(m.inputs[1].const)
            if w.ndim == 2 and w.shape[0] == x.type.shape[-1]:
                return w, bias
    raise FrontendError(
        f"MoE {n.name!r}: its router_probs are not x·W (+ b) with a constant W [H, E] of its "
        "input x; wsecc's moe kernel computes the router's logits itself"
    )


def _full_mask_index(c: _Converter, n: onnx.NodeProto, mask: Value, s: int) -> Value:
    """The [B, S, S] operand of a "full" mask from a 3-D mask_index [B, S, S] or Megatron's 4-D
    [B, 1, M, M] (M ≥ S, read at rows past .. past + S, keys 0 .. past + S: past is 0 here).
    onnxruntime keeps a pair where the mask is > 0, wsecc where it is not 0: alike on 0/1."""
    b = mask.type.shape[0]
    if mask.type.rank == 3:
        if mask.type.shape != (b, s, s):
            raise FrontendError(
                f"Attention {n.name!r}: a 3-D mask_index must be [B, S, S], got {mask.type.shape}"
            )
        return mask
    if mask.type.shape[1] != 1 or min(mask.type.shape[2:]) < s:
        raise FrontendError(
            f"Attention {n.name!r}: a 4-D mask_index must be [B, 1, M, M] with M ≥ the sequence "
            f"({s}), got {mask.type.shape}"
        )
    corner = c.emit(
        Op.SLICE, [mask], {"starts": (0, 0), "ends": (s, s), "axes": (2, 3), "steps": (1, 1)}
    )[0]
    return c.emit(Op.RESHAPE, [corner], {"shape": (b, s, s)})[0]


# ================================================================ entry point


def to_graph(
    model: onnx.ModelProto,
    weights: Sequence[TensorProto] = (),
    placeholders: Mapping[str, np.ndarray] | None = None,
) -> Graph:
    """Convert a bound, folded model (with `weights` beside its initializers, as `fold` returns
    them) to the wsecc Graph (raises FrontendError). `placeholders` are the data-less constants
    that stand for graph inputs that are weights (`--weights inputs`): those inputs become
    these constants."""
    return _Converter(model, weights, placeholders).run()


def raw_op_histogram(model: onnx.ModelProto) -> dict[str, int]:
    hist: dict[str, int] = {}
    for n in model.graph.node:
        key = n.op_type if not n.domain or n.domain == "ai.onnx" else f"{n.domain}.{n.op_type}"
        hist[key] = hist.get(key, 0) + 1
    return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))


def unsupported_ops(model: onnx.ModelProto) -> list[str]:
    """Every node whose (domain, op_type) has no converter, as 'OpType 'node-name''."""
    return sorted(
        {
            f"{n.op_type}{'' if not n.domain else ' (' + n.domain + ')'} {n.name!r}"
            for n in model.graph.node
            if op_key(n) not in CONVERTERS
        }
    )


def op_key(n: onnx.NodeProto) -> tuple[str, str]:
    return ("" if n.domain in ("", "ai.onnx") else n.domain, n.op_type)
