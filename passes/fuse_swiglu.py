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
The gate may also be GELU, exact or tanh (GeGLU: Gemma, ModernBERT): `activation` says which.
A Linear whose output is cut in two along its last axis (a Split or two Slices), a piece
multiplied (Phi-3's, ModernBERT's fused gate/up projection), is first made one Linear per piece
(`_split_linear`).
Requires fuse-linear's Linears; runs before fuse-gelu folds activations into Linears.
"""

from __future__ import annotations

import functools

import numpy as np

from wsecc.ir.arrays import is_uniform
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
from wsecc.ir.rules import gelu, silu
from wsecc.passdef import Pass, PassContext

_PROBE = np.linspace(-8.0, 8.0, 401, dtype=np.float32)
_PROBE64 = _PROBE.astype(np.float64)
_GATE_OPS = ELEMENTWISE | {Op.GELU}


@functools.cache
def _gates() -> dict[str, np.ndarray]:
    """The gate activations at the probe points (float64), computed on first use: SiLU's
    sigmoid and GELU's erf come from scipy.special, a fifth of a second to import, which a
    compile whose graph has no candidate gate never needs."""
    return {
        "silu": silu(_PROBE64),
        "gelu": gelu(_PROBE64),
        "gelu_tanh": gelu(_PROBE64, "tanh"),
    }


def _gate_function(region: list[Node], z: Value) -> str | None:
    """The gate activation `region` computes of z (`_gates`), if any."""
    y = probe_function(region, z, _PROBE)
    if y is None:
        return None
    for name, ref in _gates().items():
        if np.max(np.abs(y - ref)) <= 1e-5 * 8.0:
            return name
    return None


def _plain_linear(view: GraphView, v: Value) -> Node | None:
    lin = view.prod(v, Op.LINEAR)
    return lin if lin is not None and lin.attr("activation") == "none" else None


def _gate(view: GraphView, t: Value) -> tuple[Node, list[Node], str]:
    """The gate Linear, the activation region from its output to t and the activation, or
    NoMatch."""
    end = view.prod(t)
    if end is None or end.op not in _GATE_OPS:
        raise NoMatch("operand is not an elementwise op")
    for n in view.ancestors(t)[::-1]:  # the nearest Linear first
        if n.op is not Op.LINEAR or n.attr("activation") != "none":
            continue
        region = region_between(view, n.output, end, _GATE_OPS, max_nodes=10)
        act = _gate_function(region, n.output) if region is not None else None
        if region is None or act is None:
            continue
        inside = set(region)
        if view.escapes([v for r in region[:-1] for v in r.outputs], inside) or any(
            u not in inside for u in view.users.get(n.output, [])
        ):
            continue
        return n, region, act
    raise NoMatch("no Linear before it whose output it takes through SiLU or GELU")


def _match(view: GraphView, mul: Node) -> tuple[Replacement, set[Node]]:
    why = "neither operand is silu(Linear) beside a Linear"
    for t, u in (mul.inputs, mul.inputs[::-1]):
        up = _plain_linear(view, u)
        if up is None or view.sole_user(u) is not mul:
            continue
        try:
            gate, region, act = _gate(view, t)
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
            activation=act,
            has_bias=bool(gate.attr("has_bias")),
        )
        return Replacement([new], {out: new.output}), set(nodes)
    raise NoMatch(why)


def _pieces(view: GraphView, lin: Node) -> list[tuple[Value, int, int]] | None:
    """(value, first column, end) of each piece a Linear's output is cut into along its last
    axis by its users — one Split, or Slices with step 1 — when they tile it exactly."""
    v, users = lin.output, view.users.get(lin.output, [])
    rank, n = v.type.rank, v.type.shape[-1]
    if v in view.outputs or not users:
        return None
    pieces: list[tuple[Value, int, int]] = []
    for u in users:
        if u.op is Op.SPLIT and len(users) == 1 and u.attr("axis") % rank == rank - 1:
            ends = np.cumsum([o.type.shape[-1] for o in u.outputs])
            pieces = [
                (o, int(e) - o.type.shape[-1], int(e)) for o, e in zip(u.outputs, ends, strict=True)
            ]
        elif (
            u.op is Op.SLICE
            and tuple(a % rank for a in u.attr("axes")) == (rank - 1,)
            and tuple(u.attr("steps") or (1,)) == (1,)
        ):
            start = int(u.attr("starts")[0])
            start = start + n if start < 0 else min(start, n)
            pieces.append((u.output, start, start + u.output.type.shape[-1]))
        else:
            return None
    pieces.sort(key=lambda p: p[1])
    bounds = [0] + [e for _, _, e in pieces]
    if [s for _, s, _ in pieces] != bounds[:-1] or bounds[-1] != n:
        return None
    return pieces


def _split_linear(view: GraphView, lin: Node) -> tuple[Replacement, set[Node]]:
    """Linear(x, W, b) whose output is cut in two along its last axis (a Split, or two
    Slices), a piece multiplied -> one Linear per piece, each with its columns of W (and b):
    Phi-3's and ModernBERT's fused gate/up projection, split before the gated product, so
    that fuse-swiglu then sees two Linears."""
    pieces = _pieces(view, lin)
    if pieces is None or len(pieces) != 2:
        raise NoMatch("output is not cut in two along its last axis")
    if lin.attr("activation") != "none" or not all(v.is_const for v in lin.inputs[1:]):
        raise NoMatch("has an activation, or its weight is not a constant to split")
    if not any(u.op is Op.MUL for v, _, _ in pieces for u in view.users.get(v, [])):
        raise NoMatch("no piece is multiplied: not a gated product")
    # in graph order: a set of nodes iterates by address, which made the origins' order vary
    cuts = sorted({view.producer[v] for v, _, _ in pieces}, key=view.index.__getitem__)
    new = []
    for piece, start, end in pieces:
        consts = [
            Value.constant(f"{piece.name}/{role}", _columns(v.const, start, end))
            for role, v in zip(("weight", "bias"), lin.inputs[1:], strict=False)
            if v.const is not None
        ]
        new.append(
            make_node(
                Op.LINEAR,
                [lin.inputs[0], *consts],
                piece.name,
                origin_of([lin, *cuts]),
                **lin.attr_dict,
            )
        )
    mapping = {p: n.output for (p, _, _), n in zip(pieces, new, strict=True)}
    return Replacement(new, mapping), {lin, *cuts}


def _columns(a: np.ndarray, start: int, end: int) -> np.ndarray:
    """Columns start..end of `a`; a uniform array (a weight without data, `--weights inputs`)
    stays a view of its one element rather than a dense copy."""
    cut = a[..., start:end]
    return cut if is_uniform(a) else np.ascontiguousarray(cut)


def fuse_swiglu(graph: Graph, ctx: PassContext) -> Graph:
    graph, _ = rewrite_nodes(graph, _split_linear, anchor_ops=frozenset({Op.LINEAR}))
    g, misses = rewrite_nodes(graph, _match, anchor_ops=frozenset({Op.MUL}))
    for m in misses:
        if "Linear" in m and "neither operand" not in m:
            ctx.note("fuse-swiglu", m)
    return g


PASS = Pass("fuse-swiglu", fuse_swiglu)
