"""fuse-swiglu: the gated half of a SwiGLU MLP becomes one `GatedLinear`.

`Mul(silu(Linear(x, W_gate)), Linear(x, W_up)) -> GatedLinear(x, W_gate, W_up)`, either operand
order; the down projection stays a Linear. SiLU is matched by *evaluation*, as fuse-gelu
matches GELU: the elementwise region from the gate Linear's output to the Mul's operand (scalar
constants only, no escaping intermediates) must compute z·σ(z) on probe values, so
`z * Sigmoid(z)`, `Sigmoid(z) * z` and `z / (1 + Exp(-z))` all match. Both Linears must read the
same x, have no activation, agree on bias, and be used only here.

Why one kernel rather than two linears and an elementwise multiply: the gate and up
projections read the same activation, so one region holding both weight tiles receives x once,
and the product leaves it as N values per token instead of 2N; the SiLU and the multiply are
the matmul's epilogue on the finished sums (`wsecc.kernels.kinds.matmul`, `gated_linear`).
Requires fuse-linear's Linears; runs before fuse-gelu folds activations into Linears.
"""

from __future__ import annotations

import numpy as np

from wsecc.ir.core import Graph, Node, Op, Value
from wsecc.ir.rewrite import (
    ELEMENTWISE,
    GraphView,
    NoMatch,
    Replacement,
    make_node,
    origin_of,
    probe_function,
    region_between,
    rewrite_nodes,
)
from wsecc.ir.rules import silu
from wsecc.pm import Pass, PassContext

_PROBE = np.linspace(-8.0, 8.0, 401, dtype=np.float32)
_SILU = silu(_PROBE.astype(np.float64))


def _is_silu(region: list[Node], z: Value) -> bool:
    y = probe_function(region, z, _PROBE)
    return y is not None and bool(np.max(np.abs(y - _SILU)) <= 1e-5 * 8.0)


def _plain_linear(view: GraphView, v: Value) -> Node | None:
    lin = view.prod(v, Op.LINEAR)
    return lin if lin is not None and lin.attr("activation") == "none" else None


def _gate(view: GraphView, t: Value) -> tuple[Node, list[Node]]:
    """The gate Linear and the SiLU region from its output to t, or NoMatch."""
    end = view.prod(t)
    if end is None or end.op not in ELEMENTWISE:
        raise NoMatch("operand is not an elementwise op")
    for n in view.ancestors(t)[::-1]:  # the nearest Linear first
        if n.op is not Op.LINEAR or n.attr("activation") != "none":
            continue
        region = region_between(view, n.output, end, ELEMENTWISE, max_nodes=8)
        if region is None or not _is_silu(region, n.output):
            continue
        inside = set(region)
        if view.escapes([v for r in region[:-1] for v in r.outputs], inside) or any(
            u not in inside for u in view.users.get(n.output, [])
        ):
            continue
        return n, region
    raise NoMatch("no Linear before it whose output it takes through SiLU")


def _match(view: GraphView, mul: Node) -> tuple[Replacement, set[Node]]:
    why = "neither operand is silu(Linear) beside a Linear"
    for t, u in (mul.inputs, mul.inputs[::-1]):
        up = _plain_linear(view, u)
        if up is None or view.sole_user(u) is not mul:
            continue
        try:
            gate, region = _gate(view, t)
        except NoMatch as e:
            why = str(e)
            continue
        if gate.inputs[0] is not up.inputs[0] or gate.inputs[1].type != up.inputs[1].type:
            why = "gate and up Linears do not read the same x with equal weight shapes"
            continue
        if gate.attr("has_bias") != up.attr("has_bias"):
            why = "one of the gate and up Linears has a bias"
            continue
        ins = [gate.inputs[0], gate.inputs[1], up.inputs[1], *gate.inputs[2:], *up.inputs[2:]]
        nodes = [gate, *region, up, mul]
        out = mul.output
        new = make_node(
            Op.GATED_LINEAR,
            ins,
            out.name,
            origin_of(sorted(nodes, key=view.index.__getitem__)),
            activation="silu",
            has_bias=bool(gate.attr("has_bias")),
        )
        return Replacement([new], {out: new.output}), set(nodes)
    raise NoMatch(why)


def fuse_swiglu(graph: Graph, ctx: PassContext) -> Graph:
    g, misses = rewrite_nodes(graph, _match, anchor_ops=frozenset({Op.MUL}))
    for m in misses:
        if "Linear" in m and "neither operand" not in m:
            ctx.note("fuse-swiglu", m)
    return g


PASS = Pass("fuse-swiglu", fuse_swiglu)
