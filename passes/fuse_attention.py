"""fuse-attention: scaled dot-product attention with its head split/merge becomes `Attention`.

Anchored on Softmax over the last axis of a rank-4 tensor [B, H, Sq, Sk]:

1. scores: walking back from the Softmax through Mul/Div by scalars (the scale), Add of a
   mask-class bias, Where(mask-class condition, ·, fill), at most one soft-cap c·tanh(s / c)
   below every mask term (Gemma 2: the `softcap` attribute) down to MatMul(q', kᵀ'); at most one
   Reshape [B·H, Sq, Sk] -> [B, H, Sq, Sk] on the way (BLOOM's baddbmm forms the scores with
   the heads batched; q', k', v' and p·v are then [B·H, S, dh]);
2. q', k', v': walking back through scalar Mul/Div (q and k each scaled, the SDPA form) and
   layout ops (Reshape, Transpose, Split, Slice) to a source [B, S, N]; the layout chain is
   *evaluated on an index tensor*, and must equal "heads h·dh columns from an offset" — so any
   order of Reshape/Transpose/Split (one Gemm+Split, three MatMuls, every K-transpose form)
   matches. At most one rotary region may sit on q's and k's way (`_rope_region`): rotate-half
   or interleaved, over all of each head's dims or, partial rotary, over the first rotary_dim
   of them with the rest concatenated back unchanged; its cos/sin tables become operands;
3. the mask: every bias or condition is evaluated, as a function of the graph's mask input,
   on probe masks; it must mean "causal (optionally within a sliding window) and/or key
   padding" (mask[b, key] == 0 drops a key) or "and/or a full mask" (an input [B, (1,) ≥Sq,
   ≥Sk] whose leading corner's mask[b, query, key] == 0 drops the pair: Megatron's), an
   additive bias at or below VERY_NEGATIVE masking, a product with a 0/1 mask only where a
   later term masks the pairs it zeroes (Megatron's scores·m − c·(1 − m)); what the additive terms add to the kept pairs must be ALiBi: per head h,
   slope_h × the key's position plus anything constant along the key axis (softmax cancels
   it), a position counting the kept keys before it (BLOOM's cumsum of the mask; the key's
   index when nothing is padded) — the slopes become the `alibi` attribute — or else terms
   that depend on no graph input, the same for every sample: a constant per head, query and
   key (MPNet's relative position bias, which the frontend folded; MPT's ALiBi, over key
   indices whatever the padding) that becomes a bias operand [H, Sq, Sk] (`has_bias`). The
   probe masks include one with every other key dropped: only gaps tell a position over the
   kept keys from a key index. Anything else (a bias that moves with the mask in
   another way) is not fused;
4. after Softmax an optional IsNaN/Where clean-up, MatMul with v', and a layout chain that
   must equal merging the heads back to [B, S, H·dh].
Intermediates may not escape the region. The mask subgraph is left for dead-code removal.

The evaluations are exact. A head split or merge that carries the position axis whole is
evaluated on three positions (`_few_positions`: one position's mapping is every position's), any
other on the whole index tensor; a mask larger than `MASK_PROBE_BYTES` whose subgraph computes
each query row from that row alone is probed a block of rows at a time (`_rowwise_plan`), so
GPT-2 13B at seq 51200 fuses without an S x S array; what would still exceed the budget is
refused in one line before it is allocated. Each outcome is remembered for the pass's run
under the structure it was computed from (`_structure`): the layers of a model repeat one
structure, and
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

from wsecc.ir.arrays import all_equal, content_key, is_uniform
from wsecc.ir.core import DType, Graph, Node, Op, Value, make_attrs
from wsecc.ir.rewrite import (
    LAYOUT,
    POINTWISE,
    GraphView,
    NoMatch,
    Replacement,
    eval_nodes,
    make_node,
    origin_of,
    region_between,
    rewrite_nodes,
    scalar,
)
from wsecc.ir.rules import alibi_positions, attention_keep, evaluate_op, rotate
from wsecc.passdef import Pass, PassContext, PassError

VERY_NEGATIVE = -1000.0  # an additive bias at or below this masks the key out

_Alias = tuple[Value, Value] | None
"""(y, x): y stands for x in a layout evaluation (a rotary region's output and input: rotation
moves no data between positions)."""
Memo = dict[Hashable, object]
"""Outcomes of the evaluations, for one run of the pass (module docstring)."""
T = TypeVar("T")


def _remembered(memo: Memo, key: Hashable, compute: Callable[[], T]) -> T:
    """`compute()`, or what it returned for `key` before; a NoMatch is raised, not kept."""
    if key not in memo:
        memo[key] = compute()
    return memo[key]  # type: ignore[return-value]


def _structure(
    src: Value, chain: Sequence[Node], target: Value, alias: _Alias = None
) -> tuple[Hashable, ...]:
    """What evaluating `chain` on an array for `src` and reading `target` depends on: src's
    type, then per node its op, attributes and operands — src, an earlier node's output, a
    constant's content, or (never equal to another) any other value — and where `target` is.
    Equal structures evaluate to equal results."""
    where: dict[Value, Hashable] = {src: "src"}
    if alias is not None and alias[1] is src:
        where[alias[0]] = ("alias", "src")
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
        if alias is not None and alias[1] in where and alias[0] not in where:
            where[alias[0]] = ("alias", where[alias[1]])
    key.append(where.get(target, ("value", id(target))))
    return tuple(key)


@dataclass
class _Scores:
    matmul: Node
    scale: float
    terms: list[tuple[str, Value, float]]
    """From the softmax back to the MatMul: ("add", bias, the scale applied after it) — "sub"
    for a bias subtracted, "add_bh"/"sub_bh" for one in [B·H, Sq, Sk] — ("mul", 0/1 mask, the
    scale after it: Megatron's scores·m − c·(1 − m)), or ("where_keep"/"where_drop", cond,
    fill)."""
    nodes: list[Node]
    heads_batched: bool  # computed in [B·H, Sq, Sk], then reshaped to [B, H, Sq, Sk] (BLOOM)
    softcap: float = 0.0  # c of scores c·tanh(scale·q·kᵀ / c) (Gemma 2), 0 without


def _splits_batch(n: Node) -> bool:
    """A Reshape [B·H, Sq, Sk] -> [B, H, Sq, Sk]: it only splits the leading axis."""
    (x,), y = n.inputs[:1], n.output
    return (
        x.type.rank == 3
        and y.type.rank == 4
        and x.type.shape[1:] == y.type.shape[2:]
        and x.type.shape[0] == y.type.shape[0] * y.type.shape[1]
    )


def _walk_scores(view: GraphView, v: Value, mask_class: Callable[[Value], bool]) -> _Scores:
    """The scores' way back from the softmax to q·kᵀ: scales, mask terms and at most one
    soft-cap c·tanh(x) (Gemma 2's `tanh(s / c) · c`), which must sit below every mask term: with
    the scale s_in below the Tanh and s_out = c above it, c·tanh(s_in·q·kᵀ) is the kernel's
    `softcap` c with scale s_in·c."""
    scale, nodes = 1.0, []
    terms: list[tuple[str, Value, float]] = []
    batched = False
    softcap, below = 0.0, 0  # the cap, and the terms found above it
    while True:
        n = view.prod(v)
        if n is None:
            raise NoMatch("scores do not come from a MatMul")
        nodes.append(n)
        if n.op is Op.MATMUL:
            if softcap and len(terms) > below:
                raise NoMatch(f"{UNSUPPORTED}a mask or bias inside the soft-capped scores")
            return _Scores(n, scale * softcap if softcap else scale, terms, nodes[:-1],
                           batched, softcap)  # fmt: skip
        if n.op in (Op.MUL, Op.DIV) and scalar(n.inputs[1]) is not None:
            s = scalar(n.inputs[1])
            assert s is not None
            scale = scale * s if n.op is Op.MUL else scale / s
            v = n.inputs[0]
        elif n.op is Op.RESHAPE and not batched and _splits_batch(n):
            batched = True
            v = n.inputs[0]
        elif n.op is Op.ADD and mask_class(n.inputs[1]):
            terms.append(("add_bh" if batched else "add", n.inputs[1], scale))
            v = n.inputs[0]
        elif n.op is Op.ADD and mask_class(n.inputs[0]):
            terms.append(("add_bh" if batched else "add", n.inputs[0], scale))
            v = n.inputs[1]
        elif n.op is Op.SUB and mask_class(n.inputs[1]):
            terms.append(("sub_bh" if batched else "sub", n.inputs[1], scale))
            v = n.inputs[0]
        elif n.op is Op.MUL and batched and any(mask_class(u) for u in n.inputs):
            raise NoMatch("scores masked by a product in [B·H, Sq, Sk]")
        elif n.op is Op.MUL and mask_class(n.inputs[1]):
            terms.append(("mul", n.inputs[1], scale))
            v = n.inputs[0]
        elif n.op is Op.MUL and mask_class(n.inputs[0]):
            terms.append(("mul", n.inputs[0], scale))
            v = n.inputs[1]
        elif n.op is Op.WHERE and batched:
            raise NoMatch("masked fill of scores in [B·H, Sq, Sk]")
        elif n.op is Op.WHERE and mask_class(n.inputs[0]):
            if scalar(n.inputs[2]) is not None and not n.inputs[1].is_const:
                terms.append(("where_keep", n.inputs[0], scalar(n.inputs[2]) or 0.0))
                v = n.inputs[1]
            elif scalar(n.inputs[1]) is not None and not n.inputs[2].is_const:
                terms.append(("where_drop", n.inputs[0], scalar(n.inputs[1]) or 0.0))
                v = n.inputs[2]
            else:
                raise NoMatch("Where in the scores is not a masked fill")
        elif n.op is Op.TANH and not softcap and not batched:
            if not scale > 0:
                raise NoMatch(f"Tanh {n.name!r} in the scores is not a soft-cap c·tanh(s / c)")
            softcap, scale, below = scale, 1.0, len(terms)
            v = n.inputs[0]
        elif n.op is Op.ADD and all(
            any(m.op is Op.MATMUL for m in view.ancestors(u)) for u in n.inputs
        ):
            raise NoMatch(
                f"{UNSUPPORTED}the scores add a second product of activations at {n.name!r} "
                "(disentangled attention: DeBERTa-v2's content-to-position and "
                "position-to-content terms), not fused into one attention kernel"
            )
        else:
            raise NoMatch(f"{n.op.name} {n.name!r} in the scores is not a scale or a mask")


UNSUPPORTED = "unsupported: "
"""Starts a NoMatch reason naming a model feature wsecc recognises and does not fuse: the pass
refuses the model in one line (PassError) when nothing else fused that softmax."""


@dataclass(frozen=True)
class _Rope:
    """A rotary region: nodes taking x to y = x·cos + rotate(x)·sin (`_rope_tables` checks)."""

    x: Value
    y: Value
    nodes: tuple[Node, ...]
    tables: tuple[Node, ...]  # what computes the cos/sin operands from constants (may be none)
    leaves: frozenset[Value]  # the cos/sin operands themselves
    before: tuple[Node, ...] = ()  # the layout chain from the head source to x


_ROPE_OPS = LAYOUT | {Op.NEG, Op.MUL, Op.ADD, Op.SUB, Op.CONCAT}


def _rope_region(view: GraphView, end: Node) -> _Rope | None:
    """The rotary region ending in `end`: Add(Mul(x', t1), Mul(r, t2)) with tables t1, t2 that
    depend on no graph input (constants, or a lookup of a constant cache at constant positions:
    GPT-J's), where x' and r both come from one x through layout ops, Neg and Concat
    (rotate-half's Slice/Neg/Concat, rotate-every-two's strided Slices, Unsqueeze/Concat and
    Reshape); or partial rotary, Concat(that Add, pass) over the last axis, where the Add's x
    and the passed-through rest are both cut out of one x (`_partial_rope_region`)."""
    if end.op is Op.CONCAT:
        return _partial_rope_region(view, end) or _halves_rope_region(view, end)
    add = end
    muls = [view.prod(v, Op.MUL) for v in add.inputs]
    if any(m is None for m in muls):
        return None
    tables: list[Value] = []
    for m in muls:
        assert m is not None
        static = [u for u in m.inputs if u.is_const or not view.input_ancestors(u)]
        if len(static) != 1:
            return None
        tables.append(static[0])
    for m in muls:
        assert m is not None
        cand = next(u for u in m.inputs if u is not tables[muls.index(m)])
        region = region_between(view, cand, add, _ROPE_OPS, 24, frozenset(tables))
        if region is not None and all(m2 in region for m2 in muls):
            computed = {n for t in tables for n in view.ancestors(t)}
            table_nodes = tuple(sorted(computed, key=view.index.__getitem__))
            return _Rope(cand, add.output, tuple(region), table_nodes, frozenset(tables))
    return None


def _static_factor(view: GraphView, m: Node) -> Value | None:
    """The one operand of Mul `m` that depends on no graph input (a rotary table), or None."""
    static = [u for u in m.inputs if u.is_const or not view.input_ancestors(u)]
    return static[0] if len(static) == 1 else None


def _halves_rope_region(view: GraphView, cat: Node) -> _Rope | None:
    """Concat(x1·c − x2·s, x2·c + x1·s) over the last axis, x1 and x2 the halves of one x
    (gpt-oss's rotary: tables half a head wide, the rotated halves concatenated), or the even
    and odd dims of x, each rotated pair stacked on a new last axis (Llama 4's rotary as
    `hf_export.real_rotary` exports it): the region from the nearest x both are cut from."""
    rank = cat.output.type.rank
    if len(cat.inputs) != 2 or cat.attr("axis") % rank != rank - 1:
        return None
    muls: list[Node] = []
    for v in cat.inputs:
        while (r := view.prod(v, Op.RESHAPE)) is not None:  # stacked pairs (Llama 4's)
            v = r.inputs[0]
        n = view.prod(v, Op.ADD, Op.SUB)
        if n is None:
            return None
        for u in n.inputs:
            m = view.prod(u, Op.MUL)
            if m is None:
                return None
            muls.append(m)
    tables = [_static_factor(view, m) for m in muls]
    if any(t is None for t in tables):
        return None
    leaves = frozenset(t for t in tables if t is not None)
    x = next(u for u in muls[0].inputs if u is not tables[0])
    for _ in range(3):  # the halves are cut by one Split (or two Slices) of x
        p = view.prod(x)
        if p is None or p.op not in LAYOUT:
            return None
        x = p.inputs[0]
        region = region_between(view, x, cat, _ROPE_OPS, 24, leaves)
        if region is not None and set(muls) <= set(region):
            computed = {n for t in leaves for n in view.ancestors(t)}
            table_nodes = tuple(sorted(computed, key=view.index.__getitem__))
            return _Rope(x, cat.output, tuple(region), table_nodes, leaves)
    return None


def _stacked_rope_region(view: GraphView, merge: Node) -> _Rope | None:
    """Reshape [..., d/2, 2] -> [..., d] of a rotary region over x' = Reshape(x [..., d]) ->
    [..., d/2, 2] whose rotated pairs are stacked on the last axis (Llama 4's, as
    `hf_export.real_rotary` exports it): the region from x to the merged output, so that its
    input and output are [..., head_dim] as `_evaluate_rope` reads them."""
    y = merge.output
    cat = view.prod(merge.inputs[0], Op.CONCAT)
    shape = y.type.shape
    if cat is None or not shape or cat.output.type.shape != (*shape[:-1], shape[-1] // 2, 2):
        return None
    inner = _halves_rope_region(view, cat)
    split = view.prod(inner.x, Op.RESHAPE) if inner is not None else None
    if inner is None or split is None or split.inputs[0].type.shape != shape:
        return None
    nodes = (split, *inner.nodes, merge)
    return _Rope(split.inputs[0], y, nodes, inner.tables, inner.leaves)


def _partial_rope_region(view: GraphView, cat: Node) -> _Rope | None:
    """Concat(y_r, x_pass) over the last axis where y_r is a rotary region's output: partial
    rotary (GPT-NeoX, Phi, StableLM, CodeGen, GPT-J with rotary_dim < head_dim) rotates the
    first r dims of each head, x[..., :r], and passes x[..., r:] through. The region grows back
    from the rotary input through layout ops to the nearest x that both parts are cut from."""
    rank = cat.output.type.rank
    if len(cat.inputs) != 2 or cat.attr("axis") % rank != rank - 1:
        return None
    add = view.prod(cat.inputs[0], Op.ADD)
    inner = _rope_region(view, add) if add is not None else None
    if inner is None:
        return None
    x = inner.x
    for _ in range(4):  # the exporters cut x[..., :r] with one Slice (or Split)
        p = view.prod(x)
        if p is None or p.op not in LAYOUT:
            return None
        x = p.inputs[0]
        region = region_between(view, x, cat, _ROPE_OPS, 40, inner.leaves)
        if region is not None and set(inner.nodes) <= set(region):
            return _Rope(x, cat.output, tuple(region), inner.tables, inner.leaves)
    return None


def _moves_data(n: Node) -> bool:
    """A layout op, or a Gather (GatherND) at constant indices: Falcon takes the key and the
    value head out of each group of its fused heads with one."""
    return n.op in LAYOUT or (n.op in (Op.GATHER, Op.GATHER_ND) and n.inputs[1].is_const)


def _one_value(c: Value, x: Value) -> float | None:
    """The value of constant `c` when every element of it is that one value and multiplying x
    by it keeps x's shape (a scalar; Llama 4's NoPE temperature per position, log(⌊(p + 1) /
    floor_scale⌋ + 1)·attn_scale + 1, which is 1 at every position below floor_scale), else
    None."""
    a = c.const
    if a is None or not a.size or np.broadcast_shapes(a.shape, x.type.shape) != x.type.shape:
        return None
    return float(a.reshape(-1)[0]) if all_equal(a) else None


def _layout_source(view: GraphView, v: Value) -> tuple[Value, list[Node], float, _Rope | None]:
    """Walk back through layout ops, scalar scales and at most one rotary region to the value
    they rearrange. The chain excludes the rotary region's nodes (`_Rope`)."""
    chain: list[Node] = []
    scale = 1.0
    rope: _Rope | None = None
    after = 0  # chain nodes between the rotary region and the target

    def done() -> tuple[Value, list[Node], float, _Rope | None]:
        forward = chain[::-1]
        if rope is None:
            return v, forward, scale, None
        return v, forward, scale, replace(rope, before=tuple(forward[: len(chain) - after]))

    while True:
        n = view.prod(v)
        if n is None:
            return done()
        if n.op is Op.RESHAPE and rope is None and (r := _stacked_rope_region(view, n)):
            rope, after = r, len(chain)
            v = r.x
        elif _moves_data(n):
            chain.append(n)
            v = n.inputs[0]
        elif (
            n.op in (Op.MUL, Op.DIV)
            and _one_value(n.inputs[1], n.inputs[0]) is not None
            and not n.inputs[0].is_const
        ):
            s = _one_value(n.inputs[1], n.inputs[0])
            assert s is not None
            scale = scale * s if n.op is Op.MUL else scale / s
            chain.append(n)
            v = n.inputs[0]
        elif (
            n.op in (Op.ADD, Op.CONCAT)
            and rope is None
            and (r := _rope_region(view, n)) is not None
        ):
            rope, after = r, len(chain)
            v = r.x
        else:
            return done()


_Source = tuple[Value, list[Node], float, "_Rope | None"]


def _norm_of_split_rows(view: GraphView, v: Value) -> bool:
    """v is a norm (no skip) over the last axis of Reshape(x [B, S, N]) -> [B, S, a, ..., z]:
    its axes 0 and 1 are x's batch and sequence, so flattening v gives x's layout back."""
    norm = view.prod(v, Op.RMS_NORM, Op.LAYER_NORM)
    if norm is None or norm.attr("has_skip"):
        return False
    split = view.prod(norm.inputs[0], Op.RESHAPE)
    x = split.inputs[0] if split is not None else None
    return x is not None and x.type.rank == 3 and x.type.shape[:2] == v.type.shape[:2]


def _flat_source(view: GraphView, found: _Source, flats: list[tuple[Node, Node]]) -> _Source:
    """A head source [B, S, a, ..., z] that a norm computed in the head-split shape
    (`_norm_of_split_rows`: Qwen3's, Gemma 3's per-head RMSNorm of q and k, over [B, S, H, dh]
    before the heads are transposed) seen as [B, S, a·…·z]: a Reshape that flattens it becomes the source, and its
    inverse (a node outside the graph, evaluated only) starts the chain, so the layout
    evaluation reads the columns as before. (flatten, inverse) is appended to `flats`."""
    src, chain, scale, rope = found
    if src.type.rank <= 3 or not _norm_of_split_rows(view, src):
        return found
    pair = next((p for p in flats if p[0].inputs[0] is src), None)
    if pair is None:
        b, s = src.type.shape[:2]
        n = int(np.prod(src.type.shape[2:]))
        flat = make_node(Op.RESHAPE, [src], f"{src.name}/flat", (), shape=(b, s, n))
        back = make_node(Op.RESHAPE, [flat.output], f"{src.name}/unflat", (), shape=src.type.shape)
        pair = (flat, Node(back.op, back.inputs, (src,), back.attrs, back.name, back.origin))
        flats.append(pair)
    flat, unflat = pair
    if rope is not None:
        rope = replace(rope, before=(unflat, *rope.before))
    return flat.output, [unflat, *chain], scale, rope


def _rope_tables(
    memo: Memo, src: Value, rope: _Rope, cols: np.ndarray
) -> tuple[str, int, Value, Value]:
    """(form, rotary_dim, cos, sin [S, dh]) of a rotary region over the heads at `cols`
    (`_head_columns`), or NoMatch. Remembered by structure: the layers share their tables (and
    the table constants)."""
    before = list(rope.before)
    structure = _structure(src, [*before, *rope.tables, *rope.nodes], rope.y)
    key = ("rope", structure, cols.shape, cols.tobytes())
    return _remembered(memo, key, lambda: _evaluate_rope(src, before, rope, cols))


def _pairs(form: str, rd: int) -> tuple[slice, slice]:
    """The two members of each rotated pair: halves of the rotary dims, or neighbours."""
    if form == "half":
        return slice(0, rd // 2), slice(rd // 2, rd)
    return slice(0, rd, 2), slice(1, rd, 2)


def _evaluate_rope(
    src: Value, before: list[Node], rope: _Rope, cols: np.ndarray
) -> tuple[str, int, Value, Value]:
    """Solve y = x·C + rotate(x)·S for C and S per element from two probes, for each form, over
    the first rotary_dim dims of each head (those the region moves; the rest pass through, C 1
    and S 0), and keep the first that a third probe confirms and that is a rotation: C and S
    must be tables over (position, feature), equal across batch rows and heads (positions and
    features read from an index tensor carried from src to x), and equal for both members of
    each rotated pair. A slice-wise region whose batch rows and heads read positions in one
    order (`_slicewise`, Llama's rotate-half) is probed on one [S, dh] slice, not on every one."""
    b, s, n = src.type.shape
    dh = cols.shape[1]
    index = np.int32 if b * s * n < 2**31 else np.int64  # half the bytes where it holds them
    iota = np.arange(b * s * n, dtype=index).reshape(b, s, n)
    idx = eval_nodes(before, {src: iota})[rope.x] if before else iota
    dim_of = np.full(n, -1, dtype=index)  # each source column's dim within its head
    dim_of[cols] = np.arange(dh)
    pos, feat = (idx // n) % s, dim_of[idx % n]
    if idx.shape[-1] != dh or np.any(feat != np.arange(dh)):
        raise NoMatch("rotary input's last axis is not the head dim")
    if _slicewise(rope, idx.ndim) and _same_slices(pos):
        # every [S, dh] slice of x (batch row, head) is rotated by one function and reads the
        # same positions: probing one slice decides for all (`_slicewise`)
        probe_shape: tuple[int, ...] = (1,) * (idx.ndim - 2) + idx.shape[-2:]
        one = (0,) * (idx.ndim - 2)
        pos, feat = pos[one].reshape(probe_shape), feat[one].reshape(probe_shape)
    else:
        probe_shape = idx.shape
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(probe_shape) for _ in range(3)]
    try:
        tables = eval_nodes(rope.tables, {})
        ys = [eval_nodes(rope.nodes, {**tables, rope.x: x})[rope.y].astype(np.float64) for x in xs]
    except Exception as e:
        raise NoMatch(f"rotary region could not be evaluated: {e}") from None
    if ys[0].shape != probe_shape:
        raise NoMatch("rotary region changes the shape")
    # partial rotary passes the dims past rotary_dim through: the last dim it moves bounds them
    moved = np.flatnonzero(np.any(ys[0] != xs[0], axis=tuple(range(ys[0].ndim - 1))))
    rd = (int(moved[-1]) + 2) // 2 * 2 if moved.size else dh
    if rd > dh or rd % 2:
        raise NoMatch(f"rotary region moves {rd} of the head's {dh} dims (not an even count)")
    for form in ("half", "interleaved"):
        r = [rotate(x, form, rd) for x in xs]
        det = xs[0] * r[1] - xs[1] * r[0]
        live = np.abs(det) > 1e-9
        safe = np.where(live, det, 1.0)
        c = np.where(live, (ys[0] * r[1] - ys[1] * r[0]) / safe, ys[0] / xs[0])
        sn = np.where(live, (xs[0] * ys[1] - xs[1] * ys[0]) / safe, 0.0)
        err = np.abs(xs[2] * c + r[2] * sn - ys[2])
        if np.max(err) > 1e-5 * max(1.0, float(np.max(np.abs(ys[2])))):
            continue
        cos, sin = np.zeros((s, dh)), np.zeros((s, dh))
        cos[pos, feat], sin[pos, feat] = c, sn
        if not (
            np.allclose(cos[pos, feat], c, atol=1e-6) and np.allclose(sin[pos, feat], sn, atol=1e-6)
        ):
            raise NoMatch("rotary tables differ across batch rows or heads")
        # a rotation turns each pair by one angle: both members see the same cos and sin
        first, second = _pairs(form, rd)
        if not all(np.allclose(t[:, first], t[:, second], atol=1e-6) for t in (cos, sin)):
            continue
        # + 0.0 makes a zero +0.0: its sign is the probes' rounding, not the table's
        return (
            form,
            rd,
            Value.constant(f"{rope.y.name}/rope_cos", (cos + 0.0).astype(np.float32)),
            Value.constant(f"{rope.y.name}/rope_sin", (sin + 0.0).astype(np.float32)),
        )
    raise NoMatch("Add of products is not a rotary embedding (rotate-half or interleaved)")


_SLICEWISE_OPS = frozenset({Op.NEG, Op.MUL, Op.ADD, Op.SUB, Op.SLICE, Op.SPLIT, Op.CONCAT})


def _slicewise(rope: _Rope, rank: int) -> bool:
    """Whether the rotary region computes each [S, dh] slice of its input x (rank `rank`: the
    leading axes are batch rows and heads) from that slice alone, by one function: its nodes are
    Neg, Mul/Add/Sub whose operands other than the region's own values (the tables) have size 1
    on every leading axis, and Slice/Split/Concat of the last axis only (rotate-half's). Such a
    region maps a slice to a slice whatever the other slices hold, the same for every slice, so
    `_evaluate_rope` probes one slice instead of B·H of them (Llama 3.1 8B at context 2048: one
    [2048, 128] slice, not 32 of them, for each of q and k)."""
    if rank < 3:
        return False
    inside = {rope.x} | {o for n in rope.nodes for o in n.outputs}
    for n in rope.nodes:
        if n.op not in _SLICEWISE_OPS:
            return False
        if n.op is Op.SLICE and any(ax % rank != rank - 1 for ax in n.attr("axes")):
            return False
        if n.op in (Op.SPLIT, Op.CONCAT) and n.attr("axis") % rank != rank - 1:
            return False
        for v in n.inputs:
            if v in inside:
                if v.type.rank != rank:
                    return False
                continue
            shape = v.type.shape
            if n.op not in (Op.MUL, Op.ADD, Op.SUB) or len(shape) > rank:
                return False
            if any(d != 1 for d in shape[: max(0, len(shape) - 2)]):
                return False
    return True


def _same_slices(pos: np.ndarray) -> bool:
    """Whether every [S, dh] slice of `pos` (the position each element of x reads) is the
    first one: each batch row and head sees positions in the same order."""
    flat = pos.reshape(-1, *pos.shape[-2:])
    return bool(np.array_equal(flat, np.broadcast_to(flat[:1], flat.shape)))


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


def _few_positions(chain: Sequence[Node], s: int, keep: int, axis: int) -> list[Node] | None:
    """`chain`, which starts from a tensor whose `axis` runs over s positions, rewritten for
    `keep` positions; or None unless every node carries the position axis whole and alone: a
    Reshape whose result has one axis of s with as many elements before it as before the
    position axis (the axis it becomes), a Transpose (the axis moves), a Split or Slice of
    another axis, a scalar scale.

    Why a few positions decide for all: each such node maps the elements at position p to the
    elements at position p, the same way for every p, so on an index tensor over the source
    the result at position p is position 0's plus p times the source's position stride; the
    head split and merge the probes compare with do the same. The index tensor then holds
    keep / s of the elements (GPT-2 13B at seq 51200: 3.1 GB as int32 otherwise)."""
    ax, out = axis, []
    for n in chain:
        shape_in = n.inputs[0].type.shape
        rank = len(shape_in)
        if n.op is Op.RESHAPE:
            shape = tuple(n.attr("shape"))
            before = math.prod(shape_in[:ax])
            found = [i for i, d in enumerate(shape) if d == s and math.prod(shape[:i]) == before]
            if not shape or min(shape) <= 0 or len(found) != 1:
                return None
            ax = found[0]
            new = (*shape[:ax], keep, *shape[ax + 1 :])
            n = replace(n, attrs=make_attrs({**n.attr_dict, "shape": new}))
        elif n.op is Op.TRANSPOSE:
            ax = list(n.attr("perm")).index(ax)
        elif n.op is Op.SPLIT:
            if n.attr("axis") % rank == ax:
                return None
        elif n.op is Op.SLICE:
            if any(a % rank == ax for a in n.attr("axes")):
                return None
        elif n.op not in (Op.MUL, Op.DIV):
            return None
        out.append(n)
    return out


POSITIONS_PROBED = 3
"""Positions a head layout is evaluated on when its chain carries the position axis whole
(`_few_positions`)."""


def _head_columns(
    memo: Memo,
    src: Value,
    chain: list[Node],
    target: Value,
    h: int,
    dh: int,
    transposed: bool,
    rope: _Rope | None = None,
    grouped: bool = False,
) -> np.ndarray:
    """[heads taken, dh]: the column of `src` each dim of each head reads when `chain` takes
    heads out of it (every position reading its own row of src), or NoMatch. `grouped` (keys,
    values): the chain may take h / g heads and repeat each g times in a row (grouped-query
    attention's repeat_kv), or take one head that the MatMul broadcasts (Falcon's multi-query);
    the heads taken are then h / g. A rotary region on the way moves
    no data, so its output stands for its input."""
    alias = (rope.y, rope.x) if rope is not None else None
    key = ("head columns", _structure(src, chain, target, alias), h, dh, transposed, grouped)
    return _remembered(
        memo,
        key,
        lambda: _evaluate_head_columns(src, chain, target, h, dh, transposed, alias, grouped),
    )


def _evaluate_head_columns(
    src: Value,
    chain: list[Node],
    target: Value,
    h: int,
    dh: int,
    transposed: bool,
    alias: _Alias,
    grouped: bool,
) -> np.ndarray:
    if src.type.rank != 3:
        raise NoMatch(f"head source {src.name!r} is not [B, S, N]")
    b, s, n = src.type.shape
    one = _one_row(chain, b)
    rows, nodes = (1, one) if one is not None else (b, chain)
    few = _few_positions(nodes, s, POSITIONS_PROBED, 1) if s > POSITIONS_PROBED else None
    if few is not None:
        s, nodes = POSITIONS_PROBED, few
    # int32 where it holds every index: at seq 51200 and width 3 x 5120 the index tensor is
    # 3.1 GB, not 6.3 (layout ops are views of it; the comparison below goes by positions)
    index = np.int32 if rows * s * n < 2**31 else np.int64
    if rows * s * n * np.dtype(index).itemsize > MASK_PROBE_BYTES:
        raise PassError(
            f"fuse-attention: checking the heads' layout of {src.name!r} evaluates an index "
            f"tensor [{rows}, {s}, {n}], {rows * s * n * np.dtype(index).itemsize / 2**20:,.0f} "
            f"MiB (over {MASK_PROBE_BYTES >> 20:,} MiB); compile at a shorter --seq"
        )
    iota = np.arange(rows * s * n, dtype=index).reshape(rows, s, n)
    vals: dict[Value, np.ndarray] = {src: iota}
    for node in nodes:  # scalar scales pass indices through unchanged
        if alias is not None and alias[1] in vals:
            vals[alias[0]] = vals[alias[1]]
        if _moves_data(node):
            vals.update(eval_nodes([node], vals))
        else:
            vals[node.output] = vals[node.inputs[0]]
    if alias is not None and alias[1] in vals:
        vals[alias[0]] = vals[alias[1]]
    got = vals[target]
    if got.ndim == 3 and got.shape[0] == rows * h:  # heads batched with the rows (BLOOM's)
        got = got.reshape(rows, h, *got.shape[1:])
    if transposed and got.ndim == 4:
        got = got.transpose(0, 1, 3, 2)
    if grouped and got.ndim == 4 and got.shape[1] == 1:  # one K/V head broadcast (multi-query)
        got = np.broadcast_to(got, (got.shape[0], h, *got.shape[2:]))
    cols = got[0, :, :1, :] if got.shape == (rows, h, s, dh) else None
    if cols is None or np.any(cols < 0) or np.any(cols >= n) or not _reads_own_rows(got, cols, n):
        raise NoMatch(f"layout from {src.name!r} does not split heads")
    cols = cols[:, 0, :]
    for taken in [d for d in range(1, h + 1) if h % d == 0] if grouped else [h]:
        heads = cols.reshape(taken, h // taken, dh)
        if np.array_equal(heads, np.broadcast_to(heads[:, :1], heads.shape)):
            return heads[:, 0]
    raise AssertionError("unreachable: every head is its own group")


LAYOUT_BLOCK = 1 << 24
"""Elements of a layout's index tensor compared at once (`_reads_own_rows`)."""


def _reads_own_rows(got: np.ndarray, cols: np.ndarray, n: int) -> bool:
    """Whether `got` [rows, h, S, dh], indices into a [rows, S, n] source, reads at every
    (row, position) that row and position's columns `cols` [h, 1, dh]; compared a block of
    positions at a time, so no second tensor as large as `got` is made."""
    rows, h, s, dh = got.shape
    step = max(1, LAYOUT_BLOCK // max(1, rows * h * dh))
    for p in range(0, s, step):
        q = min(s, p + step)
        starts = (np.arange(rows)[:, None] * s + np.arange(p, q)) * n  # [rows, q - p]
        if not np.array_equal(got[:, :, p:q], starts[:, None, :, None] + cols[None]):
            return False
    return True


def _offset(cols: np.ndarray) -> int | None:
    """The column offset of heads that sit side by side in their source, else None."""
    first = int(cols[0, 0])
    return first if np.array_equal(cols.ravel(), first + np.arange(cols.size)) else None


def _merge_heads(
    memo: Memo, view: GraphView, o: Value, heads: tuple[int, int, int, int]
) -> tuple[Value, list[Node], bool]:
    """Follow o [B, H, S, dh] (or [B·H, S, dh]; `heads` is [B, H, S, dh]) through single-user
    layout ops to its [B, S, H·dh] (or [B·S, H·dh]) form."""
    chain: list[Node] = []
    v = o
    while True:
        u = view.sole_user(v)
        if u is None or u.op not in (Op.TRANSPOSE, Op.RESHAPE):
            raise NoMatch("attention output is not merged back to [B, S, H·dh]")
        chain.append(u)
        v = u.output
        key = ("merged", _structure(o, chain, v), heads)
        form = _remembered(memo, key, partial(_merged_form, o, chain, v, heads))
        if form is not None:
            return v, chain, form == "flat"
        if len(chain) > 4:
            raise NoMatch("attention output layout not recognised")


def _merged_form(
    o: Value, chain: list[Node], v: Value, heads: tuple[int, int, int, int]
) -> str | None:
    """ "merged" when `chain` takes o [B, H, S, dh] to [B, S, H·dh], "flat" to [B·S, H·dh]
    (probed on one batch row when the chain keeps the batch axis outermost, see `_one_row`)."""
    b, h, s, dh = heads
    one = _one_row(chain, b)
    rows, nodes = (1, one) if one is not None else (b, chain)
    few = None
    if s > POSITIONS_PROBED and o.type.shape[-2] == s:
        few = _few_positions(nodes, s, POSITIONS_PROBED, o.type.rank - 2)
    if few is not None:
        s, nodes = POSITIONS_PROBED, few
    if rows * h * s * dh * 8 > MASK_PROBE_BYTES:
        raise PassError(
            f"fuse-attention: checking how {o.name!r}'s heads merge evaluates an index tensor "
            f"[{rows}, {h}, {s}, {dh}], {rows * h * s * dh * 8 / 2**20:,.0f} MiB (over "
            f"{MASK_PROBE_BYTES >> 20:,} MiB); compile at a shorter --seq"
        )
    iota = np.arange(rows * h * s * dh, dtype=np.int64).reshape(rows, h, s, dh)
    merged = iota.transpose(0, 2, 1, 3).reshape(rows, s, h * dh)
    shape = (rows * o.type.shape[0] // b, *o.type.shape[1:-2], s, dh)  # shapes from the arrays
    got = eval_nodes(nodes, {o: iota.reshape(shape)})[v]
    if got.shape == merged.shape and np.array_equal(got, merged):
        return "merged"
    if got.shape == (rows * s, h * dh) and np.array_equal(got, merged.reshape(rows * s, h * dh)):
        return "flat"
    return None


@dataclass(frozen=True)
class _MaskMeaning:
    """What the mask terms implement: causal (within a sliding `window` when not 0, or within
    the `chunk` a query is in: Llama 4's chunked local attention), a mask
    input of `kind` "key_padding" ([B, Sk]) or "full" ([B, (1,) ≥Sq, ≥Sk], its leading
    [Sq, Sk] corner per sample) or none, masked scores replaced by `fill`, ALiBi's slopes or a
    constant bias."""

    causal: bool
    window: int
    mask_in: Value | None
    kind: str
    fill: float
    slopes: tuple[float, ...]
    bias: Value | None = None  # a constant [H, Sq, Sk] added to the scaled scores (`_bias_forms`)
    chunk: int = 0  # causal within chunks of this many positions (Llama 4's), 0 without


def _mask_semantics(
    memo: Memo,
    view: GraphView,
    terms: list[tuple[str, Value, float]],
    shape: tuple[int, int, int, int],
) -> _MaskMeaning:
    """What the mask terms implement. Remembered by the terms themselves: the layers of a
    model share one mask subgraph."""
    key = ("mask", tuple(terms), shape)
    return _remembered(memo, key, lambda: _evaluate_mask(view, terms, shape))


MASK_PROBE_BYTES = 8 << 30
"""What one mask probe, or one head layout's index tensor, may hold (a third of this machine's
24 GB; past it the compile stops in one line, before allocating): the mask subgraph grows with
B S^2, so GPT-2 13B's mask at seq 16384 takes 5 GiB and at 32768 would take 11. A larger one is
probed a block of query rows at a time (`_evaluate_mask_by_rows`) when its subgraph computes each
row from that row alone."""

MASK_BLOCK_BYTES = 256 << 20
"""What one block of query rows may hold, intermediates included (`_evaluate_mask_by_rows`)."""


def _full_mask_shape(shape: tuple[int, ...], b: int, sq: int, sk: int) -> bool:
    """[B, M, M'] or [B, 1, M, M'] with M ≥ Sq and M' ≥ Sk: a per-query mask that may be
    larger than the sequence (Megatron's [B, 1, max, max], read at the leading corner)."""
    if len(shape) not in (3, 4) or shape[0] != b or (len(shape) == 4 and shape[1] != 1):
        return False
    return shape[-2] >= sq and shape[-1] >= sk


def _corner(m: np.ndarray, sq: int, sk: int) -> np.ndarray:
    """[B, Sq, Sk]: a full mask's leading corner (`_full_mask_shape`)."""
    return m.reshape(m.shape[0], *m.shape[-2:])[:, :sq, :sk]


def _evaluate_mask(
    view: GraphView, terms: list[tuple[str, Value, float]], shape: tuple[int, int, int, int]
) -> _MaskMeaning:
    """Additive terms mask a pair out where they are at or below VERY_NEGATIVE; what they add
    elsewhere (ALiBi) must be, per head h, slope_h × the key's position plus anything constant
    along the key axis (`_alibi_slopes`). A product term must be 0 or 1, and every pair it
    zeroes must be masked out by a term applied after it (Megatron's scores·m − c·(1 − m): the
    pair's score is then the fill −c)."""
    b, h, sq, sk = shape
    inputs = set().union(*(view.input_ancestors(t[1]) for t in terms)) if terms else set()
    if len(inputs) > 1:
        raise NoMatch(f"mask depends on several inputs {sorted(v.name for v in inputs)}")
    mask_in = next(iter(inputs), None)
    kind = "none" if mask_in is None else "key_padding"
    if mask_in is not None and mask_in.type.shape != (b, sk):
        if not _full_mask_shape(mask_in.type.shape, b, sq, sk):
            raise NoMatch(f"mask input {mask_in.name!r} is not [B, S] nor [B, 1, ≥S_q, ≥S_kv]")
        kind = "full"
    nodes = sorted({n for _, v, _ in terms for n in view.ancestors(v)}, key=view.index.__getitem__)
    probe = 4 * b * sq * sk + sum(
        math.prod(v.type.shape) * v.type.dtype.itemsize for n in nodes for v in n.outputs
    )  # every intermediate is kept while the probe runs, and the kept-key masks
    if probe > MASK_PROBE_BYTES:
        rowwise = _rowwise_plan(nodes, terms, b, sq, sk)
        if rowwise is not None and kind != "full":  # a full mask input is itself Sq x Sk
            return _evaluate_mask_by_rows(view, nodes, terms, shape, mask_in, rowwise, probe)
        raise PassError(
            f"fuse-attention: checking what the attention mask means evaluates it at the bound "
            f"shape [{b}, 1, {sq}, {sk}], {probe / 2**20:,.0f} MiB with its intermediates (over "
            f"{MASK_PROBE_BYTES >> 20:,} MiB); compile at a shorter --seq"
        )
    fills = [f for kind, _, f in terms if kind.startswith("where")]

    def keep_for(mask: np.ndarray | None) -> tuple[np.ndarray, list[tuple[Value, np.ndarray]]]:
        """The kept pairs [b, 1, sq, sk], and the additive terms that do not only mask with
        what they add (each [b | 1, h | 1, sq | 1, sk], as scaled as the scores after it)."""
        env = (
            {mask_in: mask.astype(mask_in.type.dtype.numpy)}
            if mask_in is not None and mask is not None
            else {}
        )
        vals = eval_nodes(nodes, env)
        keep = np.ones((b, 1, sq, sk), dtype=bool)
        later = np.ones((b, 1, sq, sk), dtype=bool)  # kept by the terms applied after this one
        biases = []
        for kind, v, after in terms:
            a = v.const if v.is_const else vals[v]
            assert a is not None
            if kind.startswith(("add", "sub")):
                a = a.astype(np.float64) * (-1 if kind.startswith("sub") else 1)
                if kind.endswith("_bh"):  # a bias of the [B·H, Sq, Sk] scores
                    a = a.reshape((1,) * (3 - a.ndim) + a.shape)
                    a = a.reshape(b, h, *a.shape[1:]) if a.shape[0] == b * h else a[None]
                else:  # broadcast against the [B, H, Sq, Sk] scores (MPT's ALiBi: [H, 1, Sk])
                    a = a.reshape((1,) * (4 - a.ndim) + a.shape)
                kept = a > VERY_NEGATIVE
                if not kept.all():
                    fills.append(float(a[~kept].min()))
                if np.any(np.where(kept, a, 0.0)):
                    biases.append((v, a * after))
            elif kind == "mul":
                if not np.isin(a, (0, 1)).all():
                    raise NoMatch("scores are multiplied by a term that is not a 0/1 mask")
                kept = a != 0
            else:
                kept = a.astype(bool) if kind == "where_keep" else ~a.astype(bool)
            if kept.ndim == 4 and kept.shape[1] > 1:  # expanded over the heads (DistilBERT's)
                if not (kept == kept[:, :1]).all():
                    raise NoMatch("the mask differs between heads")
                kept = kept[:, :1]
            kept = np.broadcast_to(kept, keep.shape) if kept.ndim <= 4 else kept
            if kind == "mul" and np.any(later & ~kept):
                raise NoMatch("scores multiplied by a 0/1 mask: no later term masks the zeros")
            if kind != "mul":
                later &= kept
            keep &= kept
        return keep, biases

    ones = np.ones(mask_in.type.shape if mask_in is not None else (b, sk), np.int64)
    try:
        base, base_biases = keep_for(ones)
    except NoMatch:
        raise
    except Exception as e:
        raise NoMatch(f"mask subgraph could not be evaluated: {e}") from None
    tril = np.tril(np.ones((sq, sk), dtype=bool), k=sk - sq)
    window = chunk = 0
    if np.array_equal(base, np.broadcast_to(tril, base.shape)):
        causal = True
    elif base.all():
        causal = False
    else:
        window = int(base[0, 0, -1].sum())  # keys the last query sees: a sliding window?
        banded = tril & np.triu(np.ones((sq, sk), dtype=bool), k=sk - sq - window + 1)
        if window == 0 or not np.array_equal(base, np.broadcast_to(banded, base.shape)):
            window, chunk = 0, _chunk_of(base[0, 0], sq, sk)
        causal = True
    # ALiBi's positions count the kept keys of a key-padding mask; a full mask has no such count
    bias = _bias_forms(base_biases, view, base, np.ones((b, sk)), h, alibi=kind != "full")
    if mask_in is not None:
        rng = np.random.default_rng(0)
        gapped = np.broadcast_to(np.arange(mask_in.type.shape[-1]) % 2 == 0, mask_in.type.shape)
        # every other key dropped, then random masks: a bias over key indices (MPT's ALiBi) and
        # one over kept keys (BLOOM's) differ only where a row's kept keys have gaps
        for m in [gapped.astype(np.int64)] + [
            (rng.random(mask_in.type.shape) > 0.3).astype(np.int64) for _ in range(3)
        ]:
            if kind == "full":
                want = base & (_corner(m, sq, sk) != 0)[:, None]
            else:
                m[:, 0] = 1
                want = base & (m != 0)[:, None, None, :]
            keep, biases = keep_for(m)
            bias = _bias_forms(biases, view, keep, m, h, was=bias)
            if not np.array_equal(keep, want):
                if kind == "full":
                    raise NoMatch(
                        f"mask does not mean 'full mask' ({mask_in.name}[b, …, query, key] == 0 "
                        "drops the pair)"
                    )
                raise NoMatch("mask does not mean 'key padding' (mask[b, key] == 0 drops the key)")
    if chunk and mask_in is not None:
        _check_padded_chunks(keep_for, mask_in, kind, (b, sq, sk), chunk)
    finite = [f for f in fills if f < 0]
    fill = min(finite) if finite else -np.inf
    fill = float(max(fill, float(np.finfo(np.float32).min)) if np.isfinite(fill) else fill)
    if bias.slopes is not None:
        return _MaskMeaning(causal, window, mask_in, kind, fill, bias.slopes, chunk=chunk)
    if bias.table is None or not bias.table.any():
        return _MaskMeaning(causal, window, mask_in, kind, fill, (), chunk=chunk)
    named = [v.name for k, v, _ in terms if k != "mul" and not view.input_ancestors(v)]
    table = np.broadcast_to(bias.table, (h, sq, sk)).astype(np.float32)
    name = f"{(named or ['attention'])[0]}/bias"  # the layers share it, as they share the terms
    constant = Value.constant(name, table)
    return _MaskMeaning(causal, window, mask_in, kind, fill, (), constant, chunk)


def _check_padded_chunks(
    keep_for: Callable[[np.ndarray], tuple[np.ndarray, object]],
    mask_in: Value,
    kind: str,
    shape: tuple[int, int, int],
    chunk: int,
) -> None:
    """NoMatch unless the chunked mask keeps, under left padding, what `attention_keep` does:
    the chunks counted from each row's first kept key (the other probes keep key 0)."""
    b, sq, sk = shape
    if kind != "key_padding":
        raise NoMatch("chunked attention with a full mask input is not supported")
    m = np.ones(mask_in.type.shape, np.int64)
    m[..., : min(3, sk - 1)] = 0
    keep, _ = keep_for(m)
    want = attention_keep({"causal": True, "mask": kind, "chunk": chunk}, b, sq, sk, m)
    if not np.array_equal(keep, np.broadcast_to(want, keep.shape)):
        raise NoMatch(
            "chunked mask under left padding does not count the chunks from the first kept key"
        )


def chunked(sq: int, sk: int, chunk: int, lo: int = 0, hi: int | None = None) -> np.ndarray:
    """[hi - lo, sk]: the pairs causal attention within chunks of `chunk` positions keeps for
    query rows [lo, hi) (query i at position sk - sq + i): key ≤ query, both in one chunk."""
    q = np.arange(lo, sq if hi is None else hi)[:, None] + (sk - sq)
    k = np.arange(sk)[None, :]
    return (k <= q) & (k // chunk == q // chunk)


def _chunk_of(base: np.ndarray, sq: int, sk: int) -> int:
    """The chunk size of a causal chunked mask `base` [Sq, Sk] (the first position past 0 that
    sees only itself starts the second chunk), or NoMatch if base is no such mask."""
    q = np.arange(sq) + (sk - sq)
    starts = [int(p) for p, row in zip(q, base, strict=True) if p > 0 and row.sum() == 1]
    if starts and np.array_equal(base, chunked(sq, sk, starts[0])):
        return starts[0]
    raise NoMatch(
        "mask with an all-ones input is neither full, causal, a causal window nor causal chunks"
    )


def _query_axis(v: Value, sq: int) -> int | None:
    """The axis of `v` that runs over the query rows when it broadcasts against the scores
    [B, H, Sq, Sk] (right-aligned: its second-to-last), or None when it is 1 there."""
    r = v.type.rank
    return r - 2 if r >= 2 and v.type.shape[r - 2] == sq else None


def _rowwise_plan(
    nodes: Sequence[Node], terms: list[tuple[str, Value, float]], b: int, sq: int, sk: int
) -> set[Node] | None:
    """The nodes of a mask subgraph to evaluate a block of query rows at a time, when that is
    exact; the others are small (no operand or result as large as one sample's Sq x Sk) and
    are evaluated whole, once. None unless every node that makes or reads a large value is
    `POINTWISE`, has a [B|1, H|1, Sq, Sk|1] result and reads every operand at its own rows (or
    broadcast along them): then rows [lo, hi) of every value are the same ops on rows [lo, hi)
    of the subgraph's inputs and constants, and checking every block checks the whole mask."""
    if sq < 2:
        return None
    large = sq * sk

    def is_large(v: Value) -> bool:
        return v.type.size >= large

    rowwise: set[Node] = set()
    for n in nodes:
        if not any(is_large(v) for v in (*n.inputs, *n.outputs)):
            continue
        out = n.outputs[0]
        if n.op not in POINTWISE or len(n.outputs) != 1 or out.type.rank != 4:
            return None
        if out.type.shape[2] != sq or any(v.type.rank > 4 for v in n.inputs):
            return None
        rowwise.add(n)
    made = {n.outputs[0] for n in rowwise}
    for n in nodes:  # a large value is read only by nodes that keep its rows
        if n not in rowwise and any(v in made or (v.is_const and is_large(v)) for v in n.inputs):
            return None
    if any(v.type.rank != 4 and is_large(v) for _, v, _ in terms):
        return None
    return rowwise


def _evaluate_mask_by_rows(
    view: GraphView,
    nodes: Sequence[Node],
    terms: list[tuple[str, Value, float]],
    shape: tuple[int, int, int, int],
    mask_in: Value | None,
    rowwise: set[Node],
    probe: int,
) -> _MaskMeaning:
    """`_evaluate_mask` for a mask too large to probe whole, one block of query rows at a time
    (`_rowwise_plan` says why that is exact): every row of every probe mask is checked, as the
    whole probe would, within `MASK_BLOCK_BYTES` at once. Masks only: an additive term that
    adds anything to the kept pairs (ALiBi, a bias table) is refused here in one line."""
    b, h, sq, sk = shape
    step = max(1, sq * MASK_BLOCK_BYTES // probe)
    small = [n for n in nodes if n not in rowwise]
    made = {n.outputs[0] for n in rowwise}
    fills = [f for kind, _, f in terms if kind.startswith("where")]

    def keep_rows(mask: np.ndarray | None, lo: int, hi: int) -> np.ndarray:
        """The kept pairs of query rows [lo, hi): [b, 1, hi - lo, sk]."""
        env = {}
        if mask_in is not None and mask is not None:
            env[mask_in] = mask.astype(mask_in.type.dtype.numpy)
        vals = eval_nodes(small, env)

        def rows(v: Value) -> np.ndarray:
            if v in made:  # computed on these rows already
                return vals[v]
            a = v.const if v.is_const else vals[v]
            assert a is not None
            ax = _query_axis(v, sq)
            return a if ax is None else np.take(a, np.arange(lo, hi), axis=ax)

        for n in sorted(rowwise, key=view.index.__getitem__):
            (vals[n.outputs[0]],) = evaluate_op(n.op, [rows(v) for v in n.inputs], n.attr_dict)
        keep = np.ones((b, 1, hi - lo, sk), dtype=bool)
        later = np.ones_like(keep)
        for kind, v, _ in terms:
            a = rows(v)
            if kind.startswith(("add", "sub")):
                if kind.endswith("_bh") and a.ndim == 3 and a.shape[0] == b * h:
                    a = a.reshape(b, h, *a.shape[1:])
                a = a.reshape((1,) * (4 - a.ndim) + a.shape)
                a = -a if kind.startswith("sub") else a
                kept = a > VERY_NEGATIVE
                if not kept.all():
                    fills.append(float(np.min(a, where=~kept, initial=np.inf)))
                if np.any((a != 0) & kept):
                    raise PassError(
                        f"fuse-attention: the attention mask [{b}, 1, {sq}, {sk}] adds a bias "
                        f"to the kept scores; checking it needs {probe / 2**20:,.0f} MiB whole "
                        f"(over {MASK_PROBE_BYTES >> 20:,} MiB); compile at a shorter --seq"
                    )
            elif kind == "mul":
                if not np.isin(a, (0, 1)).all():
                    raise NoMatch("scores are multiplied by a term that is not a 0/1 mask")
                kept = a != 0
            else:
                kept = a.astype(bool) if kind == "where_keep" else ~a.astype(bool)
            if kept.ndim == 4 and kept.shape[1] > 1:
                if not (kept == kept[:, :1]).all():
                    raise NoMatch("the mask differs between heads")
                kept = kept[:, :1]
            kept = np.broadcast_to(kept, keep.shape)
            if kind == "mul" and np.any(later & ~kept):
                raise NoMatch("scores multiplied by a 0/1 mask: no later term masks the zeros")
            if kind != "mul":
                later &= kept
            keep &= kept
        return keep

    def pattern(lo: int, hi: int, causal: bool, window: int, chunk: int) -> np.ndarray:
        """[hi - lo, sk]: the pairs a causal (within `window` or `chunk`, when not 0) or full
        mask keeps."""
        if chunk:
            return chunked(sq, sk, chunk, lo, hi)
        q = np.arange(lo, hi)[:, None] + (sk - sq)
        k = np.arange(sk)[None, :]
        keep = k <= q if causal else np.ones((hi - lo, sk), dtype=bool)
        return keep & (k > q - window) if window else keep

    def blocks() -> list[tuple[int, int]]:
        return [(lo, min(sq, lo + step)) for lo in range(0, sq, step)]

    ones = np.ones(mask_in.type.shape if mask_in is not None else (b, sk), np.int64)
    try:
        last = keep_rows(ones, sq - 1, sq)[:, 0, -1]
    except (NoMatch, PassError):
        raise
    except Exception as e:
        raise NoMatch(f"mask subgraph could not be evaluated: {e}") from None
    if last.all():
        forms = [(True, 0, 0), (False, 0, 0)]
    else:  # a window of the keys the last query sees, or chunks of up to that many
        seen = int(last[0].sum())
        forms = [(True, seen, 0)] + [
            (True, 0, c) for c in range(seen, sk) if (sk - 1) % c + 1 == seen
        ]
    for lo, hi in blocks():
        got = keep_rows(ones, lo, hi)
        forms = [
            f for f in forms if np.array_equal(got, np.broadcast_to(pattern(lo, hi, *f), got.shape))
        ]
        if not forms:
            raise NoMatch("mask with an all-ones input is neither full, causal nor a causal window")
    causal, window, chunk = forms[0]
    if chunk and mask_in is not None:
        raise NoMatch(
            f"chunked attention with a padding mask over {MASK_PROBE_BYTES >> 20:,} MiB is not "
            "checked: compile at a shorter --seq"
        )
    if mask_in is not None:
        rng = np.random.default_rng(0)
        gapped = np.broadcast_to(np.arange(mask_in.type.shape[-1]) % 2 == 0, mask_in.type.shape)
        # every other key dropped, then a random mask: with no bias to tell apart (ALiBi over
        # key indices or over kept keys, `_evaluate_mask`'s further random masks), these two
        # decide "key padding"; each pass over the rows costs what a whole probe's does
        for m in [gapped.astype(np.int64), (rng.random(mask_in.type.shape) > 0.3).astype(np.int64)]:
            m[:, 0] = 1
            for lo, hi in blocks():
                want = pattern(lo, hi, *forms[0])[None, None] & (m != 0)[:, None, None, :]
                if not np.array_equal(keep_rows(m, lo, hi), want):
                    raise NoMatch(
                        "mask does not mean 'key padding' (mask[b, key] == 0 drops the key)"
                    )
    finite = [f for f in fills if f < 0]
    fill = min(finite) if finite else -np.inf
    fill = float(max(fill, float(np.finfo(np.float32).min)) if np.isfinite(fill) else fill)
    kind = "key_padding" if mask_in is not None else "none"
    return _MaskMeaning(causal, window, mask_in, kind, fill, (), chunk=chunk)


NOT_A_BIAS = (
    "additive bias is not a mask, nor ALiBi (slope × key position, the position counting the "
    "kept keys, plus anything constant per query), nor a constant bias per head (terms of no "
    "graph input, the same for every sample)"
)


@dataclass(frozen=True)
class _BiasForms:
    """The forms what the additive terms add to the kept pairs may still take: ALiBi's `slopes`
    (() when nothing is added), a constant `table` [H, Sq, Sk] (MPNet's relative position
    bias); None for a form ruled out."""

    slopes: tuple[float, ...] | None
    table: np.ndarray | None


def _bias_forms(
    terms: list[tuple[Value, np.ndarray]],
    view: GraphView,
    keep: np.ndarray,
    mask: np.ndarray,
    h: int,
    was: _BiasForms | None = None,
    alibi: bool = True,
) -> _BiasForms:
    """The forms of `was` that what the additive `terms` (each a value and what it adds, as
    scaled as the scores after it) add to the kept pairs `keep` [b, 1, Sq, Sk] under `mask`
    fits; without `was` (the all-ones mask), the forms it fits, ALiBi only if `alibi`. The
    table's terms must depend on no graph input (constants the frontend folded: a bias that
    moves with the mask is not probed into one) and be the same for every batch row; nothing
    added is a zero table [1, 1, 1]. NoMatch when no form is left."""
    biases = [a for _, a in terms]
    slopes = (() if alibi else None) if was is None else was.slopes
    if slopes is not None and biases:
        try:
            slopes = _alibi_slopes(biases, keep, mask, h, None if was is None else slopes)
        except NoMatch:
            slopes = None
    if was is not None and slopes is not None:  # ALiBi still fits: no table is needed
        return _BiasForms(slopes, None)
    constant = not any(view.input_ancestors(v) for v, _ in terms)
    table = None
    if was is not None:
        table = was.table if constant else None
    elif constant:
        added = np.zeros((1, 1, 1, 1))
        for t in biases:  # each [b | 1, h | 1, Sq | 1, Sk]
            added = added + t
        added = np.where(keep, added, 0.0) if biases else added
        tol = 1e-6 * max(1.0, float(np.abs(added).max()))
        if np.abs(added - added[:1]).max() <= tol:
            table = added[0]
    if slopes is None and table is None:
        raise NoMatch(NOT_A_BIAS)
    return _BiasForms(slopes, table)


def _mask_operand(
    meaning: _MaskMeaning, shape: tuple[int, int, int], name: str, origin: tuple[str, ...]
) -> tuple[list[Node], list[Value]]:
    """The attention's mask operand and the layout nodes that make it: a key-padding input as
    it is; a full mask input's leading [S_q, S_kv] corner per sample as [B, S_q, S_kv] (a Slice
    and a Reshape: layout ops, which lowering reads through to the input's port)."""
    v = meaning.mask_in
    if v is None:
        return [], []
    if meaning.kind != "full":
        return [], [v]
    b, sq, sk = shape
    rank, nodes = v.type.rank, []
    if v.type.shape[-2:] != (sq, sk):
        nodes.append(
            make_node(
                Op.SLICE,
                [v],
                f"{name}/mask_corner",
                origin,
                starts=(0, 0),
                ends=(sq, sk),
                axes=(rank - 2, rank - 1),
                steps=(1, 1),
            )
        )
    if rank == 4:
        src = nodes[-1].output if nodes else v
        nodes.append(make_node(Op.RESHAPE, [src], f"{name}/mask", origin, shape=shape))
    return nodes, [nodes[-1].output if nodes else v]


def _alibi_slopes(
    biases: list[np.ndarray],
    keep: np.ndarray,
    mask: np.ndarray,
    h: int,
    slopes: tuple[float, ...] | None = None,
) -> tuple[float, ...]:
    """Per head, the slope of a bias (the sum of `biases`) that is slope_h × the key's position
    plus anything constant along the key axis (softmax cancels that), on the kept pairs; ()
    when it is constant along the keys. A key's position counts the kept keys before it
    (`rules.alibi_positions`, as the kernels compute it). Given `slopes` (found
    with nothing padded), the bias must fit those. NoMatch for any other bias. One head at a
    time: a head's arrays are as large as the kept-pair mask."""
    b, _, sq, sk = keep.shape
    kept = keep[:, 0]
    pos = np.broadcast_to(alibi_positions(mask)[:, None, :], kept.shape)
    n = np.maximum(kept.sum(axis=-1, keepdims=True), 1)

    def centred(x: np.ndarray) -> np.ndarray:  # x minus its mean over each row's kept keys
        x = np.where(kept, x, 0.0)
        return np.where(kept, x - x.sum(axis=-1, keepdims=True) / n, 0.0)

    dp = centred(pos.astype(np.float64))
    den = float((dp * dp).sum())
    found = []
    for head in range(h):
        bias = sum(np.broadcast_to(t[:, min(head, t.shape[1] - 1)], kept.shape) for t in biases)
        db = centred(np.asarray(bias))
        if slopes is not None:
            slope = slopes[head] if slopes else 0.0
        else:  # least squares, each row's mean taken out; the exporters' float32 slopes
            slope = float(np.float32((dp * db).sum() / den)) if den > 0 else 0.0
        tol = 1e-5 * max(1.0, float(np.abs(np.where(kept, bias, 0.0)).max()))
        if np.abs(db - slope * dp).max(initial=0.0) > tol:
            raise NoMatch(
                "additive bias is not a mask, nor ALiBi (slope × key position, the position "
                "counting the kept keys, plus anything constant per query)"
            )
        found.append(slope)
    return tuple(found) if any(found) else ()


@dataclass(frozen=True)
class _Sinks:
    """gpt-oss's attention sinks around a Softmax (`_sinks`)."""

    scores: Value  # [B, H, Sq, Sk], before the sink column joins
    probs: Value  # the Slice of the keys' probabilities, the sink's dropped
    logits: tuple[float, ...]  # sink_h, one per head
    nodes: tuple[Node, ...]


def _sinks(view: GraphView, sm: Node) -> _Sinks | None:
    """Softmax(Concat([s, c], -1) − ReduceMax(.)) then Slice [..., :Sk]: attention sinks, c a
    constant [.., H, .., 1] of one logit per head (the ReduceMax shift, which a softmax cancels,
    optional); None when the softmax's input is no such Concat."""
    x, nodes = sm.inputs[0], []
    n = view.prod(x)
    if n is not None and n.op is Op.SUB and x.type.rank == 4:
        mx = view.prod(n.inputs[1])
        if (
            mx is not None
            and mx.op is Op.REDUCE_MAX
            and mx.inputs[0] is n.inputs[0]
            and tuple(a % 4 for a in mx.attr("axes")) == (3,)
            and mx.attr("keepdims")
        ):
            nodes, n = [n, mx], view.prod(n.inputs[0])
    if n is None or n.op is not Op.CONCAT or len(n.inputs) != 2 or n.attr("axis") % 4 != 3:
        return None
    s, c = n.inputs
    if s.type.rank != 4 or c.type.shape[-1] != 1 or (not c.is_const and view.input_ancestors(c)):
        return None
    # a constant, or computed from constants alone (a weightless export's sinks, expanded)
    value = c.const if c.const is not None else eval_nodes(view.ancestors(c), {})[c]
    column = np.broadcast_to(np.asarray(value, np.float32), (*s.type.shape[:3], 1))
    per_head = column[0, :, 0, 0]
    if not np.array_equal(column, np.broadcast_to(per_head[None, :, None, None], column.shape)):
        raise NoMatch("the column joined to the scores is not one logit per head (a sink)")
    sl = view.sole_user(sm.output)
    if (
        sl is None
        or sl.op is not Op.SLICE
        or sl.output.type.shape != s.type.shape
        or tuple(a % 4 for a in sl.attr("axes")) != (3,)
        or tuple(sl.attr("starts")) != (0,)
        or tuple(sl.attr("steps", (1,))) != (1,)
    ):
        raise NoMatch("the softmax over the scores and a sink does not drop the sink's column")
    return _Sinks(s, sl.output, tuple(float(v) for v in per_head), (*nodes, n, sl))


def _match(memo: Memo, view: GraphView, sm: Node) -> tuple[Replacement, set[Node]]:
    sinks = _sinks(view, sm)
    x = sinks.scores if sinks is not None else sm.inputs[0]
    if x.type.rank != 4 or sm.attr("axis") != 3:
        raise NoMatch("not a softmax over the last axis of [B, H, Sq, Sk]")
    token_inputs = _token_inputs(view)

    def mask_class(v: Value) -> bool:
        inputs = view.input_ancestors(v)
        if v.is_const or not inputs:  # a function of constants alone (a folder left it: large)
            return True
        if inputs & token_inputs:
            return False
        return not any(
            n.op in (Op.MATMUL, Op.LINEAR, Op.EMBEDDING, Op.SOFTMAX) for n in view.ancestors(v)
        )

    sc = _walk_scores(view, x, mask_class)
    qv, kv = sc.matmul.inputs
    b, h, sq, sk = x.type.shape
    rank = 3 if sc.heads_batched else 4
    if qv.type.rank != rank or kv.type.rank != rank:
        raise NoMatch(f"q·kᵀ operands are not rank {rank}")
    dh = qv.type.shape[-1]
    flats: list[tuple[Node, Node]] = []  # sources flattened to [B, S, N] (`_flat_source`)
    q_src, q_chain, q_scale, q_rope = _flat_source(view, _layout_source(view, qv), flats)
    k_src, k_chain, k_scale, k_rope = _flat_source(view, _layout_source(view, kv), flats)
    q_cols = _head_columns(memo, q_src, q_chain, qv, h, dh, False, q_rope)
    k_cols = _head_columns(memo, k_src, k_chain, kv, h, dh, True, k_rope, grouped=True)
    rotary = _rotary(memo, (q_src, q_rope, q_cols), (k_src, k_rope, k_cols))
    # after softmax: optional NaN clean-up, then p·v
    p, post = (sinks.probs, list(sinks.nodes)) if sinks is not None else (sm.output, [])
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
    if sc.heads_batched:  # back to [B·H, Sq, Sk] for p·v
        u = view.sole_user(p)
        if (
            u is None
            or u.op is not Op.RESHAPE
            or u.output.type.shape != sc.matmul.output.type.shape
        ):
            raise NoMatch("softmax output is not reshaped back to [B·H, Sq, Sk]")
        post, p = [*post, u], u.output
    pv = view.sole_user(p)
    if pv is None or pv.op is not Op.MATMUL or pv.inputs[0] is not p:
        raise NoMatch("softmax output does not feed a MatMul with v")
    v_src, v_chain, v_scale, v_rope = _flat_source(view, _layout_source(view, pv.inputs[1]), flats)
    if v_scale != 1.0 or v_rope is not None:
        raise NoMatch("v is scaled or rotated")
    v_cols = _head_columns(memo, v_src, v_chain, pv.inputs[1], h, dh, False, grouped=True)
    kv_heads, v_heads = len(k_cols), len(v_cols)
    if v_heads != kv_heads:
        raise NoMatch(f"{kv_heads} key heads but {v_heads} value heads")
    region = (
        set(sc.nodes) | {sc.matmul, sm, pv} | set(post) | set(q_chain) | set(k_chain) | set(v_chain)
    )
    for r in (q_rope, k_rope):
        region |= set(r.nodes) if r is not None else set()
    region -= {unflat for _, unflat in flats}  # not in the graph
    out, out_chain, flat = _merge_heads(memo, view, pv.output, (b, h, sq, dh))
    region |= set(out_chain)
    internal = [v for n in region for v in n.outputs if v is not out]
    leak = view.escapes(internal, region)
    if leak is not None:
        raise NoMatch(f"intermediate {leak.name!r} is used outside the attention")
    srcs, offsets = [q_src, k_src, v_src], [_offset(c) for c in (q_cols, k_cols, v_cols)]
    packed: list[Node] = []  # the Linear q, k, v come from, reordered for the heads
    if any(off is None for off in offsets):
        lin, reordered = _reordered_linear(view, srcs, [q_cols, k_cols, v_cols], region)
        packed, srcs, offsets = [lin], [lin.output] * 3, [*reordered]
    q_off, k_off, v_off = offsets
    mask = _mask_semantics(memo, view, sc.terms, (b, h, sq, sk))
    attrs: dict[str, object] = {
        "num_heads": h, "head_dim": dh, "q_offset": q_off, "k_offset": k_off, "v_offset": v_off,
        "scale": float(np.float32(sc.scale * q_scale * k_scale)), "causal": mask.causal,
        "window": mask.window, "mask": mask.kind, "fill": mask.fill, "nan_to_zero": nan_to_zero,
    }  # fmt: skip
    if mask.chunk:
        attrs["chunk"] = mask.chunk
    if kv_heads != h:  # grouped-query attention
        attrs["kv_heads"] = kv_heads
    if rotary[0] != "none":
        attrs.update(rotary=rotary[0], rotary_dim=rotary[1])
    if mask.slopes:
        attrs["alibi"] = mask.slopes
    if mask.bias is not None:
        attrs["has_bias"] = True
    if sc.softcap:
        attrs["softcap"] = float(np.float32(sc.softcap))
    if sinks is not None:
        attrs["sinks"] = sinks.logits
    origin = origin_of(sorted(region, key=view.index.__getitem__))
    mask_nodes, mask_ins = _mask_operand(mask, (b, sq, sk), out.name, origin)
    ins = srcs + mask_ins + ([mask.bias] if mask.bias is not None else []) + rotary[2]
    if flat:
        att = make_node(Op.ATTENTION, ins, f"{out.name}/attn", origin, **attrs)
        new = [att, make_node(Op.RESHAPE, [att.output], out.name, origin, shape=out.type.shape)]
    else:
        new = [make_node(Op.ATTENTION, ins, out.name, origin, **attrs)]
    consumed = region | {view.producer[q_src]} if packed else region
    flat_nodes = [f for f, _ in flats if f.output in srcs]
    return Replacement(flat_nodes + mask_nodes + packed + new, {out: new[-1].output}), consumed


def _reordered_linear(
    view: GraphView, srcs: list[Value], cols: list[np.ndarray], region: set[Node]
) -> tuple[Node, list[int]]:
    """q, k and v heads taken out of one Linear's output in another order than side by side
    (GPT-NeoX's [heads, 3, dh] per token, Falcon's [kv heads, g + 2, dh], CodeGen's mp_num
    blocks): that Linear with its weight's (and bias's) columns permuted to q | k | v heads, and
    the three offsets; NoMatch unless the weight and bias are constants and the attention is
    the output's only user."""
    src = srcs[0]
    lin = view.prod(src, Op.LINEAR)
    why = f"layout from {src.name!r} does not split heads side by side"
    if lin is None or any(v is not src for v in srcs):
        raise NoMatch(f"{why}, and q, k and v are not one Linear's to reorder")
    if not all(v.is_const for v in lin.inputs[1:]):
        raise NoMatch(f"{why}, and its Linear's weight or bias is not a constant to reorder")
    if src in view.outputs or any(u not in region for u in view.users.get(src, [])):
        raise NoMatch(f"{why}, and its Linear's output is used outside the attention")
    perm = np.concatenate([c.ravel() for c in cols])
    if np.unique(perm).size != perm.size:
        raise NoMatch(f"{why}: q, k and v share columns")
    w, *bias = lin.inputs[1:]
    assert w.const is not None
    # Named after this layer's output, not the constants': one initializer may feed several
    # layers (an untrained model's zero QKV biases, stored once), and each layer's copy is its
    # own value.
    consts = [Value.constant(f"{src.name}/heads/weight", _columns(w.const, perm))] + [
        Value.constant(f"{src.name}/heads/bias", _columns(b.const, perm))
        for b in bias
        if b.const is not None
    ]
    new = make_node(
        Op.LINEAR, [lin.inputs[0], *consts], f"{src.name}/heads", lin.origin, **lin.attr_dict
    )
    q, k = cols[0].size, cols[1].size
    return new, [0, q, q + k]


def _columns(a: np.ndarray, perm: np.ndarray) -> np.ndarray:
    """`a`'s last-axis columns in the order `perm`; a uniform array (a weight without data,
    `--weights inputs`) as it is, rather than expanded to every element."""
    return a if is_uniform(a) else a[..., perm]


def _rotary(
    memo: Memo,
    q: tuple[Value, _Rope | None, np.ndarray],
    k: tuple[Value, _Rope | None, np.ndarray],
) -> tuple[str, int, list[Value]]:
    """(form, rotary_dim, [cos, sin]) when q and k are rotated alike, ("none", 0, []) when
    neither is; NoMatch otherwise."""
    if q[1] is None and k[1] is None:
        return "none", 0, []
    if q[1] is None or k[1] is None:
        raise NoMatch("only one of q and k is rotated")
    qf, qd, qc, qs = _rope_tables(memo, q[0], q[1], q[2])
    kf, kd, kc, ks = _rope_tables(memo, k[0], k[1], k[2])
    assert qc.const is not None and kc.const is not None and qs.const is not None
    assert ks.const is not None
    # the tables are solved from probes of q's and k's own shapes: equal to their rounding
    # (1e-6, as `_evaluate_rope` confirms them; gpt-oss's YaRN tables, scaled by 1.35, differ
    # in the last bits)
    if (qf, qd) != (kf, kd) or not (
        np.allclose(qc.const, kc.const, rtol=0, atol=1e-6)
        and np.allclose(qs.const, ks.const, rtol=0, atol=1e-6)
    ):
        raise NoMatch("q and k are rotated differently")
    return qf, qd, [qc, qs]


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


_NORM_RTOL = 1e-5
"""How far the norm moved ahead of the rotary may differ from it, of the largest output: float32
rounding (a unit-norm head is ~1 everywhere), not a different function."""


def _norm_before_rope(view: GraphView, ln: Node) -> tuple[Replacement, set[Node]]:
    """norm(rope(x)) -> rope(norm(x)) for an RMS norm over the head dim with one weight for
    every dim (Llama 4's q/k L2 norm after the rotary): a rotation of pairs of a head's dims
    keeps the head's norm, so the norm may come first, where the head split is layout only
    and the attention's rotary reads x (`_flat_source`). x is the value the rotary region's
    layout ops start from with the norm input's shape; checked by evaluation on a probe."""
    gamma = ln.inputs[1]
    g = gamma.const
    if ln.attr("has_skip") or g is None or not all_equal(g):
        raise NoMatch("not a norm without skip and with one weight for every dim")
    y = ln.inputs[0]
    after: list[Node] = []
    end, rope = view.prod(y), None
    while end is not None and rope is None:
        if end.op is Op.RESHAPE:
            rope = _stacked_rope_region(view, end)
        elif end.op in (Op.ADD, Op.CONCAT):
            rope = _rope_region(view, end)
            break
        if rope is None and end.op is Op.RESHAPE:
            after.append(end)
            end = view.prod(end.inputs[0])
        elif rope is None:
            break
    if rope is None:
        raise NoMatch("the norm's input is not a rotary region's output")
    x, before = rope.x, []
    while x.type.shape != y.type.shape:
        p = view.prod(x)
        if p is None or p.op is not Op.RESHAPE:
            raise NoMatch("the rotary's input is not a reshape of a value of the norm's shape")
        before.append(p)
        x = p.inputs[0]
    region = [*before[::-1], *rope.nodes, *after[::-1]]
    inside = set(region)
    if view.escapes([v for n in region for v in n.outputs if v is not y], inside) or any(
        u not in inside for u in view.users.get(x, [])
    ):
        raise NoMatch("the rotary region's values are used outside it")
    normed = make_node(ln.op, [x, gamma], f"{ln.output.name}/before_rotary", ln.origin,
                       **ln.attr_dict)  # fmt: skip
    moved: dict[Value, Value] = {}
    new = [normed]
    for n in region:
        if x in n.inputs:
            ins = [normed.output if v is x else v for v in n.inputs]
            c = make_node(n.op, ins, f"{n.name}/normed", n.origin, **n.attr_dict)
            moved.update(zip(n.outputs, c.outputs, strict=True))
            new.append(c)
    probe = np.random.default_rng(0).standard_normal(x.type.shape).astype(np.float32)
    tables = list(rope.tables)
    want = eval_nodes([*tables, *region, ln], {x: probe})[ln.output]
    (first,) = evaluate_op(ln.op, [probe, g], ln.attr_dict)
    got = eval_nodes([*tables, *region], {x: np.asarray(first)})[y]
    if np.max(np.abs(want - got)) > _NORM_RTOL * float(np.max(np.abs(want))):
        raise NoMatch("the norm does not commute with the rotary region")
    return Replacement(new, {**moved, ln.output: y}), {ln, *(n for n in region if x in n.inputs)}


def fuse_attention(graph: Graph, ctx: PassContext) -> Graph:
    memo: Memo = {}
    graph, _ = rewrite_nodes(graph, _norm_before_rope, anchor_ops=frozenset({Op.RMS_NORM}))
    g, misses = rewrite_nodes(
        graph, lambda view, sm: _match(memo, view, sm), anchor_ops=frozenset({Op.SOFTMAX})
    )
    for m in misses:
        ctx.note("fuse-attention", m)
    refused = [m for m in misses if UNSUPPORTED in m]
    if refused:
        raise PassError("fuse-attention: " + refused[0].replace(UNSUPPORTED, ""))
    return g


PASS = Pass("fuse-attention", fuse_attention)
