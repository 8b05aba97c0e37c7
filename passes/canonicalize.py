"""canonicalize: the forms every fusion can rely on.

- drops Identity, Dropout and Casts to the operand's own dtype;
- folds layout ops and casts of constants (a transposed weight becomes a constant);
- rewrites Gemm as MatMul (+ Add), weights pre-transposed;
- rewrites Einsum(x, W) that contracts x's trailing dims with W's leading dims as
  Reshape -> MatMul -> Reshape;
- puts the constant operand of a commutative op second (`Add(b, MatMul)` -> `Add(MatMul, b)`);
- shares identical constants (the same bytes become one value);
- a Gather (GatherElements) from a constant whose elements are all equal becomes that constant;
  a Gather at one constant index becomes Slice + Reshape (layout: a pooler's first token).
Guarantees: the graph computes the same function, bit for bit.
"""

from __future__ import annotations

import numpy as np

from wsecc.ir.arrays import FirstOfContent, all_equal, dense, foldable_size, is_uniform
from wsecc.ir.core import Graph, Node, Op, Value
from wsecc.ir.rewrite import COMMUTATIVE, Replacement, apply, make_node
from wsecc.ir.rules import evaluate_op
from wsecc.passdef import Pass, PassContext

_FOLDABLE = frozenset({Op.TRANSPOSE, Op.RESHAPE, Op.CAST, Op.EXPAND, Op.SLICE, Op.CONCAT})


def canonicalize(graph: Graph, ctx: PassContext) -> Graph:
    reps: list[Replacement] = []
    consts: FirstOfContent[Value] = FirstOfContent()  # keyed by content_key, hashed on demand

    def shared(v: Value) -> Value:
        if not v.is_const or v.type.size < 2:
            return v
        assert v.const is not None
        return consts.first(v, v.const)

    outputs = set(graph.outputs)
    for n in graph.nodes:
        ins = [shared(v) for v in n.inputs]
        if n.op in (Op.IDENTITY, Op.DROPOUT) or (
            n.op is Op.CAST and ins[0].type.dtype.value == n.attr("to")
        ):
            if n.outputs[0] not in outputs or not (ins[0].is_const or ins[0] in graph.inputs):
                reps.append(Replacement([], {n.outputs[0]: ins[0]}))
                continue
        if (
            n.op in _FOLDABLE
            and all(v.is_const for v in ins)
            and len(n.outputs) == 1
            and (
                _uniform_fold(n, ins)
                or foldable_size(n.outputs[0].type.shape, n.outputs[0].type.dtype.itemsize)
            )
        ):
            data = _fold(n, [v.const for v in ins])  # type: ignore[misc]
            reps.append(Replacement([], {n.outputs[0]: Value.constant(n.outputs[0].name, data)}))
            continue
        if n.op in (Op.GATHER, Op.GATHER_ELEMENTS) and _uniform_const(ins[0]):
            # a lookup into a constant of one value is that value, whatever the indices
            # (XLM-RoBERTa's token types: a zero buffer gathered at its position ids)
            assert ins[0].const is not None
            out = n.outputs[0]
            one = np.asarray(ins[0].const).reshape(-1)[:1].reshape(())
            data = np.broadcast_to(one, out.type.shape)
            reps.append(Replacement([], {out: Value.constant(out.name, data)}))
            continue
        if n.op is Op.GATHER and ins[1].is_const and ins[1].type.rank == 0 and not ins[0].is_const:
            reps.append(_pick(n, ins))  # BERT's pooler: the first token, a view
            continue
        if n.op is Op.GEMM:
            reps.append(_gemm_to_matmul(n, ins))
            continue
        if n.op is Op.EINSUM and len(ins) == 2 and ins[1].is_const:
            rep = _einsum_to_matmul(n, ins)
            if rep is not None:
                reps.append(rep)
                continue
        if n.op in COMMUTATIVE and len(ins) == 2 and ins[0].is_const and not ins[1].is_const:
            ins = [ins[1], ins[0]]
        if any(a is not b for a, b in zip(ins, n.inputs, strict=True)):
            new = Node(
                n.op,
                tuple(ins),
                tuple(Value(v.name, v.type) for v in n.outputs),
                n.attrs,
                n.name,
                n.origin,
            )
            reps.append(Replacement([new], dict(zip(n.outputs, new.outputs, strict=True))))
    return apply(graph, reps)


def _uniform_fold(n: Node, ins: list[Value]) -> bool:
    """Whether folding `n` views a uniform array (a weight without data): no memory whatever
    its shape (`_fold`); any other fold is bounded by `FOLD_MAX_BYTES`."""
    return n.op is not Op.CONCAT and is_uniform(ins[0].const)  # type: ignore[arg-type]


def _uniform_const(v: Value) -> bool:
    """A constant with data of at least one element, all of them equal (a zero buffer). Not a
    weight without data (`--weights inputs`: a uniform placeholder stands for unknown values)."""
    return v.const is not None and not is_uniform(v.const) and all_equal(v.const)


def _fold(n: Node, args: list[np.ndarray]) -> np.ndarray:
    """The op on constants. Layout ops view a uniform array (a weight without data) without
    expanding it; a Cast of one is cast as its one element."""
    if n.op is Op.CAST and is_uniform(args[0]):
        one = evaluate_op(n.op, [args[0].reshape(-1)[:1]], n.attr_dict)[0]
        return np.broadcast_to(one.reshape(()), args[0].shape)
    return evaluate_op(n.op, args, n.attr_dict)[0]


def _pick(n: Node, ins: list[Value]) -> Replacement:
    """Gather(x, i) at one constant index i -> Reshape(Slice(x, i:i+1)): layout, not a kernel
    (a pooler reading the first token)."""
    x, out = ins[0], n.outputs[0]
    axis = n.attr("axis") % x.type.rank
    i = int(np.asarray(ins[1].const)) % x.type.shape[axis]
    cut = make_node(
        Op.SLICE, [x], f"{out.name}/slice", n.origin,
        axes=(axis,), starts=(i,), ends=(i + 1,), steps=(1,),
    )  # fmt: skip
    flat = make_node(Op.RESHAPE, [cut.output], out.name, n.origin, shape=out.type.shape)
    return Replacement([cut, flat], {out: flat.output})


def _gemm_to_matmul(n: Node, ins: list[Value]) -> Replacement:
    """Gemm(x, W, c; α, β, tA, tB) -> Add(Mul?(MatMul(x', W'), α), β·c)."""
    x, w = ins[0], ins[1]
    out = n.outputs[0]
    nodes: list[Node] = []
    if n.attr("trans_a"):
        nodes.append(make_node(Op.TRANSPOSE, [x], f"{out.name}/xT", n.origin, perm=(1, 0)))
        x = nodes[-1].output
    if n.attr("trans_b"):
        if w.is_const:
            assert w.const is not None
            w = Value.constant(f"{w.name}.T", dense(w.const.T))
        else:
            nodes.append(make_node(Op.TRANSPOSE, [w], f"{out.name}/wT", n.origin, perm=(1, 0)))
            w = nodes[-1].output
    alpha, beta = n.attr("alpha", 1.0), n.attr("beta", 1.0)
    last = len(ins) == 2 and alpha == 1.0
    nodes.append(make_node(Op.MATMUL, [x, w], out.name if last else f"{out.name}/mm", n.origin))
    y = nodes[-1].output
    if alpha != 1.0:
        a = Value.constant(f"{out.name}/alpha", np.array(alpha, out.type.dtype.numpy))
        nodes.append(
            make_node(Op.MUL, [y, a], out.name if len(ins) == 2 else f"{out.name}/scaled", n.origin)
        )
        y = nodes[-1].output
    if len(ins) == 3:
        c = ins[2]
        if beta != 1.0:
            assert c.const is not None, "Gemm with beta != 1 needs a constant C"
            c = Value.constant(f"{c.name}.beta", (c.const * beta).astype(c.const.dtype))
        nodes.append(make_node(Op.ADD, [y, c], out.name, n.origin))
    return Replacement(nodes, {out: nodes[-1].output})


def _einsum_to_matmul(n: Node, ins: list[Value]) -> Replacement | None:
    """'abcd,cde->abe' with constant W: contract x's trailing dims with W's leading dims."""
    lhs, _, out_sub = n.attr("equation").partition("->")
    parts = lhs.split(",")
    if len(parts) != 2 or "." in n.attr("equation"):
        return None
    xs, ws = parts
    # the contracted letters: those in both operands and not in the output
    shared = [c for c in ws if c in xs and c not in out_sub]
    if not shared or xs[-len(shared) :] != "".join(shared) or ws[: len(shared)] != "".join(shared):
        return None
    if out_sub != xs[: -len(shared)] + ws[len(shared) :]:
        return None
    x, w = ins
    assert w.const is not None
    kdim = int(np.prod(w.type.shape[: len(shared)]))
    w2 = Value.constant(f"{w.name}.2d", w.const.reshape(kdim, -1))
    out = n.outputs[0]
    lead = x.type.shape[: -len(shared)]
    r1 = make_node(Op.RESHAPE, [x], f"{out.name}/x2d", n.origin, shape=tuple(lead) + (kdim,))
    mm = make_node(Op.MATMUL, [r1.output, w2], f"{out.name}/mm", n.origin)
    r2 = make_node(Op.RESHAPE, [mm.output], out.name, n.origin, shape=out.type.shape)
    return Replacement([r1, mm, r2], {out: r2.output})


PASS = Pass("canonicalize", canonicalize)
