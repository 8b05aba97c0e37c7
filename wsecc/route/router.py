"""Router: pattern routes under PathFinder negotiated congestion, then DSatur lane coloring.

1. Every lane is routed by the cheapest *pattern*: H-V-H with its vertical jog in any column,
   or V-H-V with its horizontal jog in any row, within `detour` PEs outside the lane's bounding
   box. These include both dimension-order routes (XY: jog at the destination column; YX: jog
   at the source column), Z-shapes and U-shaped detours. Pattern costs are O(1) per jog from
   prefix sums of link costs along rows and columns, so one lane costs O(W + H).
2. PathFinder (McMurchie & Ebeling '95): link cost = (1 + history + router history)
   × (1 + pres · overuse-if-added). While a link carries more than `link_capacity` lanes, the
   lanes through overused links are ripped up and rerouted, history grows by the overuse and
   `pres` by `pres_mult` each iteration.
3. Colors: the lane conflict graph (see `wsecc.route.problem`) is colored by DSatur. If it
   needs more than the budget, the routers where the overflowing lanes meet conflicts get
   history, those lanes and their conflicting neighbours are rerouted, and coloring repeats.
4. Success returns a complete `Routing`; otherwise `RoutingError` names the router that
   proves (or, when the clique bound fits, witnesses) the shortfall. Never a partial routing.

Deterministic: no randomness, fixed orders, argmin ties to the first pattern.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from wsecc.place.problem import Placement
from wsecc.route.problem import (
    STEPS,
    Point,
    RoutedLane,
    Routing,
    RoutingError,
    RoutingProblem,
    edge_users,
    facing_sides,
    lane_endpoints,
    links,
    router_passes,
)


@dataclass(frozen=True)
class RouterOptions:
    max_iterations: int = 40
    detour: int = 16  # PEs a pattern's jog may stray outside the lane's bounding box
    pres_initial: float = 0.5
    pres_mult: float = 1.5
    history_step: float = 1.0


class _Negotiation:
    """Per-call PathFinder state: link usage and history per direction, router history, and
    prefix sums of link costs (rows for E/W links, columns for S/N links)."""

    def __init__(self, width: int, height: int, capacity: int, opts: RouterOptions):
        self.W, self.H, self.cap, self.opts = width, height, capacity, opts
        self.pres = opts.pres_initial
        self.usage = {d: np.zeros((height, width), np.int32) for d in STEPS}
        self.hist = {d: np.zeros((height, width)) for d in STEPS}
        self.node_hist = np.zeros((height, width))
        self.prefix: dict[str, np.ndarray] = {}
        self.refresh()

    def link_cost(self, d: str, rows: slice | int = slice(None), cols: slice | int = slice(None)):
        """Cost of adding one lane to links leaving (rows, cols) in direction d."""
        over = np.maximum(0, self.usage[d][rows, cols] + 1 - self.cap)
        base = 1.0 + self.hist[d][rows, cols] + self.into[d][rows, cols]
        return base * (1.0 + self.pres * over)

    def refresh(self) -> None:
        """Recompute every prefix sum (after history or `pres` changed)."""
        sx_sy = {d: (-sy, -sx) for d, (sx, sy) in STEPS.items()}
        # router history charged on the links entering the router
        self.into = {d: np.roll(self.node_hist, sx_sy[d], axis=(0, 1)) for d in STEPS}
        for d in "EW":
            self.prefix[d] = np.zeros((self.H, self.W + 1))
            self.prefix[d][:, 1:] = np.cumsum(self.link_cost(d), axis=1)
        for d in "SN":
            self.prefix[d] = np.zeros((self.H + 1, self.W))
            self.prefix[d][1:, :] = np.cumsum(self.link_cost(d), axis=0)

    def commit(self, path: tuple[Point, ...], delta: int) -> None:
        """Add (delta=+1) or rip up (delta=−1) a lane; refresh only the lines it touched."""
        lines = set()
        for a, d in links(path):
            self.usage[d][a[1], a[0]] += delta
            lines.add((d, a[1] if d in "EW" else a[0]))
        for d, k in sorted(lines):
            if d in "EW":
                self.prefix[d][k, 1:] = np.cumsum(self.link_cost(d, k, slice(None)))
            else:
                self.prefix[d][1:, k] = np.cumsum(self.link_cost(d, slice(None), k))

    def hcost(self, y, xa, xb):
        """Cost of running along row(s) y from column xa to xb (either way); vectorised."""
        pe, pw = self.prefix["E"], self.prefix["W"]
        return np.where(xb >= xa, pe[y, xb] - pe[y, xa], pw[y, xa + 1] - pw[y, xb + 1])

    def vcost(self, x, ya, yb):
        """Cost of running along column(s) x from row ya to yb (either way); vectorised."""
        ps, pn = self.prefix["S"], self.prefix["N"]
        return np.where(yb >= ya, ps[yb, x] - ps[ya, x], pn[ya + 1, x] - pn[yb + 1, x])

    def best_path(self, s: Point, t: Point, hvh_first: bool) -> tuple[Point, ...]:
        """Cheapest H-V-H or V-H-V pattern from s to t (a simple path).

        Ties go to the family named by `hvh_first`, then to the smallest jog coordinate; with
        `_lane_order` this nests the lanes of one flow instead of crossing them.
        """
        (x1, y1), (x2, y2), m = s, t, self.opts.detour
        # A jog outside the box on a straight lane would revisit PEs: allow it only off-axis.
        cs = _jogs(x1, x2, m if y1 != y2 else 0, self.W)
        rs = _jogs(y1, y2, m if x1 != x2 else 0, self.H)
        hvh = self.hcost(y1, x1, cs) + self.vcost(cs, y1, y2) + self.hcost(y2, cs, x2)
        vhv = self.vcost(x1, y1, rs) + self.hcost(rs, x1, x2) + self.vcost(x2, rs, y2)
        i, j = int(np.argmin(hvh)), int(np.argmin(vhv))
        if hvh[i] < vhv[j] or (hvh[i] == vhv[j] and hvh_first):
            c = int(cs[i])
            path = _polyline([(x1, y1), (c, y1), (c, y2), (x2, y2)])
        else:
            r = int(rs[j])
            path = _polyline([(x1, y1), (x1, r), (x2, r), (x2, y2)])
        if self.pres > self.opts.pres_initial and self.would_overuse(path):
            return self.maze_path(s, t, min(hvh[i], vhv[j])) or path
        return path

    def would_overuse(self, path: tuple[Point, ...]) -> bool:
        return any(self.usage[d][a[1], a[0]] >= self.cap for a, d in links(path))

    def maze_path(self, s: Point, t: Point, cost_to_beat: float) -> tuple[Point, ...] | None:
        """Dijkstra over the lane's bounding box grown by `detour`, for lanes no pattern
        routes without overuse (from the second iteration on). None unless cheaper."""
        m = self.opts.detour
        x0, x1 = max(0, min(s[0], t[0]) - m), min(self.W - 1, max(s[0], t[0]) + m)
        y0, y1 = max(0, min(s[1], t[1]) - m), min(self.H - 1, max(s[1], t[1]) + m)
        win = (slice(y0, y1 + 1), slice(x0, x1 + 1))
        cost = {d: self.link_cost(d, *win) for d in STEPS}
        dist, prev = {s: 0.0}, {}
        heap = [(0.0, s)]
        while heap:
            du, u = heapq.heappop(heap)
            if u == t:
                break
            if du > dist[u]:
                continue
            for d, (sx, sy) in STEPS.items():
                v = (u[0] + sx, u[1] + sy)
                if not (x0 <= v[0] <= x1 and y0 <= v[1] <= y1):
                    continue
                dv = du + float(cost[d][u[1] - y0, u[0] - x0])
                if dv < dist.get(v, np.inf):
                    dist[v], prev[v] = dv, u
                    heapq.heappush(heap, (dv, v))
        if dist.get(t, np.inf) >= cost_to_beat:
            return None
        path = [t]
        while path[-1] != s:
            path.append(prev[path[-1]])
        return tuple(reversed(path))

    def overuse(self) -> dict[str, np.ndarray]:
        return {d: np.maximum(0, u - self.cap) for d, u in self.usage.items()}

    def uses_overused(self, path: tuple[Point, ...]) -> bool:
        return any(self.usage[d][a[1], a[0]] > self.cap for a, d in links(path))

    def negotiate(self, hot_routers: list[Point]) -> None:
        """End of an iteration: history += overuse (and += step at hot routers), pres grows."""
        for d, over in self.overuse().items():
            self.hist[d] += self.opts.history_step * over
        for x, y in hot_routers:
            self.node_hist[y, x] += self.opts.history_step
        self.pres *= self.opts.pres_mult
        self.refresh()


def _lane_order(ends: list[tuple[Point, Point]]) -> list[tuple[int, tuple[Point, Point]]]:
    """(lane index, ends) in routing order: when the lanes shift along and across the edge in
    the same sense (east and south, or west and north), the last lane first, else the first.

    Routed in this order with ties to the smallest jog, a flow's lanes nest (no crossings).
    """
    (sx, sy), (tx, ty) = ends[0]
    same_sense = (tx - sx) * (ty - sy) > 0
    order = list(enumerate(ends))
    return order[::-1] if same_sense else order


def _jogs(a: int, b: int, margin: int, size: int) -> np.ndarray:
    return np.arange(max(0, min(a, b) - margin), min(size - 1, max(a, b) + margin) + 1)


def _polyline(corners: list[Point]) -> tuple[Point, ...]:
    path = [corners[0]]
    for tx, ty in corners[1:]:
        x, y = path[-1]
        while (x, y) != (tx, ty):
            x += (tx > x) - (tx < x)
            y += (ty > y) - (ty < y) if x == tx else 0
            path.append((x, y))
    return tuple(path)


# ----------------------------------------------------------------------------------- coloring


def conflict_graph(lanes: tuple[RoutedLane, ...]) -> list[set[int]]:
    """adj[i] = lanes that share a router with lane i under a different (flow, configuration)."""
    adj: list[set[int]] = [set() for _ in lanes]
    for ps in router_passes(lanes).values():
        if len(ps) < 2:
            continue
        for a, (i, ci) in enumerate(ps):
            for j, cj in ps[a + 1 :]:
                if (lanes[i].flow, ci) != (lanes[j].flow, cj):
                    adj[i].add(j)
                    adj[j].add(i)
    return adj


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
    problem: RoutingProblem, placement: Placement, options: RouterOptions | None = None
) -> Routing:
    """Route and color every lane of every flow within the color budget and link capacity.

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
    net = _Negotiation(problem.width, problem.height, problem.link_capacity, opts)
    paths: list[tuple[Point, ...]] = [()] * len(lanes)
    todo = list(range(len(lanes)))
    colored: tuple[RoutedLane, ...] = ()
    for iteration in range(1, opts.max_iterations + 1):
        for i in todo:
            if paths[i]:
                net.commit(paths[i], -1)
            paths[i] = net.best_path(lanes[i][2], lanes[i][3], horizontal[lanes[i][0]])
            net.commit(paths[i], +1)
        if any(o.any() for o in net.overuse().values()):
            todo = [i for i, p in enumerate(paths) if net.uses_overused(p)]
            net.negotiate([])
            continue
        routed = tuple(RoutedLane(f, k, p, 0) for (f, k, _, _), p in zip(lanes, paths, strict=True))
        adj = conflict_graph(routed)
        colors = dsatur(adj)
        colored = tuple(
            RoutedLane(ln.flow, ln.index, ln.path, c) for ln, c in zip(routed, colors, strict=True)
        )
        over = [i for i, c in enumerate(colors) if c >= problem.color_budget]
        if not over:
            return Routing.of(colored, problem.color_budget, iteration)
        # history on the routers where an overflowing lane meets the lanes it conflicts with
        shared = {at for i in over for j in adj[i] for at in routed[j].path}
        hot = sorted({at for i in over for at in routed[i].path if at in shared})
        todo = sorted(set(over) | {j for i in over for j in adj[i]})
        net.negotiate(hot)
    raise RoutingError(_failure(problem, paths, lanes, colored, net))


def _failure(
    problem: RoutingProblem,
    paths: list[tuple[Point, ...]],
    lanes: list[tuple[str, int, Point, Point]],
    colored: tuple[RoutedLane, ...],
    net: _Negotiation,
) -> str:
    """One line naming the router that shows why routing failed, and the flows crossing it."""
    flows = {f.name: f for f in problem.flows}

    def crossing(names: Iterable[str]) -> str:
        return ", ".join(
            f"{n} [{', '.join(flows[n].onnx_nodes) or 'no onnx nodes'}]" for n in sorted(set(names))
        )

    overuse = net.overuse()
    if any(o.any() for o in overuse.values()):
        d = max(overuse, key=lambda d: int(overuse[d].max()))
        y, x = (int(v) for v in np.unravel_index(int(overuse[d].argmax()), overuse[d].shape))
        names = [lanes[i][0] for i, p in enumerate(paths) if ((x, y), d) in links(p)]
        return (
            f"cannot route within link capacity {problem.link_capacity}: link from router "
            f"({x}, {y}) going {d} needs {len(names)} lanes; flows crossing it: {crossing(names)}"
        )
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
    flow_names = (r.lanes[i].flow for i, _ in passes[at])
    return f"cannot route within {budget} colors: {what}; flows crossing it: {crossing(flow_names)}"
