"""The reference interpreter: evaluates a Graph with the numpy rules of `wsecc.ir.rules`."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from wsecc.ir.core import Graph, IRError, Node, Value
from wsecc.ir.rules import evaluate_op

Operands = Callable[[Node, list[np.ndarray]], list[np.ndarray]]


def evaluate(
    graph: Graph,
    feeds: Mapping[str, np.ndarray],
    *,
    keep_all: bool = False,
    operands: Operands | None = None,
) -> dict[Value, np.ndarray]:
    """Run `graph` on `feeds` (by input name). Returns outputs (or every value, `keep_all`).

    Intermediate values are freed as soon as their last user has run unless `keep_all`.
    `operands(node, args)`, when given, returns the arguments the node runs on (the gradient's
    mixed precision rounds a contraction's operands to float16 there: `wsecc.ir.grad`).
    """
    env: dict[Value, np.ndarray] = {}
    for v in graph.inputs:
        if v.name not in feeds:
            raise IRError(f"missing input {v.name!r}")
        arr = np.asarray(feeds[v.name])
        if arr.shape != v.type.shape:
            raise IRError(f"input {v.name!r} has shape {arr.shape}, the graph wants {v.type.shape}")
        env[v] = arr.astype(v.type.dtype.numpy, copy=False)
    last_use: dict[Value, int] = {}
    for i, n in enumerate(graph.nodes):
        for v in n.inputs:
            last_use[v] = i
    keep = set(graph.outputs)
    for i, n in enumerate(graph.nodes):
        args = [v.const if v.is_const else env[v] for v in n.inputs]
        if operands is not None:
            args = operands(n, args)  # type: ignore[arg-type]
        try:
            results = evaluate_op(n.op, args, n.attr_dict)  # type: ignore[arg-type]
        except (IRError, ValueError, IndexError) as e:
            raise IRError(f"{n.op.name} {n.name!r}: {e}") from e
        for v, r in zip(n.outputs, results, strict=True):
            env[v] = np.asarray(r, dtype=v.type.dtype.numpy).reshape(v.type.shape)
        if not keep_all:
            for v in n.inputs:
                if last_use.get(v) == i and v not in keep and not v.is_const:
                    env.pop(v, None)
    if keep_all:
        return env
    return {v: (v.const if v.is_const else env[v]) for v in graph.outputs}  # type: ignore[misc]


def run(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Outputs by name."""
    return {v.name: a for v, a in evaluate(graph, feeds).items()}
