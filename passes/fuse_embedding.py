"""fuse-embedding: table lookups and their sums become one Embedding.

`Gather(T, ids) -> Embedding(ids, T)` for a constant float table T [V, D] gathered on axis 0;
`Add(Embedding(a..), Embedding(b..)) -> Embedding(a.., b..)` (token + position + token type).
Position ids that folded to constants stay constant operands. A constant added to an embedding
(token types the frontend folded: ALBERT's, BERT's, called without `token_type_ids`, are a
lookup of a zero buffer) joins it as a lookup of its own rows at constant ids
(`Embedding(.., arange, c as [rows, D])`). A lookup whose ids and tables are all constants,
joined with nothing, computes a constant: it becomes one (a kernel with no input would be
left otherwise).
"""

from __future__ import annotations

import numpy as np

from wsecc.ir.core import Graph, IRError, Node, Op, Value
from wsecc.ir.rewrite import GraphView, NoMatch, Replacement, make_node, origin_of, rewrite_nodes
from wsecc.ir.rules import evaluate_op
from wsecc.pm import Pass, PassContext


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
    table = np.ascontiguousarray(c.const).reshape(-1, c.type.shape[-1])
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


def _constant(view: GraphView, n: Node) -> tuple[Replacement, set[Node]]:
    if not all(v.is_const for v in n.inputs) or n.output in view.outputs:
        raise NoMatch("the lookup reads a graph input")
    data = evaluate_op(n.op, [v.const for v in n.inputs], n.attr_dict)[0]  # type: ignore[misc]
    return Replacement([], {n.output: Value.constant(n.output.name, data)}), {n}


def fuse_embedding(graph: Graph, ctx: PassContext) -> Graph:
    g, _ = rewrite_nodes(graph, _gather, anchor_ops=frozenset({Op.GATHER}))
    while True:  # a chain of sums folds one Add per sweep
        g2, _ = rewrite_nodes(g, _sum, anchor_ops=frozenset({Op.ADD}))
        if len(g2.nodes) == len(g.nodes):
            break
        g = g2
    g3, _ = rewrite_nodes(g2, _constant, anchor_ops=frozenset({Op.EMBEDDING}))
    return g3


PASS = Pass("fuse-embedding", fuse_embedding)
