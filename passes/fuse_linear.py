"""fuse-linear: `Add(MatMul(x, W), b) -> Linear(x, W, b)`; `MatMul(x, W) -> Linear(x, W)`.

W must be a constant matrix [K, N] and b a constant broadcasting as [N]. When x is a
Reshape merging leading dims ([B, S, K] -> [B·S, K], the Conv1D-as-Gemm form) and the result
is reshaped straight back to [B, S, N], the Linear works on the rank-3 tensor and both
Reshapes disappear; the bias may then follow the Reshape back (TensorFlow's Tensordot). The MatMul output must not be used elsewhere when a bias is fused.
"""

from __future__ import annotations

from wsecc.ir.core import Graph, Node, Op, Value
from wsecc.ir.rewrite import GraphView, NoMatch, Replacement, make_node, origin_of, rewrite_nodes
from wsecc.passdef import Pass, PassContext


def _bias(view: GraphView, y: Value) -> tuple[Node, Value] | None:
    add = view.sole_user(y)
    if add is None or add.op is not Op.ADD or add.inputs[0] is not y:
        return None
    b = add.inputs[1]
    n = y.type.shape[-1]
    if not b.is_const or b.type.size != n or b.type.shape[-1:] != (n,) or b.type.rank > y.type.rank:
        return None
    return add, b


def _match(view: GraphView, mm: Node) -> tuple[Replacement, set[Node]]:
    x, w = mm.inputs
    if not w.is_const or w.type.rank != 2:
        raise NoMatch("weight is not a constant matrix")
    nodes = [mm]
    out = mm.output
    bias = _bias(view, out)
    b = None
    if bias is not None:
        add, bval = bias
        assert bval.const is not None
        b = (
            bval
            if bval.type.rank == 1
            else Value.constant(f"{bval.name}.1d", bval.const.reshape(-1))
        )
        nodes.append(add)
        out = add.output
    # Conv1D-as-Gemm: Reshape([B,S,K] -> [B·S,K]) -> Linear -> Reshape back to [B,S,N].
    rin = view.prod(x, Op.RESHAPE)
    rout = view.sole_user(out)
    if (
        rin is not None
        and x.type.rank == 2
        and rout is not None
        and rout.op is Op.RESHAPE
        and rin.inputs[0].type.shape[:-1] == rout.output.type.shape[:-1]
        and rout.output.type.shape[-1] == w.type.shape[1]
    ):
        x = rin.inputs[0]
        nodes.append(rout)
        out = rout.output
        if b is None and (bias := _bias(view, out)) is not None:  # TF's Tensordot: bias after
            add, b = bias
            nodes.append(add)
            out = add.output
            if b.type.rank != 1:
                assert b.const is not None
                b = Value.constant(f"{b.name}.1d", b.const.reshape(-1))
    ins = [x, w] + ([b] if b is not None else [])
    new = make_node(
        Op.LINEAR, ins, out.name, origin_of(nodes), activation="none", has_bias=b is not None
    )
    return Replacement([new], {out: new.output}), set(nodes)


def fuse_linear(graph: Graph, ctx: PassContext) -> Graph:
    g, misses = rewrite_nodes(graph, _match, anchor_ops=frozenset({Op.MATMUL}))
    for m in misses:
        ctx.note("fuse-linear", m)
    return g


PASS = Pass("fuse-linear", fuse_linear)
