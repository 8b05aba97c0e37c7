"""Cost models: for each kernel kind, SRAM per PE and cycles per sample on an h x w region.

One plain function per kind, each stating the mapping it assumes and its formulas; `COST_MODELS`
maps every `KernelKind` to its model (a kind without an entry is an error, never a fallthrough).
`docs/cost-models.md` walks through the same formulas with the hardware sources. The ISPD 2020
contest's kinds (conv, dblock, cblock; formulas in `wsecc.kernels.conv`) size by execution
parameters rather than rows and columns, so their models list a `frontier` of shapes per stage
time instead of candidate `shapes`.

Notation (integers; "per sample" = one sequence; cdiv(a, b) = ceil(a / b)):

    h, w    region rows and columns
    sb, ab  storage / accumulate bytes per element: fp32 4/4, mixed 2/4, fp16 2/2
    f       target.flops_per_cycle[precision]     per PE, FMAC path (1 FMA = 2 flops)
    v       target.vector_ops_per_cycle[precision] per PE, elementwise ops
    L       target.link_bytes_per_cycle           one link direction (32 b = 4 B, wafer-facts §5.1)
    R       target.sram.reserved_bytes            code + runtime reserve per PE
    c       min(chunk_tokens, tokens streamed)    activations move in chunks of c tokens

Every model reports the fullest PE's SRAM as {weights, buffers, kv, reserve = R}, the busiest PE's
compute cycles, and the busiest lane's link cycles (bytes over one PE-to-PE link direction / L).
`cycles_per_sample = max(compute, link)`: compute and fabric transfers overlap (asynchronous DSD
operations on microthreads, wafer-facts §6), so a stage runs at its slowest resource. Hop and ramp
latencies lengthen the pipeline fill, not the steady state, and are not charged here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from fractions import Fraction
from types import MappingProxyType

from wsecc.kernels.conv import (
    Conv,
    ConvShape,
    cdiv,
    conv_memory,
    convs_of,
    frontier,
    slowest_time,
)
from wsecc.kernels.ir import (
    ACTIVATIONS,
    ELEM_TYPE_BYTES,
    ELEMENTWISE_OPS,
    LAYERNORM_OPS,
    SCORE_OPS,
    SOFTMAX_OPS,
    Kernel,
    KernelKind,
    Params,
    precision,
)
from wsecc.targets import Target

DEFAULT_CHUNK_TOKENS = 8
"""Tokens per streamed chunk: enough to amortise per-chunk task overhead, small enough that
double-buffered chunks stay a few KB per PE. A compiler option, not a hardware fact."""

INDEX_BYTES = ELEM_TYPE_BYTES["i32"]


def least_true(pred: Callable[[int], bool], lo: int, hi: int) -> int:
    """The least integer x in (lo, hi] with pred(x), for pred monotone (false, then true),
    given pred(hi) true and pred(lo) false (not evaluated). Bisection: log2(hi - lo) calls."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True)
class SramBreakdown:
    """Bytes on one PE (the region's fullest)."""

    weights: int
    buffers: int
    kv: int
    reserve: int

    @property
    def total(self) -> int:
        return self.weights + self.buffers + self.kv + self.reserve

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class KernelCost:
    h: int
    w: int
    sram: SramBreakdown
    compute_cycles: int  # per sample, busiest PE
    link_cycles: int  # per sample, busiest lane
    in_bytes_per_sample: int
    out_bytes_per_sample: int

    @property
    def area(self) -> int:
        return self.h * self.w

    @property
    def cycles_per_sample(self) -> int:
        return max(self.compute_cycles, self.link_cycles)

    @property
    def flow_bytes_per_cycle_needed(self) -> float:
        """Bytes per cycle its flows (in + out) must carry to keep it busy at its own rate."""
        return (self.in_bytes_per_sample + self.out_bytes_per_sample) / self.cycles_per_sample


@dataclass(frozen=True)
class CostContext:
    """Target, precision and chunking: everything a cost model reads besides the kernel."""

    target: Target
    precision: str
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS

    @property
    def sb(self) -> int:
        return precision(self.precision).storage_bytes

    @property
    def ab(self) -> int:
        return precision(self.precision).accum_bytes

    @property
    def f(self) -> int:
        return self.target.flops_per_cycle[self.precision]

    @property
    def v(self) -> int:
        return self.target.vector_ops_per_cycle[self.precision]

    @property
    def L(self) -> int:  # noqa: N802 - the notation of the formulas
        return self.target.link_bytes_per_cycle

    def chunk(self, tokens: int) -> int:
        return min(self.chunk_tokens, tokens)

    def cost(
        self,
        h: int,
        w: int,
        *,
        weights: int,
        buffers: int,
        kv: int = 0,
        compute: int,
        link: int,
        in_bytes: int,
        out_bytes: int,
    ) -> KernelCost:
        sram = SramBreakdown(weights, buffers, kv, self.target.sram.reserved_bytes)
        return KernelCost(h, w, sram, compute, link, in_bytes, out_bytes)


# --- matmul: linear and lm_head --------------------------------------------------------------


def _matmul(
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
        buffers  = 2 c kh sb            double-buffered input chunk
                 + 2 c nw ab            double-buffered partial sums
                 + residual 2 c own sb  double-buffered residual chunk
        compute  = cdiv(2 M kh nw, f)                          MACs
                 + cdiv(M own (bias + act_ops + residual), v)  epilogue
        link     = max(cdiv(M kh sb, L),        input lane along a row
                       red cdiv(M nw ab, L),    partial sums along a column (≈ one per output)
                       cdiv(M nw sb, L))        output lane down a column
    where red = 1 if h > 1 else 0.
    """
    sb, ab, c = ctx.sb, ctx.ab, ctx.chunk(M)
    kh, nw = cdiv(K, h), cdiv(N, w)
    own = cdiv(nw, h)
    red = int(h > 1)
    epilogue = int(bias) + act_ops + int(residual)
    return ctx.cost(
        h,
        w,
        weights=(kh * nw + int(bias) * own) * sb,
        buffers=2 * c * kh * sb + 2 * c * nw * ab + int(residual) * 2 * c * own * sb,
        compute=cdiv(2 * M * kh * nw, ctx.f) + cdiv(M * own * epilogue, ctx.v),
        link=max(
            cdiv(M * kh * sb, ctx.L), red * cdiv(M * nw * ab, ctx.L), cdiv(M * nw * sb, ctx.L)
        ),
        in_bytes=M * K * sb + int(residual) * M * N * sb,
        out_bytes=M * N * sb,
    )


def linear_cost(p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
    """A linear layer with its fused epilogue: `_matmul` with M = tokens, bias, activation
    (ACTIVATIONS ops per output element) and residual add."""
    return _matmul(
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


def lm_head_cost(p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
    """The LM head: `_matmul` with M = rows, N = vocab, no epilogue. A tied head still holds its
    own copy of the table here: every region keeps its weights resident (execution model §3)."""
    return _matmul(p["rows"], p["K"], p["vocab"], h, w, ctx)


# --- attention -------------------------------------------------------------------------------


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


# --- row-wise kinds: layernorm, softmax, elementwise ---------------------------------------------


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
        buffers = 2 c dw sb (inputs + outputs)   double-buffered chunks
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
        buffers=2 * c * dw * sb * (inputs + outputs) + c * stats * ab,
        compute=cdiv(mr * dw * ops, ctx.v),
        link=max(
            cdiv(rows * dw * sb * inputs, L),
            cdiv(rows * dw * sb * outputs, L),
            allreduce * cdiv(2 * mr * stats * ab, L),
        ),
        in_bytes=rows * dim * sb * inputs,
        out_bytes=rows * dim * sb * outputs,
    )


def layernorm_cost(p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
    """LN(x + r): `_rowwise` with ops = LAYERNORM_OPS (+1 for the residual add), gamma and beta
    resident, stats = 2 (sum x, sum x^2); with a residual it reads x and r and writes both
    LN(x + r) and x + r (the residual stream), so inputs = outputs = 2."""
    res = int(p["has_residual"])
    return _rowwise(
        p["rows"],
        p["dim"],
        h,
        w,
        ctx,
        ops=LAYERNORM_OPS + res,
        weight_vectors=2,
        inputs=1 + res,
        outputs=1 + res,
        stats=2,
    )


def softmax_cost(p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
    """softmax over the last dim: `_rowwise` with ops = SOFTMAX_OPS, stats = 2 (max, sum)."""
    return _rowwise(p["rows"], p["dim"], h, w, ctx, ops=SOFTMAX_OPS, stats=2)


def elementwise_cost(p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
    """op(in_1..in_k): `_rowwise` with ops = ELEMENTWISE_OPS[op], inputs = k, no statistics."""
    return _rowwise(
        p["rows"], p["dim"], h, w, ctx, ops=ELEMENTWISE_OPS[p["op"]], inputs=p["inputs"]
    )


def rowwise_shapes(p: Params, hmax: int, wmax: int) -> tuple[list[int], list[int]]:
    return breakpoints(p["rows"], hmax), breakpoints(p["dim"], wmax)


# --- embedding ---------------------------------------------------------------------------------


def embedding_cost(p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
    """Gather: out[t] = sum of n_tables rows table[id], table[vocab, dim] resident.

    Mapping: table rows split over region rows, vh = cdiv(vocab, h); features over columns,
    dw = cdiv(dim, w). Ids (i32) enter on the W edge and are multicast to every PE; the PE row
    owning an id sends its dw slice down the column, where the n_tables lookups of a token are
    summed in flight; results leave on the S edge. Compute is charged for the worst case, all
    lookups of a sample landing on one PE row (a repeated token), so it does not shrink with h.

        weights = vh dw sb
        buffers = 2 c n_tables INDEX_BYTES + 2 c dw sb   double-buffered ids and output chunk
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
        buffers=2 * c * n * INDEX_BYTES + 2 * c * dw * sb,
        compute=cdiv(M * n * dw, ctx.v),
        link=max(cdiv(M * n * INDEX_BYTES, ctx.L), cdiv(M * dw * sb, ctx.L)),
        in_bytes=M * n * INDEX_BYTES,
        out_bytes=M * dim * sb,
    )


# --- generic fallback ------------------------------------------------------------------------


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


# --- candidate shapes ----------------------------------------------------------------------------

ShapesFn = Callable[[Params, int, int], tuple[list[int], list[int]]]

_DENSE_BELOW = 64
_THIN_RATIO = 1.03


def breakpoints(extent: int, cap: int) -> list[int]:
    """Region sizes worth trying for a dimension of `extent` split over up to `cap` PEs.

    Only v with v == cdiv(extent, cdiv(extent, v)) matter: any other v gives the same tile size
    cdiv(extent, v) as a smaller one. Above 64 the list is thinned to one value per 3% step.
    """
    out: list[int] = []
    for v in range(1, min(extent, cap) + 1):
        if v != cdiv(extent, cdiv(extent, v)):
            continue
        if v <= _DENSE_BELOW or v >= out[-1] * _THIN_RATIO:
            out.append(v)
    return out


def split_shapes(rows_param: str, cols_param: str) -> ShapesFn:
    """Candidates for a mapping that splits param `rows_param` over rows, `cols_param` over
    columns."""

    def shapes(p: Params, hmax: int, wmax: int) -> tuple[list[int], list[int]]:
        return breakpoints(p[rows_param], hmax), breakpoints(p[cols_param], wmax)

    return shapes


# --- contest convolutions ------------------------------------------------------------------------


def conv_memlimit(ctx: CostContext) -> Fraction:
    """The contest's memlimit in words: data SRAM over the storage bytes per word (the CS-1's
    16-bit words are the fp16/mixed storage type)."""
    sram = ctx.target.sram
    return Fraction(sram.bytes_per_pe - sram.reserved_bytes, ctx.sb)


def _conv_kernel_cost(
    convs: tuple[Conv, ...], s: ConvShape, h: int, w: int, ctx: CostContext
) -> KernelCost:
    """A frontier shape as an h x w region (R0: h = height; R90: h = width). Its SRAM is the
    contest memory of its fullest conv in bytes: filters as weights, the activation window as
    buffers (rounded so that the total is the exact memory rounded up)."""
    p = s.params
    mem, act = max(
        (
            conv_memory(c, p.h, p.w, ci, ki),
            Fraction((c.W + c.S - 1) * (c.H + c.R - 1) * c.K, p.w * p.h * ki),
        )
        for c, ci, ki in zip(convs, p.c, p.k, strict=True)
    )
    buffers = math.floor(act * ctx.sb)
    return ctx.cost(
        h,
        w,
        weights=math.ceil(mem * ctx.sb) - buffers,
        buffers=buffers,
        compute=s.time,
        link=0,
        in_bytes=0,
        out_bytes=0,
    )


def conv_frontier(kind: str) -> FrontierFn:
    """The contest model's menu: every non-dominated shape with time <= T (no limit: T = None)
    and memory <= the target's words per PE, in R0 and R90 where each fits the program rectangle
    (`wsecc.kernels.conv.frontier`). Cycles are the contest's time units; flows cost nothing."""

    def shapes(p: Params, T: int | None, ctx: CostContext) -> tuple[KernelCost, ...]:
        convs = convs_of(kind, p)
        fab = ctx.target.fabric
        dt = slowest_time(convs) if T is None else T
        out = []
        for s in frontier(
            convs, p["H"], p["W"], dt, conv_memlimit(ctx), (fab.program_width, fab.program_height)
        ):
            for h, w in dict.fromkeys([(s.height, s.width), (s.width, s.height)]):
                if h <= fab.program_height and w <= fab.program_width:
                    out.append(_conv_kernel_cost(convs, s, h, w, ctx))
        return tuple(out)

    return shapes


def conv_cost(kind: str) -> CostFn:
    """The contest model on a fixed h x w region: the fastest parameters whose rectangle fits it
    (R0 or R90) within the target's words per PE — the least T whose frontier has such a shape.
    Raises ValueError when no parameters fit the region."""
    front = conv_frontier(kind)

    def cost(p: Params, h: int, w: int, ctx: CostContext) -> KernelCost:
        def fitting(T: int) -> list[KernelCost]:
            return [c for c in front(p, T, ctx) if c.h <= h and c.w <= w]

        hi = slowest_time(convs_of(kind, p))
        if not fitting(hi):
            raise ValueError(
                f"no execution parameters of {kind} {dict(p)} fit a {h}x{w} region within "
                f"{conv_memlimit(ctx)} words per PE"
            )
        T = least_true(lambda t: bool(fitting(t)), 0, hi)  # times are >= 1
        return min(fitting(T), key=lambda c: (c.compute_cycles, c.sram.total, c.area))

    return cost


# --- the table ---------------------------------------------------------------------------------

CostFn = Callable[[Params, int, int, CostContext], KernelCost]
FrontierFn = Callable[[Params, "int | None", CostContext], tuple[KernelCost, ...]]


@dataclass(frozen=True)
class CostModel:
    """A kind's cost at a region shape, and its menu of shapes for sizing: either `shapes`
    (candidate row and column counts, each costed) or `frontier` (the model lists its own
    non-dominated shapes within a stage time: for models whose parameters are not the region's
    rows and columns, like the contest's convolutions)."""

    cost: CostFn
    shapes: ShapesFn | None = None  # candidate (rows, columns) given the largest allowed h and w
    frontier: FrontierFn | None = None


COST_MODELS: Mapping[KernelKind, CostModel] = MappingProxyType(
    {
        KernelKind.LINEAR: CostModel(linear_cost, split_shapes("K", "N")),
        KernelKind.LM_HEAD: CostModel(lm_head_cost, split_shapes("K", "vocab")),
        KernelKind.ATTENTION: CostModel(attention_cost, attention_shapes),
        KernelKind.LAYERNORM: CostModel(layernorm_cost, rowwise_shapes),
        KernelKind.SOFTMAX: CostModel(softmax_cost, rowwise_shapes),
        KernelKind.ELEMENTWISE: CostModel(elementwise_cost, rowwise_shapes),
        KernelKind.EMBEDDING: CostModel(embedding_cost, split_shapes("vocab", "dim")),
        KernelKind.GENERIC: CostModel(generic_cost, split_shapes("elements", "elements")),
        **{
            kind: CostModel(conv_cost(kind.value), frontier=conv_frontier(kind.value))
            for kind in (KernelKind.CONV, KernelKind.DBLOCK, KernelKind.CBLOCK)
        },
    }
)


def cost_model(kind: KernelKind) -> CostModel:
    if kind not in COST_MODELS:
        raise KeyError(f"no cost model for kernel kind {kind.value!r}")
    return COST_MODELS[kind]


def kernel_cost(
    kernel: Kernel,
    h: int,
    w: int,
    precision_name: str,
    target: Target,
    *,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
) -> KernelCost:
    """SRAM per PE and cycles per sample of `kernel` on an h x w region of `target`."""
    if h <= 0 or w <= 0:
        raise ValueError(f"{kernel.describe()}: region {h}x{w} must be at least 1x1")
    ctx = CostContext(target, precision_name, chunk_tokens)
    return cost_model(kernel.kind).cost(kernel.params, h, w, ctx)
