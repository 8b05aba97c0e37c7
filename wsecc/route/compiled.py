"""The router's inner loops, compiled with numba: committing a lane to the link grids (with the
prefix sums of the lines it changed), choosing a lane's cheapest pattern, and the maze search
(`search_to`: scipy's Dijkstra over reduced costs, step for step, stopped at the target).

Why compiled: the negotiation routes a lane thousands of times a call (6,803 routes of a lane
in the two calls of Llama 3.1 8B generate, bench/RESULTS.md, issue 34), and each route's work
is small loops over one path's links, a few rows and columns, and one window's jogs: in Python
and numpy each costs more in per-call overhead than in arithmetic.

The arithmetic is that of the numpy expressions in `wsecc.route.router._Negotiation` it
replaces, operation for operation (a link's cost base × (1 + pres · overuse-if-added); prefix
sums as running sums from the line's start, as `np.cumsum`; a pattern's cost as the sum of its
three segments' prefix differences, then its toll; the search's queue order and ties), so the
results are bit-identical.

Each exported function has one signature, compiled when this module is first imported after
an install and cached in the user's cache directory (`wsecc.compiled_cache.cache_dir`, the
one `wsecc.sim.compiled` uses): 4.4 s of CPU the first time on this 2-core machine. The helpers
have none: they are compiled into the functions that call them. Loading the four from the cache,
numba's import included, takes about 0.6 s of CPU (measured on the same machine), once per
process.
"""

from __future__ import annotations

import heapq

import numpy as np
from numba import config, njit, types

from wsecc.compiled_cache import use_for_numba

use_for_numba(config)

_i64, _f64, _bool = types.int64, types.float64, types.boolean
_F2 = types.Array(types.float64, 2, "C")
_F3 = types.Array(types.float64, 3, "C", readonly=True)
_I3 = types.Array(types.int32, 3, "C")
_IDS = types.Array(types.int64, 1, "C", readonly=True)
_RECTS = types.Array(types.int64, 2, "C", readonly=True)


@njit(nogil=True, cache=True, inline="always")
def _link_cost(base, usage, cap, pres, k, y, x):  # type: ignore[no-untyped-def]
    """Cost of adding one lane to link (k, y, x): `_Negotiation.link_cost`."""
    return base[k, y, x] * (1.0 + pres * max(0, usage[k, y, x] + 1 - cap))


@njit(nogil=True, cache=True, inline="always")
def _resum(usage, base, cap, pres, pe, pw, ps, pn, row_from, col_from):  # type: ignore[no-untyped-def]
    """The prefix sums of each row (E, W: `row_from[k, y]`) and column (S, N: `col_from[k - 2,
    x]`) from its first changed link on: `pe[y, x + 1]` = the cost of row y's E links 0..x
    summed in order from `pe[y, 0]` (`pw` W, along rows; `ps`, `pn` S and N, down the
    columns, [y + 1, x]), as `np.cumsum` of `_Negotiation.link_cost` sums them. A line's sums
    before its first changed link are unchanged, so starting from the one before it gives the
    same sums to the bit; index 0 of each line is never written (the arrays start zeroed)."""
    _, H, W = usage.shape
    for k in range(2):
        prefix = pe if k == 0 else pw
        for y in range(H):
            acc = prefix[y, row_from[k, y]]
            for x in range(row_from[k, y], W):
                acc += _link_cost(base, usage, cap, pres, k, y, x)
                prefix[y, x + 1] = acc
        prefix = ps if k == 0 else pn
        for x in range(W):
            acc = prefix[col_from[k, x], x]
            for y in range(col_from[k, x], H):
                acc += _link_cost(base, usage, cap, pres, k + 2, y, x)
                prefix[y + 1, x] = acc


@njit(
    types.void(_I3, _F3, _i64, _f64, _F2, _F2, _F2, _F2, _IDS, _i64),
    nogil=True,
    cache=True,
)
def commit(usage, base, cap, pres, pe, pw, ps, pn, ids, delta):  # type: ignore[no-untyped-def]
    """Add `delta` lanes to the links `ids` (flat indices of the (4, H, W) grids, E W S N) and
    bring the prefix sums of each row (E, W) or column (S, N) whose links changed up to date,
    from its first changed link on (`_resum`)."""
    _, H, W = usage.shape
    row_from = np.full((2, H), W, np.int64)  # first changed x per row; W: none
    col_from = np.full((2, W), H, np.int64)  # first changed y per column; H: none
    for i in range(ids.size):
        k, at = divmod(ids[i], H * W)
        y, x = divmod(at, W)
        usage[k, y, x] += delta
        if k < 2:
            row_from[k, y] = min(row_from[k, y], x)
        else:
            col_from[k - 2, x] = min(col_from[k - 2, x], y)
    _resum(usage, base, cap, pres, pe, pw, ps, pn, row_from, col_from)


@njit(types.void(_I3, _F3, _i64, _f64, _F2, _F2, _F2, _F2), nogil=True, cache=True)
def sum_lines(usage, base, cap, pres, pe, pw, ps, pn):  # type: ignore[no-untyped-def]
    """Every prefix sum (`_resum` of every line from its start)."""
    _, H, W = usage.shape
    zeros = np.zeros((2, H), np.int64), np.zeros((2, W), np.int64)
    _resum(usage, base, cap, pres, pe, pw, ps, pn, zeros[0], zeros[1])


@njit(nogil=True, cache=True, inline="always")
def _hrun(pe, pw, y, a, b):  # type: ignore[no-untyped-def]
    """Cost of running along row y from column a to b (either way): `_Negotiation.hcost`."""
    if b >= a:
        return pe[y, b] - pe[y, a]
    return pw[y, a + 1] - pw[y, b + 1]


@njit(nogil=True, cache=True, inline="always")
def _vrun(ps, pn, x, a, b):  # type: ignore[no-untyped-def]
    """Cost of running along column x from row a to b (either way): `_Negotiation.vcost`."""
    if b >= a:
        return ps[b, x] - ps[a, x]
    return pn[a + 1, x] - pn[b + 1, x]


@njit(nogil=True, cache=True, inline="always")
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
    (indexed [y, x]), S and N links (also [y, x], running down the columns). Costs, toll (per
    step inside a rectangle of `near`) and ties as `_Negotiation.pattern`: the first cheapest
    jog of each family, H-V-H over V-H-V when equal and `hvh_first`."""
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


# the link grids' directions, in `wsecc.route.router.DIRS` order: E, W, S, N
_DX = np.array([1, -1, 0, 0], np.int64)
_DY = np.array([0, 0, 1, -1], np.int64)


@njit(nogil=True, cache=True, inline="always")
def _link_inside(rects, k, y, x):  # type: ignore[no-untyped-def]
    """The rectangles of `rects` (rows x, y, w, h) holding both routers of link (k, y, x): the
    toll steps it counts for, as `wsecc.route.router._path_inside` per rectangle."""
    ax, ay = x + _DX[k], y + _DY[k]
    n = 0
    for r in range(rects.shape[0]):
        rx, ry, rw, rh = rects[r, 0], rects[r, 1], rects[r, 2], rects[r, 3]
        if rx <= min(x, ax) and max(x, ax) < rx + rw and ry <= min(y, ay) and max(y, ay) < ry + rh:
            n += 1
    return n


@njit(
    types.Tuple((types.Array(types.int64, 1, "C"), _f64))(
        _F3, _I3, _i64, _f64, _f64, _RECTS, _i64, _i64, _i64, _i64, _i64, _i64, _i64, _i64, _f64
    ),
    nogil=True,
    cache=True,
)
def search_to(base, usage, cap, pres, toll, near, bx, by, bw, bh, sx, sy, tx, ty, cost_to_beat):  # type: ignore[no-untyped-def]
    """The cheapest path from (sx, sy) to (tx, ty) inside the box (bx, by, bw, bh) of the link
    grids (area coordinates), if it costs less than `cost_to_beat`: (its PEs as box-local ids
    y·bw + x, from source to target; its cost), or (no PEs, inf).

    A*, as Dijkstra over reduced link costs c(u→v) − h(u) + h(v) with h the Manhattan distance
    to the target: every link costs at least 1, so reduced costs are ≥ 0. A link costs as in
    `commit` (`_link_cost`) plus `toll` per rectangle of `near` holding both its routers
    (`_link_inside`). It is the search `_Negotiation.maze_path` made with scipy's
    `dijkstra` (1.17, `_shortest_path.pyx`: a priority queue of (distance, PE), the nearest
    first and, among equally near, the highest PE id; a PE's links scanned E, W, S, N; a PE
    queued again only when its distance falls, and never beyond the limit cost_to_beat −
    h(source)), step for step, so it returns the same path; but it stops when it settles the
    target, where scipy's settles every PE within the limit (91% of each window on Llama 3.1
    8B generate, bench/RESULTS.md, issue 34). A settled PE's predecessor never changes again
    (costs are not negative), so stopping there leaves the path as it is.
    """
    n = bw * bh
    dist = np.full(n, np.inf)
    pred = np.full(n, -1, np.int64)
    src, dst = (sy - by) * bw + (sx - bx), (ty - by) * bw + (tx - bx)
    h_src = abs(sx - tx) + abs(sy - ty)
    limit = max(0.0, cost_to_beat - h_src)
    dist[src] = 0.0
    heap = [(0.0, -src)]  # (distance, −PE): heapq's least is scipy's queue's top
    while heap:
        d, neg = heapq.heappop(heap)
        v = -neg
        if dist[v] < d:
            continue  # queued again since, nearer: settled then
        if v == dst:
            break
        x, y = v % bw + bx, v // bw + by
        for k in range(4):
            ax, ay = x + _DX[k], y + _DY[k]
            if ax < bx or ax >= bx + bw or ay < by or ay >= by + bh:
                continue  # scipy's graph has a self-loop here, which never shortens a path
            c = _link_cost(base, usage, cap, pres, k, y, x)
            if near.shape[0]:
                c = c + toll * _link_inside(near, k, y, x)
            next_val = d + (c + ((abs(ax - tx) - abs(x - tx)) + (abs(ay - ty) - abs(y - ty))))
            u = (ay - by) * bw + (ax - bx)
            if next_val <= limit and dist[u] > next_val:
                dist[u] = next_val
                heapq.heappush(heap, (next_val, -u))
                pred[u] = v
    if not dist[dst] + h_src < cost_to_beat:
        return np.empty(0, np.int64), np.inf
    steps = 0
    u = dst
    while u != src:
        u = pred[u]
        steps += 1
    path = np.empty(steps + 1, np.int64)
    u = dst
    for i in range(steps, -1, -1):
        path[i] = u
        u = pred[u]
    return path, dist[dst] + h_src
