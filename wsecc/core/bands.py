"""Layers in full-width bands: an exact layout for a run of layers that the placers do not pack.

A system's group over several systems (`wsecc.core.partition`) is a run of layers of the same
kinds (Llama 3.1 70B: 16 or 17 layers of nine kernels a system). Its regions, sized at 85-90%
of the wafer, leave the placers little room: neither the greedy placer nor CP-SAT in its
budget packed one of the 70B's five groups (bench/RESULTS.md, issue 30). Yet one layout packs
such a run by construction: every layer in a band of `h` rows across the program rectangle,
its kernels side by side, each as narrow as its SRAM allows at that height; the bands stacked
top to bottom in layer order, serpentine (even bands left to right, odd ones right to left
within the columns they use, so that each layer's last kernel sits above the next layer's
first); the kernels before the
first layer and after the last (the final norm, the head) side by side in the rows below the
bands. `band_layout` takes the tallest bands with which all of this fits.

It is a layout, not an optimum: each kernel first takes the narrowest width that fits at the
band's height (its fullest PE); with `batch` (generate mode) the columns a band leaves free
then go, a few at a time, to the kernel whose decode step (`KindDef.decode`) they shorten the
most per column (`_widen`: greedy, not sizing's balance over the whole program). Placement
uses the layout only when every fill failed to pack (`wsecc.core.flow.place_and_route`).
"""

from __future__ import annotations

from collections.abc import Sequence

from wsecc.core.layers import find_layers
from wsecc.kernels import Kernel, KernelGraph
from wsecc.kernels.costs import CostContext, cost_at
from wsecc.place.problem import Rect


def narrowest(kernel: Kernel, h: int, ctx: CostContext, most: int) -> int | None:
    """The fewest columns (at most `most`) on which `kernel`'s fullest PE fits a PE's SRAM at
    `h` rows, or None."""
    limit = ctx.target.sram.bytes_per_pe
    for w in range(1, most + 1):
        if cost_at(kernel, h, w, ctx).sram.total <= limit:
            return w
    return None


def _row(kernels: Sequence[Kernel], h: int, ctx: CostContext, width: int) -> list[int] | None:
    """Each kernel's narrowest width at `h` rows, if together they fit `width` columns."""
    widths: list[int] = []
    for k in kernels:
        w = narrowest(k, h, ctx, width - sum(widths))
        if w is None:
            return None
        widths.append(w)
    return widths


def band_layout(
    kg: KernelGraph, ctx: CostContext, batch: int | None = None
) -> dict[str, Rect] | None:
    """Every kernel of `kg` in a band layout (module doc) on `ctx.target`'s program rectangle,
    costed in `ctx` (its chunk and buffering), the tallest bands first, each band's free
    columns given to its kernels' decode steps of `batch` sequences (None: left free); None
    when `kg` has no two layers or no band height fits."""
    layers = find_layers([k.kind for k in kg.kernels])
    if layers is None or len(layers) < 2:
        return None
    fab = ctx.target.fabric
    H, W = fab.program_height, fab.program_width
    n = len(layers)
    others = [*kg.kernels[: layers.start], *kg.kernels[layers.end :]]
    for h in range(H // n, 0, -1):
        rects = _bands(kg, layers.spans, h, ctx, W, batch)
        if rects is None:
            continue
        rest = H - n * h
        if others:
            widths = _row(others, rest, ctx, W) if rest else None
            if widths is None:
                continue
            x = 0
            for k, w in zip(others, widths, strict=True):
                rects[k.name] = Rect(x, n * h, w, rest)
                x += w
        return rects
    return None


def _bands(
    kg: KernelGraph,
    spans: Sequence[tuple[int, int]],
    h: int,
    ctx: CostContext,
    width: int,
    batch: int | None,
) -> dict[str, Rect] | None:
    """Each layer (`spans` of `kg.kernels`) in a band of `h` rows, serpentine, or None."""
    rects: dict[str, Rect] = {}
    for i, (a, b) in enumerate(spans):
        kernels = kg.kernels[a:b]
        widths = _row(kernels, h, ctx, width)
        if widths is None:
            return None
        if batch is not None:
            widths = _widen(kernels, widths, h, ctx, width, batch)
        x, used = 0, sum(widths)
        for k, w in zip(kernels, widths, strict=True):
            left = x if i % 2 == 0 else used - x - w  # mirrored within the columns it uses
            rects[k.name] = Rect(left, i * h, w, h)
            x += w
    return rects


WIDEN_LOOKAHEAD = 64
"""Columns `_widen` looks ahead for a kernel whose decode step a single column does not shorten
(tile sizes change at breakpoints only)."""


def _widen(
    kernels: Sequence[Kernel],
    widths: list[int],
    h: int,
    ctx: CostContext,
    width: int,
    batch: int,
) -> list[int]:
    """`widths` with the band's free columns given, step by step, to the kernel whose decode
    step of `batch` sequences the fewest further columns shorten the most per column."""
    widths = list(widths)

    def step(i: int, w: int) -> int:
        k = kernels[i]
        decode = k.spec.decode
        assert decode is not None  # generate mode's kernels all have one (generation_kernels)
        return int(decode(k.params, h, w, ctx, batch).latency)

    now = [step(i, w) for i, w in enumerate(widths)]
    spare = width - sum(widths)
    while spare > 0:
        best: tuple[float, int, int, int] | None = None  # (gain per column, i, columns, latency)
        for i in range(len(kernels)):
            for more in range(1, min(spare, WIDEN_LOOKAHEAD) + 1):
                lat = step(i, widths[i] + more)
                if lat < now[i]:
                    gain = (now[i] - lat) / more
                    if best is None or gain > best[0]:
                        best = (gain, i, more, lat)
                    break
        if best is None:
            break
        _, i, more, lat = best
        widths[i] += more
        now[i] = lat
        spare -= more
    return widths


__all__ = ["band_layout", "narrowest"]
