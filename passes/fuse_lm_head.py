"""fuse-lm-head: the vocabulary projection becomes `LMHead`.

`Linear(x, W[K, V])` becomes `LMHead(x, W)` when V equals the row count of the largest embedding table (the token table)
of the graph and the Linear feeds a graph output (directly or through a Reshape). A weight
equal to the transpose of that table is the tied head of GPT-style models (`tied=True`).
"""

from __future__ import annotations

from wsecc.ir.arrays import same_data
from wsecc.ir.core import Graph, Node, Op
from wsecc.ir.rewrite import GraphView, NoMatch, Replacement, make_node, rewrite_nodes
from wsecc.passdef import Pass, PassContext


def _match(view: GraphView, lin: Node) -> tuple[Replacement, set[Node]]:
    if lin.attr("activation") != "none":
        raise NoMatch("has an activation")
    w = lin.inputs[1]
    tables = [t for n in view.graph.nodes if n.op is Op.EMBEDDING for t in n.inputs[1::2]]
    if not tables or w.type.shape[1] != max(t.type.shape[0] for t in tables):
        raise NoMatch("output width is not the vocabulary size")
    v = lin.output
    r = view.sole_user(v)
    if v not in view.outputs and not (
        r is not None and r.op is Op.RESHAPE and r.output in view.outputs
    ):
        raise NoMatch("does not feed a graph output")
    tied = any(
        t.type.shape == w.type.shape[::-1] and same_data(t.const, w.const.T)  # type: ignore[arg-type, union-attr]
        for t in tables
    )
    new = make_node(
        Op.LM_HEAD,
        list(lin.inputs),
        v.name,
        lin.origin,
        activation="none",
        has_bias=lin.attr("has_bias"),
        tied=tied,
    )
    return Replacement([new], {v: new.output}), {lin}


def fuse_lm_head(graph: Graph, ctx: PassContext) -> Graph:
    g, _ = rewrite_nodes(graph, _match, anchor_ops=frozenset({Op.LINEAR}))
    return g


PASS = Pass("fuse-lm-head", fuse_lm_head)
