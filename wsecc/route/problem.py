"""Routing schemas (frozen, JSON round-trip), lane geometry and the validator; no solver here.

Model. A flow between two placed kernels becomes `lanes` parallel paths. Lane k runs from a PE
on the source rectangle's *output edge* (the edge facing the destination) to a PE on the
destination's *input edge* (the edge facing the source), through the routers of the PEs on its
way. A lane keeps one color end to end (a wavelet's color tag does not change in flight).

Conflicts. At a router, a lane's *route configuration* is (direction it arrives from, direction
it leaves to), with "R" for the ramp (injection at the first PE, delivery at the last). Two lanes
at a common router CONFLICT, i.e. need different colors, unless they belong to the same flow and
have the same configuration there: only then would the router's single (rx, tx) entry for that
color serve both. Lanes of different flows always conflict, even with equal configurations,
because merging two flows' wavelets on one color would deliver one flow's data to the other.
Colors are per router, so non-conflicting lanes may reuse a color anywhere.

Link capacity: lanes per link direction (default 1: each lane gets a link's full bandwidth).
"""

from __future__ import annotations

import functools
import heapq
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from itertools import chain, pairwise
from typing import Any

import numpy as np

from wsecc.core.lanes import lanes_within
from wsecc.errors import WseccError
from wsecc.place.problem import PlaceFlow, Placement, PlacementProblem, Rect

Point = tuple[int, int]
STEPS: dict[str, Point] = {"E": (1, 0), "W": (-1, 0), "S": (0, 1), "N": (0, -1)}
RAMP = "R"
OPPOSITE = {"E": "W", "W": "E", "S": "N", "N": "S"}
_DIRECTION = {step: d for d, step in STEPS.items()}


Paths = Mapping[tuple[str, Point, Point], tuple[Point, ...]]
"""Lane paths by (flow, source PE, destination PE): what a routing attempt leaves for the next
(`wsecc.route.router.route`'s `warm`)."""


class RoutingError(WseccError):
    """Routing is impossible within the budget; the message names the router that proves it.
    `flows`: the flows whose lanes it failed on (crossing an overloaded link, or that router);
    `paths`: where the failed attempt's lanes ended, for the next attempt to start from."""

    def __init__(self, message: str, flows: Iterable[str] = (), paths: Paths | None = None) -> None:
        super().__init__(message)
        self.flows = tuple(sorted(set(flows)))
        self.paths: Paths = paths or {}


@dataclass(frozen=True)
class RouteFlow:
    """A flow to route: `lanes` parallel paths from kernel `src` to kernel `dst`."""

    name: str
    src: str
    dst: str
    lanes: int
    bytes_per_sample: float
    onnx_nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RoutingProblem:
    """The flows of a placed graph, with lane counts, the color budget and link capacity."""

    width: int
    height: int
    flows: tuple[RouteFlow, ...]
    color_budget: int
    link_capacity: int = 1

    def to_json(self) -> dict[str, Any]:
        return {
            "width": self.width,
            "height": self.height,
            "flows": [asdict(f) for f in self.flows],
            "color_budget": self.color_budget,
            "link_capacity": self.link_capacity,
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> RoutingProblem:
        return RoutingProblem(
            width=int(d["width"]),
            height=int(d["height"]),
            flows=tuple(
                RouteFlow(**{**f, "onnx_nodes": tuple(f.get("onnx_nodes", ()))}) for f in d["flows"]
            ),
            color_budget=int(d["color_budget"]),
            link_capacity=int(d.get("link_capacity", 1)),
        )


def make_routing_problem(
    problem: PlacementProblem,
    placement: Placement,
    *,
    colors_total: int = 24,
    colors_reserved: int = 3,
    bytes_per_lane: float = 1 << 20,
    max_lanes: int | None = 16,
    link_capacity: int = 1,
) -> RoutingProblem:
    """Flows of `problem` as lanes on `placement`.

    lanes = clamp(lanes_within(bytes_per_sample, bytes_per_lane), 1, min(max_lanes, edge slots))
    (`wsecc.core.lanes`: bytes_per_lane is what one lane moves in a stage time), where
    the edge slots are what `lane_endpoints` can give the flow on both facing edges
    (`max_lanes=None`: the edge slots alone). Flows
    from a kernel to itself need no route and are dropped. Budget = colors_total −
    colors_reserved (24 − 3 memcpy colors on a WSE-2).
    """
    names: dict[str, int] = {}
    flows: list[RouteFlow] = []
    routed = [f for f in problem.flows if f.src != f.dst]
    sides = edge_users(routed, placement)
    for f in routed:
        base = f.name or f"{f.src}->{f.dst}"
        names[base] = names.get(base, 0) + 1
        name = base if names[base] == 1 else f"{base}#{names[base]}"
        src, dst = placement.rects[f.src], placement.rects[f.dst]
        slots = min(len(s) for s in _slot_sets(src, dst, sides, f.src, f.dst, len(flows)))
        want = lanes_within(f.bytes_per_sample, bytes_per_lane)
        nodes = problem.kernel(f.src).onnx_nodes + problem.kernel(f.dst).onnx_nodes
        flows.append(
            RouteFlow(
                name,
                f.src,
                f.dst,
                max(1, min(want, slots if max_lanes is None else min(max_lanes, slots))),
                f.bytes_per_sample,
                tuple(dict.fromkeys(nodes)),
            )
        )
    return RoutingProblem(
        problem.width, problem.height, tuple(flows), colors_total - colors_reserved, link_capacity
    )


# ------------------------------------------------------------------------------ lane geometry


def facing_sides(src: Rect, dst: Rect) -> tuple[str, str]:
    """(side of src facing dst, side of dst facing src), sides in "ENSW".

    The axis along which the rectangles are separated wins; if both (or neither), the axis of
    the larger centre offset.
    """
    (sx, sy), (dx, dy) = src.center2(), dst.center2()
    apart_x = dst.x >= src.x + src.w or src.x >= dst.x + dst.w
    apart_y = dst.y >= src.y + src.h or src.y >= dst.y + dst.h
    horizontal = apart_x if apart_x != apart_y else abs(dx - sx) >= abs(dy - sy)
    if horizontal:
        return ("E", "W") if dx >= sx else ("W", "E")
    return ("S", "N") if dy >= sy else ("N", "S")


def edge_pes(r: Rect, side: str) -> list[Point]:
    """PEs of rectangle r's edge on `side`, in increasing coordinate along the edge."""
    if side in "EW":
        x = r.x + r.w - 1 if side == "E" else r.x
        return [(x, y) for y in range(r.y, r.y + r.h)]
    y = r.y + r.h - 1 if side == "S" else r.y
    return [(x, y) for x in range(r.x, r.x + r.w)]


EdgeUsers = dict[tuple[str, str], list[tuple[int, float]]]


def edge_users(flows: Iterable[PlaceFlow | RouteFlow], placement: Placement) -> EdgeUsers:
    """(kernel, side) -> (index in `flows`, bytes per sample) of the flows that leave or enter
    by that edge."""
    users: EdgeUsers = defaultdict(list)
    for i, f in enumerate(flows):
        s_side, d_side = facing_sides(placement.rects[f.src], placement.rects[f.dst])
        users[(f.src, s_side)].append((i, f.bytes_per_sample))
        users[(f.dst, d_side)].append((i, f.bytes_per_sample))
    return users


def _slot_sets(
    src: Rect, dst: Rect, users: EdgeUsers, src_name: str, dst_name: str, flow_index: int
) -> tuple[list[Point], list[Point]]:
    """Edge PEs this flow may use on its two facing edges: its share of each (`edge_shares`),
    so flows sharing an edge never share a start or end PE, unless more flows share the edge
    than it has PEs: then flow r of the edge takes PE r mod (edge length)."""
    s_side, d_side = facing_sides(src, dst)
    out = []
    for rect, key in ((src, (src_name, s_side)), (dst, (dst_name, d_side))):
        edge = edge_pes(rect, key[1])
        flows = users[key]
        rank = [i for i, _ in flows].index(flow_index)
        if len(flows) >= len(edge):
            out.append([edge[rank % len(edge)]])
            continue
        owners = edge_shares(len(edge), tuple(b for _, b in flows))
        out.append([p for p, owner in zip(edge, owners, strict=True) if owner == rank])
    return out[0], out[1]


@functools.lru_cache(maxsize=1 << 12)
def edge_shares(n: int, weights: tuple[float, ...]) -> tuple[int, ...]:
    """The owner (index into `weights`) of each of an edge's n PEs, for len(weights) <= n flows
    weighted by their bytes: each flow one PE, then each next PE to the flow with the fewest PEs
    per byte (the earlier flow on a tie), so that the flow whose lanes would be shortest of its
    bandwidth gains first; then each flow's PEs spread evenly along the edge, so equal flows
    interleave: PE p to flow p mod len(weights)."""
    k = len(weights)
    w = [max(b, 0.0) for b in weights]
    if not any(w):
        w = [1.0] * k
    quota = [1] * k
    # fewest PEs per byte first; a flow of no bytes never gains past its one PE
    heap = [(1 / b, i) for i, b in enumerate(w) if b > 0]
    heapq.heapify(heap)
    for _ in range(n - k):
        _, i = heapq.heappop(heap)
        quota[i] += 1
        heapq.heappush(heap, (quota[i] / w[i], i))
    # flow i's t-th PE ideally at (t + 1/2) n / quota_i along the edge: all flows' ideal
    # points in order, the earlier flow first on a tie
    ideal = sorted(((t + 0.5) * n / quota[i], i) for i in range(k) for t in range(quota[i]))
    owners = [i for _, i in ideal]
    return tuple(owners)


def _spread(slots: list[Point], n: int) -> list[Point]:
    return [slots[(2 * k + 1) * len(slots) // (2 * n)] for k in range(n)]


def lane_endpoints(
    problem: RoutingProblem, placement: Placement, users: EdgeUsers, flow_index: int
) -> list[tuple[Point, Point]]:
    """(source PE, destination PE) of each lane of flow `flow_index`.

    Lanes are spread evenly over the flow's edge slots, in the same order on both edges (so
    lanes need not cross). If the two edges' slots overlap in the coordinate along the edge by
    at least `lanes`, lanes are taken from the overlap: they then run straight.
    """
    f = problem.flows[flow_index]
    src, dst = placement.rects[f.src], placement.rects[f.dst]
    s_slots, d_slots = _slot_sets(src, dst, users, f.src, f.dst, flow_index)
    along = 1 if facing_sides(src, dst)[0] in "EW" else 0
    shared = sorted({p[along] for p in s_slots} & {p[along] for p in d_slots})
    if len(shared) >= f.lanes:
        picks = _spread([(c, c) for c in shared], f.lanes)
        s_at = {p[along]: p for p in s_slots}
        d_at = {p[along]: p for p in d_slots}
        return [(s_at[c], d_at[c]) for c, _ in picks]
    return list(zip(_spread(s_slots, f.lanes), _spread(d_slots, f.lanes), strict=True))


# ----------------------------------------------------------------------------------- product


@dataclass(frozen=True)
class RoutedLane:
    flow: str
    index: int
    path: tuple[Point, ...]  # PEs visited, first on the source edge, last on the destination
    color: int


@dataclass(frozen=True)
class Routing:
    """Routed, colored lanes plus the figures a report needs.

    colors_used_max: max over routers of the distinct colors passing it.
    color_histogram: k -> number of routers with exactly k colors (k ≥ 1).
    color_lower_bound: max over routers of the number of pairwise-conflicting lane classes
        there (a clique of the conflict graph, hence a certificate: no coloring of THESE routes
        uses fewer colors); `lower_bound_router` is that router.
    """

    lanes: tuple[RoutedLane, ...]
    color_budget: int
    colors_used_max: int
    color_histogram: dict[int, int]
    color_lower_bound: int
    lower_bound_router: Point
    link_load_max: int
    total_length: int
    iterations: int

    @staticmethod
    def of(lanes: Iterable[RoutedLane], color_budget: int, iterations: int) -> Routing:
        """Build a Routing, computing every summary figure from the lanes."""
        lanes = tuple(sorted(lanes, key=lambda ln: (ln.flow, ln.index)))
        hist, lb, lb_at, load_max = _summary(lanes)
        return Routing(
            lanes=lanes,
            color_budget=color_budget,
            colors_used_max=max(hist, default=0),
            color_histogram=hist,
            color_lower_bound=lb,
            lower_bound_router=lb_at,
            link_load_max=load_max,
            total_length=sum(len(ln.path) - 1 for ln in lanes),
            iterations=iterations,
        )

    def link_loads(self) -> dict[tuple[Point, str], int]:
        """(router, outgoing direction) -> lanes on that link."""
        return link_loads(self.lanes)

    def to_json(self) -> dict[str, Any]:
        return {
            "lanes": [
                {"flow": ln.flow, "index": ln.index, "color": ln.color, **encode_path(ln.path)}
                for ln in self.lanes
            ],
            "color_budget": self.color_budget,
            "colors_used_max": self.colors_used_max,
            "color_histogram": {str(k): v for k, v in self.color_histogram.items()},
            "color_lower_bound": self.color_lower_bound,
            "lower_bound_router": list(self.lower_bound_router),
            "link_load_max": self.link_load_max,
            "total_length": self.total_length,
            "iterations": self.iterations,
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> Routing:
        return Routing(
            lanes=tuple(
                RoutedLane(ln["flow"], int(ln["index"]), decode_path(ln), int(ln["color"]))
                for ln in d["lanes"]
            ),
            color_budget=int(d["color_budget"]),
            colors_used_max=int(d["colors_used_max"]),
            color_histogram={int(k): int(v) for k, v in d["color_histogram"].items()},
            color_lower_bound=int(d["color_lower_bound"]),
            lower_bound_router=(int(d["lower_bound_router"][0]), int(d["lower_bound_router"][1])),
            link_load_max=int(d["link_load_max"]),
            total_length=int(d["total_length"]),
            iterations=int(d["iterations"]),
        )

    def dumps(self) -> str:
        """Deterministic JSON (sorted keys)."""
        return json.dumps(self.to_json(), indent=1, sort_keys=True)


def _runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of the integer array `keys`, ascending, and how often each occurs:
    `np.unique(keys, return_counts=True)` by one sort (numpy's `unique` hashes, then sorts the
    distinct values: several times slower on the half-million router passes of a large
    routing)."""
    ordered = np.sort(keys, kind="stable")
    starts = np.flatnonzero(np.diff(ordered, prepend=ordered[:1] - 1))
    return ordered[starts], np.diff(starts, append=len(ordered))


def _summary(lanes: tuple[RoutedLane, ...]) -> tuple[dict[int, int], int, Point, int]:
    """`Routing.of`'s figures, every router pass at once (numpy; the same as counting over
    `router_passes` and `link_loads`): routers by their number of distinct colors, the largest
    number of distinct (flow, configuration) classes at a router and the least router (x, y)
    with it, and the busiest link's lanes."""
    sizes = np.array([len(ln.path) for ln in lanes], np.int64)
    if sizes.sum() == 0:
        return {}, 0, (0, 0), 0
    flat = chain.from_iterable(chain.from_iterable(ln.path for ln in lanes))
    pts = np.fromiter(flat, np.int64, count=2 * int(sizes.sum())).reshape(-1, 2)
    lane = np.repeat(np.arange(len(lanes)), sizes)
    ends = np.cumsum(sizes)
    first = np.zeros(len(pts), bool)
    last = np.zeros(len(pts), bool)
    first[(ends - sizes)[sizes > 0]] = True
    last[(ends - 1)[sizes > 0]] = True
    # direction codes: 0-3 the unit steps E W S N, 4 any other step ("?"), 5 the ramp
    step = np.zeros_like(pts)
    step[:-1] = pts[1:] - pts[:-1]
    code = np.full(len(pts), 4, np.int64)
    for k, (dx, dy) in enumerate(STEPS.values()):
        code[(step[:, 0] == dx) & (step[:, 1] == dy)] = k
    out = np.where(last, 5, code)
    opposite = np.array([1, 0, 3, 2, 4, 5])  # E<->W, S<->N, "?" stays
    came = np.where(first, 5, opposite[np.roll(out, 1)])
    xs, ys = pts[:, 0] - pts[:, 0].min(), pts[:, 1] - pts[:, 1].min()
    router = xs * (int(ys.max()) + 1) + ys  # orders as (x, y)

    def per_router(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Routers and how many distinct `key`s pass each."""
        span = int(key.max()) + 1
        pairs, _ = _runs(router * span + key)  # (router, key) as one integer
        return _runs(pairs // span)

    colors = np.array([ln.color for ln in lanes], np.int64)[lane]
    _, n_colors = per_router(colors)
    hist = dict(sorted(Counter(int(n) for n in n_colors).items()))
    flow_ids = {f: i for i, f in enumerate(sorted({ln.flow for ln in lanes}))}
    flow = np.array([flow_ids[ln.flow] for ln in lanes], np.int64)[lane]
    at, n_classes = per_router((flow * 6 + came) * 6 + out)
    lb = int(n_classes.max())
    k = int(np.flatnonzero(n_classes == lb)[0])  # routers come sorted: the least (x, y)
    i = int(np.flatnonzero(router == at[k])[0])
    lb_at = (int(pts[i, 0]), int(pts[i, 1]))
    link = ~last & (code < 4)
    _, loads = _runs(router[link] * 4 + code[link])
    return hist, lb, lb_at, int(loads.max(initial=0))


def step_dir(a: Point, b: Point) -> str | None:
    """Direction of the unit step a→b, or None if it is not a unit step."""
    return _DIRECTION.get((b[0] - a[0], b[1] - a[1]))


def links(path: tuple[Point, ...]) -> list[tuple[Point, str]]:
    """(router, outgoing direction) of each step of a path of unit steps (ValueError if not)."""
    out = []
    for a, b in pairwise(path):
        d = step_dir(a, b)
        if d is None:
            raise ValueError(f"path step {a}->{b} is not a unit step")
        out.append((a, d))
    return out


def encode_path(path: tuple[Point, ...]) -> dict[str, Any]:
    """Compact form: start PE and run-length moves, e.g. {"start": [3, 4], "moves": "E12 S5"}.

    Raises ValueError for a path that is not made of unit steps (validate first).
    """
    runs: list[list[Any]] = []
    for a, b in pairwise(path):
        d = step_dir(a, b)
        if d is None:
            raise ValueError(f"path step {a}->{b} is not a unit step")
        if runs and runs[-1][0] == d:
            runs[-1][1] += 1
        else:
            runs.append([d, 1])
    return {"start": list(path[0]), "moves": " ".join(f"{d}{n}" for d, n in runs)}


def decode_path(d: dict[str, Any]) -> tuple[Point, ...]:
    x, y = d["start"]
    path = [(x, y)]
    for run in d["moves"].split():
        sx, sy = STEPS[run[0]]
        for _ in range(int(run[1:])):
            x, y = x + sx, y + sy
            path.append((x, y))
    return tuple(path)


def lane_configs(path: tuple[Point, ...]) -> list[tuple[Point, tuple[str, str]]]:
    """(router, (in, out)) along a path; "in" is the side the lane arrives from, "R" = ramp."""
    if not path:
        return []
    steps = [step_dir(a, b) or "?" for a, b in pairwise(path)]
    came = [RAMP] + [OPPOSITE.get(d, "?") for d in steps]
    return list(zip(path, zip(came, [*steps, RAMP], strict=True), strict=True))


def router_passes(lanes: tuple[RoutedLane, ...]) -> dict[Point, list[tuple[int, tuple[str, str]]]]:
    """Router -> [(lane index in `lanes`, configuration)] for every lane through it."""
    passes: dict[Point, list[tuple[int, tuple[str, str]]]] = defaultdict(list)
    for i, ln in enumerate(lanes):
        for at, cfg in lane_configs(ln.path):
            passes[at].append((i, cfg))
    return passes


def link_loads(lanes: Iterable[RoutedLane]) -> dict[tuple[Point, str], int]:
    """(router, outgoing direction) -> number of lanes using that link."""
    loads: dict[tuple[Point, str], int] = defaultdict(int)
    for ln in lanes:
        for a, b in pairwise(ln.path):
            d = step_dir(a, b)
            if d is not None:
                loads[(a, d)] += 1
    return dict(loads)


def crossed_regions(routing: Routing, placement: Placement) -> dict[str, set[str]]:
    """Flow -> the kernels whose region one of its lanes crosses: a step between two routers of
    that region (the links its own traffic uses), its own source and destination left out. L0
    charges such a lane's bytes to that kernel's busiest link (`wsecc.sim.perf`)."""
    names = list(placement.rects)
    if not names or not routing.lanes:
        return {}
    width = max(max(r.x + r.w for r in placement.rects.values()), 1)
    height = max(max(r.y + r.h for r in placement.rects.values()), 1)
    owner = np.full((height + 1, width + 1), -1, np.int64)  # region index per PE; -1 outside
    for i, r in enumerate(placement.rects.values()):
        owner[r.y : r.y + r.h, r.x : r.x + r.w] = i
    out: dict[str, set[str]] = defaultdict(set)
    for ln in routing.lanes:
        p = np.clip(np.asarray(ln.path, np.int64).reshape(-1, 2), 0, [width, height])
        a, b = owner[p[:-1, 1], p[:-1, 0]], owner[p[1:, 1], p[1:, 0]]
        ends = [names.index(n) for n in _ends(ln.flow) if n in placement.rects]
        inside = (a == b) & (a >= 0) & ~np.isin(a, ends)
        out[ln.flow].update(names[i] for i in np.unique(a[inside]).tolist())
    return {f: ks for f, ks in out.items() if ks}


def _ends(flow: str) -> tuple[str, str]:
    """(source, destination) kernel of a routed flow named `src->dst` (or `src->dst#n`)."""
    src, _, dst = flow.partition("->")
    return src, dst.split("#")[0]


# --------------------------------------------------------------------------------- validator


def validate_routing(problem: RoutingProblem, placement: Placement, routing: Routing) -> list[str]:
    """Every violation, as human-readable lines (empty list = legal).

    Legal: each flow has exactly lanes 0..lanes−1; each path is a simple chain of unit steps on
    the fabric from a PE of the source's facing edge to a PE of the destination's facing edge;
    every color is in [0, budget) and no router sees more than `budget` colors; no two
    conflicting lanes share a color at a router; no link carries more than `link_capacity`.

    A legal routing is proved so by `_legal` (numpy over every router pass at once); only a
    routing it does not prove legal is walked lane by lane to name its violations.
    """
    return [] if _legal(problem, placement, routing) else _violations(problem, placement, routing)


def _violations(problem: RoutingProblem, placement: Placement, routing: Routing) -> list[str]:
    """`validate_routing`'s lines, found lane by lane and pair by pair at each router."""
    out: list[str] = []
    W, H, budget = problem.width, problem.height, problem.color_budget
    flows = {f.name: f for f in problem.flows}
    have = defaultdict(list)
    for ln in routing.lanes:
        have[ln.flow].append(ln.index)
    for f in problem.flows:
        got = have.get(f.name, [])
        out += [f"flow '{f.name}' lane {k} is missing" for k in range(f.lanes) if k not in got]
        out += [f"flow '{f.name}' lane {k} is routed twice" for k in set(got) if got.count(k) > 1]
    for name in sorted(have):
        if name not in flows:
            out.append(f"unknown flow '{name}' is routed")
    ends: dict[str, tuple[str, set[Point], str, set[Point]]] = {}  # per flow, see _facing_edges
    for ln in routing.lanes:
        flow = flows.get(ln.flow)
        tag = f"flow '{ln.flow}' lane {ln.index}"
        if flow is not None and not 0 <= ln.index < flow.lanes:
            out.append(f"{tag} is beyond the flow's {flow.lanes} lanes")
        out += _path_violations(tag, ln.path, W, H)
        if flow is not None and ln.path:
            if ln.flow not in ends:
                ends[ln.flow] = _facing_edges(flow, placement)
            s_side, s_edge, d_side, d_edge = ends[ln.flow]
            if ln.path[0] not in s_edge:
                out.append(
                    f"{tag} starts at {ln.path[0]}, not on the {s_side} edge of '{flow.src}'"
                )
            if ln.path[-1] not in d_edge:
                out.append(f"{tag} ends at {ln.path[-1]}, not on the {d_side} edge of '{flow.dst}'")
        if not 0 <= ln.color < budget:
            out.append(f"{tag} has color {ln.color}, outside the budget 0..{budget - 1}")
    at_routers: list[tuple[Point, str]] = []  # sorted by router below; the sort is stable
    for at, ps in router_passes(routing.lanes).items():
        colors = {routing.lanes[i].color for i, _ in ps}
        if len(colors) > budget:
            at_routers.append((at, f"router {at} uses {len(colors)} colors, budget {budget}"))
        for a, (i, ci) in enumerate(ps):
            for j, cj in ps[a + 1 :]:
                li, lj = routing.lanes[i], routing.lanes[j]
                if li.color == lj.color and (li.flow, ci) != (lj.flow, cj):
                    line = (
                        f"router {at}: flow '{li.flow}' lane {li.index} and flow '{lj.flow}' "
                        f"lane {lj.index} share color {li.color} with different routes"
                    )
                    at_routers.append((at, line))
    out += [line for _, line in sorted(at_routers, key=lambda v: v[0])]
    for (at, d), n in sorted(link_loads(routing.lanes).items()):
        if n > problem.link_capacity:
            out.append(f"link {at}->{d} carries {n} lanes, capacity {problem.link_capacity}")
    return out


def _legal(problem: RoutingProblem, placement: Placement, routing: Routing) -> bool:
    """True when `validate_routing` would find no violation: the same rules, checked on arrays
    of every router pass at once instead of pair by pair. False is no verdict: the caller then
    walks the lanes to name what is wrong."""
    flows = {f.name: f for f in problem.flows}
    want = {(f.name, k) for f in problem.flows for k in range(f.lanes)}
    got = [(ln.flow, ln.index) for ln in routing.lanes]
    if len(got) != len(want) or set(got) != want:
        return False
    if any(not ln.path or not 0 <= ln.color < problem.color_budget for ln in routing.lanes):
        return False
    ends: dict[str, tuple[str, set[Point], str, set[Point]]] = {}
    for ln in routing.lanes:
        if ln.flow not in ends:
            ends[ln.flow] = _facing_edges(flows[ln.flow], placement)
        _, s_edge, _, d_edge = ends[ln.flow]
        if ln.path[0] not in s_edge or ln.path[-1] not in d_edge:
            return False
    sizes = np.array([len(ln.path) for ln in routing.lanes], np.int64)
    flat = chain.from_iterable(chain.from_iterable(ln.path for ln in routing.lanes))
    pts = np.fromiter(flat, np.int64, count=2 * int(sizes.sum())).reshape(-1, 2)
    x, y = pts[:, 0], pts[:, 1]
    if not ((x >= 0) & (x < problem.width) & (y >= 0) & (y < problem.height)).all():
        return False
    lane = np.repeat(np.arange(len(sizes)), sizes)
    last = np.zeros(len(pts), bool)
    last[np.cumsum(sizes) - 1] = True
    step = np.zeros_like(pts)
    step[:-1] = pts[1:] - pts[:-1]
    if not (np.abs(step).sum(1)[~last] == 1).all():  # every step a unit step
        return False
    router = y * problem.width + x
    if (_runs(lane * (problem.width * problem.height) + router)[1] > 1).any():
        return False  # a lane visits a router twice
    # configuration codes: leaving 0-3 (E W S N) or 4 (the ramp); arriving likewise
    code = np.full(len(pts), 4, np.int64)
    for k, (dx, dy) in enumerate(STEPS.values()):
        code[~last & (step[:, 0] == dx) & (step[:, 1] == dy)] = k
    came = np.full(len(pts), 4, np.int64)
    came[1:] = np.array([1, 0, 3, 2, 4])[code[:-1]]
    came[np.cumsum(sizes) - sizes] = 4
    flow_ids = {name: i for i, name in enumerate(flows)}
    flow = np.array([flow_ids[ln.flow] for ln in routing.lanes], np.int64)[lane]
    color = np.array([ln.color for ln in routing.lanes], np.int64)[lane]
    budget = problem.color_budget
    at_color = router * budget + color
    # no conflict: every lane of one color at one router has one (flow, configuration)
    config = (flow * 5 + came) * 5 + code
    span = int(config.max(initial=0)) + 1
    classes, _ = _runs(at_color * span + config)  # (router and color, configuration) pairs
    if (_runs(classes // span)[1] > 1).any():
        return False
    # colors per router are at most `budget` since every color is below it; links within capacity
    on_link = ~last
    _, loads = _runs(router[on_link] * 4 + code[on_link])
    return bool(loads.max(initial=0) <= problem.link_capacity)


def _facing_edges(flow: RouteFlow, placement: Placement) -> tuple[str, set[Point], str, set[Point]]:
    """(source side, its edge PEs, destination side, its edge PEs) of a flow's facing edges."""
    src, dst = placement.rects[flow.src], placement.rects[flow.dst]
    s_side, d_side = facing_sides(src, dst)
    return s_side, set(edge_pes(src, s_side)), d_side, set(edge_pes(dst, d_side))


def _path_violations(tag: str, path: tuple[Point, ...], W: int, H: int) -> list[str]:
    if not path:
        return [f"{tag} has an empty path"]
    out = [f"{tag} leaves the fabric at {p}" for p in path if not (0 <= p[0] < W and 0 <= p[1] < H)]
    out += [
        f"{tag} is broken: {a} -> {b} is not a unit step"
        for a, b in pairwise(path)
        if step_dir(a, b) is None
    ]
    if len(set(path)) != len(path):
        out.append(f"{tag} visits a router twice")
    return out
