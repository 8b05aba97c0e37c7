"""fuse-lm-head: the vocabulary projection becomes `LMHead`.

`Linear(x, W[K, V])` becomes `LMHead(x, W)` when V equals the row count of the largest embedding table (the token table)
of the graph and the Linear feeds a graph output (directly or through a Reshape). A weight
equal to the transpose of that table is the tied head of GPT-style models (`tied=True`).
A soft-cap between the head and the output, c·tanh(y / c) (Gemma 2's final_logit_softcapping:
Div or Mul by a scalar, Tanh, Mul or Div by a scalar, with the same c), joins the head as its
`softcap` attribute.
"""

from __future__ import annotations

import numpy as np

from wsecc.ir.arrays import same_data
from wsecc.ir.core import Graph, Node, Op, Value
from wsecc.ir.rewrite import GraphView, NoMatch, Replacement, make_node, rewrite_nodes, scalar
from wsecc.passdef import Pass, PassContext


def _match(view: GraphView, lin: Node) -> tuple[Replacement, set[Node]]:
    if lin.attr("activation") != "none":
        raise NoMatch("has an activation")
    w = lin.inputs[1]
    tables = [t for n in view.graph.nodes if n.op is Op.EMBEDDING for t in n.inputs[1::2]]
    if not tables or w.type.shape[1] != max(t.type.shape[0] for t in tables):
        raise NoMatch("output width is not the vocabulary size")
    v = lin.output
    cap, capped = _softcap(view, v)
    end = capped[-1].output if capped else v
    r = view.sole_user(end)
    if end not in view.outputs and not (
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
        end.name,
        lin.origin,
        (),
        activation="none",
        has_bias=lin.attr("has_bias"),
        tied=tied,
        **({"softcap": cap} if capped else {}),
    )
    return Replacement([new], {end: new.output}), {lin, *capped}


def _scale_of(n: Node | None) -> float | None:
    """s of a Mul by the scalar s or a Div by 1/s (either operand order for Mul), else None."""
    if n is None or n.op not in (Op.MUL, Op.DIV):
        return None
    s = scalar(n.inputs[1])
    if n.op is Op.MUL and s is None:
        s = scalar(n.inputs[0])
    if s is None or s == 0:
        return None
    return s if n.op is Op.MUL else 1.0 / s


def _softcap(view: GraphView, v: Value) -> tuple[float, list[Node]]:
    """(c, its three nodes) when v's only way on is c·tanh(v / c), else (0, [])."""
    div = view.sole_user(v)
    tanh = view.sole_user(div.output) if div is not None else None
    mul = view.sole_user(tanh.output) if tanh is not None else None
    s_in, s_out = _scale_of(div), _scale_of(mul)
    if tanh is None or tanh.op is not Op.TANH or s_in is None or s_out is None:
        return 0.0, []
    assert div is not None and mul is not None
    c = float(np.float32(s_out))
    if not c > 0 or float(np.float32(1.0 / s_in)) != c:
        return 0.0, []
    if v in view.outputs or div.output in view.outputs or tanh.output in view.outputs:
        return 0.0, []
    return c, [div, tanh, mul]


def fuse_lm_head(graph: Graph, ctx: PassContext) -> Graph:
    g, _ = rewrite_nodes(graph, _match, anchor_ops=frozenset({Op.LINEAR}))
    return g


PASS = Pass("fuse-lm-head", fuse_lm_head)
