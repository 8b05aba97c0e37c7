"""The `moe` kind: a mixture-of-experts block (router, E SwiGLU experts, combine) in one region,
every expert's weights resident, each token computed by the k experts its router chooses.

Params: tokens per sample, H (the model's width), F (each expert's hidden width), E experts, k
chosen per token, the router's form and whether the k weights are renormalised; S, the shared
expert's hidden width (0: none), and `shared` ("none", "plain", or "sigmoid": scaled per token
by sigmoid(x·w), one more router column).

Mapping on an h x w region (docs/cost-models.md, "moe"):

    grid      the experts sit in a grid of er x ec cells of hs = h // er rows by ws = w // ec
              columns (rows and columns past them idle); cell q = r ec + j (row r, column j)
              holds ep = cdiv(E, er ec) experts, expert e in cell e mod (er ec). `moe_grid`
              chooses er (ec = min(w, cdiv(E, er))) to hold the fewest expert weights on a PE,
              fewer cell rows on a tie: er = 1 is the bands of columns (each expert on all h
              rows), more cell rows give each expert more columns, so the region can shrink
              to what its weight bytes need rather than stop at w // E columns an expert
    experts   in its cell, PE (i, c) holds, for each of its experts, W_gate[e][H_i, F_c] and
              W_up[e][H_i, F_c] (the gated_linear tiles: H over the cell's hs rows,
              kh = cdiv(H, hs); F over its ws columns, ni = cdiv(F, ws)) and W_down[e][F_c, H_i]
    router    W_router[H_i, E_c] on PE (i, c) of cell row 0 for the first nr = min(E, w)
              columns, rc = cdiv(E, nr) of the E a PE (kh x rc)

A token's x[H_i] enters row i of cell row 0 on the W edge and is multicast east along the row,
through every cell of the row (the dispatch: each cell sees every token, only the chosen ones
compute). With er > 1 the row also turns x[H_i] south at column c_i = i mod w, down that
column to row i of every other cell row, where it is multicast west and east along the row:
the dispatch's vertical traffic spread over min(hs, w) columns, cdiv(hs, w) slices a column.
The router's columns form its partial logits, each reduced down its column of cell row 0;
the last row gathers the E logits west to column 0 (the link into it carries E - rc a token),
which scores (softmax or sigmoid), chooses the top k and renormalises, and multicasts each
token's k expert ids and weights along column 0, through every row, and east along the rows
(the routing decision, 2k values a token). In a cell, a chosen expert's gate/up partials are
reduced down each column as gated_linear's; the finished h = silu(g)·u (ni values per column)
goes back up the column, each PE multiplies it by its W_down[F_c, H_i] tile, and the partial
y[H_i] runs east along the row through the cell, is weighted by the router's weight at the
cell's last column and added into the row's running sum of the token's expert outputs (the
combine). In cell row r >= 1 that sum starts at 0 on the W edge, runs east through the row's
cells, comes back west to column c_i, and goes north up column c_i to cell row 0, each cell
row's sum added in turn as it passes (the last cell row's first); in cell row 0 it comes west
to column 0 and starts the row's running sum, which runs east through cell row 0's cells and
leaves on the E edge. The dispatch and the combine are the block's all-to-all traffic: every
token crosses every cell both ways, H values out and H back; the vertical legs move the same
slices over distinct columns. Each turn is one router's multicast (a set-valued tx, x to the
ramp and south, then west and east: "Unicast and multicast are hardware primitives",
wafer-facts.md, fabric routing); its hops cost the target's hop latency (1 cycle a hop, the same
file) and its bytes the link's L, as every kind's flows.

Costs per sample (M = tokens), busiest PE (column 0 of cell row 0 also holds a router tile):

    Mb       = cdiv(M k ep, E)          (token, choice) pairs a cell computes: the router's
                                        choices spread evenly over the experts (the expected
                                        load; a skewed router's busiest cell is not modelled)
    weights  = (ep 3 kh ni + kh rc) sb
    buffers  = `moe_buffers` (below), with c = the chunk's tokens
    compute  = cdiv(2 M kh rc, f) + cdiv(M ROUTER_OPS, v)            the router
             + cdiv(2 Mb kh 3 ni, f) + cdiv(Mb cdiv(ni, hs) GATE_OPS, v) the chosen experts
             + cdiv(2 Mb kh, v)                                        weight and add (combine)
    link     = max(cdiv(M kh sb, L),            dispatch: x east along a row
                   cdiv(M (E - rc) ab, L),      the logits gathered to column 0
                   cdiv(M 2k sb, L),            the routing decision
                   red cdiv(Mb 2 ni ab, L),     gate/up partials down a cell column
                   cdiv(Mb ni sb, L),           h back up the cell column
                   cdiv(M kh ab, L),            combine: the running sums east along a row
                   up cdiv(M vs kh sb, L),      dispatch: x south down column c_i
                   up cdiv(M vs kh ab, L))      combine: the sums north up column c_i
    with red = 1 if hs > 1 else 0, up = 1 if er > 1 else 0, vs = cdiv(hs, w) slices a column;
    ROUTER_OPS per token: E (TRANSCENDENTAL_OPS + 3) to score and normalise, E k to choose, 2k
    to renormalise. (As for every kind, flows of different colors on one link are costed by
    the largest, not their sum.)

A shared expert (S > 0) is spread over the whole region, every token going through it: cell
row r holds the r-th of er blocks of S over its w columns, PE (i, c) S_gate, S_up [H_i, S_c]
and S_down [S_c, H_i] (ns = cdiv(S, er w)); its gate/up partials reduce down the columns, h_s
goes back up, and its W_down partial joins the row's running sum; its sigmoid gate is one more
column on column 0 beside the router's tile. It adds

    weights  + (3 kh ns + sig kh) sb          buffers: `moe_buffers`'s ns terms
    compute  + cdiv(2 M kh 3 ns, f) + cdiv(M cdiv(ns, hs) GATE_OPS, v)
             + sig (cdiv(2 M kh, f) + cdiv(M (SIGMOID_OPS + kh), v))
    link     max with red cdiv(M 2 ns ab, L) and cdiv(M ns sb, L)
    decode   compute + matvec(B 3 kh ns, 3 kh ns sb) + cdiv(B cdiv(ns, hs) GATE_OPS, v);
             reduction + reduce(hs, B 2 ns ab) + reduce(w, B kh ab); broadcast +
             multicast(hs, B ns sb); bytes read + 3 kh ns sb
with sig = 1 for the sigmoid-gated form.

With `bias` (gpt-oss: the router's and each expert's gate, up and down biases), a cell's PE also
holds its experts' gate/up bias slices and a down-bias slice, column 0 the router's E biases:

    weights  + (ep (2 ni + kh) + E) sb
    compute  + cdiv(M E, v) + cdiv(Mb (2 cdiv(ni, hs) + kh), v)
    decode   compute + cdiv(B E, v) + cdiv(cb (2 cdiv(ni, hs) + kh), v); bytes read
             + (re (2 ni + kh) + E) sb

and `activation` "clamped_silu" (gpt-oss's gate) costs CLAMPED_GATE_OPS per hidden unit of a
routed expert in place of GATE_OPS.

Buffers (`moe_buffers`: what the busiest PE holds besides its weights while c tokens are in
flight; c = the chunk's tokens in infer mode and prefill, c = B, one token per user, in a
decode step):

    x          2 c kh sb      the c tokens' x[H_i], double-buffered: every token is dispatched
                              through every cell, and a cell's pairs read it until the chunk
                              is done
    decision   2 c 2k sb      the c tokens' k expert ids and k weights, double-buffered: the
                              cell picks its pairs from them
    partials   2 2 (ni + ns) ab   one (token, choice) pair's gate/up partial sums (ni each),
                              double-buffered: the cell streams its pairs through its PEs one
                              at a time, the next pair's multiply-adds overlapping the last
                              one's reduction down the column; the shared expert (ns) likewise
                              one token at a time
    h          2 (ni + ns) sb     that pair's finished h = silu(g) u back up the column (and
                              the shared expert's h_s), double-buffered
    sums       2 c kh ab      the c tokens' running sums y[H_i] east along the row, each
                              waiting for the PE's own pair of that token, double-buffered
    below      up 2 c kh ab   with er > 1, at column c_i: the c tokens' sums coming north from
                              the cell rows below, waiting for the row's own, double-buffered
                              (PE (0, 0), the router's, is one of them: c_0 = 0)

The gate/up partials and h do not grow with c: how many of a chunk's pairs land in a cell
depends on the router (cdiv(c k ep, E) expected, up to c min(k, ep)), and streaming them one
at a time holds one pair's. The double buffer assumes a pair's multiply-adds (2 kh 3 ni / f
cycles) cover its partials' move to the next row (2 ni ab / L); where they do not, the stall
is the link term's, which the throughput already counts.

The decode step (`moe_decode`, B tokens, all k choices among the block's experts; a shard's
step at c of them is "Shards" below): only the experts the step's tokens choose are read —
the busiest cell computes B min(k, ep) (token, choice) pairs and reads min(ep, B k) experts'
tiles; the router reads its E columns; latency in phases as `wsecc.kernels.decode`:

    broadcast = multicast(w, B kh sb)            x east along the row, through every cell
              + up multicast(h - hs + 1, B kh sb)   x south down column c_i
              + multicast(h, B 2k sb)            the routing decision along column 0
              + multicast(hs, B ni sb)           h back up the cell column
    compute   = matvec(B kh rr, kh rr sb) + cdiv(B ROUTER_OPS, v)
              + matvec(cb 3 kh ni, re 3 kh ni sb) + cdiv(cb cdiv(ni, e) GATE_OPS, v)
    reduction = reduce(hs, B rr ab)              router logits down its columns
              + multicast(nr, B (E - rc) ab)     gathered west to column 0
              + r(hs, cb 2 ni ab)                gate/up partials down a cell column, scattered
                                                 over the e PEs the reduction ends on
              + reduce(ws, cb kh ab)             W_down partials along the cell
              + (w - ws) hop + k relay           the combine: across the row's other cells,
                                                 k adds
              + up (2 (w - 1) + (h - hs)) hop + up (er - 1) relay
                                                 with er > 1: row i's sum back west to c_i and,
                                                 in cell row 0, on west to column 0 ((w - 1 -
                                                 c_i) + c_i = w - 1 hops for every row), north
                                                 to cell row 0 (a cell row's add each), and
                                                 east through all of the other cell row's w
                                                 columns (w - 1; the chosen cell's row is the
                                                 reduce and the w - ws hops above)
    with cb = B min(k, ep), re = min(ep, cb) and rr = rc + sig (column 0's router columns).
Each reduction is the chain or a two-level tree, whichever is faster (`reduce`); the gate/up
one's mapping r (e = hs rows for the chain, G leaders for a tree) is the one whose reduction
and gate ops together are fastest (`wsecc.kernels.decode.reductions`).

Shards (`wsecc.passes.split_moe`: a block whose experts do not fit one system). A shard holds
E of the block's R experts and a whole copy of the router: R router columns (nr = min(R, w),
rc = cdiv(R, nr), the logits gather R - rc, ROUTER_OPS of R, the router's bias R), the same
top k over all R, and its E experts on the grid above; an unsplit block is R = E. Its
throughput counts its expected share of the choices, Mb = cdiv(M k ep, R) a cell and
T k E / R a sample's flops. A shard after the first (`accumulate`) reads the running sum of
the shards before on the W edge, beside x: row i's slice y[H_i] starts the row's running sum
in place of 0 (the `sums` buffer it already holds), so it adds M H sb to the bytes in and
nothing to the buffers; the two inputs share a link at different colors (costed by the
larger, as every kind's flows).

A decode step over shards (`moe_step`, c of a token's k choices among the kernel's E
experts; the whole block's step is c = k). A token passes every shard of its block and makes
exactly k choices across them, so each shard is charged its c of one split of the k
(`choices`, set by `wsecc.core.experts.decode_charges`: the worst split that can happen over
the block's shards on their placed regions; without it c = min(k, E), every choice among its
experts, the worst for the shard alone). With c choices the busiest cell computes cb =
B min(c, ep) pairs and the combine makes c adds (c relays); with c = 0 the shard still
scores the token (its router copy), dispatches x through its cells and multicasts the
routing decision (the program is fixed; which shard computes is the router's), but has no
expert multiply-adds, no gate/up reduction and no h back up its cells, and the running sum
only passes each cell, multicast(ws, B kh ab) in place of the W_down reduce; the vertical
legs (er > 1) are charged as for c > 0, the cell rows' sums added as they pass. The decode
flops and bytes read count the same c: B c choices' work, re = min(ep, cb) experts' tiles.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from wsecc.ir.core import Node, Op
from wsecc.ir.rules import MOE_ACTIVATIONS, MOE_ROUTERS, MOE_SHARED
from wsecc.kernels.conv import cdiv
from wsecc.kernels.costs import CostContext, KernelCost, breakpoints
from wsecc.kernels.decode import DecodeCost, matvec, multicast, reduce, reductions, relay
from wsecc.kernels.ir import KernelKind
from wsecc.kernels.kind import TRANSCENDENTAL_OPS, GradRule, KindDef, Params
from wsecc.kernels.kinds.common import rows_per_sample
from wsecc.kernels.kinds.matmul import GATE_OPS
from wsecc.kernels.kinds.rowwise import ELEMENTWISE_OPS

SIGMOID_OPS = ELEMENTWISE_OPS["sigmoid"]
CLAMPED_GATE_OPS = GATE_OPS + 5
"""gpt-oss's clamped gate per hidden unit: SwiGLU's, plus min(g, limit), u's two bounds,
alpha·g inside the sigmoid and u + 1."""


def routed(p: Params) -> int:
    """R, the experts the router chooses among: E for a whole block, more for a shard (module
    doc, "Shards"); params saved before shards have no R."""
    return int(p.get("R", p["E"]))


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


@dataclass(frozen=True)
class MoeGrid:
    """The experts' grid on an h x w region (module doc, "Mapping"): er x ec cells of hs x ws
    PEs, ep experts a cell; a PE's tiles are kh of H by ni of F."""

    er: int
    ec: int
    hs: int
    ws: int
    ep: int
    kh: int
    ni: int

    @property
    def cells(self) -> int:
        return self.er * self.ec

    @property
    def vertical(self) -> int:
        """1 when the grid has more than one cell row (x and the sums cross between them)."""
        return int(self.er > 1)

    def cell(self, e: int) -> tuple[int, int]:
        """(cell row, cell column) of expert e."""
        return divmod(e % self.cells, self.ec)


def router_columns(E: int, w: int) -> tuple[int, int]:
    """(nr, rc): the router's E columns over the first nr = min(E, w) columns of cell row 0,
    rc = cdiv(E, nr) a PE."""
    nr = min(E, w)
    return nr, cdiv(E, nr)


@functools.lru_cache(maxsize=65536)
def moe_grid(E: int, H: int, F: int, h: int, w: int) -> MoeGrid:
    """The grid of E experts (H x F each) on h x w holding the fewest expert weights on a PE,
    fewer cell rows on a tie (er = 1: each expert on all h rows, bands of w // E columns)."""
    best: MoeGrid | None = None
    for er in range(1, min(E, h) + 1):
        if er > 1 and cdiv(E, er) == cdiv(E, er - 1):
            continue  # the same cell columns on fewer rows each: never fewer weights
        ec = min(w, cdiv(E, er))
        hs, ws = h // er, w // ec
        g = MoeGrid(er, ec, hs, ws, cdiv(E, er * ec), cdiv(H, hs), cdiv(F, ws))
        if best is None or g.ep * g.kh * g.ni < best.ep * best.kh * best.ni:
            best = g
    assert best is not None  # er = 1 always runs
    return best


def _grid(p: Params, h: int, w: int) -> MoeGrid:
    return moe_grid(p["E"], p["H"], p["F"], h, w)


def _shared_flops(p: Params) -> int:
    """Per token, the shared expert: 6 H S, GATE_OPS per hidden unit, the add into the sum;
    its sigmoid gate 2 H, SIGMOID_OPS and the scale H."""
    H, S = p["H"], p["S"]
    sig = int(p["shared"] == "sigmoid")
    return (6 * H * S + S * GATE_OPS + H + sig * (3 * H + SIGMOID_OPS)) if S else 0


def _moe_flops(p: Params) -> int:
    """Work per sample counting only the chosen experts: the router (2 T H R and its vector
    ops), k SwiGLU experts per token (6 H F multiply-adds as flops, GATE_OPS per hidden
    unit), the combine's weight and add per output, and the shared expert if any. A shard
    (E of the router's R experts) computes its expected share, T k E / R choices."""
    T, H, F, E, R, k = p["tokens"], p["H"], p["F"], p["E"], routed(p), p["k"]
    per_choice = 6 * H * F + F * gate_ops(p) + 2 * H + _bias_ops(p)
    per_token = router_ops(R, k) + R * int(p.get("bias", False)) + _shared_flops(p)
    return int(2 * T * H * R + T * per_token + T * k * E * per_choice // R)


def moe_buffers(p: Params, h: int, w: int, ctx: CostContext, c: int) -> int:
    """Bytes the busiest PE buffers with c tokens in flight on h x w (module doc, "Buffers"):
    the tokens' x slices, routing decisions and running sums (and, with cell rows below, the
    sums coming north), and one (token, choice) pair's gate/up partials and h (the shared
    expert's with them)."""
    g = _grid(p, h, w)
    kh, ni, ns = g.kh, g.ni, cdiv(p["S"], g.er * w)
    sb, ab = ctx.sb, ctx.ab
    return (
        2 * c * kh * sb
        + 2 * c * 2 * p["k"] * sb
        + 2 * 2 * (ni + ns) * ab
        + 2 * (ni + ns) * sb
        + 2 * c * kh * ab
        + g.vertical * 2 * c * kh * ab
    )


def moe_cost(p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
    """SRAM per PE and cycles per sample on h x w (module doc)."""
    M, H, R, k = p["tokens"], p["H"], routed(p), p["k"]
    sb, ab, c = ctx.sb, ctx.ab, ctx.chunk(M)
    g = _grid(p, h, w)
    kh, ni, ep, hs = g.kh, g.ni, g.ep, g.hs
    Mb = cdiv(M * k * ep, R)
    red, up, vs = int(hs > 1), g.vertical, cdiv(hs, w)
    ns, sig = cdiv(p["S"], g.er * w), int(p["shared"] == "sigmoid")
    _, rc = router_columns(R, w)
    shared_compute = (
        cdiv(2 * M * kh * 3 * ns, ctx.f)
        + cdiv(M * cdiv(ns, hs) * GATE_OPS, ctx.v)
        + sig * (cdiv(2 * M * kh, ctx.f) + cdiv(M * (SIGMOID_OPS + kh), ctx.v))
        if ns
        else 0
    )
    bias = int(p.get("bias", False))
    return ctx.cost(
        h,
        w,
        weights=(ep * 3 * kh * ni + kh * rc + 3 * kh * ns + sig * kh) * sb
        + bias * (ep * (2 * ni + kh) + R) * sb,
        buffers=moe_buffers(p, h, w, ctx, c),
        compute=cdiv(2 * M * kh * rc, ctx.f)
        + cdiv(M * router_ops(R, k), ctx.v)
        + cdiv(2 * Mb * kh * 3 * ni, ctx.f)
        + cdiv(Mb * cdiv(ni, hs) * gate_ops(p), ctx.v)
        + cdiv(2 * Mb * kh, ctx.v)
        + bias * (cdiv(M * R, ctx.v) + cdiv(Mb * (2 * cdiv(ni, hs) + kh), ctx.v))
        + shared_compute,
        link=max(
            cdiv(M * kh * sb, ctx.L),
            cdiv(M * (R - rc) * ab, ctx.L),
            cdiv(M * 2 * k * sb, ctx.L),
            red * cdiv(Mb * 2 * ni * ab, ctx.L),
            cdiv(Mb * ni * sb, ctx.L),
            cdiv(M * kh * ab, ctx.L),
            up * cdiv(M * vs * kh * sb, ctx.L),
            up * cdiv(M * vs * kh * ab, ctx.L),
            red * cdiv(M * 2 * ns * ab, ctx.L),
            cdiv(M * ns * sb, ctx.L),
        ),
        in_bytes=M * H * sb * (1 + int(p.get("accumulate", False))),
        out_bytes=M * H * sb,
    )


def charged_choices(p: Params) -> int:
    """The choices c a token makes among this kernel's experts that a decode step charges:
    `choices` where the step's split over a block's shards set it (`wsecc.core.experts`), else
    min(k, E), all k among them (the whole block's case, and a shard's worst alone)."""
    return int(p.get("choices", min(p["k"], p["E"])))


def moe_decode(p: Params, h: int, w: int, ctx: CostContext, B: int) -> DecodeCost:
    """One decode step of B tokens on `moe_cost`'s mapping (module doc), each token making
    `charged_choices` of its k choices among the kernel's experts."""
    return moe_step(p, h, w, ctx, B, charged_choices(p))


def moe_step(p: Params, h: int, w: int, ctx: CostContext, B: int, c: int) -> DecodeCost:
    """One decode step of B tokens on `moe_cost`'s mapping when each token makes c of its k
    choices among the kernel's E experts (module doc, "The decode step" and "Shards"): c =
    min(k, E) is the whole block's step; c = 0 a shard the step's tokens skip, which still
    scores them, dispatches x through its cells and passes the running sum on."""
    H, F, E, R, k = p["H"], p["F"], p["E"], routed(p), p["k"]
    assert 0 <= c <= min(k, E), f"{c} choices among {E} experts, top {k}"
    sb, ab = ctx.sb, ctx.ab
    g = _grid(p, h, w)
    kh, ni, ep, hs, ws, up = g.kh, g.ni, g.ep, g.hs, g.ws, g.vertical
    cb = B * min(c, ep)
    re = min(ep, cb)
    hop = ctx.target.link.hop_latency_cycles
    ns = cdiv(p["S"], g.er * w)
    nr, rc = router_columns(R, w)
    rows = rc + int(p["shared"] == "sigmoid")  # column 0's: the shared expert's gate beside
    bias = int(p.get("bias", False))

    def gate_up(nbytes: int, after: Callable[[int], int]) -> tuple[int, int]:
        """Gate/up partials of `nbytes` down a cell column (hs PEs), scattered over the e PEs
        the reduction ends on, and `after(e)`, the vector ops that follow on the busiest of
        them: of the mappings (`reductions`), the one fastest in both together, as (its
        reduction's cycles, its vector ops' cycles)."""
        r, ops = min(
            ((r, after(r.ends)) for r in reductions(ctx, hs, nbytes)),
            key=lambda ra: ra[0].cycles + ra[1],
        )  # fmt: skip
        return r.cycles, ops

    shared_r, shared_gate = gate_up(
        B * 2 * ns * ab, lambda e: cdiv(B * cdiv(ns, e) * GATE_OPS, ctx.v)
    )
    shared = (
        DecodeCost(
            compute=matvec(ctx, B * 3 * kh * ns, 3 * kh * ns * sb) + shared_gate,
            reduction=shared_r + reduce(ctx, w, B * kh * ab).cycles,
            broadcast=multicast(ctx, hs, B * ns * sb),
            bytes_read=3 * kh * ns * sb,
        )
        if ns
        else DecodeCost()
    )
    # the chosen experts' pieces; with no choice the cell's running sum only passes through
    expert_r, expert_gate = (
        gate_up(
            cb * 2 * ni * ab,
            lambda e: (
                cdiv(cb * cdiv(ni, e) * gate_ops(p), ctx.v)
                + bias * cdiv(cb * (2 * cdiv(ni, e) + kh), ctx.v)
            ),
        )
        if cb
        else (0, 0)
    )
    cell_sum = reduce(ctx, ws, cb * kh * ab).cycles if cb else multicast(ctx, ws, B * kh * ab)
    return DecodeCost(
        compute=matvec(ctx, B * kh * rows, kh * rows * sb)
        + cdiv(B * router_ops(R, k), ctx.v)
        + matvec(ctx, cb * 3 * kh * ni, re * 3 * kh * ni * sb)
        + expert_gate
        + bias * cdiv(B * R, ctx.v)
        + shared.compute,
        reduction=reduce(ctx, hs, B * rows * ab).cycles
        + multicast(ctx, nr, B * (R - rc) * ab)
        + expert_r
        + cell_sum
        + (w - ws) * hop
        + c * relay(ctx)
        + up * ((2 * (w - 1) + (h - hs)) * hop + (g.er - 1) * relay(ctx))
        + shared.reduction,
        broadcast=multicast(ctx, w, B * kh * sb)
        + up * multicast(ctx, h - hs + 1, B * kh * sb)
        + multicast(ctx, h, B * 2 * k * sb)
        + (multicast(ctx, hs, B * ni * sb) if cb else 0)
        + shared.broadcast,
        bytes_read=(re * 3 * kh * ni + kh * rows) * sb
        + bias * (re * (2 * ni + kh) + R) * sb
        + shared.bytes_read,
        flops=2 * B * H * R
        + B * (router_ops(R, k) + R * bias)
        + B * c * (6 * H * F + F * gate_ops(p) + 2 * H + _bias_ops(p))
        + B * _shared_flops(p),
    )


# --- training: the backward of `wsecc.ir.rules._moe_vjp`, the router's choice held ------------

GATE_GRAD_OPS = 4
"""Per hidden unit of an expert's backward, besides recomputing its gate (gate_ops): dh·∂h/∂g
and dh·∂h/∂u, and the two products that form ∂h/∂g from σ (as gated_linear's backward)."""


def router_grad_ops(E: int, k: int) -> int:
    """Vector ops per token of the router's backward, from the kept weights' cotangents to the
    logits': the renormalisation's (Σ dw·w, a subtract and a divide each, 4k), the scores' (the
    softmax's s·(ds − Σ ds·s) or the sigmoid's ds·s·(1 − s), 4 per expert)."""
    return 4 * E + 4 * k


def _moe_grad_flops(p: Params) -> int:
    """The backward per sample (docs/training.md, "Mixture of experts"), counting only the
    experts each token chose, as the forward does:

        router    4 T H E + T router_grad_ops(E, k)       dW_router = xᵀ dl, dx += dl W_routerᵀ
                  (+ T E: the router bias's Σ dl)
        per (token, choice) pair
                  12 H F + F (gate_ops + GATE_GRAD_OPS)   dx, dW_gate, dW_up, dW_down, dh (2 H F
                                                          each) and the gate's derivative
                  + 4 H                                   the weight's cotangent (a dot, 2 H), its
                                                          scale of dy or dz (H), the add into dx
                  (+ 2 F + H: the gate, up and down biases' sums)
        shared    12 H S + S (GATE_OPS + GATE_GRAD_OPS) + H, and with its sigmoid gate
                  7 H + SIGMOID_OPS: Σ dy·y_s (2 H), its weight's and dx's products (4 H), dy·q

    The weights' gradients accumulate in the multiply-adds of dW = xᵀ·dz over the tokens that
    chose the expert (no separate pass)."""
    T, H, F, E, k, S = p["tokens"], p["H"], p["F"], p["E"], p["k"], p["S"]
    bias = int(p.get("bias", False))
    per_choice = 12 * H * F + F * (gate_ops(p) + GATE_GRAD_OPS) + 4 * H + bias * (2 * F + H)
    sig = int(p["shared"] == "sigmoid")
    shared = 12 * H * S + S * (GATE_OPS + GATE_GRAD_OPS) + H + sig * (7 * H + SIGMOID_OPS)
    per_token = router_grad_ops(E, k) + bias * E + k * per_choice + (shared if S else 0)
    return int(4 * T * H * E + T * per_token)


def _moe_saved_elems(p: Params) -> int:
    """Activations per sample the forward keeps for the backward: x (T H: every weight's
    gradient reads it), the router's logits (T E: the scores are recomputed from them), the
    routing decision (T 2k: ids and weights), each (token, choice) pair's gate and up
    pre-activations (2F: h and its derivative are recomputed from them), the shared expert's
    (2S) and its gate's logit (1)."""
    T, F, E, k, S = p["tokens"], p["F"], p["E"], p["k"], p["S"]
    sig = int(p["shared"] == "sigmoid")
    return int(T * (p["H"] + E + 2 * k + k * 2 * F + 2 * S + sig))


MOE_GRAD = GradRule(flops=_moe_grad_flops, saved_elems=_moe_saved_elems)
"""The moe kind's training rule (`wsecc.kernels.kind.GradRule`); the tensor-level gradient it
counts is `wsecc.ir.rules._moe_vjp`."""


MAX_CELL_ROWS = 4
"""The most cell rows sizing offers (er = 1, 2, 4 dividing E): on wse3 gpt-oss-120B's block
fits a PE on 204,800 PEs with 4 cell rows (400 x 512), about what its bytes need, against
263,680 with one; more would only slow sizing."""


def moe_shapes(p: Params, hmax: int, wmax: int) -> tuple[list[int], list[int]]:
    """For each grid of er cell rows (a power of 2 dividing E, at most MAX_CELL_ROWS; er = 1
    the bands of columns) and ec = E / er cell columns: rows er times H's breakpoints over a
    cell, columns ec times F's (or, er = 1 on fewer columns than experts, experts sharing
    cells). The cost model chooses each shape's grid (`moe_grid`)."""
    E, H, F = p["E"], p["H"], p["F"]
    rows: set[int] = set(breakpoints(H, hmax))
    cols: set[int] = set(breakpoints(E, wmax) if wmax < E else [])
    er = 1
    while er <= min(MAX_CELL_ROWS, hmax) and E % er == 0:
        ec = E // er
        if ec <= wmax:
            rows.update(er * r for r in breakpoints(H, hmax // er))
            cols.update(ec * c for c in breakpoints(F, wmax // ec))
        er *= 2
    return sorted(rows), sorted(cols)


def _lower_moe(n: Node, b: int) -> dict[str, object]:
    x, wg = n.inputs[0], n.inputs[2]
    E, H, F = wg.type.shape
    return {
        "tokens": rows_per_sample(x, b),
        "H": H,
        "F": F,
        "E": E,
        "R": n.inputs[1].type.shape[1],
        "accumulate": bool(n.attr("accumulate", False)),
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
    if routed(p) < p["E"]:
        return f"R {routed(p)}: the router's experts are fewer than the {p['E']} held"
    return "" if p["k"] <= routed(p) else f"k {p['k']} is more than the {routed(p)} experts"


MOE = KindDef(
    kind=KernelKind.MOE,
    params={
        "tokens": "int+",
        "H": "int+",
        "F": "int+",
        "E": "int+",
        "R": "int+",
        "accumulate": "bool",
        "k": "int+",
        "router": "str",
        "normalize": "bool",
        "S": "int0",
        "shared": "str",
        "bias": "bool",
        "activation": "str",
    },
    check=_check,
    defaults=lambda p: {
        "S": 0,
        "shared": "none",
        "bias": False,
        "activation": "silu",
        "R": p["E"],
        "accumulate": False,
    },
    flops=_moe_flops,
    weight_elems=lambda p: (
        p["H"] * routed(p)
        + 3 * p["E"] * p["H"] * p["F"]
        + 3 * p["H"] * p["S"]
        + int(p["shared"] == "sigmoid") * p["H"]
        + int(p.get("bias", False)) * (routed(p) + p["E"] * (2 * p["F"] + p["H"]))
    ),
    in_edge="W",
    out_edge="E",
    cost=moe_cost,
    tile_split=(None, None),  # H over each cell row's rows, F over each cell's columns
    shapes=moe_shapes,
    lowers=frozenset({Op.MOE}),
    lower=_lower_moe,
    tokens="tokens",
    decode=moe_decode,
    grad=MOE_GRAD,
)
