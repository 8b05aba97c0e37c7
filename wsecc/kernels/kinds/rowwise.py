"""Row-wise kinds: `layernorm`, `rmsnorm`, `softmax` and `elementwise`, costed by one mapping
(`_rowwise`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from wsecc.ir.core import Node, Op
from wsecc.kernels.costs import CostContext, KernelCost, breakpoints, cdiv
from wsecc.kernels.decode import DecodeCost, multicast, reduce
from wsecc.kernels.ir import KernelKind
from wsecc.kernels.kind import TRANSCENDENTAL_OPS, GradRule, KindDef, Params, one_of
from wsecc.kernels.kinds.common import rows_per_sample

ELEMENTWISE_OPS: Mapping[str, int] = MappingProxyType(
    {
        "add": 1,
        "sub": 1,
        "mul": 1,
        "neg": 1,
        "max": 1,
        "min": 1,
        "relu": 1,
        "where": 1,
        "copy": 1,
        "cast": 1,
        "div": TRANSCENDENTAL_OPS,  # reciprocal by Newton iterations, then a multiply
        "exp": TRANSCENDENTAL_OPS,
        "tanh": TRANSCENDENTAL_OPS,
        "erf": TRANSCENDENTAL_OPS,
        "sqrt": TRANSCENDENTAL_OPS,
        "sigmoid": TRANSCENDENTAL_OPS + 2,  # 1 / (1 + exp(-x))
        # 0.5 x (1 + tanh(c (x + 0.044715 x^3))): x^3 2, fma 1, scale 1, tanh, +1 1, 0.5 x 2
        "gelu_tanh": TRANSCENDENTAL_OPS + 7,
        # 0.5 x (1 + erf(x / sqrt 2)): scale 1, erf, +1 1, 0.5 x 2
        "gelu_erf": TRANSCENDENTAL_OPS + 4,
    }
)
"""Vector ops per element of each elementwise op (composite ops written out as sums)."""

LAYERNORM_OPS = 6
"""Per element: sum x (1), sum x^2 (1 FMA), x - mean (1), * rstd (1), * gamma (1), + beta (1)."""

RMSNORM_OPS = 3
"""Per element: sum x^2 (1 FMA), * rstd (1), * gamma (1): LayerNorm without the mean and beta."""

SOFTMAX_OPS = 3 + TRANSCENDENTAL_OPS + 1
"""Per element: running max (1), x - max (1), exp (8), running sum (1), * 1/sum (1) = 12."""


def _rowwise(
    rows: int,
    dim: int,
    h: int,
    w: int,
    ctx: CostContext,
    *,
    ops: int,
    weight_vectors: int = 0,
    inputs: int = 1,
    outputs: int = 1,
    stats: int = 0,
) -> KernelCost:
    """out[rows, dim] computed row by row: dim split over columns, rows dealt over region rows.

    Mapping: dw = cdiv(dim, w) features per column (the layout a matmul's S edge emits); whole
    c-token chunks are dealt round-robin to region rows, mr = cdiv(rows, h) rows per PE. Inputs
    enter on the N edge and stream down the columns; outputs leave on the S edge. Kinds with
    per-row statistics (`stats` scalars per row, e.g. sum and sum of squares) all-reduce them
    along the region row (w > 1). `weight_vectors` per-feature vectors (gamma, beta) are resident.

        weights = weight_vectors dw sb
        buffers = nb c dw sb (inputs + outputs)  double-buffered chunks (nb = 2; 1 single-buffered)
                + c stats ab                     per-row statistics
        compute = cdiv(mr dw ops, v)
        link    = max(cdiv(rows dw sb inputs, L),   input lane per column
                      cdiv(rows dw sb outputs, L),  output lane per column
                      [w > 1 and stats > 0] cdiv(2 mr stats ab, L))   row all-reduce
    """
    sb, ab, L, c = ctx.sb, ctx.ab, ctx.L, ctx.chunk(rows)
    dw, mr = cdiv(dim, w), cdiv(rows, h)
    allreduce = int(w > 1 and stats > 0)
    return ctx.cost(
        h,
        w,
        weights=weight_vectors * dw * sb,
        buffers=ctx.nb * c * dw * sb * (inputs + outputs) + c * stats * ab,
        compute=cdiv(mr * dw * ops, ctx.v),
        link=max(
            cdiv(rows * dw * sb * inputs, L),
            cdiv(rows * dw * sb * outputs, L),
            allreduce * cdiv(2 * mr * stats * ab, L),
        ),
        in_bytes=rows * dim * sb * inputs,
        out_bytes=rows * dim * sb * outputs,
    )


def _rowwise_decode(
    B: int,
    dim: int,
    h: int,
    w: int,
    ctx: CostContext,
    *,
    ops: int,
    weight_vectors: int = 0,
    inputs: int = 1,
    outputs: int = 1,
    stats: int = 0,
) -> DecodeCost:
    """One decode step of `_rowwise`'s mapping: B rows (one token per sequence) dealt over the
    region rows, mr = cdiv(B, h) per PE. A row enters on the N edge and goes down its column to
    its region row, and its result down to the S edge; the statistics are reduced along the
    region row to its end PE (the chain or a two-level tree, whichever is faster,
    `wsecc.kernels.decode.reduce`) and the result multicast back from it (an all-reduce):

        compute   = cdiv(mr dw ops, v)
        reduction = [stats > 0] (reduce(w, mr stats ab) + multicast(w, mr stats ab))
        broadcast = multicast(h, B dw sb inputs) + multicast(h, B dw sb outputs)"""
    sb, ab = ctx.sb, ctx.ab
    dw, mr = cdiv(dim, w), cdiv(B, h)
    stat_bytes = mr * stats * ab
    return DecodeCost(
        compute=cdiv(mr * dw * ops, ctx.v),
        reduction=reduce(ctx, w, stat_bytes).cycles + multicast(ctx, w, stat_bytes) if stats else 0,
        broadcast=multicast(ctx, h, B * dw * sb * inputs)
        + multicast(ctx, h, B * dw * sb * outputs),
        bytes_read=weight_vectors * dw * sb,
        flops=B * dim * ops,
    )


def rowwise_shapes(p: Params, hmax: int, wmax: int) -> tuple[list[int], list[int]]:
    """Rows: breakpoints of the rows (whole chunks per region row); columns: of the features."""
    return breakpoints(p["rows"], hmax), breakpoints(p["dim"], wmax)


# Row-wise SRAM does not depend on the region row (whole chunks are dealt to rows), so only the
# features split: the map leaves every row of a column at its fullest figure.
_ROWWISE_SPLIT: tuple[str | None, str | None] = (None, "dim")


# --- layernorm and rmsnorm: y = norm(x + r) (and x + r as a second output when has_residual) ------


@dataclass(frozen=True)
class _Norm:
    """What tells one row normalization from the other: ops per element (the residual add not
    counted), resident weight vectors (gamma, beta), per-row statistics (kept for the backward
    too), backward ops per element."""

    ops: int
    weight_vectors: int
    stats: int
    grad_ops: int

    def _shape(self, p: Params) -> dict[str, int]:
        """norm(x + r): `ops` (+1 for the residual add), the weight vectors resident, `stats`
        per row; with a residual it reads x and r and writes both norm(x + r) and x + r (the
        residual stream), so inputs = outputs = 2."""
        res = int(p["has_residual"])
        adds = _adds(p)  # a parallel block adds two
        return {
            "ops": self.ops + adds,
            "weight_vectors": self.weight_vectors,
            "inputs": 1 + adds,
            "outputs": 1 + res,
            "stats": self.stats,
        }

    def cost(self, p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
        """`_rowwise` with the norm's `_shape`."""
        return _rowwise(p["rows"], p["dim"], h, w, ctx, **self._shape(p))

    def decode(self, p: Params, h: int, w: int, ctx: CostContext, B: int) -> DecodeCost:
        """`_rowwise_decode` with the norm's `_shape`."""
        return _rowwise_decode(B, p["dim"], h, w, ctx, **self._shape(p))

    def kind(self, kind: KernelKind, op: Op) -> KindDef:
        return KindDef(
            kind=kind,
            params={"rows": "int+", "dim": "int+", "has_residual": "bool", "residuals": "int+"},
            defaults=lambda p: {"residuals": 1},
            flops=lambda p: p["rows"] * p["dim"] * (self.ops + _adds(p)),
            weight_elems=lambda p: self.weight_vectors * p["dim"],
            in_edge="N",
            out_edge="S",
            cost=self.cost,
            shapes=rowwise_shapes,
            tile_split=_ROWWISE_SPLIT,
            chunks_over_rows=True,
            lowers=frozenset({op}),
            lower=_lower_norm,
            tokens="rows",
            decode=self.decode,
            grad=GradRule(
                flops=lambda p: p["rows"] * p["dim"] * self.grad_ops,
                saved_elems=lambda p: p["rows"] * (p["dim"] + self.stats),  # x (or x + r), stats
            ),
        )


def _adds(p: Params) -> int:
    """The skip inputs a norm adds to its input per element (0, 1, or 2 for a parallel block)."""
    return int(p["has_residual"]) * int(p.get("residuals", 1))


def _lower_norm(n: Node, b: int) -> dict[str, object]:
    x = n.inputs[0]
    params = 2 if n.op is Op.LAYER_NORM else 1
    return {
        "rows": rows_per_sample(x, b),
        "dim": x.type.shape[-1],
        "has_residual": bool(n.attr("has_skip")),
        "residuals": max(1, len(n.inputs) - 1 - params),
    }


LAYERNORM_GRAD_OPS = 10
"""LayerNorm's backward per element: dxh = dy g (1), dg += dy xh (2), db += dy (1), the two row
means of dxh and dxh xh (2), dx = (dxh - mean - xh mean2) rstd (4); a fused residual passes dx
to both inputs (no op)."""
RMSNORM_GRAD_OPS = 7
"""RMSNorm's backward per element: dxh = dy g (1), dg += dy xh with xh = x rstd recomputed (2),
the row mean of dxh xh (1), dx = (dxh - xh mean) rstd (3)."""
SOFTMAX_GRAD_OPS = 4
"""Softmax's backward per element: y dy (1), its row sum (1), dy - sum (1), times y (1)."""

_LAYERNORM = _Norm(LAYERNORM_OPS, weight_vectors=2, stats=2, grad_ops=LAYERNORM_GRAD_OPS)
"""LN: gamma and beta; stats sum x and sum x^2 (kept: mean and rstd)."""
_RMSNORM = _Norm(RMSNORM_OPS, weight_vectors=1, stats=1, grad_ops=RMSNORM_GRAD_OPS)
"""RMSNorm (Llama's, T5's LayerNorm): gamma only; stat sum x^2 (kept: rstd)."""
layernorm_cost = _LAYERNORM.cost
rmsnorm_cost = _RMSNORM.cost

LAYERNORM = _LAYERNORM.kind(KernelKind.LAYERNORM, Op.LAYER_NORM)
RMSNORM = _RMSNORM.kind(KernelKind.RMSNORM, Op.RMS_NORM)


# --- softmax over the last dim ------------------------------------------------------------------


def softmax_cost(p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
    """softmax over the last dim: `_rowwise` with ops = SOFTMAX_OPS, stats = 2 (max, sum)."""
    return _rowwise(p["rows"], p["dim"], h, w, ctx, ops=SOFTMAX_OPS, stats=2)


SOFTMAX = KindDef(
    kind=KernelKind.SOFTMAX,
    params={"rows": "int+", "dim": "int+"},
    flops=lambda p: p["rows"] * p["dim"] * SOFTMAX_OPS,
    weight_elems=lambda p: 0,
    in_edge="N",
    out_edge="S",
    cost=softmax_cost,
    shapes=rowwise_shapes,
    tile_split=_ROWWISE_SPLIT,
    chunks_over_rows=True,
    tokens="rows",
    decode=lambda p, h, w, ctx, B: _rowwise_decode(
        B, p["dim"], h, w, ctx, ops=SOFTMAX_OPS, stats=2
    ),
    grad=GradRule(
        flops=lambda p: p["rows"] * p["dim"] * SOFTMAX_GRAD_OPS,
        saved_elems=lambda p: p["rows"] * p["dim"],  # y
    ),
)


# --- elementwise: out[rows, dim] = op(in_1, ..., in_inputs) --------------------------------------


def elementwise_cost(p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
    """op(in_1..in_k): `_rowwise` with ops = ELEMENTWISE_OPS[op], inputs = k, no statistics."""
    return _rowwise(
        p["rows"], p["dim"], h, w, ctx, ops=ELEMENTWISE_OPS[p["op"]], inputs=p["inputs"]
    )


def _lower_elementwise(n: Node, b: int) -> dict[str, object] | None:
    out = n.outputs[0]
    if not out.type.rank:  # a scalar op: generic
        return None
    if n.op is Op.GELU:  # a GELU names its formula
        op = "gelu_tanh" if n.attr("approximate") == "tanh" else "gelu_erf"
    else:
        op = n.op.value
    return {
        "rows": rows_per_sample(out, b),
        "dim": out.type.shape[-1],
        "op": op,
        "inputs": sum(not v.is_const for v in n.inputs),
    }


ELEMENTWISE = KindDef(
    kind=KernelKind.ELEMENTWISE,
    params={"rows": "int+", "dim": "int+", "op": "str", "inputs": "int+"},
    check=one_of("op", ELEMENTWISE_OPS),
    flops=lambda p: p["rows"] * p["dim"] * ELEMENTWISE_OPS[str(p["op"])],
    weight_elems=lambda p: 0,
    in_edge="N",
    out_edge="S",
    cost=elementwise_cost,
    shapes=rowwise_shapes,
    tile_split=_ROWWISE_SPLIT,
    chunks_over_rows=True,
    lowers=frozenset(
        {
            Op.ADD,
            Op.SUB,
            Op.MUL,
            Op.DIV,
            Op.MAX,
            Op.MIN,
            Op.WHERE,
            Op.GELU,
            Op.TANH,
            Op.RELU,
            Op.SIGMOID,
            Op.NEG,
            Op.EXP,
            Op.SQRT,
        }
    ),
    lower=_lower_elementwise,
    tokens="rows",
    decode=lambda p, h, w, ctx, B: _rowwise_decode(
        B, p["dim"], h, w, ctx, ops=ELEMENTWISE_OPS[p["op"]], inputs=p["inputs"]
    ),
    # the derivative costs what the op did, once per input; the inputs are kept for it
    grad=GradRule(
        flops=lambda p: p["rows"] * p["dim"] * ELEMENTWISE_OPS[str(p["op"])] * p["inputs"],
        saved_elems=lambda p: p["rows"] * p["dim"] * p["inputs"],
    ),
)
