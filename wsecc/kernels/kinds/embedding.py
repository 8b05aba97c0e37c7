"""`embedding`: out[t] = sum over n_tables lookups of table[id]; vocab = rows of all tables
together."""

from __future__ import annotations

from wsecc.ir.core import Node, Op
from wsecc.kernels.costs import INDEX_BYTES, CostContext, KernelCost, cdiv
from wsecc.kernels.decode import DecodeCost, multicast
from wsecc.kernels.ir import KernelKind
from wsecc.kernels.kind import GradRule, KindDef, Params
from wsecc.kernels.kinds.common import rows_per_sample


def embedding_cost(p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
    """Gather: out[t] = sum of n_tables rows table[id], table[vocab, dim] resident.

    Mapping: table rows split over region rows, vh = cdiv(vocab, h); features over columns,
    dw = cdiv(dim, w). Ids (i32) enter on the W edge and are multicast to every PE; the PE row
    owning an id sends its dw slice down the column, where the n_tables lookups of a token are
    summed in flight; results leave on the S edge. Compute is charged for the worst case, all
    lookups of a sample landing on one PE row (a repeated token), so it does not shrink with h.

        weights = vh dw sb
        buffers = nb c n_tables INDEX_BYTES + nb c dw sb   double-buffered ids and output chunk
                                                           (nb = 2; 1 single-buffered)
        compute = cdiv(rows n_tables dw, v)
        link    = max(cdiv(rows n_tables INDEX_BYTES, L), cdiv(rows dw sb, L))
    """
    vocab, dim, M, n = p["vocab"], p["dim"], p["rows"], p["n_tables"]
    sb, c = ctx.sb, ctx.chunk(M)
    vh, dw = cdiv(vocab, h), cdiv(dim, w)
    return ctx.cost(
        h,
        w,
        weights=vh * dw * sb,
        buffers=ctx.nb * c * (n * INDEX_BYTES + dw * sb),
        compute=cdiv(M * n * dw, ctx.v),
        link=max(cdiv(M * n * INDEX_BYTES, ctx.L), cdiv(M * dw * sb, ctx.L)),
        in_bytes=M * n * INDEX_BYTES,
        out_bytes=M * dim * sb,
    )


def embedding_decode(p: Params, h: int, w: int, ctx: CostContext, B: int) -> DecodeCost:
    """One decode step of `embedding_cost`'s mapping: B tokens' ids multicast along the W edge's
    row and down every column, the owning rows' slices summed down the column to the S edge
    (`wsecc.kernels.decode`):

        compute   = cdiv(B n_tables dw, v)
        broadcast = multicast(w, B n_tables INDEX_BYTES) + multicast(h, B n_tables INDEX_BYTES)
                  + multicast(h, B dw sb)"""
    n, dw = p["n_tables"], cdiv(p["dim"], w)
    ids = B * n * INDEX_BYTES
    return DecodeCost(
        compute=cdiv(B * n * dw, ctx.v),
        broadcast=multicast(ctx, w, ids)
        + multicast(ctx, h, ids)
        + multicast(ctx, h, B * dw * ctx.sb),
        bytes_read=n * dw * ctx.sb,
        flops=B * p["dim"] * (n - 1),
    )


def _lower(n: Node, b: int) -> dict[str, object]:
    tables = n.inputs[1::2]
    out = n.output
    return {
        "vocab": sum(t.type.shape[0] for t in tables),
        "dim": out.type.shape[-1],
        "rows": rows_per_sample(out, b),
        "n_tables": len(tables),
        "scaled": "scale" in n.attr_dict,  # Gemma's √d: one multiply per element
    }


EMBEDDING = KindDef(
    kind=KernelKind.EMBEDDING,
    params={"vocab": "int+", "dim": "int+", "rows": "int+", "n_tables": "int+", "scaled": "bool"},
    defaults=lambda p: {"scaled": False},
    flops=lambda p: p["rows"] * p["dim"] * (p["n_tables"] - 1 + int(p.get("scaled", False))),
    weight_elems=lambda p: p["vocab"] * p["dim"],
    in_edge="W",
    out_edge="S",
    cost=embedding_cost,
    tile_split=("vocab", "dim"),  # table rows over rows, features over columns
    lowers=frozenset({Op.EMBEDDING}),
    lower=_lower,
    tokens="rows",
    decode=embedding_decode,
    # dTable[ids] += dY: one add per gathered element of each table; the ids are kept
    grad=GradRule(
        flops=lambda p: p["rows"] * p["dim"] * p["n_tables"],
        saved_elems=lambda p: p["rows"] * p["n_tables"],
    ),
)
