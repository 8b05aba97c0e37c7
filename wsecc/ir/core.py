"""Core IR types: DType, TensorType, Value, Op, Node, Graph.

Values have identity semantics (two values with the same name and type are still different
values); constants are values that carry their data. A Graph is immutable: passes build new
graphs. ONNX op_type strings never appear here — the frontend maps them onto `Op` once.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class IRError(Exception):
    """A malformed IR object or an operation the IR cannot express."""


class DType(enum.Enum):
    FLOAT32 = "f32"
    FLOAT16 = "f16"
    FLOAT64 = "f64"
    INT64 = "i64"
    INT32 = "i32"
    INT8 = "i8"
    UINT8 = "u8"
    BOOL = "bool"

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(_NUMPY[self])

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.FLOAT32, DType.FLOAT16, DType.FLOAT64)

    @staticmethod
    def from_numpy(dt: np.dtype) -> DType:
        for k, v in _NUMPY.items():
            if np.dtype(v) == dt:
                return k
        raise IRError(f"unsupported numpy dtype {dt}")


_NUMPY = {
    DType.FLOAT32: "float32",
    DType.FLOAT16: "float16",
    DType.FLOAT64: "float64",
    DType.INT64: "int64",
    DType.INT32: "int32",
    DType.INT8: "int8",
    DType.UINT8: "uint8",
    DType.BOOL: "bool",
}


@dataclass(frozen=True)
class TensorType:
    dtype: DType
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        if any((not isinstance(d, int)) or d < 0 for d in self.shape):
            raise IRError(f"shape must be non-negative ints, got {self.shape}")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __str__(self) -> str:
        return f"{self.dtype.value}[{','.join(map(str, self.shape))}]"


@dataclass(frozen=True, eq=False)
class Value:
    """An SSA value. `const` holds the data of a constant (weights, folded shapes)."""

    name: str
    type: TensorType
    const: np.ndarray | None = field(default=None, repr=False)

    @property
    def is_const(self) -> bool:
        return self.const is not None

    @staticmethod
    def constant(name: str, data: np.ndarray) -> Value:
        data = np.asarray(data)
        data.setflags(write=False)
        return Value(name, TensorType(DType.from_numpy(data.dtype), tuple(data.shape)), data)

    def __repr__(self) -> str:
        return f"%{self.name}:{self.type}"


class Op(enum.Enum):
    # elementwise, binary (numpy broadcasting)
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    POW = "pow"
    MAX = "max"
    MIN = "min"
    MOD = "mod"
    AND = "and"
    OR = "or"
    XOR = "xor"
    EQUAL = "equal"
    LESS = "less"
    LESS_EQUAL = "less_equal"
    GREATER = "greater"
    GREATER_EQUAL = "greater_equal"
    # elementwise, unary
    NEG = "neg"
    ABS = "abs"
    SQRT = "sqrt"
    RECIPROCAL = "reciprocal"
    EXP = "exp"
    LOG = "log"
    ERF = "erf"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    RELU = "relu"
    NOT = "not"
    ISNAN = "isnan"
    ISINF = "isinf"
    CAST = "cast"
    IDENTITY = "identity"
    DROPOUT = "dropout"
    # elementwise, ternary
    WHERE = "where"
    # contraction
    MATMUL = "matmul"
    GEMM = "gemm"
    EINSUM = "einsum"
    # layout and indexing (all shapes static: every shape operand is an attribute)
    RESHAPE = "reshape"
    TRANSPOSE = "transpose"
    EXPAND = "expand"
    CONCAT = "concat"
    SLICE = "slice"
    SPLIT = "split"
    GATHER = "gather"
    GATHER_ND = "gather_nd"
    GATHER_ELEMENTS = "gather_elements"
    SCATTER_ELEMENTS = "scatter_elements"
    TILE = "tile"
    # reductions and normalisations
    REDUCE_MEAN = "reduce_mean"
    REDUCE_SUM = "reduce_sum"
    REDUCE_MAX = "reduce_max"
    CUMSUM = "cumsum"
    SOFTMAX = "softmax"
    TOP_K = "top_k"
    # fused transformer ops (produced by the passes or by onnxruntime-fused input graphs)
    LINEAR = "linear"
    LAYER_NORM = "layer_norm"
    RMS_NORM = "rms_norm"
    GATED_LINEAR = "gated_linear"
    GELU = "gelu"
    ATTENTION = "attention"
    EMBEDDING = "embedding"
    LM_HEAD = "lm_head"
    MOE = "moe"


FUSED_OPS = frozenset(
    {
        Op.LINEAR,
        Op.GATED_LINEAR,
        Op.LAYER_NORM,
        Op.RMS_NORM,
        Op.GELU,
        Op.ATTENTION,
        Op.EMBEDDING,
        Op.LM_HEAD,
        Op.MOE,
    }
)

AttrValue = int | float | str | bool | tuple[Any, ...]


@dataclass(frozen=True, eq=False)
class Node:
    """One operation. `origin` names the ONNX nodes it came from (provenance)."""

    op: Op
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    attrs: tuple[tuple[str, AttrValue], ...] = ()
    name: str = ""
    origin: tuple[str, ...] = ()

    def attr(self, key: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def attr_dict(self) -> dict[str, AttrValue]:
        return dict(self.attrs)

    @property
    def output(self) -> Value:
        if len(self.outputs) != 1:
            raise IRError(f"{self.op.name} {self.name!r} has {len(self.outputs)} outputs")
        return self.outputs[0]


def make_attrs(attrs: Mapping[str, AttrValue] | None) -> tuple[tuple[str, AttrValue], ...]:
    """Canonical, hashable attribute tuple (sorted by name, lists become tuples)."""
    if not attrs:
        return ()

    def freeze(v: Any) -> AttrValue:
        if isinstance(v, list | tuple):
            return tuple(freeze(x) for x in v)
        if isinstance(v, np.generic):
            return v.item()
        return v

    return tuple(sorted((k, freeze(v)) for k, v in attrs.items()))


@dataclass(frozen=True, eq=False)
class Graph:
    """A function from `inputs` to `outputs`; `nodes` are in topological order."""

    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    nodes: tuple[Node, ...]
    name: str = "main"

    def constants(self) -> list[Value]:
        """Constant values used by nodes or returned, in first-use order, each once."""
        seen: dict[int, Value] = {}
        for n in self.nodes:
            for v in n.inputs:
                if v.is_const and id(v) not in seen:
                    seen[id(v)] = v
        for v in self.outputs:
            if v.is_const and id(v) not in seen:
                seen[id(v)] = v
        return list(seen.values())

    def producers(self) -> dict[Value, Node]:
        return {v: n for n in self.nodes for v in n.outputs}

    def users(self) -> dict[Value, list[Node]]:
        out: dict[Value, list[Node]] = {}
        for n in self.nodes:
            for v in n.inputs:
                out.setdefault(v, []).append(n)
        return out

    def op_histogram(self) -> dict[str, int]:
        hist: dict[str, int] = {}
        for n in self.nodes:
            hist[n.op.name] = hist.get(n.op.name, 0) + 1
        return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def replace(
        self,
        nodes: Iterable[Node],
        outputs: tuple[Value, ...] | None = None,
    ) -> Graph:
        return Graph(
            self.inputs, self.outputs if outputs is None else outputs, tuple(nodes), self.name
        )
