"""Shape selection by a serpentine column floorplan: which frontier shape each kernel takes.

The sizer offers each kernel many (height, width) shapes with time ≤ Δt. Whether a Δt is
affordable depends on choosing shapes that *pack*. This module makes that choice and a witness
packing together, by dynamic programming over one family of floorplans:

- kernels in a fixed sequence (a topological order that keeps chains together);
- the sequence cut into consecutive runs, one per vertical column of width a_c (Σ a_c ≤ W);
- in a column, each kernel takes its lowest shape (R0 or R90) whose x-extent is ≤ a_c, and the
  kernels stack along y (Σ heights ≤ H), upward in even columns and downward in odd ones.

`cut_columns` is a DP over (kernels placed j, width used U):

    best[j][U + a] = min_{i<j, a} best[i][U] + cost(i, j, a)

For feasibility, cost = a (least total width). For wirelength, `_column_costs` gives

    cost(i, j, a) = Σ_{edges inside the column} |y_u − y_v|
                  + Σ_{edges leaving it} (|y_inside − y_end kernel| + a/2)

Serpentine neighbours meet at the columns' ends, where the layout levels their end kernels, so
an edge between neighbouring columns costs about the two halves. Only the widths where a
column's stacked heights change are tried. `serpentine` lays out the chosen columns exactly;
the solver scores that layout, and the shared placer refines its coordinates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from wsecc.kernels.conv import ConvShape
from wsecc.place.problem import Rect

_INF = np.iinfo(np.int64).max // 4


@dataclass(frozen=True)
class Oriented:
    """A sized shape in one orientation: R0 spans `width` along x, R90 spans `height` along x."""

    shape: ConvShape
    rot: str

    @property
    def w(self) -> int:
        return self.shape.width if self.rot == "R0" else self.shape.height

    @property
    def h(self) -> int:
        return self.shape.height if self.rot == "R0" else self.shape.width


def orientations(shapes: tuple[ConvShape, ...]) -> tuple[Oriented, ...]:
    """Each shape in R0 and R90 (one copy for a square)."""
    out = []
    for s in shapes:
        out.append(Oriented(s, "R0"))
        if s.width != s.height:
            out.append(Oriented(s, "R90"))
    return tuple(out)


@dataclass(frozen=True)
class Column:
    """Kernels sequence[start:end] stacked in a column `width` wide at x."""

    start: int
    end: int
    x: int
    width: int


@dataclass(frozen=True)
class Floorplan:
    """A shape and a rectangle per kernel (indexed like the sequence), plus the columns."""

    choices: tuple[Oriented, ...]
    rects: tuple[Rect, ...]
    columns: tuple[Column, ...]
    objective: int  # what the DP minimised: total width, or the doubled WL estimate


def lowest_tables(
    options: tuple[Oriented, ...], fabric: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """For every column width a = 0..W: the least y-extent of an option with x-extent ≤ a
    (H+1 if none, so any column holding it is over-full), and which option gives it (-1)."""
    fab_w, fab_h = fabric
    height = np.full(fab_w + 1, fab_h + 1, dtype=np.int64)
    which = np.full(fab_w + 1, -1, dtype=np.int64)
    for i, o in sorted(enumerate(options), key=lambda t: t[1].w):
        if o.w > fab_w:
            continue
        better = height[o.w :] > o.h
        height[o.w :][better] = o.h
        which[o.w :][better] = i
    return height, which


# Columns that may start at kernel i: (j, widths ascending, DP costs), j ascending.
ColumnCosts = Callable[[int], Iterator[tuple[int, np.ndarray, np.ndarray]]]
_Cuts = list[tuple[int, int, int]]  # columns as (start, end, width)


def column_floorplan(
    options: list[tuple[Oriented, ...]],
    edges: list[tuple[int, int]],
    fabric: tuple[int, int],
    junction: Fraction | None = Fraction(0),
) -> Floorplan | None:
    """The best serpentine column floorplan of kernels `0..n-1` (in that order), or None.

    `options[t]` are kernel t's oriented shapes; `edges` are (u, v) index pairs (direction
    ignored). With `junction=None` the DP minimises the total column width (pure feasibility,
    fast); otherwise it minimises the wirelength estimate of `_column_costs`, which charges
    `junction` × half the height of a column's end kernel per edge leaving there.
    """
    fab_w, fab_h = fabric
    lowest = [lowest_tables(o, fabric) for o in options]
    heights = np.stack([t[0] for t in lowest])  # (n, W+1)
    ends = np.sort(np.array(edges, dtype=np.int64).reshape(-1, 2), axis=1)

    def columns(i: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        for j, a_min in _columns_from(heights, i, fab_h):
            if junction is None:
                yield j, np.array([a_min]), np.array([a_min])
            else:
                yield j, *_column_costs(heights[i:j], i, ends, a_min, junction)

    found = cut_columns(len(options), columns, fab_w)
    if found is None:
        return None
    cuts, objective = found
    blocks = [_stack_block(options, lowest, i, j, a) for i, j, a in cuts]
    return serpentine(options, cuts, blocks, objective, fabric)


def band_floorplan(
    options: list[tuple[Oriented, ...]],
    edges: list[tuple[int, int]],
    fabric: tuple[int, int],
    junction: Fraction | None,
    band: frozenset[int],
) -> Floorplan | None:
    """Kernels `band` stacked in a full-width band at the bottom of the fabric (each in its
    lowest shape, in sequence order), the others in the serpentine columns of
    `column_floorplan` on the W × (H − band height) above it; None if either does not fit.

    For kernels that are long at every Δt near the bound (memory-bound convs whose least-area
    shapes span most of the fabric's width): a column that holds one is as wide as the fabric,
    so the column family must give them squarer shapes of larger area, or not pack; a band
    takes them flat. The band's height only decreases as Δt grows (each kernel's lowest shape
    at x-extent ≤ W does), so packability stays monotone in Δt. `columns` and `objective` are
    those of the columns above; the band's wirelength is not in the objective.
    """
    fab_w, fab_h = fabric
    lowest = {t: lowest_tables(options[t], fabric) for t in band}
    flat = {t: options[t][int(lowest[t][1][fab_w])] for t in band if lowest[t][1][fab_w] >= 0}
    if len(flat) < len(band):
        return None
    rest = [t for t in range(len(options)) if t not in band]
    placed: dict[int, Rect] = {}
    y = 0
    for t in sorted(band):
        placed[t] = Rect((fab_w - flat[t].w) // 2, y, flat[t].w, flat[t].h)
        y += flat[t].h
    if y > fab_h:
        return None
    index = {t: i for i, t in enumerate(rest)}
    sub_edges = [(index[u], index[v]) for u, v in edges if u in index and v in index]
    above = column_floorplan([options[t] for t in rest], sub_edges, (fab_w, fab_h - y), junction)
    if above is None:
        return None
    for t, r in zip(rest, above.rects, strict=True):
        placed[t] = Rect(r.x, r.y + y, r.w, r.h)
    rects = tuple(placed[t] for t in range(len(options)))
    choices = tuple(_option(options[t], r) for t, r in enumerate(rects))
    return Floorplan(choices, rects, above.columns, above.objective)


def long_kernels(options: list[tuple[Oriented, ...]], fabric: tuple[int, int]) -> list[int]:
    """The kernels whose least-area shapes are all longer than half the fabric's width,
    longest first: the ones a band (`band_floorplan`) may take flat."""
    half = fabric[0] / 2
    found = []
    for t, opts in enumerate(options):
        least = min(o.w * o.h for o in opts)
        span = min(max(o.w, o.h) for o in opts if o.w * o.h == least)
        if span > half:
            found.append((-span, t))
    return [t for _, t in sorted(found)]


def _columns_from(heights: np.ndarray, i: int, fab_h: int) -> Iterator[tuple[int, int]]:
    """(j, least width) for every column i..j−1 that fits some width, j ascending."""
    stacked = np.zeros(heights.shape[1], dtype=np.int64)
    for j in range(i + 1, heights.shape[0] + 1):
        stacked += heights[j - 1]
        fits = np.flatnonzero(stacked <= fab_h)
        if fits.size == 0:
            return
        yield j, int(fits[0])


def cut_columns(n: int, columns: ColumnCosts, fab_w: int) -> tuple[_Cuts, int] | None:
    """Cut kernels 0..n−1 into consecutive columns of least total cost with Σ width ≤ W.

    DP over (kernels placed j, width used u): best[j][u + a] = min best[i][u] + cost(i, j, a).
    Returns the columns (start, end, width) and the least cost, or None if nothing fits.
    """
    used = np.arange(fab_w + 1)
    best = np.full((n + 1, fab_w + 1), _INF, dtype=np.int64)
    best[0, 0] = 0
    prev_i = np.full((n + 1, fab_w + 1), -1, dtype=np.int64)
    prev_a = np.zeros((n + 1, fab_w + 1), dtype=np.int64)
    for i in range(n):
        reach = np.flatnonzero(best[i] < _INF)
        if reach.size == 0:
            continue
        for j, widths, costs in columns(i):
            if widths[0] + reach[0] > fab_w:
                break
            # cand[k, u] = best[i, u − a_k] + cost_k: the column of width a_k ends at u
            src = used[None, :] - widths[:, None]
            cand = np.where(src >= 0, best[i, np.maximum(src, 0)], _INF) + costs[:, None]
            k = cand.argmin(axis=0)
            value = cand[k, used]
            better = value < best[j]
            best[j, better] = value[better]
            prev_i[j, better] = i
            prev_a[j, better] = widths[k[better]]
    if best[n].min() >= _INF:
        return None
    total = int(np.argmin(best[n]))
    objective = int(best[n, total])
    cuts, j = [], n
    while j > 0:
        i, a = int(prev_i[j, total]), int(prev_a[j, total])
        cuts.append((i, j, a))
        total -= a
        j = i
    return cuts[::-1], objective


def _column_costs(
    heights: np.ndarray, first: int, ends: np.ndarray, a_min: int, junction: Fraction
) -> tuple[np.ndarray, np.ndarray]:
    """(widths, costs) of the column holding kernels first.. first+k−1, over the widths ≥ a_min
    where its stacked heights change, keeping only widths that lower the cost.

    cost = doubled wirelength estimate: edges inside the column exactly; an edge leaving the
    column as the vertical distance from its inside end to the column's first kernel (edge to an
    earlier kernel) or last kernel (to a later one), plus half the column width, plus `junction`
    × half that end kernel's height. junction = 0 assumes neighbouring columns' end kernels are
    level (the layout levels them when the columns' slack allows); the true vertical offset
    |h_last − h_first|/2 couples two columns, so the solver tries a few `junction` values and
    keeps the layout with the least exact wirelength.
    """
    k = heights.shape[0]
    change = np.flatnonzero(np.any(heights[:, 1:] != heights[:, :-1], axis=0)) + 1
    widths = np.unique(np.concatenate(([a_min], change[change > a_min])))
    hs = heights[:, widths]  # (k, len(widths))
    centre2 = 2 * np.cumsum(hs, axis=0) - hs  # doubled centres from the column's start
    lo, hi = ends[:, 0] - first, ends[:, 1] - first
    inner = (lo >= 0) & (hi < k)
    back = (lo < 0) & (hi >= 0) & (hi < k)
    ahead = (lo >= 0) & (lo < k) & (hi >= k)
    cost = np.abs(centre2[lo[inner]] - centre2[hi[inner]]).sum(axis=0)
    cost += (centre2[hi[back]] - centre2[0]).sum(axis=0)
    cost += (centre2[k - 1] - centre2[lo[ahead]]).sum(axis=0)
    cost += (back.sum() + ahead.sum()) * widths
    ends_h = back.sum() * hs[0] + ahead.sum() * hs[-1]
    cost += (junction.numerator * ends_h) // junction.denominator
    keep = np.ones(widths.size, dtype=bool)
    keep[1:] = cost[1:] < np.minimum.accumulate(cost)[:-1]
    return widths[keep], cost[keep]


def _stack_block(
    options: list[tuple[Oriented, ...]],
    lowest: list[tuple[np.ndarray, np.ndarray]],
    i: int,
    j: int,
    a: int,
) -> list[tuple[int, Rect]]:
    """Kernels i..j−1 stacked upward from y = 0, each centred in width a (block-relative)."""
    out, y = [], 0
    for t in range(i, j):
        o = options[t][int(lowest[t][1][a])]
        out.append((t, Rect((a - o.w) // 2, y, o.w, o.h)))
        y += o.h
    return out


def serpentine(
    options: list[tuple[Oriented, ...]],
    cuts: _Cuts,
    blocks: list[list[tuple[int, Rect]]],
    objective: int,
    fabric: tuple[int, int],
) -> Floorplan:
    """Place column blocks left to right: block c holds kernels cuts[c] as (kernel, rectangle
    relative to the column, chain running upward). Odd columns are mirrored so the chain runs
    down, and every column is shifted vertically (within the fabric) so that its first kernel
    is level with the previous column's last one."""
    fab_h = fabric[1]
    placed: dict[int, Rect] = {}
    columns: list[Column] = []
    x, level2 = 0, 0  # level2: doubled y-centre of the previous column's last kernel
    for c, ((i, j, a), block) in enumerate(zip(cuts, blocks, strict=True)):
        height = max(r.y + r.h for _, r in block)
        if c % 2:
            block = [(t, Rect(r.x, height - r.y - r.h, r.w, r.h)) for t, r in block]
        entry = dict(block)[i].center2()[1]
        y0 = max(0, min((level2 - entry) // 2, fab_h - height))
        for t, r in block:
            placed[t] = Rect(x + r.x, y0 + r.y, r.w, r.h)
        level2 = placed[j - 1].center2()[1]
        columns.append(Column(i, j, x, a))
        x += a
    rects = tuple(placed[t] for t in range(len(options)))
    choices = tuple(_option(options[t], r) for t, r in enumerate(rects))
    return Floorplan(choices, rects, tuple(columns), objective)


def _option(options: tuple[Oriented, ...], r: Rect) -> Oriented:
    """The fastest option with the rectangle's extents."""
    return min((o for o in options if (o.w, o.h) == (r.w, r.h)), key=lambda o: o.shape.time)
