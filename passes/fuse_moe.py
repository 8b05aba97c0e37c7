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

Not matched (the region stays, and lowering leaves generic kernels, so the pass notes why):
a shared expert added to the routed sum (Qwen2-MoE), gpt-oss's clamped SwiGLU with biases,
Llama 4's dense-then-scatter experts, onnxruntime-genai's `com.microsoft.MoE`.
Requires fuse-linear's Linears (the router) and runs before fuse-swiglu, whose SiLU matcher
never sees inside the gathered experts anyway.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

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
from wsecc.pm import Pass, PassContext

_VIEWS = LAYOUT | {Op.IDENTITY, Op.CAST}
_RTOL = 1e-4  # of the output's largest magnitude: float32 rounding, not a different function
_SEED = 0


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
    out = _block_output(view, topk, x)
    region = _region(view, x, out)
    stacks = _stacks(region, e)
    probe = np.random.default_rng(_SEED).standard_normal(x.type.shape).astype(x.type.dtype.numpy)
    want = eval_nodes(region, {x: probe})[out].reshape(x.type.shape)
    k = int(topk.attr("k"))
    for g, u, d in _layouts(stacks, h):
        for router_form, normalize in itertools.product(MOE_ROUTERS, (True, False)):
            attrs: dict[str, object] = {
                "k": k,
                "router": router_form,
                "normalize": normalize,
                "activation": GATES[0],
            }
            got = moe([probe, wr.const, g, u, d], attrs)[0]
            if not _agrees(want, got):
                continue
            consts = [
                Value.constant(f"{router.name}/moe_{part}", np.ascontiguousarray(a))
                for part, a in (("gate", g), ("up", u), ("down", d))
            ]
            origin = origin_of(region)
            name = f"{out.name}/moe" if out.type.shape != x.type.shape else out.name
            node = make_node(Op.MOE, [x, wr, *consts], name, origin, (), **attrs)
            new = [node]
            if out.type.shape != x.type.shape:
                new.append(
                    make_node(Op.RESHAPE, [node.output], out.name, origin, shape=out.type.shape)
                )
            return Replacement(new, {out: new[-1].output}), set(region)
    raise NoMatch("no router form and expert weight layout computes what the block computes")


def fuse_moe(graph: Graph, ctx: PassContext) -> Graph:
    g, misses = rewrite_nodes(graph, _match, anchor_ops=frozenset({Op.TOP_K}))
    for m in misses:
        ctx.note("fuse-moe", m)
    return g


PASS = Pass("fuse-moe", fuse_moe)
