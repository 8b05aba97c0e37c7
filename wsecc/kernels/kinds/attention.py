"""`attention`: softmax(Q K^T / sqrt(d) + mask) V over `heads` heads; the projections are linear
kernels."""

from __future__ import annotations

from wsecc.ir.core import Node, Op
from wsecc.kernels.costs import CostContext, KernelCost, breakpoints, cdiv
from wsecc.kernels.ir import KernelKind
from wsecc.kernels.kind import TRANSCENDENTAL_OPS, GradRule, KindDef, Params

SCORE_OPS = 3 + TRANSCENDENTAL_OPS
"""Per attention score: running max (1), s - max (1), exp (8), running sum (1) = 11.
The 1/sqrt(d) scale is folded into Q; a padding mask adds 1 op (an add) per score."""


def attention_pairs(seq: int, causal: bool) -> int:
    """(query, key) pairs of one head: seq^2, or seq (seq + 1) / 2 under a causal mask."""
    return seq * (seq + 1) // 2 if causal else seq * seq


def _flops(p: Params) -> int:
    heads, seq, d = int(p["heads"]), int(p["seq"]), int(p["head_dim"])
    per_pair = 4 * d + SCORE_OPS + int(p["padding_mask"])  # QK^T 2d, PV 2d, softmax
    return heads * attention_pairs(seq, bool(p["causal"])) * per_pair + heads * seq * d


def attention_cost(p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
    """softmax(Q K^T + mask) V for H heads of dimension d over S tokens (online softmax).

    Mapping: heads split over columns, hw = cdiv(H, w) per column. When w > H, g = w // H
    columns share each head as query groups (each holds the head's K/V, sees every g-th query).
    A head's keys and values for the whole sequence are spread over the column's rows,
    cyclically (key j on row j mod h), sh = cdiv(S, h) per PE: K/V for the whole sequence stay
    resident, so K/V grows with S and is what makes long sequences not fit. Queries of the column,
    sq = cdiv(S, g), stream down it from the N edge; each PE scores them against its keys and
    keeps a partial (acc[d], max, sum); the partials are merged down the column (red = h > 1) and
    normalised at the bottom, leaving on the S edge. K/V enter each row on the W edge and are
    multicast along it. Cyclic keys make causal work even: the fullest PE (row 0) sees
    cdiv(sq (sh + 1), 2) of its pairs (= sq sh / 2 + sq / 2). A causal decoder needs one K/V set
    (a sample's keys are all used before the next sample's arrive, token order); a bidirectional
    encoder double-buffers it (kv_sets = 2) to load sample n+1 while sample n's queries run.

        kv      = kv_sets hw sh (2 d sb + mask sb)         keys, values, additive mask
        buffers = 2 c hw d sb                              double-buffered query chunk
                + c sh ab                                  scores of one head for one chunk
                + 2 c hw (d + 2) ab                        double-buffered partials
        pairs   = hw cdiv(sq (sh + 1), 2) if causal else hw sq sh
        compute = cdiv(4 d pairs, f)                       Q K^T and P V
                + cdiv((SCORE_OPS + mask) pairs, v)        online softmax per score
                + cdiv(hw sq (red 2 (d + 2) + d), v)       merge partials, normalise
        link    = max(cdiv(sq hw d sb, L),                 query lane (= output lane) per column
                      cdiv(2 sh H d sb, L),                K/V lane per row
                      red cdiv(sq hw (d + 2) ab, L))       partials lane per column
    """
    S, H, d = p["seq"], p["heads"], p["head_dim"]
    causal, mask = p["causal"], int(p["padding_mask"])
    sb, ab, L = ctx.sb, ctx.ab, ctx.L
    hw, g = cdiv(H, w), max(1, w // H)
    sq, sh = cdiv(S, g), cdiv(S, h)
    c = ctx.chunk(sq)
    red = int(h > 1)
    kv_sets = 1 if causal else 2
    pairs = hw * (cdiv(sq * (sh + 1), 2) if causal else sq * sh)
    return ctx.cost(
        h,
        w,
        weights=0,
        kv=kv_sets * hw * sh * (2 * d * sb + mask * sb),
        buffers=2 * c * hw * d * sb + c * sh * ab + 2 * c * hw * (d + 2) * ab,
        compute=cdiv(4 * d * pairs, ctx.f)
        + cdiv((SCORE_OPS + mask) * pairs, ctx.v)
        + cdiv(hw * sq * (red * 2 * (d + 2) + d), ctx.v),
        link=max(
            cdiv(sq * hw * d * sb, L),
            cdiv(2 * sh * H * d * sb, L),
            red * cdiv(sq * hw * (d + 2) * ab, L),
        ),
        in_bytes=3 * S * H * d * sb + mask * S * sb,
        out_bytes=S * H * d * sb,
    )


def attention_shapes(p: Params, hmax: int, wmax: int) -> tuple[list[int], list[int]]:
    """Rows: breakpoints of S. Columns: breakpoints of H, then whole multiples g H (query groups)."""
    S, H = p["seq"], p["heads"]
    groups = [H * g for g in breakpoints(S, wmax // H)] if wmax >= H else []
    return breakpoints(S, hmax), sorted(set(breakpoints(H, wmax)) | set(groups))


def _lower(n: Node, b: int) -> dict[str, object]:
    return {
        "seq": n.inputs[0].type.shape[1],
        "heads": n.attr("num_heads"),
        "head_dim": n.attr("head_dim"),
        "causal": bool(n.attr("causal")),
        "padding_mask": n.attr("mask") != "none",
    }


def _grad_flops(p: Params) -> int:
    """FlashAttention's backward: the forward keeps Q, K, V, O and each row's log-sum-exp, not
    the probabilities, so per (query, key) pair it recomputes s = q.k (2d) and p = exp(s - lse)
    (1 + TRANSCENDENTAL_OPS), then dV += p dO (2d), dP = dO.v (2d), dS = p (dP - D) (2),
    dQ += dS k (2d), dK += dS q (2d); D = rowsum(dO * O) costs 2d per query."""
    heads, seq, d = int(p["heads"]), int(p["seq"]), int(p["head_dim"])
    per_pair = 10 * d + 3 + TRANSCENDENTAL_OPS + int(p["padding_mask"])
    return heads * attention_pairs(seq, bool(p["causal"])) * per_pair + 2 * heads * seq * d


ATTENTION = KindDef(
    kind=KernelKind.ATTENTION,
    params={
        "seq": "int+",
        "heads": "int+",
        "head_dim": "int+",
        "causal": "bool",
        "padding_mask": "bool",
    },
    flops=_flops,
    weight_elems=lambda p: 0,
    in_edge="N",
    out_edge="S",
    cost=attention_cost,
    shapes=attention_shapes,
    # keys cyclic over rows; heads (or query groups of one head) of equal size over columns
    tile_split=("seq", None),
    cyclic_rows=True,
    lowers=frozenset({Op.ATTENTION}),
    lower=_lower,
    grad=GradRule(
        flops=_grad_flops,
        # Q, K, V and O, and one log-sum-exp per query and head
        saved_elems=lambda p: p["heads"] * p["seq"] * (4 * p["head_dim"] + 1),
    ),
    simulate="wsecc.sim.functional:_attention",
)
