"""`generic`: any other op that computes, known only by its work, weights and largest activation
(given directly as params). Lowering falls back to it for every op no other kind lowers."""

from __future__ import annotations

from wsecc.ir.core import Node
from wsecc.kernels.costs import CostContext, KernelCost, cdiv, split_shapes
from wsecc.kernels.ir import KernelKind
from wsecc.kernels.kind import GradRule, KindDef, Params


def generic_cost(p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
    """Any other op, known only by its flops, weights and largest activation (`elements`).

    Mapping: everything spread evenly over P = h w PEs, computed at the vector rate (no FMAC
    structure is assumed); the activation enters on W over h lanes and leaves on S over w lanes.

        weights = cdiv(weight_elems, P) sb
        buffers = 4 cdiv(elements, P) sb          double-buffered input and output slices
        compute = cdiv(cdiv(flops, P), v)
        link    = max(cdiv(elements sb, h L), cdiv(elements sb, w L))
    """
    P, sb, E = h * w, ctx.sb, p["elements"]
    return ctx.cost(
        h,
        w,
        weights=cdiv(p["weight_elems"], P) * sb,
        buffers=4 * cdiv(E, P) * sb,
        compute=cdiv(cdiv(p["flops"], P), ctx.v),
        link=max(cdiv(E * sb, h * ctx.L), cdiv(E * sb, w * ctx.L)),
        in_bytes=E * sb,
        out_bytes=E * sb,
    )


def lower_generic(n: Node, b: int) -> dict[str, object]:
    """One flop per output element; constants of more than one element are its weights."""
    out = n.outputs[0]
    return {
        "op": n.op.value,
        "flops": max(1, out.type.size // b),
        "weight_elems": sum(v.type.size for v in n.inputs if v.is_const and v.type.size > 1),
        "elements": max(1, out.type.size // b),
    }


GENERIC = KindDef(
    kind=KernelKind.GENERIC,
    params={"op": "str", "flops": "int0", "weight_elems": "int0", "elements": "int+"},
    flops=lambda p: int(p["flops"]),
    weight_elems=lambda p: int(p["weight_elems"]),
    in_edge="W",
    out_edge="S",
    cost=generic_cost,
    shapes=split_shapes("elements", "elements"),
    tile_split=(None, None),  # everything spread evenly over all PEs
    lower=lower_generic,
    # known only by its work: the backward is charged twice the forward, inputs kept
    grad=GradRule(flops=lambda p: 2 * int(p["flops"]), saved_elems=lambda p: p["elements"]),
)
