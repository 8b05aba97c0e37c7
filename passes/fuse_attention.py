"""fuse-attention: scaled dot-product attention with its head split/merge becomes `Attention`.

Anchored on Softmax over the last axis of a rank-4 tensor [B, H, Sq, Sk]:

1. scores: walking back from the Softmax through Mul/Div by scalars (the scale), Add of a
   mask-class bias, Where(mask-class condition, ·, fill) down to MatMul(q', kᵀ');
2. q', k', v': walking back through scalar Mul/Div (q and k each scaled, the SDPA form) and
   layout ops (Reshape, Transpose, Split, Slice) to a source [B, S, N]; the layout chain is
   *evaluated on an index tensor*, and must equal "heads h·dh columns from an offset" — so any
   order of Reshape/Transpose/Split (one Gemm+Split, three MatMuls, every K-transpose form)
   matches;
3. the mask: every bias or condition is evaluated, as a function of the graph's mask input,
   on probe masks; it must mean "causal (optionally within a sliding window) and/or key
   padding" (mask[b, key] == 0 drops a key);
   anything else (ALiBi, relative biases) is not fused;
4. after Softmax an optional IsNaN/Where clean-up, MatMul with v', and a layout chain that
   must equal merging the heads back to [B, S, H·dh].
Intermediates may not escape the region. The mask subgraph is left for dead-code removal.

The evaluations are exact and as large as the tensors (at seq 2048, width 6144, a [1, 2048,
18432] index tensor per head split), so each outcome is remembered for the pass's run under the
structure it was computed from (`_structure`): the layers of a model repeat one structure, and
a 44-layer model evaluates its layouts once, not 44 times. Only matches are remembered; a
layout or mask that does not match is evaluated again, so its reason names its own values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import TypeVar

import numpy as np

from wsecc.ir.arrays import content_key
from wsecc.ir.core import DType, Graph, Node, Op, Value, make_attrs
from wsecc.ir.rewrite import (
    LAYOUT,
    GraphView,
    NoMatch,
    Replacement,
    eval_nodes,
    make_node,
    origin_of,
    rewrite_nodes,
    scalar,
)
from wsecc.ir.rules import split_heads
from wsecc.pm import Pass, PassContext, PassError

VERY_NEGATIVE = -1000.0  # an additive bias at or below this masks the key out

Memo = dict[Hashable, object]
"""Outcomes of the evaluations, for one run of the pass (module docstring)."""
T = TypeVar("T")


def _remembered(memo: Memo, key: Hashable, compute: Callable[[], T]) -> T:
    """`compute()`, or what it returned for `key` before; a NoMatch is raised, not kept."""
    if key not in memo:
        memo[key] = compute()
    return memo[key]  # type: ignore[return-value]


def _structure(src: Value, chain: Sequence[Node], target: Value) -> tuple[Hashable, ...]:
    """What evaluating `chain` on an array for `src` and reading `target` depends on: src's
    type, then per node its op, attributes and operands — src, an earlier node's output, a
    constant's content, or (never equal to another) any other value — and where `target` is.
    Equal structures evaluate to equal results."""
    where: dict[Value, Hashable] = {src: "src"}
    key: list[Hashable] = [src.type]
    for i, n in enumerate(chain):
        operands: list[Hashable] = []
        for v in n.inputs:
            if v in where:
                operands.append(where[v])
            elif v.const is not None:
                operands.append(content_key(v.const))
            else:
                operands.append(("value", id(v)))
        key.append((n.op, n.attrs, tuple(operands), tuple(o.type for o in n.outputs)))
        where.update({o: (i, j) for j, o in enumerate(n.outputs)})
    key.append(where.get(target, ("value", id(target))))
    return tuple(key)


@dataclass
class _Scores:
    matmul: Node
    scale: float
    terms: list[
        tuple[str, Value, float]
    ]  # ("add", bias, 0) | ("where_keep"/"where_drop", cond, fill)
    nodes: list[Node]


def _walk_scores(view: GraphView, v: Value, mask_class) -> _Scores:  # type: ignore[no-untyped-def]
    scale, terms, nodes = 1.0, [], []
    while True:
        n = view.prod(v)
        if n is None:
            raise NoMatch("scores do not come from a MatMul")
        nodes.append(n)
        if n.op is Op.MATMUL:
            return _Scores(n, scale, terms, nodes[:-1])
        if n.op in (Op.MUL, Op.DIV) and scalar(n.inputs[1]) is not None:
            s = scalar(n.inputs[1])
            assert s is not None
            scale = scale * s if n.op is Op.MUL else scale / s
            v = n.inputs[0]
        elif n.op is Op.ADD and mask_class(n.inputs[1]):
            terms.append(("add", n.inputs[1], 0.0))
            v = n.inputs[0]
        elif n.op is Op.ADD and mask_class(n.inputs[0]):
            terms.append(("add", n.inputs[0], 0.0))
            v = n.inputs[1]
        elif n.op is Op.WHERE and mask_class(n.inputs[0]):
            if scalar(n.inputs[2]) is not None and not n.inputs[1].is_const:
                terms.append(("where_keep", n.inputs[0], scalar(n.inputs[2]) or 0.0))
                v = n.inputs[1]
            elif scalar(n.inputs[1]) is not None and not n.inputs[2].is_const:
                terms.append(("where_drop", n.inputs[0], scalar(n.inputs[1]) or 0.0))
                v = n.inputs[2]
            else:
                raise NoMatch("Where in the scores is not a masked fill")
        else:
            raise NoMatch(f"{n.op.name} {n.name!r} in the scores is not a scale or a mask")


def _layout_source(view: GraphView, v: Value) -> tuple[Value, list[Node], float]:
    """Walk back through layout ops and scalar scales to the value they rearrange."""
    chain: list[Node] = []
    scale = 1.0
    while True:
        n = view.prod(v)
        if n is None:
            return v, chain[::-1], scale
        if n.op in LAYOUT:
            chain.append(n)
            v = n.inputs[0]
        elif (
            n.op in (Op.MUL, Op.DIV)
            and scalar(n.inputs[1]) is not None
            and not n.inputs[0].is_const
        ):
            s = scalar(n.inputs[1])
            assert s is not None
            scale = scale * s if n.op is Op.MUL else scale / s
            chain.append(n)
            v = n.inputs[0]
        else:
            return v, chain[::-1], scale


def _one_row(chain: Sequence[Node], b: int) -> list[Node] | None:
    """`chain`, which starts from a tensor with `b` rows on axis 0, rewritten for one row; or
    None unless every node keeps axis 0 outermost and whole: a Reshape to a multiple of `b`
    rows, a Transpose that leaves axis 0 first, a Split or Slice of another axis, a scalar
    scale.

    Why one row decides for all: on an index tensor over a [b, ...] source, every such node
    maps the b row blocks of axis 0 to b row blocks, block i = block 0 + i·(source row size).
    The head split and merge the probes compare with do the same, so they agree on b rows
    exactly when they agree on one.
    """
    if b == 1:
        return list(chain)
    out = []
    for n in chain:
        rank = n.inputs[0].type.rank
        if n.op is Op.RESHAPE:
            shape = tuple(n.attr("shape"))
            if not shape or min(shape) <= 0 or shape[0] % b:
                return None
            n = replace(n, attrs=make_attrs({**n.attr_dict, "shape": (shape[0] // b, *shape[1:])}))
        elif n.op is Op.TRANSPOSE:
            if n.attr("perm")[0] % rank != 0:
                return None
        elif n.op is Op.SPLIT:
            if n.attr("axis") % rank == 0:
                return None
        elif n.op is Op.SLICE:
            if any(ax % rank == 0 for ax in n.attr("axes")):
                return None
        elif n.op not in (Op.MUL, Op.DIV):
            return None
        out.append(n)
    return out


def _head_offset(
    memo: Memo, src: Value, chain: list[Node], target: Value, h: int, dh: int, transposed: bool
) -> int:
    """The column offset at which `chain` takes heads out of `src`, or NoMatch."""
    key = ("head offset", _structure(src, chain, target), h, dh, transposed)
    return _remembered(
        memo, key, lambda: _evaluate_head_offset(src, chain, target, h, dh, transposed)
    )


def _evaluate_head_offset(
    src: Value, chain: list[Node], target: Value, h: int, dh: int, transposed: bool
) -> int:
    if src.type.rank != 3:
        raise NoMatch(f"head source {src.name!r} is not [B, S, N]")
    b, s, n = src.type.shape
    one = _one_row(chain, b)
    rows, nodes = (1, one) if one is not None else (b, chain)
    iota = np.arange(rows * s * n, dtype=np.int64).reshape(rows, s, n)
    vals: dict[Value, np.ndarray] = {src: iota}
    for node in nodes:  # scalar scales pass indices through unchanged
        if node.op in LAYOUT:
            vals.update(eval_nodes([node], vals))
        else:
            vals[node.output] = vals[node.inputs[0]]
    got = vals[target]
    first = int(got.reshape(-1)[0])
    off = first % n
    if n < off + h * dh:
        raise NoMatch("head columns run past the source")
    want = split_heads(iota, off, h, dh)
    if transposed:
        want = want.transpose(0, 1, 3, 2)
    if got.shape != want.shape or not np.array_equal(got, want):
        raise NoMatch(f"layout from {src.name!r} does not split heads")
    return off


def _merge_heads(
    memo: Memo, view: GraphView, o: Value, inside: set[Node]
) -> tuple[Value, list[Node], bool]:
    """Follow o [B, H, S, dh] through single-user layout ops to its [B, S, H·dh] (or [B·S, H·dh]) form."""
    chain: list[Node] = []
    v = o
    while True:
        u = view.sole_user(v)
        if u is None or u.op not in (Op.TRANSPOSE, Op.RESHAPE):
            raise NoMatch("attention output is not merged back to [B, S, H·dh]")
        chain.append(u)
        v = u.output
        key = ("merged", _structure(o, chain, v))
        form = _remembered(memo, key, partial(_merged_form, o, chain, v))
        if form is not None:
            return v, chain, form == "flat"
        if len(chain) > 4:
            raise NoMatch("attention output layout not recognised")


def _merged_form(o: Value, chain: list[Node], v: Value) -> str | None:
    """ "merged" when `chain` takes o [B, H, S, dh] to [B, S, H·dh], "flat" to [B·S, H·dh]
    (probed on one batch row when the chain keeps the batch axis outermost, see `_one_row`)."""
    b, h, s, dh = o.type.shape
    one = _one_row(chain, b)
    rows, nodes = (1, one) if one is not None else (b, chain)
    iota = np.arange(rows * h * s * dh, dtype=np.int64).reshape(rows, h, s, dh)
    merged = iota.transpose(0, 2, 1, 3).reshape(rows, s, h * dh)
    got = eval_nodes(nodes, {o: iota})[v]
    if got.shape == merged.shape and np.array_equal(got, merged):
        return "merged"
    if got.shape == (rows * s, h * dh) and np.array_equal(got, merged.reshape(rows * s, h * dh)):
        return "flat"
    return None


def _mask_semantics(
    memo: Memo,
    view: GraphView,
    terms: list[tuple[str, Value, float]],
    shape: tuple[int, int, int, int],
) -> tuple[bool, int, Value | None, float]:
    """(causal, window, key-padding mask input or None, fill) that the mask terms implement.
    Remembered by the terms themselves: the layers of a model share one mask subgraph."""
    key = ("mask", tuple(terms), shape)
    return _remembered(memo, key, lambda: _evaluate_mask(view, terms, shape))


MASK_PROBE_BYTES = 8 << 30
"""What one mask probe may hold (a third of this machine's 24 GB): the mask subgraph grows with
B S^2, so GPT-2 13B's mask at seq 16384 takes 5 GiB and at 32768 would take 20."""


def _evaluate_mask(
    view: GraphView, terms: list[tuple[str, Value, float]], shape: tuple[int, int, int, int]
) -> tuple[bool, int, Value | None, float]:
    b, _, sq, sk = shape
    inputs = set().union(*(view.input_ancestors(t[1]) for t in terms)) if terms else set()
    if len(inputs) > 1:
        raise NoMatch(f"mask depends on several inputs {sorted(v.name for v in inputs)}")
    mask_in = next(iter(inputs), None)
    if mask_in is not None and mask_in.type.shape != (b, sk):
        raise NoMatch(f"mask input {mask_in.name!r} is not [B, S]")
    nodes = sorted({n for _, v, _ in terms for n in view.ancestors(v)}, key=view.index.__getitem__)
    probe = 4 * b * sq * sk + sum(
        math.prod(v.type.shape) * v.type.dtype.itemsize for n in nodes for v in n.outputs
    )  # every intermediate is kept while the probe runs, and the kept-key masks
    if probe > MASK_PROBE_BYTES:
        raise PassError(
            f"fuse-attention: checking what the attention mask means evaluates it at the bound "
            f"shape [{b}, 1, {sq}, {sk}], {probe / 2**20:,.0f} MiB with its intermediates (over "
            f"{MASK_PROBE_BYTES >> 20:,} MiB); compile at a shorter --seq"
        )
    fills = [f for kind, _, f in terms if kind != "add"]

    def keep_for(mask: np.ndarray | None) -> np.ndarray:
        env = (
            {mask_in: mask.astype(mask_in.type.dtype.numpy)}
            if mask_in is not None and mask is not None
            else {}
        )
        vals = eval_nodes(nodes, env)
        keep = np.ones((b, 1, sq, sk), dtype=bool)
        for kind, v, _ in terms:
            a = v.const if v.is_const else vals[v]
            assert a is not None
            if kind == "add":
                a = a.astype(np.float64)
                if np.any((a < 0) & (a > VERY_NEGATIVE)) or np.any(a > 0):
                    raise NoMatch("additive bias is not a mask (values between 0 and -1000)")
                fills.append(float(a.min()) if a.size else 0.0)
                kept = a == 0
            else:
                kept = a.astype(bool) if kind == "where_keep" else ~a.astype(bool)
            keep &= np.broadcast_to(kept, keep.shape) if kept.ndim <= 4 else kept
        return keep

    try:
        base = keep_for(np.ones((b, sk), np.int64))
    except NoMatch:
        raise
    except Exception as e:
        raise NoMatch(f"mask subgraph could not be evaluated: {e}") from None
    tril = np.tril(np.ones((sq, sk), dtype=bool), k=sk - sq)
    window = 0
    if np.array_equal(base, np.broadcast_to(tril, base.shape)):
        causal = True
    elif base.all():
        causal = False
    else:
        window = int(base[0, 0, -1].sum())  # keys the last query sees: a sliding window?
        banded = tril & np.triu(np.ones((sq, sk), dtype=bool), k=sk - sq - window + 1)
        if window == 0 or not np.array_equal(base, np.broadcast_to(banded, base.shape)):
            raise NoMatch("mask with an all-ones input is neither full, causal nor a causal window")
        causal = True
    if mask_in is not None:
        rng = np.random.default_rng(0)
        for _ in range(3):
            m = (rng.random((b, sk)) > 0.3).astype(np.int64)
            m[:, 0] = 1
            want = base & (m != 0)[:, None, None, :]
            if not np.array_equal(keep_for(m), want):
                raise NoMatch("mask does not mean 'key padding' (mask[b, key] == 0 drops the key)")
    finite = [f for f in fills if f < 0]
    fill = min(finite) if finite else -np.inf
    fill = float(max(fill, np.finfo(np.float32).min) if np.isfinite(fill) else fill)
    return causal, window, mask_in, fill


def _match(memo: Memo, view: GraphView, sm: Node) -> tuple[Replacement, set[Node]]:
    x = sm.inputs[0]
    if x.type.rank != 4 or sm.attr("axis") != 3:
        raise NoMatch("not a softmax over the last axis of [B, H, Sq, Sk]")
    token_inputs = _token_inputs(view)

    def mask_class(v: Value) -> bool:
        if v.is_const:
            return True
        if view.input_ancestors(v) & token_inputs:
            return False
        return not any(
            n.op in (Op.MATMUL, Op.LINEAR, Op.EMBEDDING, Op.SOFTMAX) for n in view.ancestors(v)
        )

    sc = _walk_scores(view, x, mask_class)
    qv, kv = sc.matmul.inputs
    b, h, sq, sk = x.type.shape
    if qv.type.rank != 4 or kv.type.rank != 4:
        raise NoMatch("q·kᵀ operands are not rank 4")
    dh = qv.type.shape[-1]
    q_src, q_chain, q_scale = _layout_source(view, qv)
    k_src, k_chain, k_scale = _layout_source(view, kv)
    q_off = _head_offset(memo, q_src, q_chain, qv, h, dh, transposed=False)
    k_off = _head_offset(memo, k_src, k_chain, kv, h, dh, transposed=True)
    # after softmax: optional NaN clean-up, then p·v
    p, post = sm.output, []
    nan_to_zero = False
    u = view.sole_user(p)
    if u is not None and u.op is Op.ISNAN:
        users = view.users.get(p, [])
        wh = [w for w in users if w.op is Op.WHERE]
        if (
            len(users) != 2
            or len(wh) != 1
            or wh[0].inputs[0] is not u.output
            or scalar(wh[0].inputs[1]) != 0.0
        ):
            raise NoMatch("IsNaN after softmax is not the NaN→0 clean-up")
        post, p, nan_to_zero = [u, wh[0]], wh[0].output, True
    elif u is None:
        users = view.users.get(p, [])
        isn = [w for w in users if w.op is Op.ISNAN]
        wh = [w for w in users if w.op is Op.WHERE]
        if (
            len(users) == 2
            and len(isn) == 1
            and len(wh) == 1
            and wh[0].inputs[0] is isn[0].output
            and scalar(wh[0].inputs[1]) == 0.0
        ):
            post, p, nan_to_zero = [isn[0], wh[0]], wh[0].output, True
    pv = view.sole_user(p)
    if pv is None or pv.op is not Op.MATMUL or pv.inputs[0] is not p:
        raise NoMatch("softmax output does not feed a MatMul with v")
    v_src, v_chain, v_scale = _layout_source(view, pv.inputs[1])
    if v_scale != 1.0:
        raise NoMatch("v is scaled")
    v_off = _head_offset(memo, v_src, v_chain, pv.inputs[1], h, dh, transposed=False)
    region = (
        set(sc.nodes) | {sc.matmul, sm, pv} | set(post) | set(q_chain) | set(k_chain) | set(v_chain)
    )
    out, out_chain, flat = _merge_heads(memo, view, pv.output, region)
    region |= set(out_chain)
    internal = [v for n in region for v in n.outputs if v is not out]
    leak = view.escapes(internal, region)
    if leak is not None:
        raise NoMatch(f"intermediate {leak.name!r} is used outside the attention")
    causal, window, mask_in, fill = _mask_semantics(memo, view, sc.terms, (b, h, sq, sk))
    attrs = {
        "num_heads": h, "head_dim": dh, "q_offset": q_off, "k_offset": k_off, "v_offset": v_off,
        "scale": float(np.float32(sc.scale * q_scale * k_scale)), "causal": causal, "window": window,
        "mask": "key_padding" if mask_in is not None else "none", "fill": fill, "nan_to_zero": nan_to_zero,
    }  # fmt: skip
    origin = origin_of(sorted(region, key=view.index.__getitem__))
    ins = [q_src, k_src, v_src] + ([mask_in] if mask_in is not None else [])
    if flat:
        att = make_node(Op.ATTENTION, ins, f"{out.name}/attn", origin, **attrs)
        new = [att, make_node(Op.RESHAPE, [att.output], out.name, origin, shape=out.type.shape)]
    else:
        new = [make_node(Op.ATTENTION, ins, out.name, origin, **attrs)]
    return Replacement(new, {out: new[-1].output}), region


def _token_inputs(view: GraphView) -> set[Value]:
    """Graph inputs that are themselves indices into constant float tables (token / type ids).

    Only Cast/Reshape may stand between: OPT computes positions from the attention mask with
    CumSum, and that does not make the mask a token input."""
    idx: list[Value] = []
    for n in view.graph.nodes:
        if n.op is Op.EMBEDDING:
            idx += n.inputs[0::2]
        elif n.op is Op.GATHER and n.inputs[0].is_const and n.inputs[0].type.dtype.is_float:
            idx.append(n.inputs[1])
    out = set()
    for v in idx:
        while (p := view.prod(v, Op.CAST, Op.RESHAPE, Op.IDENTITY)) is not None:
            v = p.inputs[0]
        if v in view.graph.inputs and v.type.dtype in (DType.INT64, DType.INT32):
            out.add(v)
    return out


def fuse_attention(graph: Graph, ctx: PassContext) -> Graph:
    memo: Memo = {}
    g, misses = rewrite_nodes(
        graph, lambda view, sm: _match(memo, view, sm), anchor_ops=frozenset({Op.SOFTMAX})
    )
    for m in misses:
        ctx.note("fuse-attention", m)
    return g


PASS = Pass("fuse-attention", fuse_attention)
