"""fuse-embedding: table lookups and their sums become one Embedding.

`Gather(T, ids) -> Embedding(ids, T)` for a constant float table T [V, D] gathered on axis 0;
`Add(Embedding(a..), Embedding(b..)) -> Embedding(a.., b..)` (token + position + token type).
Position ids that folded to constants stay constant operands.
"""

from __future__ import annotations

from wsecc.ir.core import Graph, Node, Op
from wsecc.ir.rewrite import GraphView, NoMatch, Replacement, make_node, origin_of, rewrite_nodes
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


def _sum(view: GraphView, n: Node) -> tuple[Replacement, set[Node]]:
    a, b = (view.prod(v, Op.EMBEDDING) for v in n.inputs)
    if a is None or b is None:
        raise NoMatch("operands are not both embeddings")
    if view.escapes([a.output, b.output], {n}):
        raise NoMatch("an embedding is also used elsewhere")
    new = make_node(Op.EMBEDDING, list(a.inputs + b.inputs), n.output.name, origin_of([a, b, n]))
    return Replacement([new], {n.output: new.output}), {a, b, n}


def fuse_embedding(graph: Graph, ctx: PassContext) -> Graph:
    g, _ = rewrite_nodes(graph, _gather, anchor_ops=frozenset({Op.GATHER}))
    while True:  # a chain of sums folds one Add per sweep
        g2, _ = rewrite_nodes(g, _sum, anchor_ops=frozenset({Op.ADD}))
        if len(g2.nodes) == len(g.nodes):
            return g2
        g = g2


PASS = Pass("fuse-embedding", fuse_embedding)
