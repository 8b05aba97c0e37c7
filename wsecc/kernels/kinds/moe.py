"""The `moe` kind: a mixture-of-experts block (router, E SwiGLU experts, combine) in one region,
every expert's weights resident, each token computed by the k experts its router chooses.

Params: tokens per sample, H (the model's width), F (each expert's hidden width), E experts, k
chosen per token, the router's form and whether the k weights are renormalised; S, the shared
expert's hidden width (0: none), and `shared` ("none", "plain", or "sigmoid": scaled per token
by sigmoid(x·w), one more router column).

Mapping on an h x w region (docs/cost-models.md, "moe"):

    bands     the columns are cut into b = min(E, w) bands of wb = w // b columns (columns past
              b wb idle); band j holds ep = cdiv(E, b) experts (expert e in band e mod b)
    experts   in its band, PE (i, c) holds, for each of its experts, W_gate[e][H_i, F_c] and
              W_up[e][H_i, F_c] (the gated_linear tiles: H over the h rows, kh = cdiv(H, h); F
              over the band's columns, ni = cdiv(F, wb)) and W_down[e][F_c, H_i]
    router    W_router[H_i, :] on column 0 of row i (kh x E)

A token's x[H_i] enters row i on the W edge and is multicast east along the whole row, through
every band (the dispatch: each band sees every token, only the chosen ones compute). Column 0
forms the router's partial logits, reduced down the column; the last row scores (softmax or
sigmoid), chooses the top k and renormalises, and multicasts each token's k expert ids and
weights back up column 0 and east along the rows (the routing decision, 2k values a token).
In a band, a chosen expert's gate/up partials are reduced down each column as gated_linear's;
the finished h = silu(g)·u (ni values per column) goes back up the column, each PE multiplies
it by its W_down[F_c, H_i] tile, and the partial y[H_i] runs east along the row through the
band, weighted by the router's weight at the band's last column and added into the row's
running sum of the token's k expert outputs (the combine), which leaves on the E edge. The
dispatch (x east along the rows) and the combine (the running sums east) are the block's
all-to-all traffic: every token crosses every band both ways, H values out and H back.

Costs per sample (M = tokens), busiest PE (a band's column 0 also holds the router):

    Mb       = cdiv(M k ep, E)          (token, choice) pairs a band computes: the router's
                                        choices spread evenly over the experts (the expected
                                        load; a skewed router's busiest band is not modelled)
    weights  = (ep 3 kh ni + kh E) sb
    buffers  = `moe_buffers` (below), with c = the chunk's tokens
    compute  = cdiv(2 M kh E, f) + cdiv(M ROUTER_OPS, v)             the router
             + cdiv(2 Mb kh 3 ni, f) + cdiv(Mb cdiv(ni, h) GATE_OPS, v) the chosen experts
             + cdiv(2 Mb kh, v)                                        weight and add (combine)
    link     = max(cdiv(M kh sb, L),            dispatch: x east along a row
                   cdiv(M 2k sb, L),            the routing decision
                   red cdiv(Mb 2 ni ab, L),     gate/up partials down a band column
                   cdiv(Mb ni sb, L),           h back up the band column
                   cdiv(M kh ab, L))            combine: the running sums east along a row
    with red = 1 if h > 1 else 0; ROUTER_OPS per token: E (TRANSCENDENTAL_OPS + 3) to score
    and normalise, E k to choose, 2k to renormalise.

A shared expert (S > 0) is spread over the whole region, every token going through it: PE
(i, c) holds S_gate, S_up [H_i, S_c] and S_down [S_c, H_i] (ns = cdiv(S, w)); its gate/up
partials reduce down the columns, h_s goes back up, and its W_down partial joins the row's
running sum; its sigmoid gate is one more column of the router's tile. It adds

    weights  + (3 kh ns + sig kh) sb          buffers: `moe_buffers`'s ns terms
    compute  + cdiv(2 M kh 3 ns, f) + cdiv(M cdiv(ns, h) GATE_OPS, v)
             + sig (cdiv(2 M kh, f) + cdiv(M (SIGMOID_OPS + kh), v))
    link     max with red cdiv(M 2 ns ab, L) and cdiv(M ns sb, L)
    decode   compute + matvec(B 3 kh ns, 3 kh ns sb) + cdiv(B cdiv(ns, h) GATE_OPS, v);
             reduction + chain(h, B 2 ns ab) + chain(w, B kh ab); broadcast + multicast(h,
             B ns sb); bytes read + 3 kh ns sb
with sig = 1 for the sigmoid-gated form.

With `bias` (gpt-oss: the router's and each expert's gate, up and down biases), a band's PE also
holds its experts' gate/up bias slices and a down-bias slice, column 0 the router's E biases:

    weights  + (ep (2 ni + kh) + E) sb
    compute  + cdiv(M E, v) + cdiv(Mb (2 cdiv(ni, h) + kh), v)
    decode   compute + cdiv(B E, v) + cdiv(cb (2 cdiv(ni, h) + kh), v); bytes read
             + (re (2 ni + kh) + E) sb

and `activation` "clamped_silu" (gpt-oss's gate) costs CLAMPED_GATE_OPS per hidden unit of a
routed expert in place of GATE_OPS.

Buffers (`moe_buffers`: what a PE must hold besides its weights while c tokens are in flight;
c = the chunk's tokens in infer mode and prefill, c = B, one token per user, in a decode step):

    x          2 c kh sb      the c tokens' x[H_i], double-buffered: every token is dispatched
                              through every band, and a band's pairs read it until the chunk
                              is done
    decision   2 c 2k sb      the c tokens' k expert ids and k weights, double-buffered: the
                              band picks its pairs from them
    partials   2 2 (ni + ns) ab   one (token, choice) pair's gate/up partial sums (ni each),
                              double-buffered: the band streams its pairs through its PEs one
                              at a time, the next pair's multiply-adds overlapping the last
                              one's reduction down the column; the shared expert (ns) likewise
                              one token at a time
    h          2 (ni + ns) sb     that pair's finished h = silu(g) u back up the column (and
                              the shared expert's h_s), double-buffered
    sums       2 c kh ab      the c tokens' running sums y[H_i] east along the row, each
                              waiting for the PE's own pair of that token, double-buffered

The gate/up partials and h do not grow with c: how many of a chunk's pairs land in a band
depends on the router (cdiv(c k ep, E) expected, up to c min(k, ep)), and streaming them one
at a time holds one pair's. The double buffer assumes a pair's multiply-adds (2 kh 3 ni / f
cycles) cover its partials' move to the next row (2 ni ab / L); where they do not, the stall
is the link term's, which the throughput already counts.

The decode step (`moe_decode`, B tokens): only the experts the step's tokens choose are read —
the busiest band computes B min(k, ep) (token, choice) pairs and reads min(ep, B k) experts'
tiles; the router reads its E columns; latency in phases as `wsecc.kernels.decode`:

    broadcast = multicast(w, B kh sb)            x east along the row, through every band
              + multicast(h, B 2k sb)            the routing decision up column 0
              + multicast(h, B ni sb)            h back up the band column
    compute   = matvec(B kh E, kh E sb) + cdiv(B ROUTER_OPS, v)
              + matvec(cb 3 kh ni, re 3 kh ni sb) + cdiv(cb cdiv(ni, h) GATE_OPS, v)
    reduction = chain(h, B E ab)                 router logits down column 0
              + chain(h, cb 2 ni ab)             gate/up partials down a band column
              + chain(wb, cb kh ab)              W_down partials along the band
              + (w - wb) hop + k relay           the combine: across the other bands, k adds
    with cb = B min(k, ep) and re = min(ep, cb).
"""

from __future__ import annotations

from wsecc.ir.core import Node, Op
from wsecc.ir.rules import MOE_ACTIVATIONS, MOE_ROUTERS, MOE_SHARED
from wsecc.kernels.conv import cdiv
from wsecc.kernels.costs import CostContext, KernelCost, breakpoints
from wsecc.kernels.decode import DecodeCost, chain, matvec, multicast, relay
from wsecc.kernels.ir import KernelKind
from wsecc.kernels.kind import TRANSCENDENTAL_OPS, KindDef, Params
from wsecc.kernels.kinds.common import rows_per_sample
from wsecc.kernels.kinds.matmul import GATE_OPS
from wsecc.kernels.kinds.rowwise import ELEMENTWISE_OPS

SIGMOID_OPS = ELEMENTWISE_OPS["sigmoid"]
CLAMPED_GATE_OPS = GATE_OPS + 5
"""gpt-oss's clamped gate per hidden unit: SwiGLU's, plus min(g, limit), u's two bounds,
alpha·g inside the sigmoid and u + 1."""


def gate_ops(p: Params) -> int:
    """Vector ops per hidden unit of a routed expert's gate (`activation`)."""
    return CLAMPED_GATE_OPS if p.get("activation", "silu") == "clamped_silu" else GATE_OPS


def _bias_ops(p: Params) -> int:
    """Per (token, choice) with `bias`: the gate, up and down biases' adds (2F + H)."""
    return (2 * p["F"] + p["H"]) * int(p.get("bias", False))


def router_ops(E: int, k: int) -> int:
    """Vector ops per token of the router after its logits: score and normalise each of the E
    (TRANSCENDENTAL_OPS + 3: an exp or sigmoid, a max, a sum, a scale), choose k (E compares
    per choice), renormalise the k (a sum and a scale each)."""
    return E * (TRANSCENDENTAL_OPS + 3) + E * k + 2 * k


def _bands(E: int, w: int) -> tuple[int, int, int]:
    """(bands, columns per band, experts per band) on w columns."""
    b = min(E, w)
    return b, w // b, cdiv(E, b)


def _shared_flops(p: Params) -> int:
    """Per token, the shared expert: 6 H S, GATE_OPS per hidden unit, the add into the sum;
    its sigmoid gate 2 H, SIGMOID_OPS and the scale H."""
    H, S = p["H"], p["S"]
    sig = int(p["shared"] == "sigmoid")
    return (6 * H * S + S * GATE_OPS + H + sig * (3 * H + SIGMOID_OPS)) if S else 0


def _moe_flops(p: Params) -> int:
    """Work per sample counting only the chosen experts: the router (2 T H E and its vector
    ops), k SwiGLU experts per token (6 H F multiply-adds as flops, GATE_OPS per hidden
    unit), the combine's weight and add per output, and the shared expert if any."""
    T, H, F, E, k = p["tokens"], p["H"], p["F"], p["E"], p["k"]
    per_choice = 6 * H * F + F * gate_ops(p) + 2 * H + _bias_ops(p)
    per_token = router_ops(E, k) + E * int(p.get("bias", False)) + k * per_choice + _shared_flops(p)
    return int(2 * T * H * E + T * per_token)


def moe_buffers(p: Params, h: int, w: int, ctx: CostContext, c: int) -> int:
    """Bytes a PE of the busiest band buffers with c tokens in flight on h x w (module doc,
    "Buffers"): the tokens' x slices, routing decisions and running sums, and one (token,
    choice) pair's gate/up partials and h (the shared expert's with them)."""
    _, wb, _ = _bands(p["E"], w)
    kh, ni, ns = cdiv(p["H"], h), cdiv(p["F"], wb), cdiv(p["S"], w)
    sb, ab = ctx.sb, ctx.ab
    return (
        2 * c * kh * sb
        + 2 * c * 2 * p["k"] * sb
        + 2 * 2 * (ni + ns) * ab
        + 2 * (ni + ns) * sb
        + 2 * c * kh * ab
    )


def moe_cost(p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
    """SRAM per PE and cycles per sample on h x w (module doc)."""
    M, H, F, E, k = p["tokens"], p["H"], p["F"], p["E"], p["k"]
    sb, ab, c = ctx.sb, ctx.ab, ctx.chunk(M)
    _, wb, ep = _bands(E, w)
    kh, ni = cdiv(H, h), cdiv(F, wb)
    Mb = cdiv(M * k * ep, E)
    red = int(h > 1)
    ns, sig = cdiv(p["S"], w), int(p["shared"] == "sigmoid")
    shared_compute = (
        cdiv(2 * M * kh * 3 * ns, ctx.f)
        + cdiv(M * cdiv(ns, h) * GATE_OPS, ctx.v)
        + sig * (cdiv(2 * M * kh, ctx.f) + cdiv(M * (SIGMOID_OPS + kh), ctx.v))
        if ns
        else 0
    )
    bias = int(p.get("bias", False))
    return ctx.cost(
        h,
        w,
        weights=(ep * 3 * kh * ni + kh * E + 3 * kh * ns + sig * kh) * sb
        + bias * (ep * (2 * ni + kh) + E) * sb,
        buffers=moe_buffers(p, h, w, ctx, c),
        compute=cdiv(2 * M * kh * E, ctx.f)
        + cdiv(M * router_ops(E, k), ctx.v)
        + cdiv(2 * Mb * kh * 3 * ni, ctx.f)
        + cdiv(Mb * cdiv(ni, h) * gate_ops(p), ctx.v)
        + cdiv(2 * Mb * kh, ctx.v)
        + bias * (cdiv(M * E, ctx.v) + cdiv(Mb * (2 * cdiv(ni, h) + kh), ctx.v))
        + shared_compute,
        link=max(
            cdiv(M * kh * sb, ctx.L),
            cdiv(M * 2 * k * sb, ctx.L),
            red * cdiv(Mb * 2 * ni * ab, ctx.L),
            cdiv(Mb * ni * sb, ctx.L),
            cdiv(M * kh * ab, ctx.L),
            red * cdiv(M * 2 * ns * ab, ctx.L),
            cdiv(M * ns * sb, ctx.L),
        ),
        in_bytes=M * H * sb,
        out_bytes=M * H * sb,
    )


def moe_decode(p: Params, h: int, w: int, ctx: CostContext, B: int) -> DecodeCost:
    """One decode step of B tokens on `moe_cost`'s mapping (module doc)."""
    H, F, E, k = p["H"], p["F"], p["E"], p["k"]
    sb, ab = ctx.sb, ctx.ab
    _, wb, ep = _bands(E, w)
    kh, ni = cdiv(H, h), cdiv(F, wb)
    cb = B * min(k, ep)
    re = min(ep, cb)
    hop = ctx.target.link.hop_latency_cycles
    ns = cdiv(p["S"], w)
    rows = E + int(p["shared"] == "sigmoid")  # the shared expert's gate: one more column
    bias = int(p.get("bias", False))
    shared = (
        DecodeCost(
            compute=matvec(ctx, B * 3 * kh * ns, 3 * kh * ns * sb)
            + cdiv(B * cdiv(ns, h) * GATE_OPS, ctx.v),
            reduction=chain(ctx, h, B * 2 * ns * ab) + chain(ctx, w, B * kh * ab),
            broadcast=multicast(ctx, h, B * ns * sb),
            bytes_read=3 * kh * ns * sb,
        )
        if ns
        else DecodeCost()
    )
    return DecodeCost(
        compute=matvec(ctx, B * kh * rows, kh * rows * sb)
        + cdiv(B * router_ops(E, k), ctx.v)
        + matvec(ctx, cb * 3 * kh * ni, re * 3 * kh * ni * sb)
        + cdiv(cb * cdiv(ni, h) * gate_ops(p), ctx.v)
        + bias * (cdiv(B * E, ctx.v) + cdiv(cb * (2 * cdiv(ni, h) + kh), ctx.v))
        + shared.compute,
        reduction=chain(ctx, h, B * rows * ab)
        + chain(ctx, h, cb * 2 * ni * ab)
        + chain(ctx, wb, cb * kh * ab)
        + (w - wb) * hop
        + k * relay(ctx)
        + shared.reduction,
        broadcast=multicast(ctx, w, B * kh * sb)
        + multicast(ctx, h, B * 2 * k * sb)
        + multicast(ctx, h, B * ni * sb)
        + shared.broadcast,
        bytes_read=(re * 3 * kh * ni + kh * rows) * sb
        + bias * (re * (2 * ni + kh) + E) * sb
        + shared.bytes_read,
        flops=2 * B * H * E
        + B * (router_ops(E, k) + E * bias)
        + B * k * (6 * H * F + F * gate_ops(p) + 2 * H + _bias_ops(p))
        + B * _shared_flops(p),
    )


def moe_shapes(p: Params, hmax: int, wmax: int) -> tuple[list[int], list[int]]:
    """Rows: H's breakpoints. Columns: whole bands, E times F's breakpoints over a band (or
    fewer columns than experts when the fabric has fewer, experts sharing bands)."""
    E = p["E"]
    if wmax < E:
        return breakpoints(p["H"], hmax), breakpoints(E, wmax)
    return breakpoints(p["H"], hmax), [E * c for c in breakpoints(p["F"], wmax // E)]


def _lower_moe(n: Node, b: int) -> dict[str, object]:
    x, wg = n.inputs[0], n.inputs[2]
    E, H, F = wg.type.shape
    return {
        "tokens": rows_per_sample(x, b),
        "H": H,
        "F": F,
        "E": E,
        "k": int(n.attr("k")),
        "router": str(n.attr("router")),
        "normalize": bool(n.attr("normalize")),
        "S": n.inputs[5].type.shape[1] if n.attr("shared", "none") != "none" else 0,
        "shared": str(n.attr("shared", "none")),
        "bias": bool(n.attr("bias", False)),
        "activation": str(n.attr("activation")),
    }


def _check(p: Params) -> str:
    if p["shared"] not in MOE_SHARED or (p["shared"] == "none") != (p["S"] == 0):
        return (
            f"shared {p['shared']!r} with S {p['S']}: one of {', '.join(MOE_SHARED)}, S 0 for none"
        )
    if p["activation"] not in MOE_ACTIVATIONS:
        return f"activation {p['activation']!r} is not one of {', '.join(MOE_ACTIVATIONS)}"
    if p["router"] not in MOE_ROUTERS:
        return f"router {p['router']!r} is not one of {', '.join(MOE_ROUTERS)}"
    return "" if p["k"] <= p["E"] else f"k {p['k']} is more than the {p['E']} experts"


MOE = KindDef(
    kind=KernelKind.MOE,
    params={
        "tokens": "int+",
        "H": "int+",
        "F": "int+",
        "E": "int+",
        "k": "int+",
        "router": "str",
        "normalize": "bool",
        "S": "int0",
        "shared": "str",
        "bias": "bool",
        "activation": "str",
    },
    check=_check,
    defaults=lambda p: {"S": 0, "shared": "none", "bias": False, "activation": "silu"},
    flops=_moe_flops,
    weight_elems=lambda p: (
        p["H"] * p["E"]
        + 3 * p["E"] * p["H"] * p["F"]
        + 3 * p["H"] * p["S"]
        + int(p["shared"] == "sigmoid") * p["H"]
        + int(p.get("bias", False)) * p["E"] * (1 + 2 * p["F"] + p["H"])
    ),
    in_edge="W",
    out_edge="E",
    cost=moe_cost,
    tile_split=("H", None),  # H over the rows; the columns hold bands of experts
    shapes=moe_shapes,
    lowers=frozenset({Op.MOE}),
    lower=_lower_moe,
    tokens="tokens",
    decode=moe_decode,
)
