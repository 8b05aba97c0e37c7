"""fuse-embedding: table lookups and their sums become one Embedding.

`Gather(T, ids) -> Embedding(ids, T)` for a constant float table T [V, D] gathered on axis 0;
`Add(Embedding(a..), Embedding(b..)) -> Embedding(a.., b..)` (token + position + token type).
Position ids that folded to constants stay constant operands. A constant added to an embedding
(token types the frontend folded: ALBERT's, BERT's, called without `token_type_ids`, are a
lookup of a zero buffer) joins it as a lookup of its own rows at constant ids
(`Embedding(.., arange, c as [rows, D])`). A lookup whose ids and tables are all constants,
joined with nothing, computes a constant: it becomes one (a kernel with no input would be
left otherwise). Position ids computed from the token ids as RoBERTa's (XLM-RoBERTa, MPNet,
CamemBERT: non-pad tokens numbered from pad + 1) are recognised by evaluation and become the
embedding's `padded_positions` (it reads the token ids; `rules.padded_positions`). An
embedding times a scalar constant (Gemma's √d) becomes the embedding's `scale`.
"""

from __future__ import annotations

import numpy as np

from wsecc.ir.arrays import is_uniform
from wsecc.ir.core import DType, Graph, IRError, Node, Op, Value
from wsecc.ir.rewrite import (
    GraphView,
    NoMatch,
    Replacement,
    eval_nodes,
    make_node,
    origin_of,
    rewrite_nodes,
    scalar,
)
from wsecc.ir.rules import evaluate_op, padded_positions
from wsecc.passdef import Pass, PassContext


def _gather(view: GraphView, n: Node) -> tuple[Replacement, set[Node]]:
    table, ids = n.inputs
    if (
        n.attr("axis") != 0
        or not table.is_const
        or table.type.rank != 2
        or not table.type.dtype.is_float
    ):
        raise NoMatch("not a lookup in a constant float table")
    new = make_node(Op.EMBEDDING, [ids, table], n.output.name, n.origin)
    return Replacement([new], {n.output: new.output}), {n}


def _as_lookup(c: Value, name: str) -> list[Value] | None:
    """A float constant [..., D] as (ids, table): its rows looked up at constant ids, so that
    an embedding plus c is one embedding; None unless c is a float constant of rank ≥ 1."""
    if c.const is None or not c.type.dtype.is_float or c.type.rank < 1:
        return None
    lead = c.type.shape[:-1]
    ids = np.arange(int(np.prod(lead, dtype=np.int64)), dtype=np.int64).reshape(lead)
    rows = (int(np.prod(lead, dtype=np.int64)), c.type.shape[-1])
    if is_uniform(c.const):  # a weight without data stays one element
        table = np.broadcast_to(c.const.reshape(-1)[:1].reshape(()), rows)
    else:
        table = np.ascontiguousarray(c.const).reshape(rows)
    return [Value.constant(f"{name}/rows", ids), Value.constant(f"{name}/table", table)]


def _sum(view: GraphView, n: Node) -> tuple[Replacement, set[Node]]:
    a, b = (view.prod(v, Op.EMBEDDING) for v in n.inputs)
    if a is not None and b is None and (c := _as_lookup(n.inputs[1], n.output.name)):
        ins, used = [*a.inputs, *c], [a, n]
    elif b is not None and a is None and (c := _as_lookup(n.inputs[0], n.output.name)):
        ins, used = [*c, *b.inputs], [b, n]
    elif a is None or b is None:
        raise NoMatch("operands are not both embeddings")
    else:
        ins, used = [*a.inputs, *b.inputs], [a, b, n]
    if view.escapes([u.output for u in used[:-1]], {n}):
        raise NoMatch("an embedding is also used elsewhere")
    try:
        new = make_node(Op.EMBEDDING, ins, n.output.name, origin_of(used))
    except IRError as e:
        raise NoMatch(f"the lookups do not sum: {e}") from None
    if new.output.type != n.output.type:
        raise NoMatch("the sum broadcasts beyond its embeddings' shape")
    return Replacement([new], {n.output: new.output}), set(used)


def _scaled(view: GraphView, mul: Node) -> tuple[Replacement, set[Node]]:
    """Mul(Embedding(..), c) with a scalar constant c, the embedding used only here ->
    Embedding(..; scale=c): Gemma multiplies its token embeddings by √d."""
    emb = view.prod(mul.inputs[0], Op.EMBEDDING)
    c = scalar(mul.inputs[1])
    if emb is None or c is None or "scale" in emb.attr_dict:
        raise NoMatch("not an embedding times a scalar constant")
    if view.sole_user(emb.output) is not mul or mul.output.type != emb.output.type:
        raise NoMatch("the embedding is also used elsewhere")
    attrs = dict(emb.attr_dict, scale=float(np.float32(c)))
    new = make_node(Op.EMBEDDING, list(emb.inputs), mul.output.name, origin_of([emb, mul]), **attrs)
    return Replacement([new], {mul.output: new.output}), {emb, mul}


def _constant(view: GraphView, n: Node) -> tuple[Replacement, set[Node]]:
    if not all(v.is_const for v in n.inputs) or n.output in view.outputs:
        raise NoMatch("the lookup reads a graph input")
    data = evaluate_op(n.op, [v.const for v in n.inputs], n.attr_dict)[0]  # type: ignore[misc]
    return Replacement([], {n.output: Value.constant(n.output.name, data)}), {n}


_POSITION_OPS = frozenset(
    {Op.EQUAL, Op.NOT, Op.CAST, Op.CUMSUM, Op.MUL, Op.ADD, Op.SUB, Op.RESHAPE, Op.IDENTITY}
)


def _positions(view: GraphView, n: Node) -> tuple[Replacement, set[Node]]:
    """Embedding whose ids of one pair are computed from an int graph input by comparisons,
    casts, a running sum and integer arithmetic, and compute RoBERTa's padding-derived position
    ids (`rules.padded_positions`) for a pad id among their scalar constants, on probe ids ->
    the same Embedding reading the token ids directly, `padded_positions=(pair, pad)`."""
    if n.attr("padded_positions"):
        raise NoMatch("already derives positions")
    for i, ids in enumerate(n.inputs[0::2]):
        if ids.is_const or ids in view.graph.inputs:
            continue
        sources = view.input_ancestors(ids)
        nodes = view.ancestors(ids)
        if len(sources) != 1 or not nodes or any(m.op not in _POSITION_OPS for m in nodes):
            continue
        (tok,) = sources
        if tok.type.dtype not in (DType.INT64, DType.INT32) or tok.type.shape != ids.type.shape:
            continue
        pads = {int(c) for m in nodes for v in m.inputs if (c := scalar(v)) is not None}
        for pad in sorted(pads):
            if _derives_positions(nodes, tok, ids, pad):
                ins = list(n.inputs)
                ins[2 * i] = tok
                attrs = dict(n.attr_dict, padded_positions=(i, pad))
                new = make_node(Op.EMBEDDING, ins, n.output.name, n.origin, **attrs)
                return Replacement([new], {n.output: new.output}), {n}
    raise NoMatch("no ids computed from token ids as padding-derived positions")


def _derives_positions(nodes: list[Node], tok: Value, ids: Value, pad: int) -> bool:
    """Do `nodes` take token ids to `padded_positions(ids, pad)`, on probes with pads?"""
    rng = np.random.default_rng(0)
    shape = tok.type.shape
    for _ in range(3):
        probe = rng.integers(0, 4, size=shape) + pad - 1
        probe[..., -1:] = pad
        probe = probe.astype(tok.type.dtype.numpy)
        try:
            got = eval_nodes(nodes, {tok: probe})[ids]
        except Exception:  # noqa: BLE001 - a subgraph the probe cannot run is no match
            return False
        if not np.array_equal(got, padded_positions(probe.astype(np.int64), pad)):
            return False
    return True


def fuse_embedding(graph: Graph, ctx: PassContext) -> Graph:
    g, _ = rewrite_nodes(graph, _gather, anchor_ops=frozenset({Op.GATHER}))
    while True:  # a chain of sums folds one Add per sweep
        g2, _ = rewrite_nodes(g, _sum, anchor_ops=frozenset({Op.ADD}))
        if len(g2.nodes) == len(g.nodes):
            break
        g = g2
    g3, _ = rewrite_nodes(g2, _constant, anchor_ops=frozenset({Op.EMBEDDING}))
    g4, _ = rewrite_nodes(g3, _positions, anchor_ops=frozenset({Op.EMBEDDING}))
    g5, _ = rewrite_nodes(g4, _scaled, anchor_ops=frozenset({Op.MUL}))
    return g5


PASS = Pass("fuse-embedding", fuse_embedding)
