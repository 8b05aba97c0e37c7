"""The router's inner loops, compiled with numba: committing a lane to the link grids (with the
prefix sums of the lines it changed) and choosing a lane's cheapest pattern.

Why compiled: the negotiation routes a lane thousands of times a call (6,803 routes of a lane
in the two calls of Llama 3.1 8B generate, bench/RESULTS.md, issue 34), and each route's work
is small loops over one path's links, a few rows and columns, and one window's jogs: in Python
and numpy each costs more in per-call overhead than in arithmetic.

The arithmetic is that of the numpy expressions in `wsecc.route.router._Negotiation` it
replaces, operation for operation (a link's cost base × (1 + pres · overuse-if-added); prefix
sums as running sums from the line's start, as `np.cumsum`; a pattern's cost as the sum of its
three segments' prefix differences, then its toll), so the results are bit-identical.

Each function has one signature, compiled when this module is first imported after an install
and cached in the user's cache directory (`_cache_dir`, the one `wsecc.sim.compiled` uses);
later imports load them in a fraction of a second.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
from numba import config, njit, types


def _cache_dir() -> Path:
    """`wsecc.sim.compiled.cache_dir`, without importing the simulator's loops: the first of
    `WSECC_CACHE_DIR`, `$XDG_CACHE_HOME/wsecc`, `~/.cache/wsecc` whose `numba` folder can be
    written; else one in the temporary directory."""
    env = os.environ
    if env.get("WSECC_CACHE_DIR"):
        roots = [Path(env["WSECC_CACHE_DIR"])]
    else:
        xdg = env.get("XDG_CACHE_HOME")
        roots = [Path(xdg) / "wsecc"] if xdg else []
        roots.append(Path.home() / ".cache" / "wsecc")
    for root in roots:
        path = root / "numba"
        try:
            path.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=path).close()
            return path
        except OSError:
            continue
    return Path(tempfile.gettempdir()) / "wsecc-numba-cache"


if not config.CACHE_DIR:  # NUMBA_CACHE_DIR, if the user set it, wins
    config.CACHE_DIR = str(_cache_dir())

_i64, _f64, _bool = types.int64, types.float64, types.boolean
_F2 = types.Array(types.float64, 2, "C")
_F3 = types.Array(types.float64, 3, "C", readonly=True)
_I3 = types.Array(types.int32, 3, "C")
_IDS = types.Array(types.int64, 1, "C", readonly=True)
_RECTS = types.Array(types.int64, 2, "C", readonly=True)


@njit(_f64(_F3, _I3, _i64, _f64, _i64, _i64, _i64), nogil=True, cache=True, inline="always")
def _link_cost(base, usage, cap, pres, k, y, x):  # type: ignore[no-untyped-def]
    """Cost of adding one lane to link (k, y, x): `_Negotiation.link_cost`."""
    return base[k, y, x] * (1.0 + pres * max(0, usage[k, y, x] + 1 - cap))


@njit(
    types.void(_I3, _F3, _i64, _f64, _F2, _F2, _F2, _F2, _IDS, _i64),
    nogil=True,
    cache=True,
)
def commit(usage, base, cap, pres, pe, pw, ps, pn, ids, delta):  # type: ignore[no-untyped-def]
    """Add `delta` lanes to the links `ids` (flat indices of the (4, H, W) grids, E W S N) and
    recompute the prefix sums of each row (E, W) or column (S, N) whose links changed: `pe[y]`
    = 0 then the running sum of row y's E link costs (`pw` W, `ps`/`pn` a column's S/N links,
    along y), as `_Negotiation.flush` computes them."""
    _, H, W = usage.shape
    rows = np.zeros((2, H), np.bool_)
    cols = np.zeros((2, W), np.bool_)
    for i in range(ids.size):
        k, at = divmod(ids[i], H * W)
        y, x = divmod(at, W)
        usage[k, y, x] += delta
        if k < 2:
            rows[k, y] = True
        else:
            cols[k - 2, x] = True
    for k in range(2):
        prefix = pe if k == 0 else pw
        for y in range(H):
            if rows[k, y]:
                acc = 0.0
                for x in range(W):
                    acc += _link_cost(base, usage, cap, pres, k, y, x)
                    prefix[y, x + 1] = acc
        prefix = ps if k == 0 else pn
        for x in range(W):
            if cols[k, x]:
                acc = 0.0
                for y in range(H):
                    acc += _link_cost(base, usage, cap, pres, k + 2, y, x)
                    prefix[y + 1, x] = acc


@njit(_f64(_F2, _F2, _i64, _i64, _i64), nogil=True, cache=True, inline="always")
def _hrun(pe, pw, y, a, b):  # type: ignore[no-untyped-def]
    """Cost of running along row y from column a to b (either way): `_Negotiation.hcost`."""
    if b >= a:
        return pe[y, b] - pe[y, a]
    return pw[y, a + 1] - pw[y, b + 1]


@njit(_f64(_F2, _F2, _i64, _i64, _i64), nogil=True, cache=True, inline="always")
def _vrun(ps, pn, x, a, b):  # type: ignore[no-untyped-def]
    """Cost of running along column x from row a to b (either way): `_Negotiation.vcost`."""
    if b >= a:
        return ps[b, x] - ps[a, x]
    return pn[a + 1, x] - pn[b + 1, x]


@njit(_i64(_RECTS, _i64, _i64, _i64, _bool), nogil=True, cache=True)
def _inside(rects, a, b, at, vertical):  # type: ignore[no-untyped-def]
    """Unit steps from a to b along row `at` (column `at` if `vertical`) between two routers of
    one of `rects` (rows x, y, w, h), summed over the rectangles: `wsecc.route.router._inside`."""
    n = 0
    for r in range(rects.shape[0]):
        x, y, w, h = rects[r, 0], rects[r, 1], rects[r, 2], rects[r, 3]
        if vertical:
            x, y, w, h = y, x, h, w
        if y <= at < y + h:
            n += max(min(max(a, b), x + w - 1) - max(min(a, b), x), 0)
    return n


@njit(
    types.UniTuple(_i64, 2)(
        _F2, _F2, _F2, _F2, _f64, _RECTS, _i64, _i64, _i64, _i64, _i64, _i64, _i64, _i64, _bool
    ),
    nogil=True,
    cache=True,
)
def pattern(pe, pw, ps, pn, toll, near, bx0, by0, bx1, by1, x1, y1, x2, y2, hvh_first):  # type: ignore[no-untyped-def]
    """The cheapest pattern from (x1, y1) to (x2, y2) with its jog in the box [bx0, bx1] ×
    [by0, by1] (area coordinates, inclusive): (0, c) for H-V-H with its vertical run in column
    c, (1, r) for V-H-V with its horizontal run in row r, from the prefix sums of the E, W
    (indexed [y, x]), S and N links (also [y, x], running down the columns). Costs, toll (per step inside a rectangle of `near`) and ties as
    `_Negotiation.pattern`: the first cheapest jog of each family, H-V-H over V-H-V when equal
    and `hvh_first`."""
    has_near = near.shape[0] > 0
    best_h, arg_h = np.inf, bx0
    for c in range(bx0, bx1 + 1):
        cost = _hrun(pe, pw, y1, x1, c) + _vrun(ps, pn, c, y1, y2) + _hrun(pe, pw, y2, c, x2)
        if has_near:
            steps = (
                _inside(near, x1, c, y1, False)
                + _inside(near, y1, y2, c, True)
                + _inside(near, c, x2, y2, False)
            )
            cost = cost + toll * steps
        if cost < best_h:
            best_h, arg_h = cost, c
    best_v, arg_v = np.inf, by0
    for r in range(by0, by1 + 1):
        cost = _vrun(ps, pn, x1, y1, r) + _hrun(pe, pw, r, x1, x2) + _vrun(ps, pn, x2, r, y2)
        if has_near:
            steps = (
                _inside(near, y1, r, x1, True)
                + _inside(near, x1, x2, r, False)
                + _inside(near, r, y2, x2, True)
            )
            cost = cost + toll * steps
        if cost < best_v:
            best_v, arg_v = cost, r
    if best_h < best_v or (best_h == best_v and hvh_first):
        return 0, arg_h
    return 1, arg_v
