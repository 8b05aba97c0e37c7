"""fuse-moe: a mixture-of-experts block becomes one `Moe` op (`wsecc.ir.rules.moe`).

What the exporters write for a sparse MoE layer (samples/README.md, "Mixture-of-experts
exports"): a router Linear x·W_router, a softmax (or sigmoid) over the E experts, TopK, the
kept weights renormalised or not; every (token, choice) pair gathers its expert's weight
stacks (GatherND of a constant [E, ., .]) and multiplies (MatMul), a SwiGLU in between; the
combine weights each expert's output and sums the k of them per token.

The match is by *evaluation*, as fuse-gelu and fuse-swiglu match activations, not by the
exporter's node order. Anchored on a TopK:

1. the router: the nearest plain Linear before the TopK with a constant weight [H, E]; x is
   its input, read back through layout ops (Reshape, Expand, ...) to the value they view;
2. the block's output: the first value after the TopK that depends on it and holds one
   H-vector per token of x (the combine's sum);
3. the region: every node between x and that output. It may read nothing but x and constants,
   and nothing inside may be used outside;
4. the experts' weights: the constant [E, ., .] stacks the region gathers from: two (gate and up
   side by side, then down) or three (gate, up, down), in whichever orientation and gate/up
   order (halves or interleaved) reproduces the region;
5. the check: the candidate `Moe` (each router form, renormalised or not, each weight layout)
   and the region are evaluated on random x of the graph's shape; the first candidate that
   agrees to float32 rounding replaces the region. A region too large to evaluate whole
   (MAX_PROBE_ELEMS) is evaluated on its first FEW_TOKENS tokens alone when it is established
   token-wise — every value it computes laid out token by token (`token_axes`) and every node
   keeping tokens apart (`_keeps_tokens_apart`) — so the check's size does not grow with the
   bound token count (`_evaluate_tokenwise`); else on every token with those past FEW_TOKENS
   NaN (`_evaluate_few`), which a region that mixes tokens carries into the checked ones.

A shared expert (Qwen2-MoE: a SwiGLU MLP of plain Linears every token goes through, scaled or
not by sigmoid(x·w) per token) added to the routed sum joins the block: the Add is the block's
output and the shared expert's Linears its weights, checked the same way.

gpt-oss's block (the router a Linear with bias, TopK of the logits, a softmax over the kept
k: the softmax router renormalised; experts with biases, gate and up interleaved in one stack;
the clamped SwiGLU, its alpha and limit read from the region's scalar constants) is matched the
same way, the biases gathered from constant [E, .] stacks. The check evaluates two probes, the
second 64 times larger, so that a clamp's bound is reached and checked.

onnxruntime-genai's `com.microsoft.MoE` contrib op becomes the same `Moe` op in the frontend
(`wsecc.frontend.convert`), its router's MatMul (+ Add) read as the router.

Llama 4's block (the router's top-k logits scattered into a row of −inf, a sigmoid of that:
each expert's input is x times the sigmoid of its logit, 0 for the experts not chosen; every
expert computes every token, a batched MatMul of the whole [E, ., .] stack, and the E outputs
are summed; a shared SwiGLU expert added) is matched the same way: the stacks the region
multiplies as well as those it gathers are the experts' weights, and a block with no gather
is also checked against the `moe` op with `scale` "input" (the router's weight scales the
expert's input: a SwiGLU of 0 is 0, so the experts not chosen add nothing). Such a block
holds every expert's values on every token (E times a gathered block's), and has no gathers to
leave unmaterialised: past MAX_PROBE_ELEMS it is checked rebound to FEW_TOKENS tokens
(`_evaluate_rebound`), a stack without data multiplied as the row's sum times its value.
Requires fuse-linear's Linears (the router) and runs before fuse-swiglu, whose SiLU matcher
never sees inside the gathered experts anyway.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from wsecc.ir.arrays import all_equal, dense, is_uniform, same_data
from wsecc.ir.core import Graph, IRError, Node, Op, TensorType, Value
from wsecc.ir.rewrite import (
    LAYOUT,
    POINTWISE,
    GraphView,
    NoMatch,
    Replacement,
    eval_nodes,
    make_node,
    origin_of,
    rewrite_nodes,
)
from wsecc.ir.rules import GATES, MOE_ROUTERS, MOE_SCALES, evaluate_op
from wsecc.passdef import Pass, PassContext

_VIEWS = LAYOUT | {Op.IDENTITY, Op.CAST}
_RTOL = 1e-4  # of the output's largest magnitude: float32 rounding, not a different function
_SEED = 0
_SCALES = (1.0, 64.0)
"""The probes' scales: x ~ N(0, 1), and one large enough that a clamped gate's bounds are
reached (gpt-oss: limit 7 against gate values of a few tenths at scale 1), so the check sees
the clamp and not only its inside."""
MAX_PROBE_ELEMS = 1 << 26
"""The most elements the block's values may hold for the check to evaluate it whole (each
gathered expert weight is materialised per token and choice: 256 MiB of float32 here). A larger
block (real-size experts: Mixtral 8x7B's holds 353M elements a token; a long context) is
checked on a few tokens: alone when it is established token-wise (`_evaluate_tokenwise`, whose
size does not grow with the bound token count), else with the others NaN (`_evaluate_few`);
what neither can hold is not fused, and the note says how many tokens fit."""
FEW_TOKENS = 4
"""The tokens a block too large to evaluate whole is checked on (`_few_token_outputs`)."""


def _viewed(view: GraphView, v: Value) -> Value:
    """The value that `v` re-addresses through layout ops (v itself if it is computed)."""
    while (n := view.prod(v)) is not None and n.op in _VIEWS and len(n.inputs) == 1:
        v = n.inputs[0]
    return v


def _router(view: GraphView, topk: Node) -> Node:
    """The nearest Linear x·W[H, E] (+ b[E], gpt-oss's) before the TopK, constant weights."""
    scores = topk.inputs[0]
    e = scores.type.shape[-1]
    for n in view.ancestors(scores)[::-1]:  # the nearest Linear first
        if n.op is not Op.LINEAR or n.attr("activation") != "none":
            continue
        if all(v.is_const for v in n.inputs[1:]) and n.inputs[1].type.shape[-1] == e:
            return n
    raise NoMatch("no router Linear x·W[H, E] before the TopK")


def _block_output(view: GraphView, topk: Node, x: Value) -> Value:
    """The first value after `topk` that depends on it and holds one H-vector per token."""
    h = x.type.shape[-1]
    tainted = set(topk.outputs)
    for n in view.graph.nodes[view.index[topk] + 1 :]:
        if not any(v in tainted for v in n.inputs):
            continue
        tainted.update(n.outputs)
        out = n.outputs[0]
        if n.op not in _VIEWS and out.type.size == x.type.size and out.type.shape[-1] == h:
            return out
    raise NoMatch("nothing after the TopK holds one vector per token of x")


def _region(view: GraphView, x: Value, out: Value) -> list[Node]:
    """The nodes between x and out; NoMatch if they read anything else or leak a value."""
    ancestors = view.ancestors(out)
    reached = {x}
    region = []
    for n in ancestors:
        if any(v in reached for v in n.inputs):
            region.append(n)
            reached.update(n.outputs)
    inside = set(region)
    for n in region:
        for v in n.inputs:
            if not (v.is_const or v in reached):
                raise NoMatch(f"the block reads {v.name!r}, which is neither x nor a constant")
    leak = view.escapes([v for n in region for v in n.outputs if v is not out], inside)
    if leak is not None:
        raise NoMatch(f"{leak.name!r} inside the block is used outside it")
    return region


def _stacks(region: list[Node], experts: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The constant stacks the region gathers experts from, or multiplies every expert's
    tokens by (Llama 4's dense experts), in node order: weights [E, ., .] and biases [E, .]
    (gpt-oss's)."""
    stacks: list[np.ndarray] = []
    biases: list[np.ndarray] = []
    for n in region:
        d = n.inputs[0] if n.inputs else None
        if n.op in (Op.GATHER_ND, Op.GATHER) and d is not None and d.is_const:
            if d.type.rank in (2, 3) and d.type.shape[0] == experts:
                assert d.const is not None
                (stacks if d.type.rank == 3 else biases).append(np.asarray(d.const))
        elif n.op is Op.MATMUL:  # every expert on every token (Llama 4's batched matmul)
            for w in n.inputs:
                if w.const is not None and w.type.rank == 3 and w.type.shape[0] == experts:
                    stacks.append(np.asarray(w.const))
    if len(stacks) not in (2, 3):
        raise NoMatch(f"the block gathers {len(stacks)} expert weight stacks, not 2 or 3")
    if len(biases) not in (0, 2, 3):
        raise NoMatch(f"the block gathers {len(biases)} expert bias stacks, not 0, 2 or 3")
    return stacks, biases


def _oriented(s: np.ndarray, rows: int) -> Iterator[np.ndarray]:
    """s[E, a, b] as [E, rows, .]: as is, transposed, or both when square."""
    if s.shape[1] == rows:
        yield s
    if s.shape[2] == rows and s.shape[1] != s.shape[2]:
        yield s.transpose(0, 2, 1)


_INTERLEAVED = (slice(0, None, 2), slice(1, None, 2))  # gate, up columns alternating (gpt-oss)


def _layouts(
    stacks: list[np.ndarray], biases: list[np.ndarray], h: int
) -> Iterator[tuple[np.ndarray, ...]]:
    """Candidate (W_gate, W_up, W_down) as [E, H, I], [E, H, I], [E, I, H], then, when the
    block gathers biases, (b_gate, b_up, b_down) as [E, I], [E, I], [E, H], split as the
    weights are."""
    if len(stacks) == 2:
        for gu, down in itertools.permutations(stacks):
            for g in _oriented(gu, h):
                i = g.shape[2] // 2
                if g.shape[2] % 2:
                    continue
                for d in _oriented(down, i):
                    if d.shape[2] != h:
                        continue
                    for first, second in (slice(0, i), slice(i, None)), _INTERLEAVED:
                        ws = (g[..., first], g[..., second], d)
                        if not biases:
                            yield ws
                            continue
                        for bgu, bd in itertools.permutations(biases):
                            if bgu.shape[1] == 2 * i and bd.shape[1] == h:
                                yield (*ws, bgu[:, first], bgu[:, second], bd)
    else:
        for gate, up, down in itertools.permutations(stacks):
            for g, u in itertools.product(_oriented(gate, h), _oriented(up, h)):
                for d in _oriented(down, g.shape[2]):
                    if g.shape == u.shape and d.shape[2] == h:
                        if not biases:
                            yield g, u, d
                            continue
                        for bg, bu, bd in itertools.permutations(biases):
                            if bg.shape == bu.shape == g.shape[::2] and bd.shape[1] == h:
                                yield g, u, d, bg, bu, bd


def _activations(region: list[Node]) -> Iterator[dict[str, object]]:
    """Candidate expert gates: SwiGLU's silu, then gpt-oss's clamped silu for each (alpha,
    limit) pair of the positive scalar constants the region reads (its Clip's bound, its
    sigmoid's scale: the check by evaluation decides which is which)."""
    yield {"activation": GATES[0]}
    scalars = sorted(
        {
            float(np.asarray(v.const).reshape(-1)[0])
            for n in region
            for v in n.inputs
            if v.is_const and v.type.size == 1 and v.type.dtype.is_float
        }
    )
    for alpha, limit in itertools.permutations([c for c in scalars if c > 0], 2):
        yield {"activation": "clamped_silu", "alpha": alpha, "limit": limit}


def _lazy_gathers(region: list[Node], experts: int) -> dict[Value, tuple[np.ndarray, Node]]:
    """The gathered expert weights of `region` that only MatMuls read: value -> (the constant
    stack [E, ., .], its Gather node), for `_evaluate_few` to multiply without materialising."""
    users: dict[Value, list[Node]] = {}
    for n in region:
        for v in n.inputs:
            users.setdefault(v, []).append(n)
    lazy = {}
    for n in region:
        d = n.inputs[0] if n.inputs else None
        if d is None or d.const is None or d.type.rank != 3 or d.type.shape[0] != experts:
            continue
        one_index = (
            n.op is Op.GATHER_ND and n.attr("batch_dims") == 0 and n.inputs[1].type.shape[-1] == 1
        ) or (n.op is Op.GATHER and n.attr("axis") == 0)
        if one_index and all(u.op is Op.MATMUL for u in users.get(n.outputs[0], [])):
            lazy[n.outputs[0]] = (np.asarray(d.const), n)
    return lazy


def _gathered_matmul(
    m: Node,
    vals: dict[Value, np.ndarray],
    lazy: dict[Value, tuple[np.ndarray, Node]],
    shape: tuple[int, ...] | None = None,
) -> np.ndarray:
    """MatMul `m` of a gathered weight G[r] = stack[ids[r]] and rows A[r], row by row, grouped by
    expert; a row whose A[r] is not finite (a token outside the check) is NaN, not computed.
    `shape` is the output's (m's own unless the region is evaluated on fewer tokens)."""
    left = m.inputs[0] in lazy
    g, a = (m.inputs[0], m.inputs[1]) if left else (m.inputs[1], m.inputs[0])
    stack, gather = lazy[g]
    ids = np.asarray(vals[gather.inputs[1]]).reshape(-1).astype(np.int64) % stack.shape[0]
    rows = np.asarray(vals[a])
    out = np.full(shape or m.output.type.shape, np.nan, np.float32)
    live = np.isfinite(rows.reshape(len(ids), -1)).all(axis=1)
    for e in np.unique(ids[live]):
        r = np.flatnonzero(live & (ids == e))
        if is_uniform(stack[e]):  # a weight without data: each output the sum times its value
            v = stack[e].reshape(-1)[0]
            axis = -2 if left else -1
            sums = rows[r].sum(axis=axis, keepdims=True, dtype=np.float32) * v
            out[r] = np.broadcast_to(sums, out[r].shape)
        else:
            out[r] = stack[e] @ rows[r] if left else rows[r] @ stack[e]
    return out


_ELEMENTWISE = POINTWISE | {Op.DROPOUT, Op.GELU}
"""Ops that act on each element (with broadcasting): token-wise whatever their operands' layout."""
_ALONG_LAST = frozenset({Op.LINEAR, Op.GATED_LINEAR, Op.LAYER_NORM, Op.RMS_NORM})
"""Ops over the last axis of their first operand, their other operands (weights) constant or
elementwise (the norms' skips)."""
_ALONG_AXES = frozenset(
    {Op.SOFTMAX, Op.TOP_K, Op.CUMSUM, Op.CONCAT, Op.SPLIT, Op.SLICE}
    | {Op.REDUCE_SUM, Op.REDUCE_MEAN, Op.REDUCE_MAX}
)
"""Ops along the axes their `axis` or `axes` attribute names (all of them when unset)."""


def token_axes(shape: tuple[int, ...], tokens: int) -> int | None:
    """How many leading axes of a value of `shape` hold the token index, when its data is laid
    out token by token (token t's values a contiguous block, in token order): the shortest
    prefix of axes whose extent is a multiple of `tokens`. None when no prefix is (the value
    does not hold a whole number of blocks per token)."""
    extent = 1
    for i, d in enumerate(shape):
        extent *= d
        if extent % tokens == 0:
            return i + 1
    return None


def _fewer_tokens(shape: tuple[int, ...], lead: int, tokens: int, few: int) -> tuple[int, ...]:
    """`shape` holding `few` of its `tokens` tokens: its `lead` token axes become ones and the
    innermost of them the few tokens' rows, so that every axis keeps its index."""
    rows = int(np.prod(shape[:lead])) // tokens * few
    return (1,) * (lead - 1) + (rows,) + shape[lead:]


def _keeps_tokens_apart(n: Node, lead: dict[Value, int]) -> bool:
    """Whether `n`, given its computed operands' token axes `lead`, computes each token's block
    of its outputs from that token's blocks of its operands alone: elementwise and layout ops
    (a Reshape keeps the data's order; a Transpose that keeps the token axes in front), ops
    along axes past the token axes, Linears and matmuls contracting past them, and gathers
    from constants. Anything else (an op that indexes or reduces over tokens, one not listed)
    is not established token-wise."""
    computed = [v for v in n.inputs if v in lead]
    if n.op in _ELEMENTWISE or n.op in (Op.RESHAPE, Op.EXPAND):
        return True
    if n.op is Op.TRANSPOSE:
        perm = tuple(n.attr("perm"))
        return all(perm[: lead[v]] == tuple(range(lead[v])) for v in computed)
    if n.op in _ALONG_AXES:
        rank = n.inputs[0].type.rank
        axes = (
            n.attr("axes")
            if n.op not in (Op.SOFTMAX, Op.TOP_K, Op.CUMSUM, Op.CONCAT, Op.SPLIT)
            else (n.attr("axis"),)
        )
        if not axes or any(a is None for a in axes):
            return False
        return all(int(a) % rank >= lead[v] for a in axes for v in computed)
    if n.op in _ALONG_LAST:
        weights = n.inputs[1:] if n.op in (Op.LINEAR, Op.GATED_LINEAR) else ()
        first = n.inputs[0]
        return all(w.is_const for w in weights) and lead.get(first, 0) < first.type.rank
    if n.op is Op.MATMUL:
        a, b = n.inputs
        return (a not in lead or lead[a] < a.type.rank) and (
            b not in lead or lead[b] <= b.type.rank - 2
        )
    if n.op in (Op.GATHER, Op.GATHER_ND):
        return n.inputs[0].is_const
    return False


def _evaluate_tokenwise(
    region: list[Node], x: Value, rows: np.ndarray, out: Value, experts: int
) -> np.ndarray | str:
    """What the region computes of `rows` (the first few tokens' x, [few, H]) evaluated on those
    tokens alone: every value of the region shrunk to the few tokens' blocks
    (`_fewer_tokens`), its Reshapes and Expands to the shrunk shapes, the gathered expert
    weights never materialised (`_gathered_matmul`). Sound when the region keeps tokens apart:
    every value it computes is laid out token by token (`token_axes`) and every node computes
    a token's block from that token's blocks alone (`_keeps_tokens_apart`), so the shrunk
    evaluation is the whole one's first few tokens, whatever the bound token count. The output
    [few, H], or why the region is not established token-wise (a phrase)."""
    h = x.type.shape[-1]
    tokens, few = x.type.size // h, rows.shape[0]
    lazy = _lazy_gathers(region, experts)
    lead: dict[Value, int] = {}
    for v in [x, *(v for n in region for v in n.outputs)]:
        axes = token_axes(v.type.shape, tokens)
        if axes is None:
            return f"{v.name!r} {v.type.shape} is not laid out token by token"
        lead[v] = axes
    apart = next((n for n in region if not _keeps_tokens_apart(n, lead)), None)
    if apart is not None:
        return f"{apart.op.name} {apart.name!r} is not established to keep tokens apart"
    shape = {v: _fewer_tokens(v.type.shape, a, tokens, few) for v, a in lead.items()}
    size = sum(int(np.prod(shape[v])) for n in region for v in n.outputs if v not in lazy)
    if size > MAX_PROBE_ELEMS:
        return f"{few} tokens' values of the block hold {size:,} elements"
    vals: dict[Value, np.ndarray] = {x: rows.reshape(shape[x])}
    for n in region:
        if n.outputs[0] in lazy:
            continue
        if n.op is Op.MATMUL and any(v in lazy for v in n.inputs):
            vals[n.output] = _gathered_matmul(n, vals, lazy, shape[n.output])
            continue
        attrs = n.attr_dict
        if n.op in (Op.RESHAPE, Op.EXPAND):
            attrs["shape"] = shape[n.output]
        args = [c if (c := v.const) is not None else vals[v] for v in n.inputs]
        try:
            results = evaluate_op(n.op, args, attrs)
        except (ValueError, IndexError, IRError) as err:
            return f"{n.op.name} {n.name!r} does not evaluate on fewer tokens ({err})"
        for v, r in zip(n.outputs, results, strict=True):
            if np.shape(r) != shape[v]:
                return f"{n.op.name} {n.name!r} gives {np.shape(r)} on fewer tokens, not {shape[v]}"
            vals[v] = np.asarray(r)
    return vals[out].reshape(few, h)


def _evaluate_few(
    region: list[Node], x: Value, probe: np.ndarray, out: Value, experts: int
) -> tuple[np.ndarray, int] | None:
    """What the region computes on `probe` with every token past the first FEW_TOKENS set to
    NaN: the gathered expert weights are never materialised (`_gathered_matmul` computes the
    finite rows only). A region that mixes tokens carries the NaN into the checked ones, which
    then agree with no candidate. (output, tokens checked), or None when the values that remain
    exceed MAX_PROBE_ELEMS."""
    lazy = _lazy_gathers(region, experts)
    size = sum(v.type.size for n in region for v in n.outputs if v not in lazy)
    if size > MAX_PROBE_ELEMS:
        return None
    h = x.type.shape[-1]
    few = min(FEW_TOKENS, x.type.size // h)
    p = probe.copy().reshape(-1, h)
    p[few:] = np.nan
    vals: dict[Value, np.ndarray] = {x: p.reshape(probe.shape)}
    for n in region:
        if n.outputs[0] in lazy:
            continue
        if n.op is Op.MATMUL and any(v in lazy for v in n.inputs):
            vals[n.output] = _gathered_matmul(n, vals, lazy)
            continue
        args = [c if (c := v.const) is not None else vals[v] for v in n.inputs]
        for v, r in zip(n.outputs, evaluate_op(n.op, args, n.attr_dict), strict=True):
            vals[v] = np.asarray(r)
    return vals[out].reshape(-1, h)[:few].reshape(few, h), few


_TOKEN_ATTRS = ("shape", "repeats")
"""The attributes that carry a token count (Reshape's and Expand's shape, Tile's repeats)."""


def _tokens_as(shape: tuple[int, ...], tokens: int, few: int) -> tuple[int, ...]:
    """`shape` with its first dim that is a multiple m·tokens (the token axis: [T, H],
    [E·T, H], [E, T, H]) made m·few."""
    for i, d in enumerate(shape):
        if d and d % tokens == 0:
            return (*shape[:i], d // tokens * few, *shape[i + 1 :])
    return shape


def _evaluate_rebound(
    region: list[Node], x: Value, probe: np.ndarray, out: Value
) -> tuple[np.ndarray, int] | None:
    """What the region computes on the first FEW_TOKENS tokens of `probe`, the region rebound
    to that many tokens: every shape and repeat count that is a multiple of the tokens scaled
    down, a fill constant's (one value everywhere, not a weight) token axis cut (Llama 4's dense experts, which compute every expert on
    every token, have no gathers `_evaluate_few` can leave unmaterialised). None when a node
    does not take the smaller shapes (a dim before the token axis that is a multiple of the
    tokens too) or the rebound values still exceed MAX_PROBE_ELEMS. A region that mixes
    tokens computes another function rebound, which then agrees with no candidate."""
    h = x.type.shape[-1]
    tokens = x.type.size // h
    few = min(FEW_TOKENS, tokens)
    if few == tokens:
        return None
    rebound = (1,) * (x.type.rank - 2) + (few, h)  # x [B, S, H] as [1, few, H]
    seen: dict[Value, Value] = {x: Value(x.name, TensorType(x.type.dtype, rebound))}
    nodes = []
    try:
        for n in region:
            ins = []
            for v in n.inputs:
                if v in seen:
                    ins.append(seen[v])
                elif (
                    v.const is not None
                    and n.op not in (Op.MATMUL, Op.LINEAR)  # weights keep their shapes
                    and v.type.shape != _tokens_as(v.type.shape, tokens, few)
                    and all_equal(v.const)  # a fill, not a weight
                ):
                    cut = tuple(slice(0, d) for d in _tokens_as(v.type.shape, tokens, few))
                    ins.append(Value.constant(v.name, np.ascontiguousarray(v.const[cut])))
                else:
                    ins.append(v)
            attrs = {
                k: _tokens_as(a, tokens, few) if isinstance(a, tuple) and k in _TOKEN_ATTRS else a
                for k, a in n.attr_dict.items()
            }
            new = make_node(n.op, ins, n.name, n.origin, [o.name for o in n.outputs], **attrs)
            seen.update(zip(n.outputs, new.outputs, strict=True))
            nodes.append(new)
    except IRError:
        return None
    if sum(v.type.size for n in nodes for v in n.outputs) > MAX_PROBE_ELEMS:
        return None
    p = probe.reshape(-1, h)[:few].reshape(seen[x].type.shape)
    vals: dict[Value, np.ndarray] = {seen[x]: p}
    for n in nodes:
        args = [c if (c := v.const) is not None else vals[v] for v in n.inputs]
        if n.op is Op.MATMUL and is_uniform(args[1]) and args[1].ndim == 3:
            # a stack without data (`--weights inputs`): each output the row's sum times its
            # one value, not a materialised [E, H, I] product
            a, w = args
            sums = a.sum(axis=-1, keepdims=True, dtype=np.float32) * w.reshape(-1)[0]
            vals[n.output] = np.broadcast_to(sums, n.output.type.shape).astype(np.float32)
            continue
        for v, r in zip(n.outputs, evaluate_op(n.op, args, n.attr_dict), strict=True):
            vals[v] = np.asarray(r)
    return vals[seen[out]].reshape(few, h), few


def _few_token_outputs(
    region: list[Node], x: Value, probes: list[np.ndarray], out: Value, experts: int
) -> tuple[list[np.ndarray], int]:
    """The region's output on the first FEW_TOKENS tokens of each probe, for a block too large
    to evaluate whole: on those tokens alone when the region keeps tokens apart
    (`_evaluate_tokenwise`, independent of the bound token count), else with the other tokens
    NaN (`_evaluate_few`, which holds every token's values), else rebound to the few tokens
    (`_evaluate_rebound`: Llama 4's dense experts, laid out expert by expert). NoMatch when
    none can."""
    h = x.type.shape[-1]
    tokens = x.type.size // h
    few = min(FEW_TOKENS, tokens)
    shrunk = [_evaluate_tokenwise(region, x, p.reshape(-1, h)[:few], out, experts) for p in probes]
    if all(isinstance(f, np.ndarray) for f in shrunk):
        return [f for f in shrunk if isinstance(f, np.ndarray)], few
    why = next(f for f in shrunk if isinstance(f, str))
    found = [
        _evaluate_few(region, x, p, out, experts) or _evaluate_rebound(region, x, p, out)
        for p in probes
    ]
    if all(f is not None for f in found):
        return [f[0] for f in found if f is not None], few
    lazy = _lazy_gathers(region, experts)
    kept = sum(v.type.size for n in region for v in n.outputs if v not in lazy)
    fit = MAX_PROBE_ELEMS // -(-kept // max(1, tokens))
    raise NoMatch(
        f"the check cannot evaluate the block on a few tokens alone ({why}) and the block holds "
        f"{kept:,} elements besides its gathered weights, over the {MAX_PROBE_ELEMS:,} it "
        "evaluates: "
        + (
            f"bind at most {fit} tokens (--seq x --batch)"
            if fit
            else "not even one token's values fit"
        )
    )


def _moe(xs: list[np.ndarray], attrs: dict[str, object]) -> np.ndarray:
    """The candidate's output (`wsecc.ir.rules.moe`), numpy's warnings off: a candidate that
    divides 0 by 0 (a sigmoid router renormalising two scores that underflowed) disagrees."""
    return evaluate_op(Op.MOE, xs, attrs)[0]


def _agrees(want: np.ndarray, got: np.ndarray, rtol: float = _RTOL) -> bool:
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    return bool(scale > 0 and np.max(np.abs(want - got)) <= rtol * scale)


def _rtol(h: int, f: int) -> float:
    """The check's tolerance for experts of width f on H = h: _RTOL, or float32's rounding of the
    block's dot products where that is more — the gate/up sums of h products (whose error the
    gate's product doubles) and the down projection's of f, (2 h + f) eps (Mixtral 8x7B's: 2.7e-3
    of the largest output; a wrong layout or router differs by the outputs themselves)."""
    return max(_RTOL, (2 * h + f) * float(np.finfo(np.float32).eps))


def _with_shared(view: GraphView, topk: Node, out: Value) -> Value | None:
    """The sum of the routed output and a term that does not depend on the routing (a shared
    expert), when that Add is the routed output's only use; else None."""
    add = view.sole_user(out)
    if add is None or add.op is not Op.ADD:
        return None
    other = add.inputs[1] if add.inputs[0] is out else add.inputs[0]
    if other.type.shape != out.type.shape or topk in view.ancestors(other):
        return None
    return add.output


def _shared_experts(
    region: list[Node], router: Node, h: int
) -> Iterator[tuple[str, list[np.ndarray]]]:
    """Candidate shared experts from the region's other plain Linears: (form, [S_gate [H, S],
    S_up [H, S], S_down [S, H]] and, "sigmoid", w_gate [H, 1])."""
    weights = []
    for n in region:
        if n.op is Op.LINEAR and n is not router:
            if n.attr("activation") != "none" or n.attr("has_bias") or not n.inputs[1].is_const:
                return
            weights.append(np.asarray(n.inputs[1].const))
    gates = [w for w in weights if w.shape == (h, 1)]
    rest = [w for w in weights if w.shape != (h, 1)]
    if len(rest) != 3 or len(gates) > 1:
        return
    for g, u, d in itertools.permutations(rest):
        if g.shape == u.shape and g.shape[0] == h and d.shape == g.shape[::-1]:
            yield ("sigmoid", [g, u, d, gates[0]]) if gates else ("plain", [g, u, d])


def _match(view: GraphView, topk: Node) -> tuple[Replacement, set[Node]]:
    if topk.attr("axis") != topk.inputs[0].type.rank - 1 or not topk.attr("largest"):
        raise NoMatch("not a TopK of the largest scores over the last axis")
    router = _router(view, topk)
    x = _viewed(view, router.inputs[0])
    wr = router.inputs[1]
    assert wr.const is not None
    h, e = wr.type.shape
    if x.type.shape[-1] != h or not x.type.dtype.is_float:
        raise NoMatch("the router does not read one H-vector per token")
    routed = _block_output(view, topk, x)
    blocks: list[tuple[Value, list[Node], list[tuple[str, list[np.ndarray]]]]] = []
    why = None
    summed = _with_shared(view, topk, routed)
    if summed is not None:
        try:
            region = _region(view, x, summed)
            blocks.append((summed, region, list(_shared_experts(region, router, h))))
        except NoMatch as err:
            why = err
    try:
        blocks.append((routed, _region(view, x, routed), [("none", [])]))
    except NoMatch as err:
        why = why or err
    if not blocks:
        raise why or NoMatch("no block")
    rng = np.random.default_rng(_SEED)
    probes = [rng.standard_normal(x.type.shape).astype(x.type.dtype.numpy) for _ in _SCALES]
    probes = [(s * p).astype(p.dtype) for s, p in zip(_SCALES, probes, strict=True)]
    k = int(topk.attr("k"))
    br = router.inputs[2].const if router.attr("has_bias") else None
    for out, region, shared_forms in blocks:
        stacks, biases = _stacks(region, e)
        if (br is None) != (not biases):
            raise NoMatch("the router has a bias and the experts none, or the reverse")
        size = sum(v.type.size for n in region for v in n.outputs)
        tokens = x.type.size // h
        if size <= MAX_PROBE_ELEMS:  # the whole block, every token
            wants = [eval_nodes(region, {x: p})[out].reshape(tokens, h) for p in probes]
            few = tokens
        else:
            wants, few = _few_token_outputs(region, x, probes, out, e)
        dense = not any(n.op in (Op.GATHER, Op.GATHER_ND) for n in region)
        candidates = itertools.product(
            shared_forms,
            _layouts(stacks, biases, h),
            _activations(region),
            itertools.product(MOE_ROUTERS, (True, False)),
            MOE_SCALES if dense else MOE_SCALES[:1],
        )
        for (shared, extra), layout, act, (router_form, normalize), scale in candidates:
            weights = [*layout[:3], *extra]
            if br is not None:
                weights += [br, *layout[3:]]
            attrs: dict[str, object] = {
                "k": k,
                "router": router_form,
                "normalize": normalize,
                "shared": shared,
                **({"bias": True} if br is not None else {}),
                **({"scale": scale} if scale != "output" else {}),
                **act,
            }
            rtol = _rtol(h, layout[0].shape[2])
            if any(w.any() for w in wants) and all(
                _agrees(
                    want, got := _moe([p.reshape(-1, h)[:few], wr.const, *weights], attrs), rtol
                )
                or not (want.any() or got.any())  # a probe both zero (weights without data)
                for p, want in zip(probes, wants, strict=True)
            ):
                return _replacement(view, router, x, out, region, weights, attrs)
    raise NoMatch("no router form and expert weight layout computes what the block computes")


def _replacement(
    view: GraphView,
    router: Node,
    x: Value,
    out: Value,
    region: list[Node],
    weights: list[np.ndarray],
    attrs: dict[str, object],
) -> tuple[Replacement, set[Node]]:
    parts = ["gate", "up", "down"]
    parts += {"none": [], "plain": ["shared_gate", "shared_up", "shared_down"]}.get(
        str(attrs["shared"]), ["shared_gate", "shared_up", "shared_down", "shared_scale"]
    )
    parts += ["router_bias", "gate_bias", "up_bias", "down_bias"]
    weights = list(weights)
    pairs = [(0, 1)] + ([(len(weights) - 3, len(weights) - 2)] if attrs.get("bias") else [])
    for g, u in pairs:  # gate and up weights, gate and up biases
        if is_uniform(weights[g]) and same_data(weights[g], weights[u]):
            # halves of one weight without data (`--weights inputs`): one stored value each
            # would make them the same weight to the parameter count; the up half gets the
            # negated tag
            up = weights[u]
            weights[u] = np.broadcast_to(-up.reshape(-1)[:1], up.shape)
    consts = [
        Value.constant(f"{router.name}/moe_{part}", dense(a))
        for part, a in zip(parts, weights, strict=False)
    ]
    origin = origin_of(region)
    reshaped = out.type.shape != x.type.shape
    name = f"{out.name}/moe" if reshaped else out.name
    node = make_node(Op.MOE, [x, router.inputs[1], *consts], name, origin, (), **attrs)
    new = [node]
    if reshaped:
        new.append(make_node(Op.RESHAPE, [node.output], out.name, origin, shape=out.type.shape))
    return Replacement(new, {out: new[-1].output}), set(region)


def fuse_moe(graph: Graph, ctx: PassContext) -> Graph:
    g, misses = rewrite_nodes(graph, _match, anchor_ops=frozenset({Op.TOP_K}))
    for m in misses:
        ctx.note("fuse-moe", m)
    return g


PASS = Pass("fuse-moe", fuse_moe)
