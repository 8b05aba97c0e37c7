"""lower: the fused Graph becomes a KernelGraph — one kernel per compute op, flows between them.

Kernels, per sample (one sequence of the bound batch): each kind's definition says which fused
ops it lowers and with what params (`wsecc.kernels.kinds`: Embedding -> embedding; Linear ->
linear with its bias and activation epilogue; LMHead -> lm_head; LayerNorm -> layernorm with its
residual skip input; Attention -> attention, causal, padding mask; Add, Mul, ... ->
elementwise); any other op that computes becomes generic.
Layout ops (Reshape, Transpose, Split, Slice, Expand, Cast) are not kernels: their data is
re-addressed on the way, so a flow runs from the producing kernel through them to the
consumer. Flows carry the producer's elements per sample; graph inputs and outputs are ports,
an input port the elements kernels read of it (all, unless every read slices it).
Provenance: each kernel keeps the ONNX node names of the op it came from.
Requires a FUSED graph (the pass manager checks it), produces KERNELS.
"""

from __future__ import annotations

import re
from collections import defaultdict

import numpy as np

from wsecc.ir.core import DType, Graph, Node, Op, Value
from wsecc.ir.rewrite import eval_nodes
from wsecc.kernels import Flow, Kernel, KernelGraph, Port, lower_node
from wsecc.passdef import Level, Pass, PassContext

_VIEW_OPS = frozenset(
    {Op.RESHAPE, Op.TRANSPOSE, Op.SPLIT, Op.SLICE, Op.EXPAND, Op.CAST, Op.IDENTITY, Op.DROPOUT}
)
_LAYER = re.compile(r"(?:^|[/._])(?:h|layer|layers|block|blocks)[._](\d+)(?:[/._]|$)")


def _kernel_name(n: Node, used: set[str]) -> str:
    """'<layer>.<op>' when the ONNX names say which layer ('h.3', 'layer.3'), else '<op>'; a
    shard of a moe op (`split-moe`) adds its experts, '<layer>.moe.e0-63'."""
    layer = next((m.group(1) for o in n.origin for m in [_LAYER.search(o)] if m), None)
    base = f"L{layer}.{n.op.value}" if layer is not None else n.op.value
    if n.op is Op.MOE and "first" in n.attr_dict:
        first = int(n.attr("first"))
        base += f".e{first}-{first + n.inputs[2].type.shape[0] - 1}"
    name, i = base, 1
    while name in used:
        i += 1
        name = f"{base}.{i}"
    used.add(name)
    return name


def kernel_names(graph: Graph) -> dict[Node, str]:
    """The kernel each node becomes, by name, in node order; view ops are absent (they are not
    kernels). `lower_to_kernels` names its kernels with this, so consumers that walk the fused
    graph (the functional simulator) find a node's kernel without re-deriving names. A kernel
    is never named like a graph input or output: their ports share the name space, and torch
    names an output it was given no name for after the op that makes it ('linear')."""
    used = {v.name for v in (*graph.inputs, *graph.outputs)}
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
        kind, params = lower_node(n, b)
        k = Kernel(name, kind, params, n.origin)
        kernel_of[n] = k
        kernels.append(k)

    reads: dict[Value, list[tuple[Value, list[Node]]]] = defaultdict(list)

    def source(v: Value) -> Kernel | Port | None:
        read = v
        chain: list[Node] = []
        while True:
            if v in ports_in:
                reads[v].append((read, chain[::-1]))
                return ports_in[v]
            p = producer.get(v)
            if p is None:
                return None  # a constant
            if p in kernel_of:
                return kernel_of[p]
            chain.append(p)
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
    inputs = tuple(
        Port(p.name, _elems_read(v, reads[v], b), p.elem_type) if reads[v] else p
        for v, p in ports_in.items()
    )
    seq = graph.inputs[0].type.shape[1] if graph.inputs and graph.inputs[0].type.rank > 1 else 1
    kg = KernelGraph(graph.name, seq, tuple(kernels), tuple(flows), inputs, tuple(outputs))
    kg.verify()
    return kg


INDEX_PROBE_ELEMS = 1 << 26
"""The largest input `_elems_read` runs its slices on element by element (an int64 index per
element: 512 MiB); past it, what the slices read is summed."""


def _elems_read(port: Value, reads: list[tuple[Value, list[Node]]], b: int) -> int:
    """Elements per sample of the input `port` that kernels read through the view chains
    `reads`: all of them, unless every chain slices it; then the distinct elements the chains
    keep (the host sends those: Megatron's [B, 1, max, max] mask is read at its [S, S]
    corner), found by running the chains on the input's element indices."""
    whole = max(1, port.type.size // b)
    if not all(any(n.op is Op.SLICE for n in chain) for _, chain in reads):
        return whole
    if port.type.size > INDEX_PROBE_ELEMS:  # each chain's elements, overlaps counted twice
        return max(1, min(whole, sum(v.type.size for v, _ in reads) // b))
    iota = np.arange(port.type.size).reshape(port.type.shape)
    read = np.unique(np.concatenate([eval_nodes(c, {port: iota})[v].ravel() for v, c in reads]))
    return max(1, min(whole, read.size // b))


PASS = Pass("lower", lower_to_kernels, requires=Level.FUSED, produces=Level.KERNELS)
