"""fuse-layernorm: any subgraph computing LayerNorm over the last axis becomes `LayerNorm`, and
any computing RMSNorm (Llama's, T5's) becomes `RMSNorm`; a residual `Add(a, b)` feeding either
becomes its skip input.

Anchored on ReduceMean(x) over the last axis, the pass tries regions from x to each candidate
output (elementwise ops and ReduceMean only, other operands constant, no escaping
intermediates) and evaluates them on probe rows: the region is a LayerNorm when
f(x) = (x − mean)/√(var + ε)·γ + β for ε one of its scalar constants and γ, β recovered from
two probes (then snapped to the region's own constant vectors when they agree). This covers
PyTorch's decomposed form (Pow 2 or Mul(d, d), Div or Mul(Reciprocal)), duplicated Subs, and
the TF/Keras form `x·γ·rsqrt + (β − mean·γ·rsqrt)`. Native LayerNormalization arrives fused.
RMSNorm is anchored the same way, on ReduceMean(x²) (Pow(x, 2) or Mul(x, x)): the region from x
must compute f(x) = x/√(mean(x²) + ε)·γ (β recovered as zero), whatever the order of Sqrt,
Reciprocal or Div and the Casts to float32 Llama's exports put around it.
Then `LayerNorm|RMSNorm(Add(a, b)) -> ...(a, skip=b)` (emitting the sum when it is used on),
an Add of two activations feeding a norm's input or skip becomes another skip (a parallel
block's attention + MLP, `_parallel`), and a norm of a Transpose that keeps the last axis is
taken before it (`_before_transpose`).
"""

from __future__ import annotations

import functools

import numpy as np

from wsecc.ir.core import Graph, Node, Op, Value
from wsecc.ir.rewrite import (
    ELEMENTWISE,
    GraphView,
    NoMatch,
    Replacement,
    eval_nodes,
    forward_candidates,
    make_node,
    origin_of,
    region_between,
    rewrite_nodes,
    scalar,
)
from wsecc.ir.rules import MAX_SKIPS
from wsecc.passdef import Pass, PassContext

_ALLOWED = ELEMENTWISE | {Op.REDUCE_MEAN}
_ROWS = 8


def _normalize(x: np.ndarray, eps: float, rms: bool) -> np.ndarray:
    x = x.astype(np.float64)
    d = x if rms else x - x.mean(-1, keepdims=True)
    return d / np.sqrt((d * d).mean(-1, keepdims=True) + eps)


def _snap(vec: np.ndarray, region: list[Node], d: int, name: str) -> Value:
    for n in region:
        for v in n.inputs:
            if v.is_const and v.type.size == d and v.const is not None:
                c = v.const.reshape(-1).astype(np.float64)
                if np.allclose(c, vec, rtol=1e-4, atol=1e-6):
                    return (
                        v
                        if v.type.rank == 1
                        else Value.constant(f"{v.name}.1d", v.const.reshape(-1))
                    )
    return Value.constant(name, vec.astype(np.float32))


@functools.lru_cache(maxsize=8)
def _probes(d: int) -> tuple[np.ndarray, ...]:
    """The three [_ROWS, d] probes `_fit` evaluates a region on: the same for every region of
    width d (seed 0), so drawn once per d, not once per candidate region (Llama 3.1 8B tries
    520 regions of width 4,096: 1 s of drawing normal deviates)."""
    rng = np.random.default_rng(0)
    return tuple(
        (rng.standard_normal((_ROWS, d)) * (1.5 + i) + 0.3 * i).astype(np.float32) for i in range(3)
    )


def _fit(region: list[Node], x: Value, rms: bool) -> tuple[Value, Value, float] | None:
    """(γ, β, ε) when the region computes LayerNorm of x (RMSNorm when `rms`: β is zero), else
    None."""
    d = x.type.shape[-1]
    lead = (1,) * (x.type.rank - 2) + (_ROWS,)  # same rank as x: reduce axes stay valid
    probes = [p.copy() for p in _probes(d)]  # copies: the region is evaluated on them
    try:
        outs = [
            eval_nodes(region, {x: p.reshape(lead + (d,))})[region[-1].outputs[0]] for p in probes
        ]
    except Exception:
        return None
    if any(y.size != _ROWS * d for y in outs):
        return None
    ys = [y.reshape(_ROWS, d).astype(np.float64) for y in outs]
    eps_candidates = sorted(
        {
            abs(float(v.const.reshape(-1)[0]))
            for n in region
            for v in n.inputs
            if v.is_const
            and v.type.size == 1
            and v.const is not None
            and 0 < abs(float(v.const.reshape(-1)[0])) < 1e-2
        }
    ) or [0.0]
    for eps in eps_candidates:
        n0, n1, n2 = (_normalize(p, eps, rms) for p in probes)
        den = n0 - n1
        row = np.argmax(np.abs(den), axis=0)
        cols = np.arange(d)
        gamma = (ys[0] - ys[1])[row, cols] / den[row, cols]
        beta = (ys[0] - gamma * n0).mean(0)
        if rms:
            beta = np.zeros_like(beta)
        pred = n2 * gamma + beta
        if np.max(np.abs(pred - ys[2])) <= 1e-4 * max(1.0, float(np.max(np.abs(ys[2])))):
            return (
                _snap(gamma, region, d, f"{x.name}/ln_gamma"),
                _snap(beta, region, d, f"{x.name}/ln_beta"),
                eps,
            )
    return None


def _squared(view: GraphView, v: Value) -> Value | None:
    """x when v is x² (Pow(x, 2) or Mul(x, x)), else None."""
    p = view.prod(v, Op.POW, Op.MUL)
    if p is None:
        return None
    a, b = p.inputs
    if (p.op is Op.POW and scalar(b) == 2.0) or (p.op is Op.MUL and a is b):
        return a
    return None


def _match(view: GraphView, mean: Node) -> tuple[Replacement, set[Node]]:
    v = mean.inputs[0]
    if (
        mean.attr("axes") != (v.type.rank - 1,)
        or not mean.attr("keepdims")
        or not v.type.dtype.is_float
    ):
        raise NoMatch("not a mean over the last axis")
    # LayerNorm means x itself; RMSNorm means x², and x is what Pow or Mul squares
    sources = [(v, False)] + [(x, True) for x in [_squared(view, v)] if x is not None]
    best = None
    for x, rms in sources:
        for y in forward_candidates(view, mean, _ALLOWED, 10):
            region = region_between(view, x, y, _ALLOWED)
            if region is None or mean not in region or (best and len(region) <= len(best[0])):
                continue
            if view.escapes([u for n in region if n is not y for u in n.outputs], set(region)):
                continue
            fit = _fit(region, x, rms)
            if fit is not None:
                best = (region, x, rms, fit)
    if best is None:
        raise NoMatch("no region from it computes LayerNorm or RMSNorm")
    region, x, rms, (gamma, beta, eps) = best
    out = region[-1].outputs[0]
    op, params = (Op.RMS_NORM, [x, gamma]) if rms else (Op.LAYER_NORM, [x, gamma, beta])
    new = make_node(op, params, out.name, origin_of(region), epsilon=eps, has_skip=False)
    return Replacement([new], {out: new.output}), set(region)


def _residual(view: GraphView, ln: Node) -> tuple[Replacement, set[Node]]:
    if ln.attr("has_skip"):
        raise NoMatch("already has a skip input")
    add = view.prod(ln.inputs[0], Op.ADD)
    if (
        add is None
        or any(v.is_const for v in add.inputs)
        or add.inputs[0].type != add.inputs[1].type
    ):
        raise NoMatch("input is not a residual Add of two activations")
    s = add.output
    emit_sum = view.escapes([s], {ln}) is not None
    names = [ln.output.name] + ([s.name] if emit_sum else [])
    attrs = dict(ln.attr_dict, has_skip=True, emit_sum=emit_sum)
    new = make_node(
        ln.op,
        [add.inputs[0], add.inputs[1], *ln.inputs[1:]],
        ln.output.name,
        origin_of([add, ln]),
        names,
        **attrs,
    )
    mapping = {ln.output: new.outputs[0]}
    if emit_sum:
        mapping[s] = new.outputs[1]
    return Replacement([new], mapping), {add, ln}


def _parallel(view: GraphView, ln: Node) -> tuple[Replacement, set[Node]]:
    """norm(x, skip) where x or the skip is itself an Add of two activations used only here
    -> norm(a, b, c) summing all three: a parallel block (GPT-J, GPT-NeoX, Falcon, CodeGen)
    adds attention and MLP to the residual stream at once, and the next norm takes both."""
    params = 2 if ln.op is Op.LAYER_NORM else 1
    operands = list(ln.inputs[: len(ln.inputs) - params])
    if not ln.attr("has_skip") or len(operands) > MAX_SKIPS:
        raise NoMatch("no skip, or no room for another")
    for i, v in enumerate(operands):
        add = view.prod(v, Op.ADD)
        if (
            add is None
            or view.sole_user(v) is not ln
            or any(u.is_const or u.type != v.type for u in add.inputs)
        ):
            continue
        if i == 0:  # (p + q) + skip: the stream p, then the skips q and skip
            parts = [add.inputs[0], add.inputs[1], *operands[1:]]
        else:  # x + (q + r): the skips summed first, as `rules.norm_input` does
            parts = [*operands[:i], *add.inputs, *operands[i + 1 :]]
        names = [o.name for o in ln.outputs]
        new = make_node(
            ln.op,
            [*parts, *ln.inputs[len(operands) :]],
            ln.name,
            origin_of([add, ln]),
            names,
            **ln.attr_dict,
        )
        return Replacement([new], dict(zip(ln.outputs, new.outputs, strict=True))), {add, ln}
    raise NoMatch("no operand is an Add of two activations used only here")


def _before_transpose(view: GraphView, ln: Node) -> tuple[Replacement, set[Node]]:
    """norm(Transpose(x)) -> Transpose(norm(x)) when the transpose keeps the last axis last: a
    norm over that axis is the same per row whichever order the rows are in. Gemma 3
    normalises q and k per head after moving the heads ahead of the positions; normalised
    before, the head split that follows is layout only (fuse-attention)."""
    t = view.prod(ln.inputs[0], Op.TRANSPOSE)
    rank = ln.inputs[0].type.rank
    if ln.attr("has_skip") or t is None or tuple(t.attr("perm"))[-1] % rank != rank - 1:
        raise NoMatch("input is not a transpose that keeps the last axis")
    if view.sole_user(t.output) is not ln:
        raise NoMatch("the transposed value is also used elsewhere")
    x = t.inputs[0]
    norm = make_node(
        ln.op, [x, *ln.inputs[1:]], f"{ln.output.name}/rows", ln.origin, **ln.attr_dict
    )
    new = make_node(Op.TRANSPOSE, [norm.output], ln.output.name, t.origin, **t.attr_dict)
    return Replacement([norm, new], {ln.output: new.output}), {t, ln}


def fuse_layernorm(graph: Graph, ctx: PassContext) -> Graph:
    g, misses = rewrite_nodes(graph, _match, anchor_ops=frozenset({Op.REDUCE_MEAN}))
    for m in misses:
        ctx.note("fuse-layernorm", m)
    g, _ = rewrite_nodes(g, _residual, anchor_ops=frozenset({Op.LAYER_NORM, Op.RMS_NORM}))
    while True:  # each sweep takes one more Add into a norm
        g2, _ = rewrite_nodes(g, _parallel, anchor_ops=frozenset({Op.LAYER_NORM, Op.RMS_NORM}))
        if len(g2.nodes) == len(g.nodes):
            break
        g = g2
    g, _ = rewrite_nodes(g, _before_transpose, anchor_ops=frozenset({Op.LAYER_NORM, Op.RMS_NORM}))
    return g


PASS = Pass("fuse-layernorm", fuse_layernorm)
