"""Cost models: SRAM per PE and cycles per sample of a kernel on an h x w region.

This module is the machinery the kinds' cost models share (`KernelCost`, `CostContext`, the
candidate-shape helpers) and `kernel_cost`, which evaluates a kernel's model. Each kind's model
is one plain function in its definition (`wsecc.kernels.kinds.<family>`), stating the mapping it
assumes and its formulas; `docs/cost-models.md` walks through the same formulas with the hardware
sources. The ISPD 2020 contest's kinds (conv, dblock, cblock; formulas in `wsecc.kernels.conv`)
size by execution parameters rather than rows and columns, so their definitions list a `frontier`
of shapes per stage time instead of candidate `shapes`.

Notation (integers; "per sample" = one sequence; cdiv(a, b) = ceil(a / b)):

    h, w    region rows and columns
    sb, ab  storage / accumulate bytes per element: fp32 4/4, mixed 2/4, fp16 2/2
    f       target.flops_per_cycle[precision]     per PE, FMAC path (1 FMA = 2 flops)
    v       target.vector_ops_per_cycle[precision] per PE, elementwise ops
    L       target.link_bytes_per_cycle           one link direction (32 b = 4 B, docs/hardware.md §5.1)
    R       target.sram.reserved_bytes            code + runtime reserve per PE
    c       min(chunk_tokens, tokens streamed)    activations move in chunks of c tokens
    nb      chunks a stream's buffer holds: 2, double-buffered (the next chunk arrives while
            this one is computed), or 1 when `single_buffered` (a decode step's one token)

Every model reports the fullest PE's SRAM as {weights, buffers, kv, reserve = R}, the busiest PE's
compute cycles, and the busiest lane's link cycles (bytes over one PE-to-PE link direction / L).
`cycles_per_sample = max(compute, link)`: compute and fabric transfers overlap (asynchronous DSD
operations on microthreads, docs/hardware.md §6), so a stage runs at its slowest resource. Hop and ramp
latencies lengthen the pipeline fill, not the steady state, and are not charged here.
Single-buffered (`CostContext.single_buffered`), a chunk can only arrive once the one before it
is computed, so nothing overlaps: `ctx.cost` charges compute + link as the compute cycles.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from wsecc.check.bisection import least_true as least_true  # the kinds' and sizing's
from wsecc.kernels.conv import cdiv as cdiv
from wsecc.kernels.ir import ELEM_TYPE_BYTES, Kernel, KernelKind, precision
from wsecc.kernels.kind import Params
from wsecc.kernels.kind import breakpoints as breakpoints
from wsecc.kernels.kind import split_shapes as split_shapes
from wsecc.kernels.registry import KINDS
from wsecc.targets import Target
from wsecc.vocab import Precision

DEFAULT_CHUNK_TOKENS = 8
"""Tokens per streamed chunk: enough to amortise per-chunk task overhead, small enough that
double-buffered chunks stay a few KB per PE. A compiler option, not a hardware fact."""

INDEX_BYTES = ELEM_TYPE_BYTES["i32"]


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
    # per sample, the region's routed flows through its shortest side (`wsecc.core.lanes`); set by
    # sizing, which knows the flows, 0 from a kind's cost model
    edge_cycles: int = 0

    @property
    def area(self) -> int:
        return self.h * self.w

    @property
    def cycles_per_sample(self) -> int:
        return max(self.compute_cycles, self.link_cycles, self.edge_cycles)

    @property
    def flow_bytes_per_cycle_needed(self) -> float:
        """Bytes per cycle its flows (in + out) must carry to keep it busy at its own rate."""
        return (self.in_bytes_per_sample + self.out_bytes_per_sample) / self.cycles_per_sample


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: one per sizing
class TrainCosts:
    """What pipelined training adds to every kernel's forward cost (`wsecc.modes.train`):

    compute  x (1 + backward flops / forward flops)   the backward runs on the kernel's own
                                                      PEs at the rate its forward achieves there
    link     unchanged                                gradients travel the forward's lanes in
                                                      the other direction (links are full duplex)
    weights  x (sb + state_bytes) / sb                gradient accumulators and optimizer state
                                                      beside every weight
    buffers  + in_flight[k] saved_elems sb / (h w)    activations kept for the backward pass
                                                      of the samples between its forward and
                                                      backward, spread over the region
    """

    state_bytes: int  # per weight element, beside its storage bytes
    in_flight: Mapping[str, int]  # kernel name -> samples whose activations it keeps


@dataclass(frozen=True)
class CostContext:
    """Target, precision and chunking: everything a cost model reads besides the kernel
    (and, in pipelined training, `train`)."""

    target: Target
    precision: Precision
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    train: TrainCosts | None = None
    # one chunk buffer per stream, not two: what a decode step needs (one token per sequence in
    # flight, the next only after the step), chosen by generate mode over several systems when
    # the groups do not fit otherwise (`wsecc.core.partition.size_over_systems`)
    single_buffered: bool = False

    def __hash__(self) -> int:
        return self._hash

    @functools.cached_property
    def _hash(self) -> int:
        # computed once: `cost_at`'s cache hashes the context on every call, and a Target
        # hashes a dozen nested dataclasses (sizing asks for tens of thousands of shapes)
        return hash(
            (self.target, self.precision, self.chunk_tokens, self.train, self.single_buffered)
        )

    # The five numbers below are cached: the kinds' cost models read them for every shape
    # (tens of thousands per compile), and a target's per-precision table checks its key
    # with an Enum call on every lookup (a fifth of sizing's CPU before).

    @functools.cached_property
    def sb(self) -> int:
        return precision(self.precision).storage_bytes

    @functools.cached_property
    def ab(self) -> int:
        return precision(self.precision).accum_bytes

    @functools.cached_property
    def f(self) -> int:
        return self.target.flops_per_cycle[self.precision]

    @functools.cached_property
    def v(self) -> int:
        return self.target.vector_ops_per_cycle[self.precision]

    @functools.cached_property
    def L(self) -> int:  # noqa: N802 - the notation of the formulas
        return self.target.link_bytes_per_cycle

    def chunk(self, tokens: int) -> int:
        return min(self.chunk_tokens, tokens)

    @property
    def nb(self) -> int:
        """Chunks a stream's buffer holds: 2 (double-buffered), 1 when `single_buffered`."""
        return 1 if self.single_buffered else 2

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
        if self.single_buffered:  # the next chunk waits for this one's compute: no overlap
            compute += link
        return KernelCost(h, w, sram, compute, link, in_bytes, out_bytes)


# --- candidate shapes: `breakpoints` and `split_shapes` live in `wsecc.kernels.kind` (a kind's
# definition names its shapes with them); re-exported here for the kinds' cost models

# --- evaluating a kernel's model ---------------------------------------------------------------------------------

CostFn = Callable[[Params, int, int, CostContext], KernelCost]
FrontierFn = Callable[[Params, "int | None", CostContext], tuple[KernelCost, ...]]


def kernel_cost(
    kernel: Kernel,
    h: int,
    w: int,
    precision_name: Precision,
    target: Target,
    *,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    single_buffered: bool = False,
) -> KernelCost:
    """SRAM per PE and cycles per sample of `kernel` on an h x w region of `target`."""
    if h <= 0 or w <= 0:
        raise ValueError(f"{kernel.describe()}: region {h}x{w} must be at least 1x1")
    ctx = CostContext(target, precision_name, chunk_tokens, single_buffered=single_buffered)
    return cost_at(kernel, h, w, ctx)


def cost_at(kernel: Kernel, h: int, w: int, ctx: CostContext) -> KernelCost:
    """`kernel`'s cost model at h x w in `ctx`, evaluated once per (kind, params, shape,
    context): sizing's menus, the placed sizing, the SRAM map and L0 all ask for the same
    shapes, and an attention model is not free."""
    params = tuple(sorted(kernel.params.items()))
    if ctx.train is None:
        return _cost_at(kernel.kind, params, h, w, ctx)
    return _train_cost_at(kernel.kind, params, h, w, ctx, ctx.train.in_flight[kernel.name])


def costs_over(
    kernel: Kernel, rows: Sequence[int], cols: Sequence[int], ctx: CostContext
) -> list[KernelCost]:
    """`cost_at` of `kernel` at every h x w with h in `rows` and w in `cols`, row-major: a
    sizing menu's shapes (thousands per kernel), the kernel's params sorted once for all."""
    if ctx.train is not None:
        return [cost_at(kernel, h, w, ctx) for h in rows for w in cols]
    kind, params = kernel.kind, tuple(sorted(kernel.params.items()))
    return [_cost_at(kind, params, h, w, ctx) for h in rows for w in cols]


@functools.lru_cache(maxsize=1 << 16)
def _cost_at(
    kind: KernelKind, params: tuple[tuple[str, Any], ...], h: int, w: int, ctx: CostContext
) -> KernelCost:
    return KINDS[kind].cost(dict(params), h, w, ctx)


@functools.lru_cache(maxsize=1 << 16)
def _train_cost_at(
    kind: KernelKind,
    params: tuple[tuple[str, Any], ...],
    h: int,
    w: int,
    ctx: CostContext,
    in_flight: int,
) -> KernelCost:
    """The forward cost with what training adds (`TrainCosts`)."""
    d, p = KINDS[kind], dict(params)
    if d.grad is None or ctx.train is None:
        raise ValueError(f"{kind.value} kernels have no gradient rule: they cannot be trained")
    forward = replace(ctx, train=None)
    c = _cost_at(kind, params, h, w, forward)
    fwd = max(1, d.flops(p))
    s = c.sram
    sram = replace(
        s,
        weights=s.weights * (forward.sb + ctx.train.state_bytes) // forward.sb,
        buffers=s.buffers + cdiv(in_flight * d.grad.saved_elems(p) * forward.sb, h * w),
    )
    return replace(
        c, sram=sram, compute_cycles=cdiv(c.compute_cycles * (fwd + d.grad.flops(p)), fwd)
    )
