"""Replication: k data-parallel copies of one placed and routed pipeline on the fabric.

A copy is placed and routed inside a *tile*, a sub-rectangle of the fabric: the placement
problem on a smaller fabric, whose routes then stay inside it too. The fabric holds a grid of
columns x rows tiles, tile (i, j) at (i x tile_w, j x tile_h); copy c sits in tile c (row by
row), its rectangles and lanes those of copy 0 translated. Copies share no PE, router or link:
each has the colors, link bandwidth and SRAM of one copy alone (copies that share no router
share no color). They share the host I/O: every copy's inputs and outputs cross the same
off-wafer channels (`target.io.offwafer_bytes_per_s`, the system's 1.2 Tb/s on a CS-2), so each
copy gets 1/k of them and

    total samples/s = k x per copy = min(k x on-wafer samples/s of a copy, host I/O bound).

Choosing k (`--replicas auto`): the largest k that still raises the total and fits. Fits: the
grid with the most tiles in which the placer packs the copy and the router routes it
(`tile_grids` lists the grids that hold n copies; `wsecc.core.flow` searches n). Raises: k copies
reach the host bound H at k_host = ceil(H / w), w a copy's on-wafer throughput; one more adds
nothing. So k = min(tiles, k_host), or N of `--replicas N` up to the tiles, and
`Replicas.reason` names what stopped it (`REASONS`). Inference only: training keeps one program
(its data parallelism is `--systems`), and so does generation (its `--batch` sequences share one
placement).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wsecc.place.problem import (
    PlaceFlow,
    PlaceKernel,
    Placement,
    PlacementProblem,
    Rect,
    kernel_shapes,
)
from wsecc.route.problem import RoutedLane, RouteFlow, Routing, RoutingProblem

if TYPE_CHECKING:
    from wsecc.sim.perf import PerfResult

FABRIC_AREA = "fabric area"  # no grid with more tiles packs the copy
HOST_IO = "host I/O"  # one more copy would not raise the total: the copies fill the host I/O
COLORS = "colors"  # in a smaller tile the copy's routes need more colors than the budget
LINKS = "links"  # in a smaller tile the copy's lanes need more than a link carries
FILLS_WAFER = "one copy fills the wafer"  # a second copy's PEs are not there
REQUESTED = "--replicas N"  # the user asked for this many
TRAIN_MODE = "train mode"  # training keeps one program
GENERATE_MODE = "generate mode"  # generation serves its batch from one placement
REASONS = (FABRIC_AREA, HOST_IO, COLORS, LINKS, FILLS_WAFER, REQUESTED, TRAIN_MODE, GENERATE_MODE)

Point = tuple[int, int]


@dataclass(frozen=True)
class Replicas:
    """k copies of the program, copy c in the tile at `origins[c]` (copy 0 at (0, 0): its
    rectangles and lanes are the program's own), and why k is what it is (`REASONS`).

    `tile` is (w, h); None for one copy on the whole fabric. `reason` is "" when not decided
    (a folder written before replication)."""

    k: int = 1
    reason: str = ""
    tile: Point | None = None
    origins: tuple[Point, ...] = ((0, 0),)

    def __post_init__(self) -> None:
        if self.k < 1 or len(self.origins) != self.k or self.origins[0] != (0, 0):
            raise ValueError(f"replicas: {self.k} copies need {self.k} origins, the first (0, 0)")

    def to_json(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "reason": self.reason,
            "tile": None if self.tile is None else {"w": self.tile[0], "h": self.tile[1]},
            "origins": [list(o) for o in self.origins],
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> Replicas:
        tile = d.get("tile")
        return Replicas(
            k=int(d["k"]),
            reason=str(d.get("reason", "")),
            tile=None if tile is None else (int(tile["w"]), int(tile["h"])),
            origins=tuple((int(x), int(y)) for x, y in d["origins"]),
        )


def grid_origins(tile: Point, columns: int, k: int) -> tuple[Point, ...]:
    """Origins of the first k tiles of a grid `columns` wide, row by row."""
    w, h = tile
    return tuple(((c % columns) * w, (c // columns) * h) for c in range(k))


def tile_grids(problem: PlacementProblem, copies: int) -> list[tuple[int, int]]:
    """(columns, rows) grids of at least `copies` tiles with the largest tiles: per number of
    columns the fewest rows, when the tile then fits a shape of the widest and of the tallest
    kernel and the copy's smallest area; the squarest tile first."""
    widest = max(min(w for w, _ in kernel_shapes(problem, k.name)) for k in problem.kernels)
    tallest = max(min(h for _, h in kernel_shapes(problem, k.name)) for k in problem.kernels)
    area = copy_area(problem)
    W, H = problem.width, problem.height
    grids = []
    for cols in range(1, min(copies, W // widest) + 1):
        rows = -(-copies // cols)
        if H // rows >= tallest and (W // cols) * (H // rows) >= area:
            grids.append((cols, rows))
    return sorted(grids, key=lambda g: abs(math.log((W / g[0]) / (H / g[1]))))


def copy_area(problem: PlacementProblem) -> int:
    """The fewest PEs a copy can take: each kernel's smallest allowed shape."""
    return sum(min(w * h for w, h in kernel_shapes(problem, k.name)) for k in problem.kernels)


def host_samples_per_s(perf: PerfResult, io_bytes_per_s: float) -> float:
    """The host I/O bound H of all copies together: samples/s when the busier direction's bytes
    per sample (L0's host-in and host-out stages) fill the off-wafer channels
    (`io_bytes_per_s` each way, as `wsecc.sim.perf` models them); infinite without host bytes."""
    host = max((f.bytes_per_sample for f in perf.flows if f.kind == "host"), default=0)
    return io_bytes_per_s / host if host > 0 else math.inf


def within(problem: PlacementProblem, tile: Point) -> PlacementProblem:
    """`problem` on a fabric of the tile's size (pins stay where they are)."""
    return PlacementProblem(tile[0], tile[1], problem.kernels, problem.flows, problem.pins)


def copies_for_host(on_wafer_samples_per_s: float, host_samples_per_s: float) -> int:
    """k_host = ceil(H / w): the fewest copies whose on-wafer throughput w together reaches the
    host I/O bound H; each copy past it adds nothing. Never less than 1."""
    if math.isinf(host_samples_per_s):  # no host bytes: the host I/O bounds nothing
        return 1 << 30
    if on_wafer_samples_per_s <= 0:
        return 1
    return max(1, math.ceil(host_samples_per_s / on_wafer_samples_per_s - 1e-9))


def choose(tiles: int, k_host: int, requested: int | None, blocked: str) -> tuple[int, str]:
    """(k, reason) from the tiles that fit (at least 1), the copies the host I/O can feed and
    `--replicas` (None: auto; N is honoured up to the tiles, even past the host bound).
    `blocked` is what stopped a grid with more tiles (FABRIC_AREA, COLORS, LINKS, FILLS_WAFER)."""
    if requested is not None:
        return (requested, REQUESTED) if requested <= tiles else (tiles, blocked)
    return (k_host, HOST_IO) if k_host <= tiles else (tiles, blocked)


# --------------------------------------------------------------- the copies on the whole fabric


def copy_name(c: int, name: str) -> str:
    """Copy c's name for a kernel or flow: copy 0 keeps the program's names."""
    return name if c == 0 else f"copy{c}/{name}"


def _moved(r: Rect, o: Point) -> Rect:
    return Rect(r.x + o[0], r.y + o[1], r.w, r.h)


def whole_problem(
    problem: PlacementProblem, reps: Replicas, width: int, height: int
) -> PlacementProblem:
    """The placement problem of every copy on the `width` x `height` fabric."""
    kernels = tuple(
        PlaceKernel(copy_name(c, k.name), k.shapes, k.onnx_nodes, k.kind)
        for c in range(reps.k)
        for k in problem.kernels
    )
    flows = tuple(
        PlaceFlow(
            copy_name(c, f.src), copy_name(c, f.dst), f.bytes_per_sample, copy_name(c, f.name)
        )
        for c in range(reps.k)
        for f in problem.flows
    )
    pins = {
        copy_name(c, n): _moved(r, o)
        for c, o in enumerate(reps.origins)
        for n, r in problem.pins.items()
    }
    return PlacementProblem(width, height, kernels, flows, pins)


def whole_placement(problem: PlacementProblem, placement: Placement, reps: Replicas) -> Placement:
    """Every copy's rectangles (`problem` from `whole_problem`); objective and bound are k
    times a copy's."""
    rects = {
        copy_name(c, n): _moved(r, o)
        for c, o in enumerate(reps.origins)
        for n, r in placement.rects.items()
    }
    return Placement.of(
        problem, rects, placer=placement.placer, bound=reps.k * placement.bound,
        status=placement.status, seconds=placement.seconds, seed=placement.seed,
        search=placement.search,
    )  # fmt: skip


def whole_routing(
    rp: RoutingProblem, routing: Routing, reps: Replicas, width: int, height: int
) -> tuple[RoutingProblem, Routing]:
    """Every copy's flows and lanes on the `width` x `height` fabric, colors kept."""
    flows = tuple(
        RouteFlow(copy_name(c, f.name), copy_name(c, f.src), copy_name(c, f.dst), f.lanes,
                  f.bytes_per_sample, f.onnx_nodes)
        for c in range(reps.k)
        for f in rp.flows
    )  # fmt: skip
    lanes = (
        RoutedLane(copy_name(c, ln.flow), ln.index,
                   tuple((x + o[0], y + o[1]) for x, y in ln.path), ln.color)
        for c, o in enumerate(reps.origins)
        for ln in routing.lanes
    )  # fmt: skip
    whole = RoutingProblem(width, height, flows, rp.color_budget, rp.link_capacity)
    return whole, Routing.of(lanes, routing.color_budget, routing.iterations)
