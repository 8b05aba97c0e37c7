"""lower: the fused Graph becomes a KernelGraph — one kernel per compute op, flows between them.

Kernels, per sample (one sequence of the bound batch):
  Embedding -> embedding; Linear -> linear (bias, activation epilogue); LMHead -> lm_head;
  LayerNorm -> layernorm (with its residual skip input); Attention -> attention (causal,
  padding mask); any other op that computes -> elementwise (Add, Mul, ...) or generic.
Layout ops (Reshape, Transpose, Split, Slice, Expand, Cast) are not kernels: their data is
re-addressed on the way, so a flow runs from the producing kernel through them to the
consumer. Flows carry the producer's elements per sample; graph inputs and outputs are ports.
Provenance: each kernel keeps the ONNX node names of the op it came from.
Requires: a fused graph (verify(..., allow_unfused=False) holds).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from wsecc.passes.context import PassContext

from wsecc.ir.core import DType, Graph, Node, Op, Value
from wsecc.kernels import Flow, Kernel, KernelGraph, KernelKind, Port

_VIEW_OPS = frozenset(
    {Op.RESHAPE, Op.TRANSPOSE, Op.SPLIT, Op.SLICE, Op.EXPAND, Op.CAST, Op.IDENTITY, Op.DROPOUT}
)
_ACTIVATION = {
    "none": "",
    "relu": "relu",
    "tanh": "tanh",
    "gelu": "gelu_erf",
    "gelu_tanh": "gelu_tanh",
}
_ELEMENTWISE = frozenset(
    {
        Op.ADD,
        Op.SUB,
        Op.MUL,
        Op.DIV,
        Op.MAX,
        Op.MIN,
        Op.WHERE,
        Op.GELU,
        Op.TANH,
        Op.RELU,
        Op.SIGMOID,
        Op.NEG,
        Op.EXP,
        Op.SQRT,
    }
)


def _rows(v: Value, batch: int) -> int:
    return v.type.size // max(v.type.shape[-1], 1) // batch if v.type.rank else 1


def _embedding(n: Node, b: int) -> tuple[KernelKind, dict[str, object]]:
    tables = n.inputs[1::2]
    out = n.output
    return KernelKind.EMBEDDING, {
        "vocab": sum(t.type.shape[0] for t in tables),
        "dim": out.type.shape[-1],
        "rows": _rows(out, b),
        "n_tables": len(tables),
    }


def _linear(n: Node, b: int) -> tuple[KernelKind, dict[str, object]]:
    x, w = n.inputs[0], n.inputs[1]
    return KernelKind.LINEAR, {
        "tokens": _rows(x, b),
        "K": w.type.shape[0],
        "N": w.type.shape[1],
        "has_bias": bool(n.attr("has_bias")),
        "activation": _ACTIVATION[n.attr("activation")],
        "residual": False,
    }


def _lm_head(n: Node, b: int) -> tuple[KernelKind, dict[str, object]]:
    x, w = n.inputs[0], n.inputs[1]
    return KernelKind.LM_HEAD, {
        "rows": _rows(x, b),
        "K": w.type.shape[0],
        "vocab": w.type.shape[1],
        "tied": bool(n.attr("tied")),
    }


def _layernorm(n: Node, b: int) -> tuple[KernelKind, dict[str, object]]:
    x = n.inputs[0]
    return KernelKind.LAYERNORM, {
        "rows": _rows(x, b),
        "dim": x.type.shape[-1],
        "has_residual": bool(n.attr("has_skip")),
    }


def _attention(n: Node, b: int) -> tuple[KernelKind, dict[str, object]]:
    return KernelKind.ATTENTION, {
        "seq": n.inputs[0].type.shape[1],
        "heads": n.attr("num_heads"),
        "head_dim": n.attr("head_dim"),
        "causal": bool(n.attr("causal")),
        "padding_mask": n.attr("mask") != "none",
    }


def _elementwise_op(n: Node) -> str:
    """The op's name in the elementwise cost table (a GELU names its formula)."""
    if n.op is Op.GELU:
        return "gelu_tanh" if n.attr("approximate") == "tanh" else "gelu_erf"
    return n.op.value


def _other(n: Node, b: int) -> tuple[KernelKind, dict[str, object]]:
    out = n.outputs[0]
    if n.op in _ELEMENTWISE and out.type.rank:
        return KernelKind.ELEMENTWISE, {
            "rows": _rows(out, b),
            "dim": out.type.shape[-1],
            "op": _elementwise_op(n),
            "inputs": sum(not v.is_const for v in n.inputs),
        }
    return KernelKind.GENERIC, {
        "op": n.op.value,
        "flops": max(1, out.type.size // b),
        "weight_elems": sum(v.type.size for v in n.inputs if v.is_const and v.type.size > 1),
        "elements": max(1, out.type.size // b),
    }


_KERNELS: dict[Op, Callable[[Node, int], tuple[KernelKind, dict[str, object]]]] = {
    Op.EMBEDDING: _embedding,
    Op.LINEAR: _linear,
    Op.LM_HEAD: _lm_head,
    Op.LAYER_NORM: _layernorm,
    Op.ATTENTION: _attention,
}


_LAYER = re.compile(r"(?:^|[/._])(?:h|layer|layers|block|blocks)[._](\d+)(?:[/._]|$)")


def _kernel_name(n: Node, used: set[str]) -> str:
    """'<layer>.<op>' when the ONNX names say which layer ('h.3', 'layer.3'), else '<op>'."""
    layer = next((m.group(1) for o in n.origin for m in [_LAYER.search(o)] if m), None)
    base = f"L{layer}.{n.op.value}" if layer is not None else n.op.value
    name, i = base, 1
    while name in used:
        i += 1
        name = f"{base}.{i}"
    used.add(name)
    return name


def kernel_names(graph: Graph) -> dict[Node, str]:
    """The kernel each node becomes, by name, in node order; view ops are absent (they are not
    kernels). `lower_to_kernels` names its kernels with this, so consumers that walk the fused
    graph (the functional simulator) find a node's kernel without re-deriving names."""
    used: set[str] = set()
    return {n: _kernel_name(n, used) for n in graph.nodes if n.op not in _VIEW_OPS}


def lower_to_kernels(graph: Graph, ctx: PassContext | None = None) -> KernelGraph:
    b = graph.inputs[0].type.shape[0] if graph.inputs and graph.inputs[0].type.rank else 1
    producer = graph.producers()
    kernel_of: dict[Node, Kernel] = {}
    kernels: list[Kernel] = []
    ports_in = {
        v: Port(v.name, max(1, v.type.size // b), "act" if v.type.dtype.is_float else "i32")
        for v in graph.inputs
    }
    for n, name in kernel_names(graph).items():
        kind, params = _KERNELS.get(n.op, _other)(n, b)
        k = Kernel(name, kind, params, n.origin)
        kernel_of[n] = k
        kernels.append(k)

    def source(v: Value) -> Kernel | Port | None:
        while True:
            if v in ports_in:
                return ports_in[v]
            p = producer.get(v)
            if p is None:
                return None  # a constant
            if p in kernel_of:
                return kernel_of[p]
            v = p.inputs[0]

    flows: list[Flow] = []
    seen: set[tuple[str, str, str]] = set()
    for n, k in kernel_of.items():
        for i, v in enumerate(n.inputs):
            src = source(v)
            if src is None:
                continue
            edge = None
            name = v.name
            if n.op is Op.ATTENTION:
                name = ("q", "k", "v", "mask")[i]
                edge = "N" if i == 0 else "W"
            key = (src.name, k.name, str(id(v)) if n.op is not Op.ATTENTION else name)
            if key in seen:
                continue
            seen.add(key)
            elem = "act" if v.type.dtype.is_float else "i32"
            flows.append(
                Flow.between(
                    src, k, max(1, v.type.size // b), elem_type=elem, name=name, dst_edge=edge
                )
            )
    outputs = []
    for v in graph.outputs:
        port = Port(
            v.name,
            max(1, v.type.size // b),
            "act" if v.type.dtype in (DType.FLOAT32, DType.FLOAT16) else "i32",
        )
        outputs.append(port)
        src = source(v)
        if src is not None:
            flows.append(Flow.between(src, port, port.elems_per_sample, name=v.name))
    seq = graph.inputs[0].type.shape[1] if graph.inputs and graph.inputs[0].type.rank > 1 else 1
    kg = KernelGraph(
        graph.name, seq, tuple(kernels), tuple(flows), tuple(ports_in.values()), tuple(outputs)
    )
    kg.verify()
    return kg
