"""Analyses computed on demand from a Graph: parameters, FLOPs per sample, fused-op provenance."""

from __future__ import annotations

import numpy as np

from wsecc.ir.arrays import same_data
from wsecc.ir.core import FUSED_OPS, Graph
from wsecc.passes.lower import lower_to_kernels

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
        if any(same_data(c, y) for y in seen.get(key, ())) or any(
            same_data(c, y.T) for y in transposed
        ):
            continue
        seen.setdefault(key, []).append(c)
        total += int(c.size)
    return total


def flops_per_sample(graph: Graph) -> int:
    """FLOPs of one sample (vector ops counted as flops) of a fused graph, as its kernels do the
    work: each kind's one formula (`wsecc.kernels.kinds`), the figure sizing's ceiling and the
    utilization use too."""
    return lower_to_kernels(graph).flops_per_sample


def fused_ops(graph: Graph) -> list[dict[str, object]]:
    """Each fused op with the ONNX nodes it came from."""
    return [
        {"op": n.op.name, "name": n.name, "onnx_nodes": list(n.origin)}
        for n in graph.nodes
        if n.op in FUSED_OPS
    ]
