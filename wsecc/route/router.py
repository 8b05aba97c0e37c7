"""Router: pattern routes under PathFinder negotiated congestion, then DSatur lane coloring.

1. Every lane is routed by the cheapest *pattern*: H-V-H with its vertical jog in any column,
   or V-H-V with its horizontal jog in any row, within `detour` PEs outside the lane's bounding
   box. These include both dimension-order routes (XY: jog at the destination column; YX: jog
   at the source column), Z-shapes and U-shaped detours. Pattern costs are O(1) per jog from
   prefix sums of link costs along rows and columns, so one lane costs O(W + H); a straight
   lane has one pattern, the line.
2. PathFinder (McMurchie & Ebeling '95): link cost = (1 + history + router history)
   × (1 + pres · overuse-if-added). While a link carries more than `link_capacity` lanes, the
   lanes through overused links are ripped up and rerouted, history grows by the overuse and
   `pres` by `pres_mult` each iteration. From the second iteration on, a lane whose pattern
   would overuse a link takes the cheapest path in its window instead (A*) when that is cheaper.
3. Colors: the lane conflict graph (see `wsecc.route.problem`) is colored by DSatur. If it
   needs more than the budget, the routers where the overflowing lanes meet conflicts get
   history, those lanes and their conflicting neighbours are rerouted, and coloring repeats.
4. Tolls (optional, `Tolls`): a lane that carries more than a region's links have left in the
   stage time finds that region closed, and each step between two of its routers costs the
   lane `Tolls.per_link` more. Its window grows to hold each closed region it meets with
   `clearance` PEs around it, so its patterns and A* may go around. A lane crossing a region
   shares the links that region's own traffic uses (L0 adds the two, `wsecc.sim.perf`), so a
   crossing the region has no room for slows the whole pipeline.
5. Success returns a complete `Routing`; otherwise `RoutingError` names the router that
   proves (or, when the clique bound fits, witnesses) the shortfall, and carries where its
   lanes ended (`RoutingError.paths`). Never a partial routing.
6. Warm start (optional, `warm`): lanes whose (flow, ends) a previous attempt routed start on
   its paths, and the first iteration routes only the others; the negotiation then proceeds as
   from any first iteration (a retry after narrowing some flows need not route every lane
   again).
   The error comes after `max_iterations`, or sooner when the shortfall (link overuse, then
   colors over budget) is not falling fast enough to reach zero by then (`_Progress`): the
   flow retries narrower lanes after each failure, and a hopeless attempt is most of its time.

7. `cut_shortfalls` (not called by `route` or the compile): the column and row boundaries that
   the lanes that must cross them, each inside its window, cannot cross within link capacity.
   A shortfall proves an attempt fails before any search; on Llama 3.1 8B generate the first
   attempt fails with no boundary short (its congestion is where lanes cross and turn), so the
   check is a diagnostic (`bench/bench_route_attempts.py`), not a step of the flow.

No route leaves its lane's window (bounding box grown by `detour`, and by the closed regions
it meets, grown by `clearance`), so the negotiation's grids cover only the routing area, the
fabric rectangle holding every window.

Deterministic: no randomness, fixed orders, argmin ties to the first pattern.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import astuple, dataclass
from itertools import pairwise
from typing import Any

import numpy as np

from wsecc.place.problem import Placement
from wsecc.route.problem import (
    STEPS,
    Paths,
    Point,
    RoutedLane,
    Routing,
    RoutingError,
    RoutingProblem,
    edge_users,
    facing_sides,
    lane_endpoints,
    router_passes,
)

DIRS = tuple(STEPS)  # the first axis of the link grids: E, W (along rows), S, N (along columns)


@dataclass(frozen=True)
class RouterOptions:
    max_iterations: int = 40
    # Iterations over which progress is measured: a negotiation stops early when its shortfall
    # (link overuse, then colors over budget), falling at its rate over this many iterations,
    # would not reach zero within `max_iterations` (see `_Progress`).
    stall_window: int = 8
    detour: int = 16  # PEs a pattern's jog may stray outside the lane's bounding box
    clearance: int = 1  # PEs a lane's window reaches beyond a region closed to it (`Tolls`)
    pres_initial: float = 0.5
    pres_mult: float = 1.5
    history_step: float = 1.0


@dataclass(frozen=True)
class Tolls:
    """What crossing other kernels' regions costs a lane in the router.

    `room[kernel]`: the bytes per sample one more lane may carry through that kernel's region
    (a step between two of its routers, as `wsecc.route.problem.crossed_regions` counts) before
    the region's busiest link passes the stage time: (stage cycles − its own link cycles) ×
    link bytes per cycle (`wsecc.core.flow.region_tolls`). A lane carrying more (its flow's bytes
    over its lane count) finds the region closed and pays `per_link` for every such step, on
    top of the links' own cost; a kernel missing from `room`, and the lane's own source and
    destination, are open. At the default `per_link` of 1 a step inside a closed region costs
    twice a free link: a lane goes around when the way around adds fewer links than it would
    take inside, and crosses otherwise (then `wsecc.core.flow` widens its flow). A larger toll
    (tried: 2, 4, 16) sent more lanes around, crowded the channels between regions at ~85%
    fill, and routed worse (bench/RESULTS.md, "Lanes that go around")."""

    room: Mapping[str, float]
    per_link: float = 1.0


def _closed(
    problem: RoutingProblem, placement: Placement, tolls: Tolls | None
) -> dict[str, np.ndarray]:
    """Flow -> the regions closed to its lanes, as rows (x, y, w, h) in fabric coordinates."""
    if tolls is None:
        return {}
    names = [n for n in tolls.room if n in placement.rects]
    room = np.array([tolls.room[n] for n in names], float)
    rects = np.array([astuple(placement.rects[n]) for n in names], np.int64).reshape(-1, 4)
    out = {}
    for f in problem.flows:
        shut = (room < f.bytes_per_sample / f.lanes) & ~np.isin(names, [f.src, f.dst])
        out[f.name] = rects[shut]
    return out


def _path_inside(rects: np.ndarray, path: np.ndarray) -> int:
    """Steps of `path` (an (n, 2) array of points) between two routers of one of `rects`."""
    x, y, w, h = (rects[:, k] for k in range(4))
    px, py = path[:, :1], path[:, 1:]
    inside = (x <= px) & (px < x + w) & (y <= py) & (py < y + h)
    return int((inside[:-1] & inside[1:]).any(-1).sum())


def _meeting(rects: np.ndarray, box: tuple[int, int, int, int]) -> np.ndarray:
    """The rows of `rects` (x, y, w, h) that overlap `box` = (x0, y0, x1, y1), inclusive."""
    x0, y0, x1, y1 = box
    x, y, w, h = (rects[:, k] for k in range(4))
    return rects[(x <= x1) & (x + w > x0) & (y <= y1) & (y + h > y0)]


_NONE = np.zeros((0, 4), np.int64)  # no closed regions


def _window(
    area: tuple[int, int, int, int], s: Point, t: Point, shut: np.ndarray, opts: RouterOptions
) -> tuple[tuple[int, int, int, int], np.ndarray]:
    """The window of a lane from s to t (fabric coordinates) as (x0, y0, x1, y1), inclusive, in
    the coordinates of `area` (x0, y0, width, height): its bounding box grown by `detour`, and
    further to hold each closed region (`shut`, fabric coordinates) it meets grown by
    `clearance`; and those regions, in area coordinates. No route of the lane leaves it."""
    ax, ay, aw, ah = area
    (x1, y1), (x2, y2), m = (s[0] - ax, s[1] - ay), (t[0] - ax, t[1] - ay), opts.detour
    c = opts.clearance
    box = (min(x1, x2) - m, min(y1, y2) - m, max(x1, x2) + m, max(y1, y2) + m)
    near = _meeting(shut - [ax, ay, 0, 0], box)
    if len(near):
        x, y, w, h = (near[:, k] for k in range(4))
        box = (
            min(box[0], int(x.min()) - c), min(box[1], int(y.min()) - c),
            max(box[2], int((x + w).max()) - 1 + c), max(box[3], int((y + h).max()) - 1 + c),
        )  # fmt: skip
    x0, y0 = max(0, box[0]), max(0, box[1])
    return (x0, y0, min(aw - 1, box[2]), min(ah - 1, box[3])), near


class _Negotiation:
    """Per-call PathFinder state on the routing area `area` = (x0, y0, width, height): link
    usage and history, router history, and prefix sums of link costs along rows (E/W links)
    and columns (S/N links).

    Link grids are indexed (direction index in DIRS, y, x) in area coordinates; a link's id is
    its flat index. Points in and out are fabric coordinates. A commit recomputes the prefix
    sums of the rows and columns it changed (`wsecc.route.compiled.commit`); a change of
    history or `pres` recomputes them all (`refresh`, `negotiate`).
    """

    def __init__(
        self, area: tuple[int, int, int, int], capacity: int, opts: RouterOptions, toll: float = 0.0
    ):
        self.x0, self.y0, self.W, self.H = area
        from wsecc.route import compiled  # numba: loaded by the first routing, not on import

        self.compiled = compiled
        self.cap, self.opts, self.toll = capacity, opts, toll
        self.pres = opts.pres_initial
        shape = (len(DIRS), self.H, self.W)
        self.usage = np.zeros(shape, np.int32)
        self.flat = self.usage.reshape(-1)  # a view: usage by link id
        self.hist = np.zeros(shape)
        self.node_hist = np.zeros((self.H, self.W))
        self.step_id = {STEPS[d]: k * self.H * self.W for k, d in enumerate(DIRS)}
        self.prefix = [np.zeros((self.H, self.W + 1)) for _ in "EW"]
        self.prefix += [np.zeros((self.H + 1, self.W)) for _ in "SN"]
        self.refresh()

    def link_cost(self, at: tuple[Any, ...]) -> np.ndarray:
        """Cost of adding one lane to the links `at` (an index into the link grids)."""
        over = np.maximum(0, self.usage[at] + 1 - self.cap)
        return self.base[at] * (1.0 + self.pres * over)

    def refresh(self) -> None:
        """Recompute the router-history charge, the links' base costs and every prefix sum
        (after history or `pres` changed)."""
        # router history charged on the links entering the router
        self.into = np.stack(
            [np.roll(self.node_hist, (-STEPS[d][1], -STEPS[d][0]), axis=(0, 1)) for d in DIRS]
        )
        self.base = 1.0 + self.hist + self.into  # a link's cost before its overuse factor
        self.sum_every_line()

    def sum_every_line(self) -> None:
        """Recompute the prefix sums of every row and column: the running sums of `link_cost`
        (`wsecc.route.compiled.sum_lines`)."""
        self.compiled.sum_lines(self.usage, self.base, self.cap, self.pres, *self.prefix)

    def link_ids(self, path: Sequence[Point]) -> list[int]:
        """Ids of the links a path of unit steps takes."""
        W, x0, y0, step_id = self.W, self.x0, self.y0, self.step_id
        return [
            step_id[(b[0] - a[0], b[1] - a[1])] + (a[1] - y0) * W + a[0] - x0
            for a, b in pairwise(path)
        ]

    def link_at(self, link: int) -> tuple[Point, str]:
        """(router, direction) of a link id, in fabric coordinates."""
        k, y, x = np.unravel_index(link, self.usage.shape)
        return (int(x) + self.x0, int(y) + self.y0), DIRS[k]

    def commit(self, ids: Sequence[int], delta: int) -> None:
        """Add (delta=+1) or rip up (delta=−1) a lane by its link ids (each once) and recompute
        the prefix sums of the rows and columns they are on."""
        self.compiled.commit(
            self.usage, self.base, self.cap, self.pres, *self.prefix,
            np.asarray(ids, np.int64), delta,
        )  # fmt: skip

    def best_path(
        self, s: Point, t: Point, hvh_first: bool, shut: np.ndarray = _NONE
    ) -> tuple[tuple[Point, ...], list[int]]:
        """A simple path from s to t and its link ids: the cheapest pattern (the straight line
        when s and t share a row or column and no closed region is near); from the second
        iteration on, if that would overuse a link, the cheapest path in the lane's window
        when it costs less. `shut`: the regions closed to this lane (rows x, y, w, h)."""
        _, near = self.window(s, t, shut)
        if (s[0] == t[0] or s[1] == t[1]) and not len(near):
            path = _polyline([s, t])
        else:
            path = self.pattern(s, t, hvh_first, shut)
        ids = self.link_ids(path)
        if self.pres > self.opts.pres_initial and self.would_overuse(ids):
            cost = float(self.link_cost(np.unravel_index(ids, self.usage.shape)).sum())
            cost += self.toll * _path_inside(near, np.array(path) - [self.x0, self.y0])
            maze = self.maze_path(s, t, cost, shut)
            if maze:
                return maze, self.link_ids(maze)
        return path, ids

    def window(
        self, s: Point, t: Point, shut: np.ndarray
    ) -> tuple[tuple[int, int, int, int], np.ndarray]:
        """The window of a lane from s to t (fabric coordinates) as (x0, y0, x1, y1),
        inclusive, in area coordinates, and the closed regions it meets (`_window`)."""
        return _window((self.x0, self.y0, self.W, self.H), s, t, shut, self.opts)

    def pattern(
        self, s: Point, t: Point, hvh_first: bool, shut: np.ndarray = _NONE
    ) -> tuple[Point, ...]:
        """Cheapest H-V-H or V-H-V pattern from s to t with its jog in the lane's window, the
        closed regions (`shut`) charged their toll.

        Ties go to the family named by `hvh_first`, then to the smallest jog coordinate; with
        `_lane_order` this nests the lanes of one flow instead of crossing them.
        """
        box, near = self.window(s, t, shut)
        (x1, y1), (x2, y2) = self.local(s), self.local(t)
        family, jog = self.compiled.pattern(
            *self.prefix, self.toll, near if len(near) else _NONE, *box, x1, y1, x2, y2, hvh_first
        )
        if family == 0:
            corners = [(x1, y1), (jog, y1), (jog, y2), (x2, y2)]
        else:
            corners = [(x1, y1), (x1, jog), (x2, jog), (x2, y2)]
        return _polyline([(x + self.x0, y + self.y0) for x, y in corners])

    def local(self, p: Point) -> Point:
        return p[0] - self.x0, p[1] - self.y0

    def would_overuse(self, ids: list[int]) -> bool:
        return bool((self.flat[ids] >= self.cap).any())

    def maze_path(
        self, s: Point, t: Point, cost_to_beat: float, shut: np.ndarray = _NONE
    ) -> tuple[Point, ...] | None:
        """The cheapest path from s to t within the lane's window, the closed regions (`shut`)
        charged their toll, if it costs less than `cost_to_beat`; else None.

        A* (`wsecc.route.compiled.search_to`): Dijkstra over reduced link costs
        c(u→v) − h(u) + h(v), h = Manhattan distance to t. Every link costs at least 1, so h is
        consistent, reduced costs are ≥ 0, and no PE with g + h > cost_to_beat is queued. It
        takes scipy's Dijkstra's steps and ties (so the same path), but stops at t. Its box is
        the part of the window within reach (`_within_reach`): the PEs a cheaper path may pass.
        """
        box, near = self.window(s, t, shut)
        (sx, sy), (tx, ty) = self.local(s), self.local(t)
        x0, y0, x1, y1 = _within_reach(box, (sx, sy), (tx, ty), cost_to_beat)
        w = x1 + 1 - x0
        path, _ = self.compiled.search_to(
            self.base, self.usage, self.cap, self.pres, self.toll, near if len(near) else _NONE,
            x0, y0, w, y1 + 1 - y0, sx, sy, tx, ty, float(cost_to_beat),
        )  # fmt: skip
        if not len(path):
            return None
        ox, oy = self.x0 + x0, self.y0 + y0
        return tuple((ox + v % w, oy + v // w) for v in path.tolist())

    def overuse(self) -> int:
        """Lanes beyond capacity, summed over the links."""
        over = np.flatnonzero(self.flat > self.cap)
        return int((self.flat[over] - self.cap).sum())

    def overused(self) -> set[int]:
        """Ids of the links carrying more than `capacity` lanes."""
        return set(np.flatnonzero(self.flat > self.cap).tolist())

    def negotiate(self, hot_routers: list[Point]) -> None:
        """End of an iteration: history += overuse (and += step at hot routers), pres grows.

        Only the overused links' history and base cost change (and, with hot routers, the
        router-history charge everywhere): the same numbers as recomputing every link, without
        a pass over the whole area for each; every prefix sum is recomputed (pres changed)."""
        over = np.flatnonzero(self.flat > self.cap)
        hist, base = self.hist.reshape(-1), self.base.reshape(-1)  # views: both contiguous
        hist[over] += self.opts.history_step * (self.flat[over] - self.cap)
        for x, y in hot_routers:
            self.node_hist[y - self.y0, x - self.x0] += self.opts.history_step
        self.pres *= self.opts.pres_mult
        if hot_routers:
            self.refresh()
            return
        base[over] = 1.0 + hist[over] + self.into.reshape(-1)[over]
        self.sum_every_line()


class _Progress:
    """The shortfall of each iteration, to stop a negotiation that is not converging.

    The shortfall is the total link overuse while there is any, then the colors needed beyond
    the budget; each phase is judged on its own. Stop when the best shortfall, falling at the
    rate it fell over the last `stall_window` iterations (at least one per window), would still
    be above zero after the remaining iterations. Negotiation slows down as it goes, so the
    straight line is optimistic: an attempt it stops would not have routed within
    `max_iterations` at the pace it was going.
    """

    def __init__(self, opts: RouterOptions):
        self.opts = opts
        self.phase = ""
        self.best: list[int] = []  # best shortfall of the phase so far, per iteration

    def hopeless(self, iteration: int, phase: str, shortfall: int) -> bool:
        if phase != self.phase:
            self.phase, self.best = phase, []
        self.best.append(min(shortfall, self.best[-1]) if self.best else shortfall)
        w = self.opts.stall_window
        if len(self.best) <= w:
            return False
        # at least one unit per window: a small shortfall on a plateau may still be negotiated
        rate = max(self.best[-1 - w] - self.best[-1], 1) / w
        return self.best[-1] > rate * (self.opts.max_iterations - iteration)


def _area(
    lanes: list[tuple[str, int, Point, Point]],
    width: int,
    height: int,
    opts: RouterOptions,
    shut: Sequence[np.ndarray] = (),
) -> tuple[int, int, int, int]:
    """(x0, y0, width, height) of the fabric rectangle holding every lane's window: its
    bounding box grown by `opts.detour`, and every closed region (rows x, y, w, h of `shut`)
    grown by `opts.clearance`."""
    margin, c = opts.detour, opts.clearance
    xs = [p[0] for _, _, s, t in lanes for p in (s, t)] or [0]
    ys = [p[1] for _, _, s, t in lanes for p in (s, t)] or [0]
    x0, y0 = max(0, min(xs) - margin), max(0, min(ys) - margin)
    x1, y1 = min(width, max(xs) + margin + 1), min(height, max(ys) + margin + 1)
    closed = np.concatenate([np.zeros((0, 4), np.int64), *shut])
    if len(closed):
        x, y, w, h = (closed[:, k] for k in range(4))
        x0, y0 = max(0, min(x0, int(x.min()) - c)), max(0, min(y0, int(y.min()) - c))
        x1, y1 = (
            min(width, max(x1, int((x + w).max()) + c)),
            min(height, max(y1, int((y + h).max()) + c)),
        )
    return x0, y0, x1 - x0, y1 - y0


def _lane_order(ends: list[tuple[Point, Point]]) -> list[tuple[int, tuple[Point, Point]]]:
    """(lane index, ends) in routing order: when the lanes shift along and across the edge in
    the same sense (east and south, or west and north), the last lane first, else the first.

    Routed in this order with ties to the smallest jog, a flow's lanes nest (no crossings).
    """
    (sx, sy), (tx, ty) = ends[0]
    same_sense = (tx - sx) * (ty - sy) > 0
    order = list(enumerate(ends))
    return order[::-1] if same_sense else order


def _within_reach(
    box: tuple[int, int, int, int], s: Point, t: Point, cost_to_beat: float
) -> tuple[int, int, int, int]:
    """The part of `box` (x0, y0, x1, y1, inclusive) where a path from s to t costing less than
    `cost_to_beat` may go: every link costs at least 1, so a path through a PE d columns (or
    rows) outside the bounding box of s and t is at least 2·d longer than their Manhattan
    distance. `maze_path` searches this part only: its search allocates its arrays for every
    PE of its box, and a lane's window (its bounding box grown by `RouterOptions.detour`) is
    often wider than any path that could beat the pattern; the PEs left out are those its
    search would never queue, so the path found is the same."""
    slack = max(0.0, cost_to_beat - abs(s[0] - t[0]) - abs(s[1] - t[1]))
    if not math.isfinite(slack):
        return box
    d = int(slack // 2) + 1  # one PE more than the farthest a cheaper path may stray
    return (
        max(box[0], min(s[0], t[0]) - d),
        max(box[1], min(s[1], t[1]) - d),
        min(box[2], max(s[0], t[0]) + d),
        min(box[3], max(s[1], t[1]) + d),
    )


def _polyline(corners: list[Point]) -> tuple[Point, ...]:
    """The unit steps through `corners`, each sharing a row or a column with the one before."""
    path = [corners[0]]
    for (ax, ay), (bx, by) in pairwise(corners):
        if ay == by and ax != bx:
            step = 1 if bx > ax else -1
            path += [(x, ay) for x in range(ax + step, bx + step, step)]
        elif ax == bx and ay != by:
            step = 1 if by > ay else -1
            path += [(ax, y) for y in range(ay + step, by + step, step)]
        elif ax != bx:
            raise ValueError(f"corners {(ax, ay)} and {(bx, by)} share no row or column")
    return tuple(path)


# ----------------------------------------------------------------------------------- coloring


_RAMP_STEP = 9  # a step code (dx + 1)·3 + (dy + 1) is 1, 3, 5 or 7; the ramp is 9


@dataclass(frozen=True)
class _Passes:
    """Every (router, lane, configuration) of a set of lanes as arrays sorted by router (stable:
    lanes in index order at a router). A router's key is x·2^20 + y, so key order is point
    order. A configuration is coded by its (arriving step, leaving step), which determines
    (in, out)."""

    router: np.ndarray
    lane: np.ndarray
    flow: np.ndarray
    config: np.ndarray

    @staticmethod
    def of(lanes: Sequence[RoutedLane]) -> _Passes:
        flow_ids: dict[str, int] = {}
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for ln in lanes:
            if not ln.path:
                continue
            p = np.array(ln.path, dtype=np.int64).reshape(-1, 2)
            d = np.diff(p, axis=0)
            step = (d[:, 0] + 1) * 3 + d[:, 1] + 1
            ramp = np.array([_RAMP_STEP])
            parts.append(
                (
                    (p[:, 0] << 20) + p[:, 1],
                    np.concatenate([ramp, step]) * 10 + np.concatenate([step, ramp]),
                    np.full(len(p), flow_ids.setdefault(ln.flow, len(flow_ids))),
                )
            )
        if not parts:
            empty = np.zeros(0, np.int64)
            return _Passes(empty, empty, empty, empty)
        counts = [len(pk[0]) for pk in parts]
        index = [i for i, ln in enumerate(lanes) if ln.path]
        router = np.concatenate([pk[0] for pk in parts])
        order = np.argsort(router, kind="stable")
        return _Passes(
            router[order],
            np.repeat(np.array(index), counts)[order],
            np.concatenate([pk[2] for pk in parts])[order],
            np.concatenate([pk[1] for pk in parts])[order],
        )

    def conflicts(self, n: int) -> list[set[int]]:
        """adj[i] for lanes 0..n−1: see `conflict_graph`."""
        adj: list[set[int]] = [set() for _ in range(n)]
        for gap in range(1, len(self.router)):  # pairs `gap` apart within one router's run
            a, b = slice(0, -gap), slice(gap, None)
            same = self.router[a] == self.router[b]
            if not same.any():
                break
            same &= (self.flow[a] != self.flow[b]) | (self.config[a] != self.config[b])
            for i, j in zip(self.lane[a][same].tolist(), self.lane[b][same].tolist(), strict=True):
                adj[i].add(j)
                adj[j].add(i)
        return adj

    def shared(self, some: Iterable[int], others: Iterable[int]) -> list[Point]:
        """Routers that a lane of `some` and a lane of `others` both pass, in point order."""
        a = self.router[np.isin(self.lane, np.fromiter(some, np.int64))]
        b = self.router[np.isin(self.lane, np.fromiter(others, np.int64))]
        return [(k >> 20, k & ((1 << 20) - 1)) for k in np.intersect1d(a, b).tolist()]


def conflict_graph(lanes: tuple[RoutedLane, ...]) -> list[set[int]]:
    """adj[i] = lanes that share a router with lane i under a different (flow, configuration)."""
    return _Passes.of(lanes).conflicts(len(lanes))


def dsatur(adj: list[set[int]]) -> list[int]:
    """Greedy coloring, most-saturated vertex first (Brélaz '79); ties: degree, then index.

    Guarantees: adjacent vertices get different colors; colors are 0..k−1 with no gaps.
    O((V + E) log V) with a lazy heap.
    """
    color = [-1] * len(adj)
    seen: list[set[int]] = [set() for _ in adj]
    heap = [(0, -len(adj[v]), v) for v in range(len(adj))]
    heapq.heapify(heap)
    while heap:
        neg_sat, _, v = heapq.heappop(heap)
        if color[v] >= 0 or -neg_sat != len(seen[v]):
            continue  # stale entry
        c = 0
        while c in seen[v]:
            c += 1
        color[v] = c
        for u in adj[v]:
            if color[u] < 0 and c not in seen[u]:
                seen[u].add(c)
                heapq.heappush(heap, (-len(seen[u]), -len(adj[u]), u))
    return color


# ------------------------------------------------------------------------------------- router


def route(
    problem: RoutingProblem,
    placement: Placement,
    options: RouterOptions | None = None,
    tolls: Tolls | None = None,
    warm: Paths | None = None,
) -> Routing:
    """Route and color every lane of every flow within the color budget and link capacity,
    paying `tolls` for crossing regions that have no room for a lane. `warm`: paths of a
    previous attempt by (flow, source, destination); a lane found there (inside this routing's
    area) starts on its path and is rerouted only when the negotiation rips it up, so the caller
    must leave out the flows whose closed regions (`tolls`: bytes per lane) changed.

    Guarantees: the result passes `validate_routing(problem, placement, ·)`; otherwise
    `RoutingError` (one line: router, colors needed vs budget, flows and their ONNX nodes).
    """
    opts = options or RouterOptions()
    users = edge_users(problem.flows, placement)
    lanes = [
        (f.name, k, s, t)
        for fi, f in enumerate(problem.flows)
        for k, (s, t) in _lane_order(lane_endpoints(problem, placement, users, fi))
    ]
    horizontal = {
        f.name: facing_sides(placement.rects[f.src], placement.rects[f.dst])[0] in "EW"
        for f in problem.flows
    }
    shut = _closed(problem, placement, tolls)
    area = _area(lanes, problem.width, problem.height, opts, [*shut.values()])
    net = _Negotiation(area, problem.link_capacity, opts, tolls.per_link if tolls else 0.0)
    paths: list[tuple[Point, ...]] = [()] * len(lanes)
    ids: list[list[int]] = [[] for _ in lanes]  # each path's link ids
    todo = _warm_start(lanes, warm or {}, area, net, paths, ids)
    colored: tuple[RoutedLane, ...] = ()
    progress = _Progress(opts)
    for iteration in range(1, opts.max_iterations + 1):
        for i in todo:
            net.commit(ids[i], -1)
            f, _, s, t = lanes[i]
            paths[i], ids[i] = net.best_path(s, t, horizontal[f], shut.get(f, _NONE))
            net.commit(ids[i], +1)
        overused = net.overused()
        if overused:
            if progress.hopeless(iteration, "links", net.overuse()):
                break
            todo = [i for i, li in enumerate(ids) if not overused.isdisjoint(li)]
            net.negotiate([])
            continue
        routed = tuple(RoutedLane(f, k, p, 0) for (f, k, _, _), p in zip(lanes, paths, strict=True))
        passes = _Passes.of(routed)
        adj = passes.conflicts(len(routed))
        colors = dsatur(adj)
        colored = tuple(
            RoutedLane(ln.flow, ln.index, ln.path, c) for ln, c in zip(routed, colors, strict=True)
        )
        over = [i for i, c in enumerate(colors) if c >= problem.color_budget]
        if not over:
            return Routing.of(colored, problem.color_budget, iteration)
        if progress.hopeless(iteration, "colors", max(colors) + 1 - problem.color_budget):
            break
        # history on the routers where an overflowing lane meets the lanes it conflicts with
        hot = passes.shared(over, {j for i in over for j in adj[i]})
        todo = sorted(set(over) | {j for i in over for j in adj[i]})
        net.negotiate(hot)
    ended = {(f, s, t): p for (f, _, s, t), p in zip(lanes, paths, strict=True)}
    raise RoutingError(*_failure(problem, ids, lanes, colored, net), paths=ended)


def _warm_start(
    lanes: list[tuple[str, int, Point, Point]],
    warm: Paths,
    area: tuple[int, int, int, int],
    net: _Negotiation,
    paths: list[tuple[Point, ...]],
    ids: list[list[int]],
) -> list[int]:
    """Put each lane that `warm` holds a path for (one inside `area`, from its source to its
    destination) on that path, committed to `net`; the indices of the lanes left to route."""
    x0, y0, w, h = area
    todo = []
    for i, (f, _, s, t) in enumerate(lanes):
        path = warm.get((f, s, t), ())
        if len(path) < 2 or path[0] != s or path[-1] != t:
            todo.append(i)
            continue
        if not all(x0 <= x < x0 + w and y0 <= y < y0 + h for x, y in path):
            todo.append(i)
            continue
        paths[i], ids[i] = path, net.link_ids(path)
        net.commit(ids[i], +1)
    return todo


def _failure(
    problem: RoutingProblem,
    ids: list[list[int]],
    lanes: list[tuple[str, int, Point, Point]],
    colored: tuple[RoutedLane, ...],
    net: _Negotiation,
) -> tuple[str, list[str]]:
    """One line naming the router that shows why routing failed and the flows crossing it; and
    the flows to narrow: those crossing any overloaded link, or that router's."""
    flows = {f.name: f for f in problem.flows}

    def crossing(names: Iterable[str]) -> str:
        return ", ".join(
            f"{n} [{', '.join(flows[n].onnx_nodes) or 'no onnx nodes'}]" for n in sorted(set(names))
        )

    over = net.overused()
    if over:
        worst = int(net.flat.argmax())
        (x, y), d = net.link_at(worst)
        names = [lanes[i][0] for i, li in enumerate(ids) if worst in li]
        every = [lanes[i][0] for i, li in enumerate(ids) if not over.isdisjoint(li)]
        return (
            f"cannot route within link capacity {problem.link_capacity}: link from router "
            f"({x}, {y}) going {d} needs {len(names)} lanes; flows crossing it: {crossing(names)}"
        ), every
    r = Routing.of(colored, problem.color_budget, 0)
    passes = router_passes(r.lanes)
    budget = problem.color_budget

    def colors_at(at: Point) -> int:
        return len({r.lanes[i].color for i, _ in passes[at]})

    if r.color_lower_bound > budget:
        at = r.lower_bound_router
        what = (
            f"router ({at[0]}, {at[1]}) has {r.color_lower_bound} mutually conflicting lanes, "
            f"so needs {r.color_lower_bound} colors, budget {budget}"
        )
    else:  # witness: the router seeing the most colors on a lane whose color is over budget
        at = max(
            sorted({a for ln in r.lanes if ln.color >= budget for a in ln.path}), key=colors_at
        )
        what = (
            f"the lane coloring needs {max(ln.color for ln in r.lanes) + 1} colors, budget "
            f"{budget} (no router alone needs more than {r.color_lower_bound}); router "
            f"({at[0]}, {at[1]}) sees the most colors ({colors_at(at)})"
        )
    flow_names = [r.lanes[i].flow for i, _ in passes[at]]
    return (
        f"cannot route within {budget} colors: {what}; flows crossing it: {crossing(flow_names)}"
    ), flow_names


# ------------------------------------------------------------------------------ capacity check


@dataclass(frozen=True)
class CutShortfall:
    """A boundary that cannot carry the lanes that must cross it one way.

    `axis` "x": the links going `direction` (E or W) between columns `at` and `at` + 1;
    "y": those going S or N between rows `at` and `at` + 1 (fabric coordinates). `lanes` must
    cross it that way inside their windows and `short` of them find no link there; `flows`
    are theirs, sorted."""

    axis: str
    direction: str
    at: int
    lanes: int
    short: int
    flows: tuple[str, ...]


def cut_shortfalls(
    problem: RoutingProblem,
    placement: Placement,
    options: RouterOptions | None = None,
    tolls: Tolls | None = None,
) -> list[CutShortfall]:
    """The boundaries between two columns or two rows of the fabric that the lanes cannot
    cross within link capacity: a necessary condition for `route` (same options and tolls),
    checked without any search.

    A lane from s to t with s.x < t.x takes at least one E link across every boundary between
    columns x and x + 1 with s.x ≤ x < t.x (W, S and N alike), in a row of its window (no
    route leaves it: bounding box grown by `detour`, and by the closed regions it meets), and a
    link carries at most `link_capacity` lanes. So the lanes crossing one boundary one way,
    each confined to an interval of rows, fit only if each can be given a row with at most
    `link_capacity` lanes to a row; `_unplaced` counts exactly how many cannot. A shortfall
    proves that `route` fails; none proves nothing (lanes also take links along the boundary,
    cross each other's ways and need colors). On Llama 3.1 8B generate (wse3) the router's
    first attempt fails while no boundary is short (bench/RESULTS.md, issue 34, route7)."""
    opts = options or RouterOptions()
    users = edge_users(problem.flows, placement)
    lanes = [
        (f.name, s, t)
        for fi, f in enumerate(problem.flows)
        for s, t in lane_endpoints(problem, placement, users, fi)
    ]
    shut = _closed(problem, placement, tolls)
    area = _area(
        [(f, 0, s, t) for f, s, t in lanes], problem.width, problem.height, opts, [*shut.values()]
    )
    ax, ay = area[0], area[1]
    crossing: dict[tuple[str, str, int], list[tuple[int, int, str]]] = {}
    for f, s, t in lanes:
        (x0, y0, x1, y1), _ = _window(area, s, t, shut.get(f, _NONE), opts)
        for axis, a, b, lo, hi, way in (
            ("x", s[0], t[0], y0 + ay, y1 + ay, "EW"),
            ("y", s[1], t[1], x0 + ax, x1 + ax, "SN"),
        ):
            d = way[0] if b > a else way[1]
            for at in range(min(a, b), max(a, b)):
                crossing.setdefault((axis, d, at), []).append((lo, hi, f))
    out = []
    for (axis, d, at), spans in sorted(crossing.items()):
        if len(spans) <= problem.link_capacity:
            continue
        short = _unplaced([(lo, hi) for lo, hi, _ in spans], problem.link_capacity)
        if short:
            flows = tuple(sorted({f for _, _, f in spans}))
            out.append(CutShortfall(axis, d, at, len(spans), short, flows))
    return out


def _unplaced(spans: Sequence[tuple[int, int]], capacity: int) -> int:
    """How many of the spans [lo, hi] (inclusive integer intervals) cannot each be given a
    position inside them when a position takes at most `capacity` of them: earliest deadline
    first (sweep the positions in order, give each to the spans open there that end soonest)
    places as many as any assignment can."""
    todo = sorted(spans)
    ends: list[int] = []
    short, i, pos = 0, 0, 0
    while i < len(todo) or ends:
        if not ends:
            pos = max(pos, todo[i][0])
        while i < len(todo) and todo[i][0] <= pos:
            heapq.heappush(ends, todo[i][1])
            i += 1
        while ends and ends[0] < pos:
            heapq.heappop(ends)
            short += 1
        for _ in range(min(capacity, len(ends))):
            heapq.heappop(ends)
        pos += 1
    return short
