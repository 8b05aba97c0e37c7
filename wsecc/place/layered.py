"""Layered start: kernels in flow order packed bottom-left into k vertical strips of the fabric,
strip after strip in a serpentine (down the first, up the second, …); best over k and the two
orientations.

Why: greedy's serpentine spans the whole fabric width, so a transformer layer is smeared over a
long thin band and its flows run far. In a strip 1/k of the fabric wide, consecutive kernels —
one layer — pack into a compact block and the next layer sits right after it. On a 2-layer
GPT-2 sub-problem, CP-SAT from greedy ended 35.6% above the bound, from layers placed one at a
time and joined 16.2% (bench/RESULTS.md, "Bounds worth reading"). Packing each layer in a box of
its own does not fit at real-size fills (~85% for GPT-2 small on wse2, where only greedy's
dense bottom-left strategy fits at all); strips keep bottom-left's density.

A kernel too wide for a strip (an LM head) is placed first where the serpentine ends (or
starts, if it comes first in flow order), the strips pack around it. Strips: k = 2 …
MAX_STRIPS, each serpentine or all running down (see `_strips`). Guarantees: deterministic, legal, or None (pins,
two or more over-wide kernels, or no k fits).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from wsecc.place.greedy import _flip, _Skyline, _transpose, bottom_left_step, flow_order
from wsecc.place.problem import PlacementProblem, Rect, kernel_shapes, weighted_wirelength

MAX_STRIPS = 4  # more never fitted a real-size model; failed tries cost ~0.1 s each


def _in_strip(r: Rect, x0: int, mirrored: bool, height: int) -> Rect:
    """`r` in the coordinates of a strip starting at column x0 (rows reversed if mirrored)."""
    return Rect(r.x - x0, height - r.y - r.h if mirrored else r.y, r.w, r.h)


def _strips(
    problem: PlacementProblem, order: list[str], k: int, wide: Mapping[str, Rect], serpentine: bool
) -> dict[str, Rect] | None:
    """`order` packed into k strips (the `wide` kernels already placed), or None if no room.

    Serpentine: odd strips run upwards, so each strip starts beside the previous one's end.
    Else every strip runs down, and a kernel that fits in no strip goes bottom-left on the whole
    fabric, onto the strips' ragged bottoms: at ~85% fill some models need that room.
    """
    W, H, S = problem.width, problem.height, problem.width // k
    rects = dict(wide)
    skies: list[_Skyline] = []
    prev = 0

    def sky_of(strip: int) -> _Skyline:
        x0, mirrored = S * strip, serpentine and strip % 2 == 1
        width = S if strip < k - 1 else W - x0
        return _Skyline(width, H, {n: _in_strip(q, x0, mirrored, H) for n, q in wide.items()})

    whole: _Skyline | None = None
    for name in (n for n in order if n not in wide):
        shapes = kernel_shapes(problem, name)
        if whole is None:
            r = bottom_left_step(skies[-1], shapes, prev) if skies else None
            while r is None and len(skies) < k:
                skies.append(sky_of(len(skies)))
                prev = 0
                r = bottom_left_step(skies[-1], shapes, prev)
            if r is not None:
                strip = len(skies) - 1
                skies[strip].add(r)
                prev = r.center2()[0]
                rects[name] = _in_strip(r, -S * strip, serpentine and strip % 2 == 1, H)
                continue
            if serpentine:
                return None
            whole = _Skyline(W, H, wide)
            whole.top[:] = np.concatenate([sky.top for sky in skies])
            prev += S * 2 * (k - 1)
        r = bottom_left_step(whole, shapes, prev)
        if r is None:
            return None
        whole.add(r)
        prev = r.center2()[0]
        rects[name] = r
    return rects


def _wide_options(
    problem: PlacementProblem, order: list[str], k: int, serpentine: bool
) -> list[dict[str, Rect]] | None:
    """Placements of the kernels too wide for a strip: each shape of each, at the serpentine's
    end (or its start, for a kernel in the first half of the order). None if two or more."""
    S, W, H = problem.width // k, problem.width, problem.height
    wide = [n for n in order if all(w > S for w, _ in kernel_shapes(problem, n))]
    if not wide:
        return [{}]
    if len(wide) > 1:
        return None
    name = wide[0]
    first = order.index(name) < len(order) / 2
    ends_low = not serpentine or (k - 1) % 2 == 0  # the last strip runs down
    out = []
    for w, h in kernel_shapes(problem, name):
        if w > W or h > H:
            continue
        at = Rect(0, 0, w, h) if first else Rect(W - w, H - h if ends_low else 0, w, h)
        out.append({name: at})
    return out


def _never() -> bool:
    return False


def layered_rects(
    problem: PlacementProblem, stop: Callable[[], bool] = _never
) -> dict[str, Rect] | None:
    """The layered placement with the least weighted wirelength, or None (see module doc).
    `stop`: asked before each packing once one was found; yes ends the search with the best so
    far (a caller's budget: the tries are Python, 0.6 s of CPU on GPT-2 XL). The default
    never stops: deterministic."""
    if problem.pins:
        return None
    best: tuple[float, dict[str, Rect]] | None = None
    for transposed in (False, True):
        prob = _transpose(problem) if transposed else problem
        order = flow_order(prob)
        for k in range(2, MAX_STRIPS + 1):
            for serpentine in (True, False):
                for wide in _wide_options(prob, order, k, serpentine) or []:
                    if best is not None and stop():
                        return best[1]
                    rects = _strips(prob, order, k, wide, serpentine)
                    if rects is None:
                        continue
                    if transposed:
                        rects = {n: _flip(r) for n, r in rects.items()}
                    wl = weighted_wirelength(problem, rects)
                    if best is None or wl < best[0]:
                        best = (wl, rects)
    return best[1] if best else None
