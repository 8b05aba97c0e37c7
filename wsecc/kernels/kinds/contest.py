"""The ISPD 2020 contest's kinds: `conv`, `dblock` and `cblock` (formulas in
`wsecc.kernels.conv`). They size by execution parameters rather than rows and columns, so their
menu is a `frontier` of shapes per stage time; activations stream west to east (the contest does
not model ports), and flows cost nothing."""

from __future__ import annotations

import math
from fractions import Fraction

from wsecc.kernels.conv import (
    BLOCK_ARGS,
    CONV_ARGS,
    Conv,
    ConvShape,
    conv_memory,
    convs_of,
    frontier,
    slowest_time,
)
from wsecc.kernels.costs import CostContext, CostFn, FrontierFn, KernelCost, least_true
from wsecc.kernels.ir import KernelKind
from wsecc.kernels.kind import KindDef, Params


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


def _contest_kind(kind: KernelKind) -> KindDef:
    """A contest kernel: 2 flops per MAC of its convs, their filters as weights."""
    block = kind is not KernelKind.CONV

    def check(p: Params) -> str:
        return f"F={p['F']} is not divisible by 4" if block and p["F"] % 4 else ""

    return KindDef(
        kind=kind,
        params=dict.fromkeys(BLOCK_ARGS if block else CONV_ARGS, "int+"),
        check=check,
        flops=lambda p: 2 * sum(c.macs for c in convs_of(kind.value, p)),
        weight_elems=lambda p: sum(c.C * c.K * c.R * c.S for c in convs_of(kind.value, p)),
        in_edge="W",
        out_edge="E",
        cost=conv_cost(kind.value),
        frontier=conv_frontier(kind.value),
        tile_split=(None, None),  # the contest states no per-PE layout
    )


CONV = _contest_kind(KernelKind.CONV)
DBLOCK = _contest_kind(KernelKind.DBLOCK)
CBLOCK = _contest_kind(KernelKind.CBLOCK)
