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
   agrees to float32 rounding replaces the region.

A shared expert (Qwen2-MoE: a SwiGLU MLP of plain Linears every token goes through, scaled or
not by sigmoid(x·w) per token) added to the routed sum joins the block: the Add is the block's
output and the shared expert's Linears its weights, checked the same way.

Not matched (the region stays, and lowering leaves generic kernels, so the pass notes why):
gpt-oss's clamped SwiGLU with biases,
Llama 4's dense-then-scatter experts, onnxruntime-genai's `com.microsoft.MoE`.
Requires fuse-linear's Linears (the router) and runs before fuse-swiglu, whose SiLU matcher
never sees inside the gathered experts anyway.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from wsecc.ir.arrays import dense, is_uniform, same_data
from wsecc.ir.core import Graph, Node, Op, Value
from wsecc.ir.rewrite import (
    LAYOUT,
    GraphView,
    NoMatch,
    Replacement,
    eval_nodes,
    make_node,
    origin_of,
    rewrite_nodes,
)
from wsecc.ir.rules import GATES, MOE_ROUTERS, moe
from wsecc.passdef import Pass, PassContext

_VIEWS = LAYOUT | {Op.IDENTITY, Op.CAST}
_RTOL = 1e-4  # of the output's largest magnitude: float32 rounding, not a different function
_SEED = 0
MAX_PROBE_ELEMS = 1 << 26
"""The most elements the block's values may hold for the check to evaluate it (each gathered
expert weight is materialised per token and choice: 256 MiB of float32 here); a larger block
is not fused, and the note says how many tokens fit, or that even one does not (real-size
experts: Mixtral 8x7B's block holds 353M elements a token)."""


def _viewed(view: GraphView, v: Value) -> Value:
    """The value that `v` re-addresses through layout ops (v itself if it is computed)."""
    while (n := view.prod(v)) is not None and n.op in _VIEWS and len(n.inputs) == 1:
        v = n.inputs[0]
    return v


def _router(view: GraphView, topk: Node) -> Node:
    scores = topk.inputs[0]
    e = scores.type.shape[-1]
    for n in view.ancestors(scores)[::-1]:  # the nearest Linear first
        if n.op is not Op.LINEAR or n.attr("activation") != "none" or n.attr("has_bias"):
            continue
        if n.inputs[1].is_const and n.inputs[1].type.shape[-1] == e:
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


def _stacks(region: list[Node], experts: int) -> list[np.ndarray]:
    """The constant weight stacks [E, ., .] the region gathers experts from, in node order."""
    stacks = []
    for n in region:
        d = n.inputs[0] if n.inputs else None
        if n.op in (Op.GATHER_ND, Op.GATHER) and d is not None and d.is_const:
            if d.type.rank == 3 and d.type.shape[0] == experts:
                assert d.const is not None
                stacks.append(np.asarray(d.const))
    if len(stacks) not in (2, 3):
        raise NoMatch(f"the block gathers {len(stacks)} expert weight stacks, not 2 or 3")
    return stacks


def _oriented(s: np.ndarray, rows: int) -> Iterator[np.ndarray]:
    """s[E, a, b] as [E, rows, .]: as is, transposed, or both when square."""
    if s.shape[1] == rows:
        yield s
    if s.shape[2] == rows and s.shape[1] != s.shape[2]:
        yield s.transpose(0, 2, 1)


def _layouts(stacks: list[np.ndarray], h: int) -> Iterator[tuple[np.ndarray, ...]]:
    """Candidate (W_gate, W_up, W_down) as [E, H, I], [E, H, I], [E, I, H]."""
    if len(stacks) == 2:
        for gu, down in itertools.permutations(stacks):
            for g in _oriented(gu, h):
                i = g.shape[2] // 2
                if g.shape[2] % 2:
                    continue
                for d in _oriented(down, i):
                    if d.shape[2] != h:
                        continue
                    yield g[..., :i], g[..., i:], d
                    yield g[..., 0::2], g[..., 1::2], d
    else:
        for gate, up, down in itertools.permutations(stacks):
            for g, u in itertools.product(_oriented(gate, h), _oriented(up, h)):
                for d in _oriented(down, g.shape[2]):
                    if g.shape == u.shape and d.shape[2] == h:
                        yield g, u, d


def _agrees(want: np.ndarray, got: np.ndarray) -> bool:
    scale = float(np.max(np.abs(want))) if want.size else 0.0
    return bool(scale > 0 and np.max(np.abs(want - got)) <= _RTOL * scale)


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
    probe = np.random.default_rng(_SEED).standard_normal(x.type.shape).astype(x.type.dtype.numpy)
    k = int(topk.attr("k"))
    for out, region, shared_forms in blocks:
        stacks = _stacks(region, e)
        size = sum(v.type.size for n in region for v in n.outputs)
        if size > MAX_PROBE_ELEMS:
            per_token = -(-size // max(1, x.type.size // h))
            raise NoMatch(
                f"the block holds {size:,} elements, over the {MAX_PROBE_ELEMS:,} its check "
                + (
                    f"evaluates: bind at most {MAX_PROBE_ELEMS // per_token} tokens (--seq x --batch)"
                    if per_token <= MAX_PROBE_ELEMS
                    else f"evaluates, {per_token:,} a token: experts this large are not fused yet"
                )
            )
        want = eval_nodes(region, {x: probe})[out].reshape(x.type.shape)
        for (shared, extra), (g, u, d) in itertools.product(shared_forms, _layouts(stacks, h)):
            for router_form, normalize in itertools.product(MOE_ROUTERS, (True, False)):
                attrs: dict[str, object] = {
                    "k": k,
                    "router": router_form,
                    "normalize": normalize,
                    "activation": GATES[0],
                    "shared": shared,
                }
                got = moe([probe, wr.const, g, u, d, *extra], attrs)[0]
                if _agrees(want, got):
                    return _replacement(view, router, x, out, region, [g, u, d, *extra], attrs)
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
    parts = ("gate", "up", "down", "shared_gate", "shared_up", "shared_down", "shared_scale")
    if is_uniform(weights[0]) and same_data(weights[0], weights[1]):
        # halves of one weight without data (`--weights inputs`): one stored value each would
        # make them the same weight to the parameter count; the up half gets the negated tag
        up = weights[1]
        weights = [weights[0], np.broadcast_to(-up.reshape(-1)[:1], up.shape), *weights[2:]]
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
