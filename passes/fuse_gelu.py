"""fuse-gelu: any elementwise subgraph that computes GELU of one value becomes `Gelu`.

Anchored on Erf or Tanh, the pass tries regions between a candidate input x (walking back
through elementwise ops) and a candidate output y (walking forward), keeps those whose only
other operands are scalar constants and whose intermediates do not escape, and *evaluates*
each on probe values: it fuses the largest region that computes the exact (erf) or the tanh
GELU within 1e-5. So the erf forms (Div √2 or Mul 1/√2, 0.5 applied first or last), the tanh
forms (Pow 3 or x·x·x, Megatron's factored form) all match without a pattern each.
Then `Gelu|Tanh|Relu(Linear(x, W, b)) -> Linear(x, W, b; activation=...)` when the Linear
has no other user (Tanh is BERT's pooler).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from wsecc.ir.core import Graph, Node, Op, Value
from wsecc.ir.rewrite import (
    ELEMENTWISE,
    GraphView,
    NoMatch,
    Replacement,
    forward_candidates,
    make_node,
    origin_of,
    probe_function,
    region_between,
    rewrite_nodes,
)
from wsecc.ir.rules import gelu
from wsecc.passdef import Pass, PassContext

_PROBE = np.linspace(-6.0, 6.0, 601, dtype=np.float32)


@functools.cache
def _refs() -> dict[str, np.ndarray]:
    """The exact and the tanh GELU at the probe points (float32), computed on first use.

    The exact form takes its erf from `math.erf`, point by point, where `wsecc.ir.rules.gelu`
    takes scipy.special.erf: the two agree to an ulp of float64, and rounded to float32 they
    are equal at every probe point (tests/passes/test_fuse_gelu_refs.py), so the pass matches
    what it matched with `gelu(_PROBE, "none")`, without importing scipy.special (a fifth of a
    second) into every compile."""
    x64 = _PROBE.astype(np.float64)
    erf = np.array([math.erf(v) for v in (x64 / math.sqrt(2.0)).tolist()])
    exact = (0.5 * x64 * (1.0 + erf)).astype(_PROBE.dtype)
    return {"none": exact, "tanh": gelu(_PROBE, "tanh")}


def _which_gelu(region: list[Node], x: Value) -> str | None:
    y = probe_function(region, x, _PROBE)
    if y is None:
        return None
    for approx, ref in _refs().items():
        if np.max(np.abs(y.astype(np.float64) - ref)) <= 1e-5 * 6.0:
            return approx
    return None


def _input_candidates(view: GraphView, anchor: Node) -> list[Value]:
    out = []
    v = anchor.inputs[0]
    for _ in range(6):
        out.append(v)
        p = view.prod(v)
        if p is None or p.op not in ELEMENTWISE:
            break
        nonconst = [u for u in p.inputs if not u.is_const]
        if not nonconst:
            break
        v = nonconst[0]
    return out


def _match(view: GraphView, anchor: Node) -> tuple[Replacement, set[Node]]:
    best: tuple[list[Node], Value, str] | None = None
    outs = [anchor] + forward_candidates(view, anchor, ELEMENTWISE, 6)
    for x in _input_candidates(view, anchor):
        if x.type.dtype.value != "f32" and x.type.dtype.value != "f16":
            continue
        for y in outs:
            region = region_between(view, x, y, ELEMENTWISE)
            if region is None or anchor not in region or (best and len(region) <= len(best[0])):
                continue
            inside = set(region)
            if view.escapes([v for n in region[:-1] for v in n.outputs if n is not y], inside):
                continue
            approx = _which_gelu(region, x)
            if approx is not None:
                best = (region, x, approx)
    if best is None:
        raise NoMatch("no region around it computes GELU")
    region, x, approx = best
    out = region[-1].outputs[0]
    new = make_node(Op.GELU, [x], out.name, origin_of(region), approximate=approx)
    return Replacement([new], {out: new.output}), set(region)


def _epilogue(view: GraphView, n: Node) -> tuple[Replacement, set[Node]]:
    lin = view.prod(n.inputs[0], Op.LINEAR)
    if lin is None or lin.attr("activation") != "none" or view.sole_user(lin.output) is not n:
        raise NoMatch("input is not a Linear used only here")
    if n.op is Op.GELU:
        act = "gelu_tanh" if n.attr("approximate") == "tanh" else "gelu"
    else:
        act = n.op.value
    attrs = dict(lin.attr_dict, activation=act)
    new = make_node(Op.LINEAR, list(lin.inputs), n.output.name, origin_of([lin, n]), **attrs)
    return Replacement([new], {n.output: new.output}), {lin, n}


def fuse_gelu(graph: Graph, ctx: PassContext) -> Graph:
    g, misses = rewrite_nodes(graph, _match, anchor_ops=frozenset({Op.ERF, Op.TANH}))
    for m in misses:
        ctx.note("fuse-gelu", m)
    g, _ = rewrite_nodes(g, _epilogue, anchor_ops=frozenset({Op.GELU, Op.TANH, Op.RELU}))
    return g


PASS = Pass("fuse-gelu", fuse_gelu)
