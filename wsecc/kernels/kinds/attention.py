"""`attention`: softmax(Q K^T / sqrt(d) + bias + mask) V over `heads` heads, K and V from
`kv_heads` heads (grouped-query attention when fewer), q and k rotated first when `rotary_dim` > 0
(rotary position embedding), a constant per-head bias [heads, S, S] added when `bias` (MPNet's
relative position bias), the scores soft-capped to c tanh(s / c) when `softcap` (Gemma 2); the
projections are linear kernels."""

from __future__ import annotations

from wsecc.ir.core import Node, Op
from wsecc.kernels.costs import CostContext, KernelCost, breakpoints, cdiv
from wsecc.kernels.decode import DecodeCost, multicast, reduce
from wsecc.kernels.ir import KernelKind
from wsecc.kernels.kind import TRANSCENDENTAL_OPS, GradRule, KindDef, Params

SCORE_OPS = 3 + TRANSCENDENTAL_OPS
"""Per attention score: running max (1), s - max (1), exp (8), running sum (1) = 11.
The 1/sqrt(d) scale is folded into Q; a padding or full mask adds 1 op (an add) per score, and so
does ALiBi's bias (slope × key position: the product is formed once per cached key and head, the add
per score) and a bias operand (its element read from SRAM with the score: the add)."""


SOFTCAP_OPS = 2 + TRANSCENDENTAL_OPS
"""Per soft-capped score (Gemma 2's c·tanh(s / c)): s × (1 / c) (1), tanh (8, a transcendental
as exp), × c (1) = 10."""


def _bias_ops(p: Params) -> int:
    """Ops per score the mask's add (padding or full), ALiBi's add and the bias operand's add
    take."""
    return int(p["padding_mask"] or p["full_mask"]) + int(p["alibi"]) + int(p["bias"])


def _score_ops(p: Params) -> int:
    """Ops per score: the online softmax, the soft-cap, the mask's add and ALiBi's add."""
    return SCORE_OPS + SOFTCAP_OPS * int(p.get("softcap", False)) + _bias_ops(p)


ROTARY_OPS = 3
"""Per rotated element: x cos (1), rotate(x) sin (1; rotate is a signed move), the sum (1)."""


def _rotated(p: Params) -> int:
    """Elements rotated per sample: the rotary dims of every query and key head."""
    return int(p["rotary_dim"]) * int(p["seq"]) * (int(p["heads"]) + int(p["kv_heads"]))


def attention_pairs(seq: int, causal: bool) -> int:
    """(query, key) pairs of one head: seq^2, or seq (seq + 1) / 2 under a causal mask."""
    return seq * (seq + 1) // 2 if causal else seq * seq


def _flops(p: Params) -> int:
    heads, seq, d = int(p["heads"]), int(p["seq"]), int(p["head_dim"])
    per_pair = 4 * d + _score_ops(p)  # QK^T 2d, PV 2d, softmax
    pairs = heads * attention_pairs(seq, bool(p["causal"]))
    return pairs * per_pair + heads * seq * d + ROTARY_OPS * _rotated(p)


def attention_cost(p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
    """softmax(Q K^T + mask) V for H heads of dimension d over S tokens (online softmax), K and V
    from Hk = kv_heads heads (each serving g_kv = H / Hk query heads), q and k rotated first over
    their first rd = rotary_dim dims when rd > 0; with ALiBi (alibi) each score also gets its
    head's slope × its key's position added (one op, in `_score_ops`: ops). A padding mask
    (mask) is one element per key, kept with the key; a full mask (full: one element per
    (query, key) pair, Megatron's) enters each row on the W edge with its keys' K/V, the row's
    sh columns of the mask for every query, multicast along the row; each PE keeps the rows of
    the query chunk in flight, double-buffered. A bias operand (bias: a constant [H, S, S],
    MPNet's relative position bias) is held like a weight: each PE keeps the elements its
    scores need, its hw heads x the sq queries of its column x its sh keys, loaded once, so it
    adds no flow; one op per score (the add, in `_score_ops`). A relative-position bias is a
    Toeplitz table (a function of key - query) that could be held as 2S - 1 values per head;
    the kernel holds the general table, which is what the IR's operand is.

    Mapping: heads split over columns, hw = cdiv(H, w) per column, which need
    kw = cdiv(hw, g_kv) K/V heads (at least 1). When w > H, g = w // H
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
    In generation the region keeps the K/V cache of every sequence in flight,
    Bs = cache_sequences of them (1 outside generate mode), up to S positions each.
    Rotary (rot = rd > 0): each PE rotates its resident keys once per sample, keeping the cos and
    sin rows of those keys' positions; a query chunk's cos and sin rows travel down the column
    with it, and the column's first row rotates the queries (ROTARY_OPS per element).

        kv      = Bs kv_sets kw sh (2 d sb + mask sb)      keys, values, additive mask
        weights = rot 2 sh rd sb                           cos and sin rows of its keys
                + bias hw sq sh sb                         its part of the bias operand
        buffers = nb c hw d sb                             double-buffered query chunk
                + rot nb c 2 rd sb                         the chunk's cos and sin rows
                + c sh ab                                  scores of one head for one chunk
                + nb c hw (d + 2) ab                       double-buffered partials
                + full nb c sh sb                          the chunk's full-mask rows
                                                           (nb = 2; 1 single-buffered)
        pairs   = hw cdiv(sq (sh + 1), 2) if causal else hw sq sh
        compute = cdiv(4 d pairs, f)                       Q K^T and P V
                + cdiv(ops pairs, v)                       online softmax per score
                + cdiv(hw sq (red 2 (d + 2) + d), v)       merge partials, normalise
                + rot cdiv(ROTARY_OPS rd (sq hw + sh kw), v)   rotate queries and keys
        link    = max(cdiv(sq (hw d + rot 2 rd) sb, L),    query lane (and its table rows)
                      cdiv(sh (2 Hk d + full S) sb, L),    K/V (and full-mask) lane per row
                      red cdiv(sq hw (d + 2) ab, L))       partials lane per column
    """
    S, H, d = p["seq"], p["heads"], p["head_dim"]
    Hk, rd = p["kv_heads"], p["rotary_dim"]
    causal, mask, rot = p["causal"], int(p["padding_mask"]), int(rd > 0)
    full, bias = int(p["full_mask"]), int(p["bias"])
    sb, ab, L = ctx.sb, ctx.ab, ctx.L
    hw, g = cdiv(H, w), max(1, w // H)
    kw = max(1, cdiv(hw, H // Hk))
    sq, sh = cdiv(S, g), cdiv(S, h)
    c = ctx.chunk(sq)
    red = int(h > 1)
    kv_sets = 1 if causal else 2
    pairs = hw * (cdiv(sq * (sh + 1), 2) if causal else sq * sh)
    return ctx.cost(
        h,
        w,
        weights=rot * 2 * sh * rd * sb + bias * hw * sq * sh * sb,
        kv=p["cache_sequences"] * kv_sets * kw * sh * (2 * d * sb + mask * sb),
        buffers=ctx.nb * c * hw * d * sb
        + rot * ctx.nb * 2 * c * rd * sb
        + c * sh * ab
        + ctx.nb * c * hw * (d + 2) * ab
        + full * ctx.nb * c * sh * sb,
        compute=cdiv(4 * d * pairs, ctx.f)
        + cdiv(_score_ops(p) * pairs, ctx.v)
        + cdiv(hw * sq * (red * 2 * (d + 2) + d), ctx.v)
        + rot * cdiv(ROTARY_OPS * rd * (sq * hw + sh * kw), ctx.v),
        link=max(
            cdiv(sq * (hw * d + rot * 2 * rd) * sb, L),
            cdiv(sh * (2 * Hk * d + full * S) * sb, L),
            red * cdiv(sq * hw * (d + 2) * ab, L),
        ),
        in_bytes=S * (H + 2 * Hk) * d * sb + mask * S * sb + full * S * S * sb,
        out_bytes=S * H * d * sb,
    )


def attention_decode(p: Params, h: int, w: int, ctx: CostContext, B: int) -> DecodeCost:
    """One decode step of `attention_cost`'s mapping with the cache full: B new queries (one per
    sequence) against the S cached positions of their sequence.

    Each query (rotated by the column's first row) and its head's share of the region go down
    the column; the new key and value are appended on row (position mod h), entering on the W
    edge; each PE scores the query against its sh = cdiv(S, h) cached keys of each of its hw
    heads and keeps a partial, merged down the column (the chain or a two-level tree, whichever
    is faster, `wsecc.kernels.decode.reduce`) and normalised at the bottom, on the S edge:

        pairs     = B hw sh
        cache     = cdiv(4 d pairs, f) + cdiv(ops pairs, v)
                  + rot cdiv(ROTARY_OPS rd B (hw + kw), v)      rotate the query and new key
        reduction = reduce(h, B hw (d + 2) ab) + cdiv(B hw (2 (d + 2) + d), v)   merge, normalise
        broadcast = max(multicast(h, B hw (d + rot 2 rd) sb),   query down the column
                        multicast(w, 2 B Hk d sb))              new K/V along its row
    The busiest PE reads its cached keys and values: bytes_read = B kw sh 2 d sb."""
    S, H, d = p["seq"], p["heads"], p["head_dim"]
    Hk, rd = p["kv_heads"], p["rotary_dim"]
    rot = int(rd > 0)
    sb, ab = ctx.sb, ctx.ab
    hw = cdiv(H, w)
    kw = max(1, cdiv(hw, H // Hk))
    sh = cdiv(S, h)
    pairs = B * hw * sh
    return DecodeCost(
        cache=cdiv(4 * d * pairs, ctx.f)
        + cdiv(_score_ops(p) * pairs, ctx.v)
        + rot * cdiv(ROTARY_OPS * rd * B * (hw + kw), ctx.v),
        reduction=reduce(ctx, h, B * hw * (d + 2) * ab).cycles
        + cdiv(B * hw * (2 * (d + 2) + d), ctx.v),
        broadcast=max(
            multicast(ctx, h, B * hw * (d + rot * 2 * rd) * sb),
            multicast(ctx, w, 2 * B * Hk * d * sb),
        ),
        bytes_read=B * kw * sh * 2 * d * sb,
        flops=B * H * S * (4 * d + _score_ops(p)),
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
        "kv_heads": n.attr("kv_heads", n.attr("num_heads")),
        "head_dim": n.attr("head_dim"),
        "rotary_dim": n.attr("rotary_dim", 0),
        "causal": bool(n.attr("causal")),
        "padding_mask": n.attr("mask") in ("key_padding", "key_length"),
        "full_mask": n.attr("mask") == "full",
        "alibi": bool(n.attr("alibi", ())),
        "bias": bool(n.attr("has_bias", False)),
        "softcap": bool(n.attr("softcap", 0.0)),
    }


def _grad_flops(p: Params) -> int:
    """FlashAttention's backward: the forward keeps Q, K, V, O and each row's log-sum-exp, not
    the probabilities, so per (query, key) pair it recomputes s = q.k (2d) and p = exp(s - lse)
    (1 + TRANSCENDENTAL_OPS; a mask's add, ALiBi's add and a bias operand's add recomputed too),
    then dV += p dO (2d), dP = dO.v (2d), dS = p (dP - D) (2), dQ += dS k (2d), dK += dS q (2d);
    D = rowsum(dO * O) costs 2d per query. Rotated q and k rotate their gradients back
    (ROTARY_OPS per element); grouped K/V heads sum their query heads' dK and dV (an add per
    element, in the dK/dV accumulation above). A bias operand's gradient (dS summed over the
    samples: `wsecc.ir.rules`) is not in this count. A soft-cap is recomputed with s
    (SOFTCAP_OPS) and scales dS by 1 - tanh^2 (3: the square, the subtraction, the product)."""
    heads, seq, d = int(p["heads"]), int(p["seq"]), int(p["head_dim"])
    softcap = (SOFTCAP_OPS + 3) * int(p.get("softcap", False))
    per_pair = 10 * d + 3 + TRANSCENDENTAL_OPS + _bias_ops(p) + softcap
    pairs = heads * attention_pairs(seq, bool(p["causal"]))
    return pairs * per_pair + 2 * heads * seq * d + ROTARY_OPS * _rotated(p)


def _check(p: Params) -> str:
    if p["heads"] % p["kv_heads"]:
        return f"kv_heads {p['kv_heads']} does not divide heads {p['heads']}"
    if p["rotary_dim"] > p["head_dim"] or p["rotary_dim"] % 2:
        return f"rotary_dim {p['rotary_dim']} is not even and within head_dim {p['head_dim']}"
    return ""


ATTENTION = KindDef(
    kind=KernelKind.ATTENTION,
    params={
        "seq": "int+",
        "heads": "int+",
        "kv_heads": "int+",
        "head_dim": "int+",
        "rotary_dim": "int0",
        "causal": "bool",
        "padding_mask": "bool",
        "full_mask": "bool",
        "alibi": "bool",
        "bias": "bool",
        "softcap": "bool",
        "cache_sequences": "int+",
    },
    flops=_flops,
    # the rotary tables and the bias operand are constants the frontend folded (from positions;
    # the bias from a learned [buckets, heads] table too): held (`attention_cost`'s weights),
    # not counted as parameters
    weight_elems=lambda p: 0,
    in_edge="N",
    out_edge="S",
    cost=attention_cost,
    shapes=attention_shapes,
    # keys cyclic over rows; heads (or query groups of one head) of equal size over columns
    tile_split=("seq", None),
    cyclic_rows=True,
    check=_check,
    # kernels made before grouped K/V heads and rotary embeddings: one K/V head per head;
    # outside generate mode one sequence's K/V is resident; before ALiBi none had a bias, before
    # full masks none had one, before bias operands none had one, nor a soft-cap before Gemma 2
    defaults=lambda p: {
        "kv_heads": p.get("heads", 1),
        "rotary_dim": 0,
        "cache_sequences": 1,
        "alibi": False,
        "full_mask": False,
        "bias": False,
        "softcap": False,
    },
    lowers=frozenset({Op.ATTENTION}),
    lower=_lower,
    grad=GradRule(
        flops=_grad_flops,
        # Q, O and one log-sum-exp per query and head; K and V per K/V head
        saved_elems=lambda p: (
            p["seq"] * (p["heads"] * (2 * p["head_dim"] + 1) + 2 * p["kv_heads"] * p["head_dim"])
        ),
    ),
    tokens="seq",
    decode=attention_decode,
)
