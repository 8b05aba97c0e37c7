"""Analyses computed on demand from a Graph: parameters, FLOPs, fused-op provenance."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from wsecc.ir.core import FUSED_OPS, Graph, Node, Op

_SAMPLES = 64


def _fingerprint(a: np.ndarray) -> tuple[tuple[int, ...], str, bytes]:
    """Shape, dtype and 64 evenly spaced elements: equal arrays have equal fingerprints, and
    different weights almost never do, so only colliding ones are compared in full."""
    idx = np.linspace(0, a.size - 1, num=min(a.size, _SAMPLES), dtype=np.int64)
    return a.shape, a.dtype.str, a.flat[idx].tobytes()


def param_count(graph: Graph) -> int:
    """Elements of the model's parameters: float constants with more than one element, each
    counted once — identical copies and transposed copies (a tied LM head stored as Wᵀ) too."""
    seen: dict[tuple[tuple[int, ...], str, bytes], list[np.ndarray]] = {}
    total = 0
    for v in graph.constants():
        c = v.const
        if c is None or c.size < 2 or c.dtype.kind != "f":
            continue
        key = _fingerprint(c)
        transposed = seen.get(_fingerprint(c.T), ()) if c.ndim == 2 else ()
        if any(np.array_equal(c, y) for y in seen.get(key, ())) or any(
            np.array_equal(c, y.T) for y in transposed
        ):
            continue
        seen.setdefault(key, []).append(c)
        total += int(c.size)
    return total


def _linear_flops(n: Node) -> int:
    x, w = n.inputs[0], n.inputs[1]
    rows = x.type.size // x.type.shape[-1]
    return 2 * rows * w.type.shape[0] * w.type.shape[1]


def _matmul_flops(n: Node) -> int:
    return 2 * n.output.type.size * n.inputs[0].type.shape[-1]


def _attention_flops(n: Node) -> int:
    b, sq, _ = n.inputs[0].type.shape
    sk = n.inputs[1].type.shape[1]
    h, dh = n.attr("num_heads"), n.attr("head_dim")
    return 4 * b * h * sq * sk * dh  # q·kᵀ and p·v, dense (a causal kernel may skip half)


_FLOPS: dict[Op, Callable[[Node], int]] = {
    Op.LINEAR: _linear_flops,
    Op.LM_HEAD: _linear_flops,
    Op.MATMUL: _matmul_flops,
    Op.GEMM: _matmul_flops,
    Op.ATTENTION: _attention_flops,
    Op.LAYER_NORM: lambda n: 8 * n.outputs[0].type.size,
    Op.GELU: lambda n: 8 * n.output.type.size,
    Op.SOFTMAX: lambda n: 5 * n.output.type.size,
}


def flops(graph: Graph) -> int:
    """Floating-point operations of one run of the graph (all batch rows)."""
    total = 0
    for n in graph.nodes:
        fn = _FLOPS.get(n.op)
        if fn is not None:
            total += fn(n)
        elif n.outputs and n.outputs[0].type.dtype.is_float:
            total += n.outputs[0].type.size
    return total


def batch_size(graph: Graph) -> int:
    return graph.inputs[0].type.shape[0] if graph.inputs and graph.inputs[0].type.rank else 1


def fused_ops(graph: Graph) -> list[dict[str, object]]:
    """Each fused op with the ONNX nodes it came from."""
    return [
        {"op": n.op.name, "name": n.name, "onnx_nodes": list(n.origin)}
        for n in graph.nodes
        if n.op in FUSED_OPS
    ]
