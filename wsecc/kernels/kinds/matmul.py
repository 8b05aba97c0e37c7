"""Matmul kinds: `linear` (a fused Linear with its epilogue), `gated_linear` (SwiGLU's gate and
up projections with silu(gate) * up as their epilogue) and `lm_head`."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from wsecc.ir.core import Node, Op
from wsecc.kernels.costs import CostContext, KernelCost, cdiv
from wsecc.kernels.decode import DecodeCost, Reduction, matvec, multicast, reductions
from wsecc.kernels.ir import KernelKind
from wsecc.kernels.kind import TRANSCENDENTAL_OPS, GradRule, KindDef, Params, one_of
from wsecc.kernels.kinds.common import rows_per_sample
from wsecc.kernels.kinds.rowwise import ELEMENTWISE_OPS

ACTIVATIONS: Mapping[str, int] = MappingProxyType(
    {
        "": 0,
        "relu": 1,
        "gelu_tanh": ELEMENTWISE_OPS["gelu_tanh"],
        "gelu_erf": ELEMENTWISE_OPS["gelu_erf"],
        "tanh": TRANSCENDENTAL_OPS,  # BERT's pooler
    }
)
"""Linear epilogue activations and their vector ops per output element."""

_FUSED_ACTIVATION = {  # the fused Linear's `activation` attribute -> ACTIVATIONS key
    "none": "",
    "relu": "relu",
    "tanh": "tanh",
    "gelu": "gelu_erf",
    "gelu_tanh": "gelu_tanh",
}


def matmul_cost(
    M: int,
    K: int,
    N: int,
    h: int,
    w: int,
    ctx: CostContext,
    *,
    bias: bool = False,
    act_ops: int = 0,
    residual: bool = False,
    gated: bool = False,
) -> KernelCost:
    """y[M,N] = act(x[M,K] W[K,N] + b) + r, weights resident, K split over rows, N over columns.

    Mapping: PE (i, j) holds the tile W[K_i, N_j], kh = cdiv(K, h) by nw = cdiv(N, w). Input
    chunks x[:, K_i] enter row i on the W edge and are multicast east along the row. Partial sums
    y[:, N_j] are reduced along the column: the partial arriving from the previous PE is the
    accumulator its FMACs add into (y += x W), so the reduction costs link bandwidth, not extra
    ops. The column's nw outputs are cut into h segments, each chain ending on its own row
    (a reduce-scatter), so each PE finishes own = cdiv(nw, h) outputs (bias, activation, residual
    add); they stream down the column and leave on the S edge. A residual enters on the S edge
    (links are full duplex).

        weights  = (kh nw + bias own) sb
        buffers  = nb c kh sb            double-buffered input chunk (nb = 2; 1 single-buffered)
                 + nb c nw ab            double-buffered partial sums
                 + residual nb c own sb  double-buffered residual chunk
        compute  = cdiv(2 M kh nw, f)                          MACs
                 + cdiv(M own (bias + act_ops + residual), v)  epilogue
        link     = max(cdiv(M kh sb, L),        input lane along a row
                       red cdiv(M nw ab, L),    partial sums along a column (≈ one per output)
                       cdiv(M nw sb, L))        output lane down a column
    where red = 1 if h > 1 else 0.

    `gated` (gated_linear): W holds two matrices side by side, W_gate and W_up [K, N] each, their
    columns paired on the same PE column (column j of both on one PE), so N outputs take
    2 cdiv(N, w) weight columns per PE column: nw and own count weight columns (MACs, partial
    sums, weights), and a finished pair gives one output — the epilogue (`act_ops` per output)
    runs on own / 2 outputs and the output lane carries nw / 2 per row of x.
    """
    sb, ab, c = ctx.sb, ctx.ab, ctx.chunk(M)
    pair = 1 + int(gated)
    kh, nw = cdiv(K, h), pair * cdiv(N, w)
    own = cdiv(nw, h)
    red = int(h > 1)
    epilogue = int(bias) + act_ops + int(residual)
    return ctx.cost(
        h,
        w,
        weights=(kh * nw + int(bias) * own) * sb,
        buffers=ctx.nb * c * (kh * sb + nw * ab + int(residual) * own * sb),
        compute=cdiv(2 * M * kh * nw, ctx.f) + cdiv(M * cdiv(own, pair) * epilogue, ctx.v),
        link=max(
            cdiv(M * kh * sb, ctx.L),
            red * cdiv(M * nw * ab, ctx.L),
            cdiv(M * (nw // pair) * sb, ctx.L),
        ),
        in_bytes=M * K * sb + int(residual) * M * N * sb,
        out_bytes=M * N * sb,
    )


def matmul_decode(
    B: int,
    K: int,
    N: int,
    h: int,
    w: int,
    ctx: CostContext,
    *,
    epilogue: int = 0,
    gated: bool = False,
) -> DecodeCost:
    """One decode step of `matmul_cost`'s mapping: B tokens (one per sequence) times W[K, N].

    x[B, K_i] is multicast east along row i; each PE multiplies it by its tile (every weight
    read once, and used once per token: a matrix-vector product); the column's partials are
    reduced down its h rows and scattered over the PEs the reduction ends on (`ends`: the
    chain's h rows, each segment's chain passing all of them, or a two-level tree's G leaders,
    `wsecc.kernels.decode.reductions`), which finish their outputs and send them down the
    column to the S edge:

        compute   = matvec(B kh nw, kh nw sb) + cdiv(B own' epilogue, v)
        reduction = reduction(h, B nw ab)       the chain's or the tree's cycles
        broadcast = multicast(w, B kh sb) + multicast(h, B own' sb)
    with own' = cdiv(cdiv(nw, ends), pair) finished outputs per PE (a gated pair gives one).
    Of the mappings the step takes the fastest in all (the tree leaves more outputs to each
    leader's epilogue and out stream than the chain leaves each row), the chain on a tie."""
    return min(
        (_matmul_decode_with(B, K, N, h, w, ctx, r, epilogue, gated)
         for r in reductions(ctx, h, B * (1 + int(gated)) * cdiv(N, w) * ctx.ab)),
        key=lambda d: d.latency,
    )  # fmt: skip


def _matmul_decode_with(
    B: int, K: int, N: int, h: int, w: int, ctx: CostContext, r: Reduction, epilogue: int,
    gated: bool,
) -> DecodeCost:  # fmt: skip
    """`matmul_decode` with its column reduction mapped as `r`."""
    sb, pair = ctx.sb, 1 + int(gated)
    kh, nw = cdiv(K, h), pair * cdiv(N, w)
    out = cdiv(cdiv(nw, r.ends), pair)
    return DecodeCost(
        compute=matvec(ctx, B * kh * nw, kh * nw * sb) + cdiv(B * out * epilogue, ctx.v),
        reduction=r.cycles,
        broadcast=multicast(ctx, w, B * kh * sb) + multicast(ctx, h, B * out * sb),
        bytes_read=kh * nw * sb,
        flops=2 * B * K * N * pair + B * N * epilogue,
    )


# --- linear: y[M,N] = act(x[M,K] W[K,N] + b) + residual ------------------------------------------


def _linear_flops(p: Params) -> int:
    epilogue = int(p["has_bias"]) + int(p["residual"]) + ACTIVATIONS[str(p["activation"])]
    return int(2 * p["tokens"] * p["K"] * p["N"] + p["tokens"] * p["N"] * epilogue)


def linear_cost(p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
    """A linear layer with its fused epilogue: `matmul_cost` with M = tokens, bias, activation
    (ACTIVATIONS ops per output element) and residual add."""
    return matmul_cost(
        p["tokens"],
        p["K"],
        p["N"],
        h,
        w,
        ctx,
        bias=p["has_bias"],
        act_ops=ACTIVATIONS[p["activation"]],
        residual=p["residual"],
    )


def linear_decode(p: Params, h: int, w: int, ctx: CostContext, B: int) -> DecodeCost:
    """`matmul_decode` with the linear's epilogue (bias, activation, residual add)."""
    epilogue = int(p["has_bias"]) + ACTIVATIONS[p["activation"]] + int(p["residual"])
    return matmul_decode(B, p["K"], p["N"], h, w, ctx, epilogue=epilogue)


def _matmul_params(n: Node, b: int) -> dict[str, object]:
    """tokens, K, N and has_bias of a linear or gated linear node (x, W[K, N], ...)."""
    x, w = n.inputs[0], n.inputs[1]
    return {
        "tokens": rows_per_sample(x, b),
        "K": w.type.shape[0],
        "N": w.type.shape[1],
        "has_bias": bool(n.attr("has_bias")),
    }


def _lower_linear(n: Node, b: int) -> dict[str, object]:
    return {
        **_matmul_params(n, b),
        "activation": _FUSED_ACTIVATION[n.attr("activation")],
        "residual": False,
    }


def _linear_grad_flops(p: Params) -> int:
    """dX = dY W^T and dW = X^T dY (2 T K N each); db sums dY (T N); the activation's derivative
    costs what the activation did (T N ACTIVATIONS ops); a fused residual passes dY through."""
    T, K, N = p["tokens"], p["K"], p["N"]
    return int(4 * T * K * N + T * N * (int(p["has_bias"]) + ACTIVATIONS[str(p["activation"])]))


LINEAR_GRAD = GradRule(
    flops=_linear_grad_flops,
    # X for dW, and the pre-activation for the activation's derivative
    saved_elems=lambda p: p["tokens"] * p["K"] + int(bool(p["activation"])) * p["tokens"] * p["N"],
)


LINEAR = KindDef(
    kind=KernelKind.LINEAR,
    params={
        "tokens": "int+",
        "K": "int+",
        "N": "int+",
        "has_bias": "bool",
        "activation": "str",
        "residual": "bool",
    },
    check=one_of("activation", ACTIVATIONS),
    flops=_linear_flops,
    weight_elems=lambda p: p["K"] * p["N"] + int(p["has_bias"]) * p["N"],
    in_edge="W",
    out_edge="S",
    cost=linear_cost,
    tile_split=("K", "N"),  # W[K_i, N_j] on PE (i, j)
    lowers=frozenset({Op.LINEAR}),
    lower=_lower_linear,
    grad=LINEAR_GRAD,
    tokens="tokens",
    decode=linear_decode,
)


# --- gated_linear: y[M,N] = silu(x W_gate + b_gate) * (x W_up + b_up) (SwiGLU's first half) -----

GATE_OPS = ELEMENTWISE_OPS["sigmoid"] + 2
"""silu(g) * u per output: sigmoid (TRANSCENDENTAL_OPS + 2), * g (1), * u (1)."""
GATE_ACTIVATION_OPS = MappingProxyType(
    {
        "silu": GATE_OPS,
        "gelu": ELEMENTWISE_OPS["gelu_erf"] + 1,  # GeGLU: gelu(g) (its ops), * u (1)
        "gelu_tanh": ELEMENTWISE_OPS["gelu_tanh"] + 1,
    }
)
"""Vector ops per output of each gate activation with its product (`rules.GATES`)."""


def _gate_ops(p: Params) -> int:
    return GATE_ACTIVATION_OPS[str(p["activation"])]


def gated_linear_cost(p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
    """SwiGLU's gate and up projections as one kernel: `matmul_cost` gated (the two weight
    matrices' columns paired on each PE column), both biases, GATE_OPS per output."""
    return matmul_cost(
        p["tokens"],
        p["K"],
        p["N"],
        h,
        w,
        ctx,
        bias=p["has_bias"],
        act_ops=_gate_ops(p) + int(p["has_bias"]),  # the second bias add
        gated=True,
    )


def _gated_linear_flops(p: Params) -> int:
    T, K, N = p["tokens"], p["K"], p["N"]
    return int(4 * T * K * N + T * N * (_gate_ops(p) + 2 * int(p["has_bias"])))


def _gated_linear_grad_flops(p: Params) -> int:
    """dX = dZg W_gate^T + dZu W_up^T and dW_gate, dW_up = X^T dZ (2 T K N each, 8 T K N); the
    gate's derivative recomputes silu and sigma (GATE_OPS) and forms dZg, dZu (4) per output;
    db sums dZ (2 T N with biases)."""
    T, K, N = p["tokens"], p["K"], p["N"]
    return int(8 * T * K * N + T * N * (_gate_ops(p) + 4 + 2 * int(p["has_bias"])))


GATED_LINEAR = KindDef(
    kind=KernelKind.GATED_LINEAR,
    params={"tokens": "int+", "K": "int+", "N": "int+", "has_bias": "bool", "activation": "str"},
    check=one_of("activation", GATE_ACTIVATION_OPS),
    defaults=lambda p: {"activation": "silu"},  # kernel graphs written before GeGLU
    flops=_gated_linear_flops,
    weight_elems=lambda p: 2 * p["K"] * p["N"] + 2 * int(p["has_bias"]) * p["N"],
    in_edge="W",
    out_edge="S",
    cost=gated_linear_cost,
    tile_split=("K", "N"),  # W_gate[K_i, N_j] and W_up[K_i, N_j] on PE (i, j)
    lowers=frozenset({Op.GATED_LINEAR}),
    lower=lambda n, b: {**_matmul_params(n, b), "activation": n.attr("activation")},
    tokens="tokens",
    decode=lambda p, h, w, ctx, B: matmul_decode(
        B, p["K"], p["N"], h, w, ctx, epilogue=_gate_ops(p) + 2 * int(p["has_bias"]), gated=True
    ),
    # X for dW, and both pre-activations for the gate's derivative
    grad=GradRule(
        flops=_gated_linear_grad_flops,
        saved_elems=lambda p: p["tokens"] * (p["K"] + 2 * p["N"]),
    ),
)


# --- lm_head: logits[rows, vocab] = x[rows, K] W[K, vocab]; tied: W is the embedding table ------


LOGIT_SOFTCAP_OPS = 2 + TRANSCENDENTAL_OPS
"""Per logit of a soft-capped head (Gemma 2's final_logit_softcapping, c·tanh(y / c)): × 1/c
(1), tanh (8), × c (1) = 10, the head's epilogue."""


def _softcap_ops(p: Params) -> int:
    return LOGIT_SOFTCAP_OPS if p.get("softcap") else 0


def lm_head_cost(p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
    """The LM head: `matmul_cost` with M = rows, N = vocab, no epilogue but a soft-cap's
    (LOGIT_SOFTCAP_OPS per logit, with `softcap`). A tied head still holds its own copy of the
    table here: every region keeps its weights resident (execution model §3)."""
    return matmul_cost(p["rows"], p["K"], p["vocab"], h, w, ctx, act_ops=_softcap_ops(p))


def _lower_lm_head(n: Node, b: int) -> dict[str, object]:
    x, w = n.inputs[0], n.inputs[1]
    return {
        "rows": rows_per_sample(x, b),
        "K": w.type.shape[0],
        "vocab": w.type.shape[1],
        "tied": bool(n.attr("tied")),
        "softcap": bool(n.attr("softcap", 0.0)),
    }


LOSS_OPS = 4 + TRANSCENDENTAL_OPS
"""Softmax cross-entropy's gradient per logit, formed as the logits leave the head: running max
(1), x - max (1), exp (8), running sum (1), p = e / sum as a multiply (1); minus the one-hot
label costs one op per row, not per logit."""


def _lm_head_grad_flops(p: Params) -> int:
    """The loss's gradient over the logits (LOSS_OPS each), then dX = dL W^T and dW = X^T dL
    (2 rows K vocab each); tied, dW accumulates into the embedding's table. A soft-cap is
    recomputed per logit and scales its gradient by 1 - tanh^2 (3 more)."""
    rows, K, V = p["rows"], p["K"], p["vocab"]
    softcap = _softcap_ops(p) + 3 * bool(p.get("softcap"))
    return int(rows * V * (LOSS_OPS + softcap) + 4 * rows * K * V)


LM_HEAD = KindDef(
    kind=KernelKind.LM_HEAD,
    params={"rows": "int+", "K": "int+", "vocab": "int+", "tied": "bool", "softcap": "bool"},
    flops=lambda p: (2 * p["K"] + _softcap_ops(p)) * p["rows"] * p["vocab"],
    weight_elems=lambda p: p["K"] * p["vocab"],
    in_edge="W",
    out_edge="S",
    cost=lm_head_cost,
    tile_split=("K", "vocab"),
    lowers=frozenset({Op.LM_HEAD}),
    lower=_lower_lm_head,
    grad=GradRule(flops=_lm_head_grad_flops, saved_elems=lambda p: p["rows"] * p["K"]),
    tokens="rows",
    decode=lambda p, h, w, ctx, B: matmul_decode(
        B, p["K"], p["vocab"], h, w, ctx, epilogue=_softcap_ops(p)
    ),
    defaults=lambda p: {"softcap": False},  # heads made before Gemma 2's soft-cap: none
)
