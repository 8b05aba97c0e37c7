"""Greedy placement: kernels laid out in flow order along serpentine rows; best of 6 variants.

Variants = 3 packing strategies × 2 orientations (rows along x, or along y by transposing the
problem). Strategies:

- `skyline`: a serpentine cursor walks east then west row after row; each rectangle drops onto
  the skyline (the lowest free row under its columns), so consecutive kernels stay adjacent.
- `shelf`: the same serpentine, but in flat shelves as tall as their tallest rectangle, each
  rectangle centred vertically in its shelf (neater rows, more waste).
- `bottom-left`: each rectangle goes where its far edge y + h is smallest on the skyline,
  nearest the previous kernel on ties; the dense fallback that fits when the others do not.

Pins are fixed obstacles: a rectangle that would hit one is pushed below it. The result is the
legal variant with the smallest weighted wirelength. Guarantees: deterministic, legal
(checked by `validate_placement`), or a `PlacementError` explaining the shortfall.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace

import numpy as np

from wsecc.place.bounds import lower_bound
from wsecc.place.problem import (
    Placement,
    PlacementError,
    PlacementProblem,
    Rect,
    kernel_shapes,
    validate_problem,
    weighted_wirelength,
)

Shape = tuple[int, int]


def flow_order(problem: PlacementProblem) -> list[str]:
    """Unpinned kernels in topological order of the flow graph, ties by problem order.

    A cycle is entered at the waiting kernel with the most already-ordered predecessors
    (then the earliest), so every kernel appears once and downstream kernels stay downstream.
    """
    index = {k.name: i for i, k in enumerate(problem.kernels)}
    succ: dict[str, list[str]] = {n: [] for n in index}
    pred: dict[str, list[str]] = {n: [] for n in index}
    for f in problem.flows:
        if f.src != f.dst:
            succ[f.src].append(f.dst)
            pred[f.dst].append(f.src)
    waiting = {n: len(pred[n]) for n in index}
    ready = [(i, n) for n, i in index.items() if waiting[n] == 0]
    heapq.heapify(ready)
    order: list[str] = []
    done: set[str] = set()
    while len(order) < len(index):
        if not ready:  # only cycles remain
            n = min(
                (n for n in index if n not in done),
                key=lambda n: (-sum(p in done for p in pred[n]), index[n]),
            )
            heapq.heappush(ready, (index[n], n))
        _, n = heapq.heappop(ready)
        if n in done:
            continue
        done.add(n)
        order.append(n)
        for m in succ[n]:
            waiting[m] -= 1
            if waiting[m] == 0 and m not in done:
                heapq.heappush(ready, (index[m], m))
    return [n for n in order if n not in problem.pins]


class _NoFit(Exception):
    """A strategy found no room for a kernel (the variant is dropped)."""

    def __init__(self, kernel: str, shape: Shape):
        super().__init__(f"kernel '{kernel}' ({shape[0]}x{shape[1]}) found no room")


class _Skyline:
    """Lowest free row per column, plus pinned obstacles that rectangles are pushed below."""

    def __init__(self, width: int, height: int, pins: Mapping[str, Rect]):
        self.width, self.height = width, height
        self.top = np.zeros(width, dtype=np.int64)
        self.pins = list(pins.values())

    def below_pins(self, x: int, y: int, w: int, h: int) -> int:
        """Smallest y' ≥ y at which (x, y', w, h) misses every pin."""
        while True:
            hits = [p for p in self.pins if p.overlaps(Rect(x, y, w, h))]
            if not hits:
                return y
            y = max(p.y + p.h for p in hits)

    def drop(self, x: int, w: int, h: int) -> int | None:
        """y where a w×h rectangle at column x comes to rest, or None if it would not fit."""
        y = self.below_pins(x, int(self.top[x : x + w].max()), w, h)
        return y if y + h <= self.height else None

    def add(self, r: Rect) -> None:
        self.top[r.x : r.x + r.w] = np.maximum(self.top[r.x : r.x + r.w], r.y + r.h)


def _skyline(problem: PlacementProblem, order: list[str]) -> dict[str, Rect]:
    """Serpentine cursor; each rectangle drops onto the skyline (first shape that fits)."""
    sky = _Skyline(problem.width, problem.height, problem.pins)
    rects: dict[str, Rect] = {}
    cursor, east = 0, True
    for name in order:
        placed = None
        for turn in (False, True):  # try the current row direction, then turn around
            if turn:
                cursor, east = (0, True) if not east else (problem.width, False)
            for w, h in kernel_shapes(problem, name):
                x = cursor if east else cursor - w
                if x < 0 or x + w > problem.width:
                    continue
                y = sky.drop(x, w, h)
                if y is not None:
                    placed = Rect(x, y, w, h)
                    break
            if placed:
                break
        if placed is None:
            raise _NoFit(name, kernel_shapes(problem, name)[0])
        sky.add(placed)
        rects[name] = placed
        cursor = placed.x + placed.w if east else placed.x
    return rects


def _shelf(problem: PlacementProblem, order: list[str]) -> dict[str, Rect]:
    """Serpentine flat shelves of preferred shapes, each rectangle centred in its shelf."""
    rects: dict[str, Rect] = {}
    W, H = problem.width, problem.height
    base, i, east = 0, 0, True
    sky = _Skyline(W, H, problem.pins)  # only for the pin check
    while i < len(order):
        row, used = [], 0
        while i < len(order) and used + kernel_shapes(problem, order[i])[0][0] <= W:
            row.append(order[i])
            used += kernel_shapes(problem, order[i])[0][0]
            i += 1
        if not row:
            raise _NoFit(order[i], kernel_shapes(problem, order[i])[0])
        shelf_h = max(kernel_shapes(problem, n)[0][1] for n in row)
        x = 0 if east else W
        for n in row:
            w, h = kernel_shapes(problem, n)[0]
            x = x if east else x - w
            r = Rect(x, base + (shelf_h - h) // 2, w, h)
            if r.y + h > H or sky.below_pins(r.x, r.y, w, h) != r.y:
                raise _NoFit(n, (w, h))
            rects[n] = r
            x = x + w if east else x
        base += shelf_h
        east = not east
    return rects


def _bottom_left(problem: PlacementProblem, order: list[str]) -> dict[str, Rect]:
    """Each rectangle where y + h is smallest; ties to the one nearest the previous kernel."""
    sky = _Skyline(problem.width, problem.height, problem.pins)
    rects: dict[str, Rect] = {}
    prev_cx2 = 0
    for name in order:
        r = bottom_left_step(sky, kernel_shapes(problem, name), prev_cx2)
        if r is None:
            raise _NoFit(name, kernel_shapes(problem, name)[0])
        sky.add(r)
        rects[name] = r
        prev_cx2 = r.center2()[0]
    return rects


def bottom_left_step(sky: _Skyline, shapes: tuple[Shape, ...], prev_cx2: int) -> Rect | None:
    """Where one rectangle of `shapes` goes on `sky`: y + h smallest, then doubled centre x
    nearest `prev_cx2`; None if no shape fits (`sky` is not changed). Ties go to the earlier
    shape, then to the column whose unobstructed key (before the pins push it down) is lower,
    then to the lower column."""
    best: tuple[int, int, Rect] | None = None
    for w, h in shapes:
        if w > sky.width:
            continue
        rest = _window_max(sky.top, w)
        xs = np.arange(rest.size)
        dist = np.abs(2 * xs + w - prev_cx2)
        ys = _below_pins(sky.pins, xs, rest, w, h)
        fits = (ys + h <= sky.height).nonzero()[0]
        if fits.size == 0:
            continue
        scale = 4 * sky.width  # > any dist: the key orders by y + h, then by dist
        final, free = (ys + h) * scale + dist, (rest + h) * scale + dist
        x = int(fits[np.lexsort((fits, free[fits], final[fits]))[0]])
        key = (int(ys[x]) + h, int(dist[x]))
        if best is None or key < best[:2]:
            best = (*key, Rect(x, int(ys[x]), w, h))
    return None if best is None else best[2]


def _window_max(top: np.ndarray, w: int) -> np.ndarray:
    """The highest of `top` over every window of w consecutive columns, left to right. A
    window as wide as the skyline (a layer block one strip wide: most of the tiled start's
    calls) is one max, without building the sliding view (whose set-up took 40% of
    `bottom_left_step` on GPT-2 XL). Other widths by doubling: after k halvings of the gap,
    `out[i]` is the highest of the `span` = 2^k columns from i, and a window of w is two such
    spans that overlap (log2 w passes over the skyline, not w: 5x less time at w = 40-374)."""
    n = top.size
    if w == n:
        return top.max(keepdims=True)
    out, span = top.copy(), 1
    while 2 * span <= w:
        out = np.maximum(out[:-span], out[span:])
        span *= 2
    if span < w:
        out = np.maximum(out[: n - w + 1], out[w - span : n - span + 1])
    return out


def _below_pins(pins: list[Rect], xs: np.ndarray, ys: np.ndarray, w: int, h: int) -> np.ndarray:
    """For each column x in `xs`, the smallest y' ≥ its y in `ys` at which a w×h rectangle
    misses every pin (`_Skyline.below_pins`, all columns at once): each push down to a pin's
    bottom is forced, so the fixed point is the least such y'."""
    ys = ys.copy()
    moved = bool(pins)
    while moved:
        moved = False
        for p in pins:
            hit = (xs < p.x + p.w) & (xs + w > p.x) & (ys < p.y + p.h) & (ys + h > p.y)
            if hit.any():
                ys[hit] = p.y + p.h
                moved = True
    return ys


STRATEGIES: dict[str, Callable[[PlacementProblem, list[str]], dict[str, Rect]]] = {
    "skyline": _skyline,
    "shelf": _shelf,
    "bottom-left": _bottom_left,
}


def _transpose(problem: PlacementProblem) -> PlacementProblem:
    """The same problem with x and y swapped (rows become columns)."""
    return PlacementProblem(
        width=problem.height,
        height=problem.width,
        kernels=tuple(
            replace(
                k,
                shapes=tuple((h, w) for w, h in k.shapes),
                pool=tuple((h, w) for w, h in k.pool),
            )
            for k in problem.kernels
        ),
        flows=problem.flows,
        pins={n: _flip(r) for n, r in problem.pins.items()},
    )


def _flip(r: Rect) -> Rect:
    return Rect(r.y, r.x, r.h, r.w)


def greedy_variants(problem: PlacementProblem) -> Iterator[tuple[str, dict[str, Rect] | str]]:
    """Yield (variant name, rects incl. pins) for each variant, or (name, why it failed)."""
    for transposed in (False, True):
        prob = _transpose(problem) if transposed else problem
        order = flow_order(prob)
        for strategy, run in STRATEGIES.items():
            name = f"{strategy}{'-T' if transposed else ''}"
            try:
                rects = run(prob, order)
            except _NoFit as e:
                yield name, str(e)
                continue
            rects.update(prob.pins)
            yield name, {n: _flip(r) for n, r in rects.items()} if transposed else rects


def greedy_rects(problem: PlacementProblem) -> tuple[str, dict[str, Rect]]:
    """(variant name, rectangles) of the variant with the least weighted wirelength.

    Raises PlacementError when the problem is malformed, the kernels cannot fit by area, or
    no variant finds room for every kernel.
    """
    bad = validate_problem(problem)
    if bad:
        raise PlacementError("malformed placement problem: " + "; ".join(bad))
    need = sum(min(w * h for w, h in kernel_shapes(problem, k.name)) for k in problem.kernels)
    have = problem.area
    summary = f"kernels need {need} PEs, usable fabric has {have} ({100 * need / have:.0f}% fill)"
    if need > have:
        raise PlacementError(f"{summary}; shrink the regions or use a larger fabric")
    best: tuple[float, str, dict[str, Rect]] | None = None
    failures = []
    for name, result in greedy_variants(problem):
        if isinstance(result, str):
            failures.append(f"{name}: {result}")
            continue
        wl = weighted_wirelength(problem, result)
        if best is None or wl < best[0]:
            best = (wl, name, result)
    if best is None:
        raise PlacementError(f"{summary}; greedy packing failed ({'; '.join(failures)})")
    return best[1], best[2]


def place_greedy(problem: PlacementProblem, *, seed: int = 0) -> Placement:
    """Best greedy variant as a Placement; bound = `wsecc.place.bounds.lower_bound`.

    `seed` is recorded only: the greedy placer is deterministic.
    """
    t0 = time.perf_counter()
    variant, rects = greedy_rects(problem)
    bound = lower_bound(problem)
    return Placement.of(
        problem,
        rects,
        placer="greedy",
        bound=bound.value,
        status=f"heuristic:{variant}",
        seconds=time.perf_counter() - t0,
        seed=seed,
        bound_kind=bound.kind,
    )
