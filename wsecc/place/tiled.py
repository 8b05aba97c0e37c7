"""Tiled start: one transformer layer packed compactly once, the packing reused for every layer,
the layer blocks lined up in the strips of `layered.py`; best over strip counts (2 … 4 or more),
the two orientations, serpentine or not, and where the largest other kernel goes.

Why: a transformer's layers repeat (same kinds, same sizes), and the star bound is within 6% of
CP-SAT's placement of one layer, but CP-SAT's window search in 10 s leaves 87–339 regions far
from a layer-by-layer arrangement (bench/RESULTS.md, "Bounds worth reading"); packing each layer
kernel by kernel into strips (`layered.py`) keeps a layer together but loose.

How, for k strips:
1. The largest kernel outside the layers (an LM head), when wider than a strip or larger than
   half a layer, is pre-placed at the serpentine's end (each of its shapes: one option each).
2. Block height: the tallest strip-wide block of which as many as there are layers pack into
   the strips around it (`_tallest`: bisection over `layered._strips`; the best option's).
3. One layer is packed by CP-SAT in that box (`pack`, injected so that ortools stays in
   `cpsat.py`), pricing its own flows, the joins to the next layer (which sits right below it)
   and the height it uses; its kernels take shapes every layer's kernels fit in (`_envelope`:
   the first layer's smaller norm fits the others' slot).
4. Every layer becomes a rigid block of the packing's size, packed by `_strips`; each block is
   flipped (4 ways) to shorten its flows to the blocks before it; the other kernels go where
   there is room (the blocks' holes too), nearest their neighbours (`_leftovers`). If they find
   none, the box is made shorter (twice at most).
The best placement's layer packing is then handed to `pack` to improve ("again"), then once
more with the kernels' pools in their menus ("pools"; `with_pools`: sizing's other shapes as
good for the stage time), each tiled again. Sizing's four alternatives (smallest area first) rarely include the shapes a
strip-wide box wants; the pool does. GPT-2 XL on WSE-2, deterministic, 10 s: 1.58e11 →
1.18e11 (bench/RESULTS.md, "Shapes from the pool"). Packing with the pools from the start
needs about 1 s per packing, not 0.3, to do as well.

Guarantees: legal (each kernel inside its slot, slots disjoint inside a block, blocks and the
other kernels disjoint), as deterministic as `pack`, or None (pins, no repeated layers, or
nothing fits).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from wsecc.core.layers import find_layers
from wsecc.place.greedy import _flip, _transpose, flow_order
from wsecc.place.layered import _strips
from wsecc.place.problem import (
    PlaceFlow,
    PlaceKernel,
    PlacementProblem,
    Rect,
    kernel_shapes,
    weighted_wirelength,
    with_pools,
)

# strip counts tried: 2 … 4, up to MAX_STRIPS when there are 4 layers or more per strip (one
# layer packing each, per orientation; 6 strips lowered BERT-large's tiled start by a fifth)
MAX_STRIPS = 6
Shape = tuple[int, int]
# (unit sub-problem with the box as its fabric, joins to the next copy, a packing to improve
# or None, the stage) -> packing or None. Stages: "first" (every box tried), "again" (the
# best packing improved), "pools" (improved once more with the kernels' pools in the menus)
Stage = Literal["first", "again", "pools"]
Pack = Callable[
    [PlacementProblem, Sequence[PlaceFlow], dict[str, Rect] | None, Stage],
    dict[str, Rect] | None,
]
# whether `pack` would still pack at this stage (its budget not spent): the blocks' sizes are
# worked out only for a packing that will run. Asked again later, it must not say yes again
# once it has said no (time and spent work only grow).
Ready = Callable[[Stage], bool]


def _always(stage: Stage) -> bool:
    return True


def repeating_layers(problem: PlacementProblem) -> tuple[list[str], list[list[str]], list[str]]:
    """(kernels before the layers, the layers, kernels after), all in flow order; the layers
    are `wsecc.core.layers.find_layers`'s (as training and generation find them), and none when
    there are fewer than two or they are not alike (as many kernels of the same kinds): tiling
    repeats one layer's packing."""
    order = flow_order(problem)
    kinds = [problem.kernel(n).kind for n in order]
    found = find_layers(kinds)
    if found is None or len(found) < 2:
        return order, [], []
    spans = found.spans
    first = kinds[spans[0][0] : spans[0][1]]
    if any(kinds[a:b] != first for a, b in spans):
        return order, [], []
    layers = [order[a:b] for a, b in spans]
    return order[: found.start], layers, order[found.end :]


def _envelope(problem: PlacementProblem, layers: list[list[str]]) -> list[tuple[Shape, ...]]:
    """Per position in a layer, shapes every layer's kernel there fits in: the largest width
    and height of each shape over the layers if all list as many shapes, else the most common
    shape list (a layer whose kernels do not fit it then fails `_fit`)."""
    out = []
    for kernels in zip(*layers, strict=True):
        lists = [kernel_shapes(problem, n) for n in kernels]
        if len({len(shapes) for shapes in lists}) == 1:
            out.append(tuple((max(s[i][0] for s in lists), max(s[i][1] for s in lists))
                             for i in range(len(lists[0]))))  # fmt: skip
        else:
            out.append(Counter(lists).most_common(1)[0][0])
    return out


def _sub(
    problem: PlacementProblem,
    names: Sequence[str],
    shapes: Sequence[tuple[Shape, ...]],
    width: int,
    height: int,
) -> PlacementProblem:
    """`names` with `shapes` and the flows among them, on a width × height fabric."""
    inside = set(names)
    kernels = tuple(
        replace(problem.kernel(n), shapes=ss) for n, ss in zip(names, shapes, strict=True)
    )
    flows = tuple(f for f in problem.flows if f.src in inside and f.dst in inside)
    return PlacementProblem(width, height, kernels, flows)


def _joins(problem: PlacementProblem, layer: list[str], after: list[str]) -> list[PlaceFlow]:
    """Flows from `layer` to the next layer `after`, renamed onto `layer`'s kernels by position."""
    here, there = {n: i for i, n in enumerate(layer)}, {n: i for i, n in enumerate(after)}
    return [
        PlaceFlow(f.src, layer[there[f.dst]], f.bytes_per_sample)
        for f in problem.flows
        if f.src in here and f.dst in there
    ]


def _fit(problem: PlacementProblem, layer: list[str], slots: list[Rect]) -> list[Rect] | None:
    """Each kernel of `layer` in its slot (its largest shape that fits, centred), or None."""
    out = []
    for name, slot in zip(layer, slots, strict=True):
        fits = [(w, h) for w, h in kernel_shapes(problem, name) if w <= slot.w and h <= slot.h]
        if not fits:
            return None
        w, h = max(fits, key=lambda s: (s[0] * s[1], s))
        out.append(Rect(slot.x + (slot.w - w) // 2, slot.y + (slot.h - h) // 2, w, h))
    return out


def _flipped(r: Rect, block: Rect, fx: bool, fy: bool) -> Rect:
    x = block.x + block.w - (r.x - block.x) - r.w if fx else r.x
    y = block.y + block.h - (r.y - block.y) - r.h if fy else r.y
    return Rect(x, y, r.w, r.h)


def _expand(
    problem: PlacementProblem,
    blocks: dict[str, Rect],
    layers: list[list[str]],
    fitted: list[list[Rect]],
) -> dict[str, Rect]:
    """Blocks replaced by their layers' kernels, each block flipped (4 ways, in flow order) to
    shorten its flows to the kernels placed before it."""
    rects = {n: r for n, r in blocks.items() if not n.startswith("\0")}
    for i, (layer, slots) in enumerate(zip(layers, fitted, strict=True)):
        block = blocks[f"\0{i}"]
        inside = set(layer)
        flows = [f for f in problem.flows if (f.src in inside) != (f.dst in inside)]
        best: tuple[float, dict[str, Rect]] | None = None
        for fx in (False, True):
            for fy in (False, True):
                cand = {
                    n: _flipped(Rect(block.x + s.x, block.y + s.y, s.w, s.h), block, fx, fy)
                    for n, s in zip(layer, slots, strict=True)
                }
                placed = {**rects, **cand}
                cost = sum(
                    f.bytes_per_sample * _distance(placed[f.src], placed[f.dst])
                    for f in flows
                    if f.src in placed and f.dst in placed
                )
                if best is None or cost < best[0]:
                    best = (cost, cand)
        assert best is not None
        rects.update(best[1])
    return rects


def _leftovers(
    problem: PlacementProblem, rects: dict[str, Rect], names: list[str]
) -> dict[str, Rect] | None:
    """`rects` plus `names`, each put where it is free and its centre nearest the bytes-weighted
    mean of its placed neighbours' centres (the kernel with the most such bytes first), or None
    when one finds no room."""
    W, H = problem.width, problem.height
    grid = np.zeros((H, W), dtype=np.int32)
    for r in rects.values():
        grid[r.y : r.y + r.h, r.x : r.x + r.w] = 1
    used = np.zeros((H + 1, W + 1), dtype=np.int32)  # 2D prefix sums of the occupied PEs
    out = dict(rects)
    todo = list(names)
    while todo:
        pull: dict[str, list[tuple[float, Rect]]] = {n: [] for n in todo}
        for f in problem.flows:
            for n, m in ((f.src, f.dst), (f.dst, f.src)):
                if n in pull and m in out:
                    pull[n].append((f.bytes_per_sample, out[m]))
        name = max(todo, key=lambda n: (sum(b for b, _ in pull[n]), -todo.index(n)))
        todo.remove(name)
        total = sum(b for b, _ in pull[name])
        tx, ty = (
            (sum(b * r.center2()[0] for b, r in pull[name]) / total,
             sum(b * r.center2()[1] for b, r in pull[name]) / total)
            if total > 0 else (W, H)
        )  # fmt: skip
        np.cumsum(np.cumsum(grid, axis=0, out=used[1:, 1:]), axis=1, out=used[1:, 1:])
        best: tuple[float, Rect] | None = None
        for w, h in kernel_shapes(problem, name):
            if w > W or h > H:
                continue
            at = _nearest_free(used, w, h, tx, ty)
            if at is not None and (best is None or at[0] < best[0]):
                best = (at[0], Rect(at[1], at[2], w, h))
        if best is None:
            return None
        r = best[1]
        grid[r.y : r.y + r.h, r.x : r.x + r.w] = 1
        out[name] = r
    return out


def _nearest_free(
    used: np.ndarray, w: int, h: int, tx: float, ty: float
) -> tuple[float, int, int] | None:
    """(cost, x, y) of the free w × h rectangle whose doubled centre is nearest (tx, ty) in
    L1, the first in row-major order on ties; None if none is free. `used`: 2D prefix sums of
    the occupied PEs, one row and column of zeros first. The cost is separable, |2x + w − tx|
    + |2y + h − ty|: one row and one column of it, added over the grid where the rectangle is
    free (the same float sums, in the same order, as over the free positions one by one)."""
    occupied = used[h:, w:] - used[:-h, w:]
    occupied -= used[h:, :-w]
    occupied += used[:-h, :-w]
    cx = np.abs(2 * np.arange(occupied.shape[1]) + w - tx)
    cy = np.abs(2 * np.arange(occupied.shape[0]) + h - ty)
    cost = cx[None, :] + cy[:, None]
    cost[occupied != 0] = np.inf
    k = int(np.argmin(cost))
    y, x = divmod(k, cost.shape[1])
    if not np.isfinite(cost[y, x]):
        return None
    return float(cost[y, x]), x, y


def _distance(a: Rect, b: Rect) -> int:
    (ax, ay), (bx, by) = a.center2(), b.center2()
    return abs(ax - bx) + abs(ay - by)


def _blocks(n: int) -> list[str]:
    return [f"\0{i}" for i in range(n)]


def _obstacles(
    problem: PlacementProblem,
    before: list[str],
    after: list[str],
    block_area: float,
    k: int,
    serpentine: bool,
) -> list[dict[str, Rect]]:
    """Where the largest other kernel may go before the strips are packed, when it is wider
    than a strip or larger than half a layer block: each of its shapes at the serpentine's end
    (its start, for a kernel before the layers); else nothing is pre-placed."""
    W, H, S = problem.width, problem.height, problem.width // k
    others = before + after
    if not others:
        return [{}]
    area = {n: min(w * h for w, h in kernel_shapes(problem, n)) for n in others}
    big = max(others, key=lambda n: (area[n], -others.index(n)))
    wide = all(w > S for w, _ in kernel_shapes(problem, big))
    if not wide and area[big] <= block_area / 2:
        return [{}]
    ends_low = not serpentine or (k - 1) % 2 == 0  # the last strip runs down
    out = []
    for w, h in kernel_shapes(problem, big):
        if w <= W and h <= H:
            at = Rect(0, 0, w, h) if big in before else Rect(W - w, H - h if ends_low else 0, w, h)
            out.append({big: at})
    return out


def _strip_blocks(
    problem: PlacementProblem,
    n: int,
    k: int,
    block: tuple[int, int],
    obstacle: dict[str, Rect],
    serpentine: bool,
) -> dict[str, Rect] | None:
    """n blocks of size `block` packed into k strips around `obstacle` (`layered._strips`)."""
    macro = PlacementProblem(
        problem.width, problem.height,
        tuple(PlaceKernel(b, (block,)) for b in _blocks(n)), (),
    )  # fmt: skip
    return _strips(macro, _blocks(n), k, obstacle, serpentine)


def _tallest(
    problem: PlacementProblem, n: int, k: int, obstacle: dict[str, Rect], serpentine: bool
) -> int:
    """The tallest block one strip wide of which n pack into the strips (0 if none)."""
    S = problem.width // k
    lo, hi = 0, problem.height // math.ceil(n / k) + 1  # lo fits (0: vacuous), hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _strip_blocks(problem, n, k, (S, mid), obstacle, serpentine) is None:
            hi = mid
        else:
            lo = mid
    return lo


@dataclass(frozen=True)
class _Tiling:
    """How to tile: the layers, which one is packed (`t`) with which shapes (`envelope`) and
    joins to the next, the other kernels, the strip count k, the box height, and the options
    (serpentine or not, obstacle, tallest block that fits) to lay the blocks out."""

    layers: list[list[str]]
    t: int
    envelope: list[tuple[Shape, ...]]
    joins: list[PlaceFlow]
    others: list[str]
    k: int
    height: int
    options: list[tuple[bool, dict[str, Rect], int]]
    width: int = 0  # the box's; 0: one strip


def _tile(
    problem: PlacementProblem,
    pack: Pack,
    how: _Tiling,
    start: dict[str, Rect] | None = None,
    stage: Stage = "first",
) -> list[tuple[dict[str, Rect], dict[str, Rect]]] | None:
    """The placements with layer `how.t` packed in a box one strip wide (or `how.width`) and
    `how.height` tall, its packing reused for every layer, the blocks in k strips as each option
    (serpentine or not, obstacle, tallest block it takes) allows, each with the layer's packing;
    None if the layer found no packing. `start`: a packing of the layer for `pack` to improve."""
    layers, k = how.layers, how.k
    template = layers[how.t]
    box = _sub(problem, template, how.envelope, how.width or problem.width // k, how.height)
    packed = pack(box, how.joins, start, stage)
    if packed is None:
        return None
    slots = [packed[n] for n in template]
    bw, bh = max(r.x + r.w for r in slots), max(r.y + r.h for r in slots)
    fitted = [_fit(problem, layer, slots) for layer in layers]
    if any(f is None for f in fitted):
        return []
    out = []
    for serpentine, obstacle, tallest in how.options:
        if tallest < bh:
            continue
        blocks = _strip_blocks(problem, len(layers), k, (bw, bh), obstacle, serpentine)
        if blocks is None:
            continue
        rects = _expand(problem, blocks, layers, fitted)  # type: ignore[arg-type]
        done = _leftovers(problem, rects, [m for m in how.others if m not in rects])
        if done is not None:
            out.append((done, packed))
    return out


def _tiled(
    problem: PlacementProblem, pack: Pack, ready: Ready = _always
) -> list[tuple[dict[str, Rect], dict[str, Rect], _Tiling]]:
    """Every tiled placement that fits, in `problem`'s own orientation, with its layer packing
    and how it was tiled; none past the strip count at which `ready("first")` says no (the
    block heights of a strip count are a bisection over `_strips` per option: GPT-2 XL spent
    4 s of CPU on them under cProfile, for packings its budget then refused)."""
    before, layers, after = repeating_layers(problem)
    if len(layers) < 2:
        return []
    others = before + after
    t = min(1, len(layers) - 2)  # the second layer: the first may differ (its norm) and has a next
    joins = _joins(problem, layers[t], layers[t + 1])
    envelope = _envelope(problem, layers)
    block_area = sum(min(w * h for w, h in shapes) for shapes in envelope)
    n = len(layers)
    out = []
    for k in range(2, min(MAX_STRIPS, max(4, n // 4)) + 1):
        if not ready("first"):  # `pack` would refuse this strip count's packing, and the rest
            break
        S = problem.width // k
        options = [
            (serpentine, obstacle, _tallest(problem, n, k, obstacle, serpentine))
            for serpentine in (True, False)
            for obstacle in _obstacles(problem, before, after, block_area, k, serpentine)
        ]
        height = max(h for _, _, h in options)
        # the other kernels usually find room in the blocks' holes; if not, shorter blocks
        for shrink in (0, 2, 6):
            how = _Tiling(layers, t, envelope, joins, others, k, height - shrink, options)
            found = _tile(problem, pack, how)
            out += [(rects, packed, how) for rects, packed in found or []]
            if found != [] or (height - shrink) * S < block_area:
                break
    return out


def tiled_rects(
    problem: PlacementProblem, pack: Pack, ready: Ready = _always
) -> dict[str, Rect] | None:
    """The tiled placement with the least weighted wirelength, or None (see module doc). The
    best one's layer packing is then handed to `pack` to improve ("again"), then once more with
    the pools in the menus ("pools"), each tiled again: the result is legal for
    `with_pools(problem)` (`tailored` gives the problem it is legal for). `ready`: whether
    `pack` would still pack (`Ready`); the result is the same as without it, found sooner when
    the budget is spent."""
    if problem.pins:
        return None
    best: tuple[float, dict[str, Rect], bool, dict[str, Rect], _Tiling] | None = None
    for transposed in (False, True):
        prob = _transpose(problem) if transposed else problem
        for rects, packed, how in _tiled(prob, pack, ready):
            wl = weighted_wirelength(problem, _oriented(rects, transposed))
            if best is None or wl < best[0]:
                best = (wl, rects, transposed, packed, how)
    if best is None:
        return None
    wl, rects, transposed, packed, how = best
    prob = _transpose(problem) if transposed else problem
    stages: list[Stage] = ["again", "pools"] if any(k.pool for k in problem.kernels) else ["again"]
    for stage in stages:
        if stage == "pools":
            prob = with_pools(prob)
            how = replace(how, envelope=_envelope(prob, how.layers))
        for again, again_packed in _tile(prob, pack, how, packed, stage) or []:
            again_wl = weighted_wirelength(problem, _oriented(again, transposed))
            if again_wl < wl:
                wl, rects, packed = again_wl, again, again_packed
    return _oriented(rects, transposed)


def _oriented(rects: dict[str, Rect], transposed: bool) -> dict[str, Rect]:
    return {n: _flip(r) for n, r in rects.items()} if transposed else rects
