"""The compile's stages as pure functions over products (no CLI or Compilation state).

    model.onnx ─load─▶ Graph ─fuse─▶ fused Graph ─lower_and_size─▶ KernelGraph, Sizing
               ─place_and_route─▶ Program ─simulate─▶ SramMap, L0, L1

`wsecc.compiler.Compilation` runs them one at a time, times them and keeps their products.

`place_and_route` owns the flow's two feedback loops. Sizing fills at most FILL_STEPS[0] of
the fabric, and when the placer cannot pack those regions the kernels are sized again at the
next, lower fill — so the placer always gets a problem it can legalise. And when the routed
program keeps less than ON_WAFER_GOAL of sizing's balanced throughput because lanes found no
room, it is placed once more with a free ring around the kernels they leave and enter
(`_route_checked`), and the faster of the two is kept. It also replicates
a program that leaves most of the fabric idle (`wsecc.core.replicas`): one copy placed and routed on
a tile, k copies on the fabric.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from wsecc.check.numerics import make_inputs, ort_run
from wsecc.core.bands import band_layout
from wsecc.core.instrument import Instrument, Trace
from wsecc.core.lanes import edge_cycles, lane_bytes, lanes_within
from wsecc.core.program import Program
from wsecc.core.replicas import (
    COLORS,
    FABRIC_AREA,
    FILLS_WAFER,
    LINKS,
    REQUESTED,
    Replicas,
    choose,
    copies_for_host,
    copy_area,
    grid_origins,
    host_samples_per_s,
    tile_grids,
    whole_placement,
    whole_problem,
    whole_routing,
    within,
)
from wsecc.errors import SimulationError
from wsecc.ir.core import Graph
from wsecc.kernels import (
    DEFAULT_CHUNK_TOKENS,
    KernelGraph,
    Sizing,
    SizingError,
    size_for_decode,
    size_regions,
    sizing_at,
)
from wsecc.options import Options
from wsecc.passes import DEFAULT_PIPELINE, EXPERT_SHARDS, LOWERING
from wsecc.place.api import place
from wsecc.place.from_kernels import placement_problem
from wsecc.place.manual import load_pins, place_manual, with_pins
from wsecc.place.problem import (
    Placement,
    PlacementError,
    PlacementProblem,
    tailored,
    validate_placement,
    with_halos,
    without_halos,
)
from wsecc.pm import NumericsCheck, PassContext, PassManager, PassRecord
from wsecc.route.problem import (
    Paths,
    Point,
    Routing,
    RoutingError,
    RoutingProblem,
    crossed_regions,
    make_routing_problem,
    validate_routing,
)
from wsecc.route.router import Tolls, route
from wsecc.sim.events import buffer_bytes_per_pe, simulate_l1
from wsecc.sim.perf import FLOW, crossing_cycles, flow_name, simulate_l0
from wsecc.sim.sram import SramError, sram_map
from wsecc.targets import Target
from wsecc.vocab import Precision, SimLevel

if TYPE_CHECKING:
    from wsecc.frontend.onnx import ModelInfo
    from wsecc.kernels.costs import TrainCosts
    from wsecc.sim.events import EventResult
    from wsecc.sim.perf import PerfResult
    from wsecc.sim.sram import SramMap

FILL_STEPS = (0.85, 0.75, 0.65, 0.55)


def fills_from(fill: float) -> tuple[float, ...]:
    """The fills `place_and_route` tries for a sizing at `fill`: that one, then FILL_STEPS'
    lower ones (FILL_STEPS itself for a sizing at its first; a split over systems may size denser,
    `wsecc.core.partition.DENSE_FILL`)."""
    return (fill, *(f for f in FILL_STEPS if f < fill))


def load(path: Path, options: Options, batch: int) -> tuple[Graph, ModelInfo]:
    """Load, bind (the batch at `batch`: the mode's, `wsecc.modes.strategy.bound_batch`) and import the
    ONNX file (folded, into the wsecc IR)."""
    from wsecc.frontend.onnx import import_model

    return import_model(
        path, batch=batch, seq=options.seq, dims=dict(options.dims), weights=options.weights
    )


def fuse(
    graph: Graph, model_path: Path, options: Options, instrument: Instrument | None = None
) -> tuple[Graph, list[PassRecord]]:
    """The pass pipeline (canonicalize and fuse), timed and dumped through `instrument`; with
    `check_each_pass`, every pass's graph is checked against onnxruntime on `model_path`."""
    numerics = None
    if options.check_each_pass:
        feeds = make_inputs(graph)
        numerics = NumericsCheck(feeds, ort_run(model_path, feeds))
    pm = PassManager(
        DEFAULT_PIPELINE,
        print_after_all=options.print_after_all,
        numerics=numerics,
        instrument=instrument or Instrument.after(Trace(), dump_dir=options.dump_dir),
    )
    fused, records = pm.run(graph, PassContext())
    assert isinstance(fused, Graph)  # the fusion pipeline stays at the graph level
    return fused, records


def split_experts(
    fused: Graph, shards: int | Mapping[str, int], instrument: Instrument | None = None
) -> tuple[Graph, list[PassRecord]]:
    """The `split-moe` pass on the fused graph: each moe op split into `shards` (one count for
    all, or per moe node name; `wsecc.core.experts.expert_shards` chooses them)."""
    pm = PassManager(EXPERT_SHARDS, instrument=instrument or Instrument.after(Trace()))
    graph, records = pm.run(fused, PassContext(options={"expert_shards": shards}))
    assert isinstance(graph, Graph)  # split-moe stays at the graph level
    return graph, records


def lower(fused: Graph) -> KernelGraph:
    """The `lower` pass (it requires a fused graph): kernels and flows, per sample."""
    kg, _ = PassManager(LOWERING).run(fused)
    assert isinstance(kg, KernelGraph)  # lowering produces the KERNELS level
    return kg


def lower_and_size(
    fused: Graph,
    target: Target,
    precision: Precision,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
) -> tuple[KernelGraph, Sizing]:
    """Lower and size for pipeline throughput at the first fill (inference's sizing; a mode
    sizes its own way through its `SizingRule`, `wsecc.modes.strategy`)."""
    kg = lower(fused)
    return kg, ForThroughput().size(kg, target, precision, FILL_STEPS[0], chunk_tokens)


class SizingRule(Protocol):
    """What sizing optimises, as placement (re-)sizes and re-costs the kernels and routing gives
    the flows their lanes: one object per mode (`wsecc.modes.strategy`), in place of mode flags."""

    @property
    def checked(self) -> bool:
        """Whether a routed program is checked against sizing's balanced throughput (and
        placed again with halos when it falls short, `_route_checked`)."""
        ...

    def size(
        self, kg: KernelGraph, target: Target, precision: Precision, fill: float, chunk_tokens: int
    ) -> Sizing:
        """Regions for `kg` filling at most `fill` of the fabric."""
        ...

    def at_shapes(
        self,
        sizing: Sizing,
        kg: KernelGraph,
        target: Target,
        precision: Precision,
        shapes: Mapping[str, tuple[int, int]],
    ) -> Sizing:
        """`sizing` with each kernel costed at its placed shape (`sizing_at`)."""
        ...

    def bytes_per_lane(self, sizing: Sizing, target: Target, kg: KernelGraph) -> float:
        """What one lane of a flow carries per sample (`lane_bytes_per_sample`)."""
        ...


@dataclass(frozen=True)
class ForThroughput:
    """Regions sized for the pipeline's throughput (`size_regions`): inference, or pipelined
    training when `train` gives what its backward kernels and optimizer add. Only inference's
    routed program is checked against the balanced throughput: a training step's sizing is not
    L0's."""

    train: TrainCosts | None = None

    @property
    def checked(self) -> bool:
        return self.train is None

    def size(
        self, kg: KernelGraph, target: Target, precision: Precision, fill: float, chunk_tokens: int
    ) -> Sizing:
        return size_regions(
            kg, target, precision, fill=fill, chunk_tokens=chunk_tokens, train=self.train
        )

    def at_shapes(
        self,
        sizing: Sizing,
        kg: KernelGraph,
        target: Target,
        precision: Precision,
        shapes: Mapping[str, tuple[int, int]],
    ) -> Sizing:
        return sizing_at(sizing, kg, target, precision, dict(shapes), train=self.train)

    def bytes_per_lane(self, sizing: Sizing, target: Target, kg: KernelGraph) -> float:
        return lane_bytes_per_sample(sizing, target)


@dataclass(frozen=True)
class ForDecode:
    """Regions sized for the latency of a decode step of `batch` sequences
    (`size_for_decode`), flows given the lanes a decode step wants (generate mode);
    `single_buffered`: every stream holds one chunk (`CostContext.single_buffered`), what a
    split over systems falls back to (`wsecc.core.partition.size_over_systems`)."""

    batch: int
    single_buffered: bool = False

    @property
    def checked(self) -> bool:
        return False

    def size(
        self, kg: KernelGraph, target: Target, precision: Precision, fill: float, chunk_tokens: int
    ) -> Sizing:
        return size_for_decode(
            kg, target, precision, batch=self.batch, fill=fill, chunk_tokens=chunk_tokens,
            single_buffered=self.single_buffered,
        )  # fmt: skip

    def at_shapes(
        self,
        sizing: Sizing,
        kg: KernelGraph,
        target: Target,
        precision: Precision,
        shapes: Mapping[str, tuple[int, int]],
    ) -> Sizing:
        return sizing_at(sizing, kg, target, precision, dict(shapes))

    def bytes_per_lane(self, sizing: Sizing, target: Target, kg: KernelGraph) -> float:
        return lane_bytes_per_sample(sizing, target, kg, self.batch)


DECODE_LANE_CYCLES = 128
"""Generate mode: the cycles a flow's share of one decode step (a token of every sequence) may
take on its lanes. A step's kernels take hundreds to thousands of cycles (`wsecc.kernels.decode`)
and the hops between regions tens to hundreds; 128 keeps the transfer below both. A compiler
choice, not a hardware fact: on Llama 3.1 8B (wse3) 64 gave the same decode rate within CP-SAT's
run-to-run spread (1,321 against 1,311-1,327 tokens/s) with 4,077 lanes to route instead of
3,417 and 16 s more of routing."""


def lane_bytes_per_sample(
    sizing: Sizing, target: Target, kg: KernelGraph | None = None, decode_batch: int | None = None
) -> float:
    """What one lane carries per sample: a stage time's worth, stage cycles per sample x link
    bytes per cycle (`wsecc.core.lanes.lane_bytes`). In generate mode (`decode_batch` sequences, `kg`
    bound at the context) at most what makes one decode step's bytes (a sample's over its
    tokens, times the batch) take DECODE_LANE_CYCLES: decode is a latency.

    A flow gets `wsecc.core.lanes.lanes_within(bytes per sample, this)` lanes (as many as its facing
    edges allow), so it moves a sample's data within the stage time and the fabric does not
    become the bottleneck the sizing balanced against."""
    per_stage = lane_bytes(sizing.stage_cycles, target.link_bytes_per_cycle)
    if decode_batch is None or kg is None:
        return per_stage
    per_step = lane_bytes(DECODE_LANE_CYCLES, target.link_bytes_per_cycle)
    return min(per_stage, per_step * kg.tokens_per_sample / decode_batch)


LANE_CAPS = (16, 4, 1)
"""Lanes per flow tried in turn when narrowing the flows at the congestion does not route: at
most 16, 4, 1 for every flow."""
NARROWINGS = 4
"""Times a failed routing takes a quarter of the lanes (rounded up) from the flows it failed on
(those crossing an overloaded link, or the router short of colors) before the caps above narrow
every flow: 16 lanes become 12, 9, 6, 4."""


def _route_widest(
    problem: PlacementProblem,
    placement: Placement,
    sizing: Sizing,
    target: Target,
    say: Callable[[str, str], None],
    bytes_per_lane: float | None = None,
) -> tuple[RoutingProblem, Routing]:
    """Route with as many lanes per flow as the bandwidth needs (edge slots permitting), each
    lane carrying `bytes_per_lane` (default `lane_bytes_per_sample` of `sizing`). While it does
    not route, narrow the flows it failed on by a quarter (up to `NARROWINGS` times), then cap
    every flow (`LANE_CAPS`). Raises the narrowest attempt's RoutingError when even one lane
    per flow cannot route."""
    if bytes_per_lane is None:
        bytes_per_lane = lane_bytes_per_sample(sizing, target)

    def problem_at(cap: int | None) -> RoutingProblem:
        return make_routing_problem(
            problem,
            placement,
            colors_total=target.colors.total,
            colors_reserved=target.colors.reserved,
            bytes_per_lane=bytes_per_lane,
            max_lanes=cap,
        )

    tolls = region_tolls(sizing, target)
    rp = problem_at(None)
    warm: Paths = {}
    for attempt in range(NARROWINGS + 1):
        try:
            routing = route(rp, placement, tolls=tolls, warm=warm)
        except RoutingError as e:
            fewer = {
                f.name: f.lanes * 3 // 4 for f in rp.flows if f.name in e.flows and f.lanes > 1
            }
            if not fewer or attempt == NARROWINGS:
                break
            say(
                "route",
                f"{str(e)[:60]}...: a quarter fewer lanes for the {len(fewer)} flows it failed on",
            )
            narrower = tuple(replace(f, lanes=fewer.get(f.name, f.lanes)) for f in rp.flows)
            rp = replace(rp, flows=narrower)
            # the next attempt starts where this one's lanes ended, but for the narrowed flows'
            warm = {key: path for key, path in e.paths.items() if key[0] not in fewer}
            continue
        return _widest_crossing(problem, placement, sizing, target, tolls, rp, routing, say)
    for cap in LANE_CAPS:
        rp = problem_at(cap)
        try:
            return rp, route(rp, placement, tolls=tolls)
        except RoutingError as e:
            if cap == LANE_CAPS[-1]:
                raise
            say(
                "route",
                f"at most {cap} lanes per flow do not route ({str(e)[:80]}...); fewer lanes",
            )
    raise AssertionError("unreachable")


def region_tolls(sizing: Sizing, target: Target) -> Tolls:
    """What a lane may carry through each kernel's region (`wsecc.route.router.Tolls`): the
    bytes its busiest link still moves in the stage time, (stage cycles − its link cycles) ×
    link bytes per cycle. A lane carrying more would make the region the slowest stage (L0
    adds a crossing lane's cycles to the region's busiest link), so the router pays a toll to
    cross it and goes around where it can."""
    T, L = sizing.stage_cycles, target.link_bytes_per_cycle
    return Tolls({k.name: lane_bytes(max(0, T - k.link_cycles), L) for k in sizing.kernels})


WIDENINGS = 3
"""Routing attempts with wider lanes for the flows that cross regions (`_widened`). A routing
that succeeds is checked again (its wider lanes may take new ways through other regions); after
a failure the flows it failed on step back a quarter of the way to their lane counts before.
The routing kept is the one whose busiest link is least busy (`_busiest_link`)."""


def _widest_crossing(
    problem: PlacementProblem,
    placement: Placement,
    sizing: Sizing,
    target: Target,
    tolls: Tolls,
    rp: RoutingProblem,
    routing: Routing,
    say: Callable[[str, str], None],
) -> tuple[RoutingProblem, Routing]:
    """The routing of `rp` (routed with `tolls`), or one whose flows crossing other regions
    have more lanes (`WIDENINGS`), whichever leaves the least busy busiest link."""
    # the lanes each flow's edge slots hold: the most any widening may give it
    slots = make_routing_problem(problem, placement, bytes_per_lane=0.5**30, max_lanes=None)
    room = {f.name: f.lanes for f in slots.flows}
    wider = _widened(room, placement, sizing, target, rp, routing)
    if wider is None:
        return rp, routing
    failed = False
    best = (_busiest_link(rp, routing, placement, sizing, target), rp, routing)
    for _ in range(WIDENINGS):
        if wider is None:
            break
        tried = wider
        try:
            rp, routing = (
                tried,
                route(tried, placement, tolls=tolls, warm=_kept(rp, tried, routing)),
            )
            best = min(
                best,
                (_busiest_link(rp, routing, placement, sizing, target), rp, routing),
                key=lambda b: b[0],
            )
            wider = _widened(room, placement, sizing, target, rp, routing)
        except RoutingError as e:
            failed = True
            before = {f.name: f.lanes for f in rp.flows}
            back = tuple(
                replace(f, lanes=f.lanes - (f.lanes - before[f.name] + 3) // 4)
                if f.name in e.flows
                else f
                for f in tried.flows
            )
            wider = replace(tried, flows=back) if back != tried.flows else None
    if failed:
        say("route", "wider lanes for some flows crossing regions do not route; kept fewer")
    return best[1], best[2]


def _kept(rp: RoutingProblem, tried: RoutingProblem, routing: Routing) -> Paths:
    """The paths of `routing` (of `rp`) for the flows whose lanes `tried` leaves as they are:
    where the next attempt's lanes of those flows start (`route`'s `warm`)."""
    same = {f.name for f, g in zip(rp.flows, tried.flows, strict=True) if f == g}
    return {(ln.flow, ln.path[0], ln.path[-1]): ln.path for ln in routing.lanes if ln.flow in same}


def _busiest_link(
    rp: RoutingProblem, routing: Routing, placement: Placement, sizing: Sizing, target: Target
) -> int:
    """Cycles per sample of the busiest link a routing leaves, as L0 charges them: a kernel's
    own link time plus the lanes crossing its region, or a flow's bytes over its lanes."""
    L = target.link_bytes_per_cycle
    paths: dict[str, list[tuple[Point, ...]]] = defaultdict(list)
    for ln in routing.lanes:
        paths[ln.flow].append(ln.path)
    pair_bytes = {(f.src, f.dst): f.bytes_per_sample for f in rp.flows}
    lanes = {flow_name(f.src, f.dst): paths[f.name] for f in rp.flows}
    crossing = crossing_cycles(placement, lanes, pair_bytes, L)
    own = max((k.link_cycles + crossing.get(k.name, 0) for k in sizing.kernels), default=0)
    flows = max((edge_cycles(f.bytes_per_sample, f.lanes, L) for f in rp.flows), default=0)
    return max(own, flows)


def _widened(
    room: Mapping[str, int],
    placement: Placement,
    sizing: Sizing,
    target: Target,
    rp: RoutingProblem,
    routing: Routing,
) -> RoutingProblem | None:
    """`rp` with more lanes for the flows whose lanes cross other kernels' regions, or None when
    none needs more. A crossing lane's bytes share the region's links with the kernel's own
    traffic (L0 adds them to its busiest link), so such a flow gets the lanes at which each
    carries at most what the busiest of those kernels leaves in the stage time:
    lanes_within(bytes, lane_bytes(T - its link cycles, L)), at most its `room` (the lanes its
    edge slots hold)."""
    T, L = sizing.stage_cycles, target.link_bytes_per_cycle
    own = {k.name: k.link_cycles for k in sizing.kernels}
    crossed = crossed_regions(routing, placement)
    if not crossed:
        return None
    flows, changed = [], False
    for f in rp.flows:
        slack = T - max((own.get(k, 0) for k in crossed.get(f.name, ())), default=T)
        lanes = f.lanes
        if 0 < slack < T:
            lanes = max(
                lanes, min(room[f.name], lanes_within(f.bytes_per_sample, lane_bytes(slack, L)))
            )
        changed |= lanes != f.lanes
        flows.append(replace(f, lanes=lanes))
    return replace(rp, flows=tuple(flows)) if changed else None


@dataclass(frozen=True)
class Placed:
    problem: PlacementProblem  # one copy's (on its tile when replicated)
    program: Program  # its sizing: the one that packed, costed at the placed shapes
    pool_shapes: int = 0  # kernels placed in a shape from the sizing's pool


def pool_shapes(sizing: Sizing, placement: Placement) -> int:
    """Kernels `placement` puts in a shape from `sizing`'s pool (not its shape or
    alternatives); `sizing` as it was sized, before `sizing_at` re-costs the placed shapes."""
    rects = placement.rects
    return sum(
        (rects[k.name].h, rects[k.name].w) in k.pool for k in sizing.kernels if k.name in rects
    )


@dataclass(frozen=True)
class Search:
    """How placement searches: the placer, its budget for every attempt together (re-sizings
    and tiles included; `deadline` is when it runs out, on `time.perf_counter`'s clock), the
    seed, and whether the placer runs a fixed work quota instead (`deterministic`)."""

    placer: str
    time_budget_s: float
    seed: int
    deterministic: bool
    deadline: float

    def left_s(self) -> float:
        """The budget an attempt gets now: what is left (at least half a second), or the whole
        budget when deterministic (a work quota, the same each time)."""
        if self.deterministic:
            return self.time_budget_s
        return max(0.5, self.deadline - time.perf_counter())


@dataclass(frozen=True)
class Work:
    """What is placed and routed: the kernels, their sizing, the target and precision, and the
    mode's sizing rule (re-costing and lanes)."""

    kg: KernelGraph
    sizing: Sizing
    target: Target
    precision: Precision
    rule: SizingRule


def _place_in(problem: PlacementProblem, search: Search) -> tuple[PlacementProblem, Placement]:
    """`problem` placed with what `search` has left, and the problem tailored to the pool
    shapes the placement took."""
    placement = place(
        problem, placer=search.placer, time_budget_s=search.left_s(), seed=search.seed,
        deterministic=search.deterministic,
    )  # fmt: skip
    return tailored(problem, placement.rects), placement


def _route_in(
    work: Work,
    problem: PlacementProblem,
    placement: Placement,
    search: Search,
    say: Callable[[str, str], None],
) -> tuple[Placement, RoutingProblem, Program]:
    """Route `placement` of `problem` (`_route_placed`); when the rule checks the routed program
    against sizing's throughput, placed again with halos where its lanes fell short
    (`_route_checked`). The placement kept, its routing problem and the program."""
    if not work.rule.checked:  # sized for a step, not for L0's throughput
        return placement, *_route_placed(work, problem, placement, say)
    return _route_checked(work, problem, placement, search, say)


def place_and_route(
    kg: KernelGraph,
    sizing: Sizing,
    target: Target,
    precision: Precision,
    *,
    placer: str,
    time_budget_s: float,
    seed: int = 0,
    deterministic: bool = False,
    pins: str | None = None,
    say: Callable[[str, str], None] = lambda stage, s: None,
    rule: SizingRule = ForThroughput(),
    replicas: int | None = 1,
) -> Placed:
    """Place (re-sizing at lower fill while the regions do not pack), route, validate.

    `replicas`: the copies wanted (`wsecc.core.replicas`), None for as many as raise the throughput
    and fit; one copy on a tile of the fabric is placed and routed, the others are it
    translated. `rule` (the mode's, `SizingRule`) does every (re-)sizing and re-costing and
    gives the flows their lanes. `time_budget_s` bounds the
    placement attempts together (re-sizings and tiles included), not routing; a placement
    made again with halos (`_route_checked`) gets it once more.

    Guarantees: the placement and routing of every copy, on the whole fabric, pass the
    solver-free validators. Raises PlacementError / RoutingError (one line) when no legal
    result exists.
    """
    if isinstance(rule, ForDecode) and sizing.single_buffered:  # re-sized as it was sized
        rule = replace(rule, single_buffered=True)
    search = Search(placer, time_budget_s, seed, deterministic, time.perf_counter() + time_budget_s)
    work = Work(kg, sizing, target, precision, rule)
    blocked = REQUESTED
    if replicas != 1:
        tiled = _place_copies(work, replicas, pins, search, say)
        if isinstance(tiled, Placed):
            return tiled
        blocked = tiled
    fills = fills_from(sizing.fill)
    sized = sizing
    for i, fill in enumerate(fills):
        try:
            if i:
                sizing = rule.size(kg, target, precision, fill, sizing.chunk_tokens)
                say("size", f"re-sized at {100 * fill:.0f}% fill: {sizing.summary()}")
            work = replace(work, sizing=sizing)
            problem, placement = _place_in(_problem(kg, sizing, target, precision, pins), search)
            break
        except (PlacementError, SizingError) as e:
            if i == len(fills) - 1 or isinstance(e, SizingError):
                banded = None if pins else _in_bands(kg, sized, target, precision, rule, say)
                if banded is None:
                    raise
                work, problem, placement = replace(work, sizing=banded[0]), *banded[1:]
                break
            say("place", f"regions at {100 * fill:.0f}% fill do not pack: {str(e)[:100]}...")
    placement, _, program = _route_in(work, problem, placement, search, say)
    program = replace(program, replicas=Replicas(1, blocked))
    return Placed(problem, program, pool_shapes(sizing, placement))


def _in_bands(
    kg: KernelGraph,
    sized: Sizing,
    target: Target,
    precision: Precision,
    rule: SizingRule,
    say: Callable[[str, str], None],
) -> tuple[Sizing, PlacementProblem, Placement] | None:
    """Generate mode (`ForDecode`): `kg`'s layers in full-width bands (`wsecc.core.bands`), the
    free columns to the decode step, costed as `sized` was (its chunk and buffering): the sizing
    at the bands' shapes, the problem with every region pinned and its placement; None in
    another mode, or when no band height fits or a region does not fit at its band."""
    if not isinstance(rule, ForDecode):  # a decode step's layout; throughput is sizing's balance
        return None
    rects = band_layout(kg, sized.context(target, precision), rule.batch)
    if rects is None:
        return None
    try:
        sizing = rule.at_shapes(
            sized, kg, target, precision, {n: (r.h, r.w) for n, r in rects.items()}
        )
        problem = with_pins(placement_problem(kg, sizing, target, precision), rects)
    except (SizingError, PlacementError):
        return None
    placement = place_manual(problem)
    bands = len({r.y for r in rects.values()})
    say(
        "place",
        f"no fill packed: {bands} bands of layers across the fabric, each kernel at least as "
        f"wide as its SRAM needs ({sizing.pes_used:,} PEs, {sizing.fabric_fraction:.1%})",
    )
    return sizing, problem, placement


def _problem(
    kg: KernelGraph, sizing: Sizing, target: Target, precision: Precision, pins: str | None
) -> PlacementProblem:
    problem = placement_problem(kg, sizing, target, precision)
    return with_pins(problem, load_pins(pins)) if pins else problem


def _route_placed(
    work: Work,
    problem: PlacementProblem,
    placement: Placement,
    say: Callable[[str, str], None],
) -> tuple[RoutingProblem, Program]:
    """Cost the kernels at their placed shapes, route with the lanes the rule gives, validate:
    the program of one copy and the routing problem it was routed as."""
    kg, sizing, target, precision, rule = (
        work.kg,
        work.sizing,
        work.target,
        work.precision,
        work.rule,
    )
    # what the placement achieves: each kernel costed at its placed shape (one of its menu's)
    shapes = {name: (r.h, r.w) for name, r in placement.rects.items()}
    sizing = rule.at_shapes(sizing, kg, target, precision, shapes)
    per_lane = rule.bytes_per_lane(sizing, target, kg)
    rp, routing = _route_widest(problem, placement, sizing, target, say, per_lane)
    # A result that fails the validators is a bug in wsecc, not in the user's input.
    bad = validate_placement(problem, placement) + validate_routing(rp, placement, routing)
    if bad:
        raise RuntimeError(f"placement/routing failed validation: {bad[0]}")
    return rp, Program(kg, sizing, placement, routing, target)


ON_WAFER_GOAL = 0.9
"""The share of sizing's balanced throughput a placed and routed program must keep on the
wafer (L0's `wafer_samples_per_s`); below it, when its lanes are the limit, the flow places
once more with halos (`_route_checked`). Issue 18's goal for every real-size model."""

HALO_PES = (2, 16)
"""Least and most PEs of free ring a starved kernel gets (`_halos`)."""
HALO_LANES_PER_PE = 4
"""A starved kernel's halo is its starved lanes over this many PEs: lanes leave a region on one
side or two, and a ring that wide lets a quarter of them turn along each side."""


def _route_checked(
    work: Work,
    problem: PlacementProblem,
    placement: Placement,
    search: Search,
    say: Callable[[str, str], None],
) -> tuple[Placement, RoutingProblem, Program]:
    """Route `placement` (`_route_placed` on `problem`); when the routed program keeps
    less than `ON_WAFER_GOAL` of its balanced throughput because lanes found no room
    (`_halos`), place once more with a free ring around the kernels they leave and enter
    (`_place_again`, on `problem` grown by those halos) and keep whichever routed program is
    faster on the wafer (the first on a tie or when the second does not pack or route).
    Inference only: a training step's or a decode step's sizing is not L0's balanced
    throughput, and `place_and_route` routes those without the check."""
    rp, program = _route_placed(work, problem, placement, say)
    first = simulate_l0(program)
    halos = _halos(program, rp, first)
    grown = with_halos(problem, halos)  # pinned kernels, and shapes a ring would not fit, stay
    halos = {k: m for k, m in halos.items() if grown.kernel(k) is not problem.kernel(k)}
    if not halos:  # none short, or none of them can be given a ring
        return placement, rp, program
    share = first.wafer_samples_per_s / program.sizing.samples_per_s
    ring = ", ".join(f"{k} {m}" for k, m in sorted(halos.items()))
    say(
        "place",
        f"on wafer {100 * share:.0f}% of balanced, limited by "
        f"{first.wafer_bottleneck} ({first.wafer_bottleneck_kind}): placed again with free "
        f"rings of PEs around {ring}",
    )
    try:
        again = _place_again(problem, placement, halos, search)
        rp2, program2 = _route_placed(work, problem, again, say)
    except (PlacementError, RoutingError) as e:
        say("place", f"with halos: {str(e)[:80]}...; kept the first placement")
        return placement, rp, program
    second = simulate_l0(program2)
    share2 = second.wafer_samples_per_s / program2.sizing.samples_per_s
    if second.wafer_samples_per_s > first.wafer_samples_per_s:
        say("place", f"with halos: on wafer {100 * share2:.0f}% of balanced; kept")
        return again, rp2, program2
    say("place", f"with halos: on wafer {100 * share2:.0f}% of balanced; kept the first")
    return placement, rp, program


def _place_again(
    problem: PlacementProblem,
    first: Placement,
    halos: Mapping[str, int],
    search: Search,
) -> Placement:
    """A placement of `problem` keeping `halos` PEs free around those kernels: `problem` grown
    by them placed with `search`'s placer (its whole budget again), shrunk back. `problem` is
    the tailored one `first` is legal for (no pools), so `first`'s bound holds for it too and
    is kept."""
    seed = search.seed
    grown = place(
        with_halos(problem, halos), placer=search.placer, time_budget_s=search.time_budget_s,
        seed=seed, deterministic=search.deterministic,
    )  # fmt: skip
    return Placement.of(
        problem,
        without_halos(problem, halos, grown.rects),
        placer=grown.placer,
        bound=first.bound,  # the optimum when the first was proven optimal: solver's
        bound_kind="cpsat" if first.bound_kind == "optimal" else first.bound_kind,
        status=f"{grown.status}, halos around {len(halos)} kernels",
        seconds=first.seconds + grown.seconds,
        seed=seed,
        search=grown.search,
    )


def _halos(program: Program, rp: RoutingProblem, perf: PerfResult) -> dict[str, int]:
    """Kernel -> the PEs of free ring it should have around it, for the kernels whose lanes
    found no room; empty when the program keeps `ON_WAFER_GOAL` of its balanced throughput.

    The starved flows: the limiting flow when L0's on-wafer limit is a flow (too few lanes
    for its bytes: its facing edges are short or blocked), or the flows whose lanes cross the
    limiting kernel's region (the router found no way around it; a lane does not cross its
    own ends, so the limiting kernel is not among theirs). Their ends get a PE of ring per
    `HALO_LANES_PER_PE` of their starved lanes, within `HALO_PES`. Empty also when the limit
    is a kernel no lane crosses: its own links take the stage time, whatever the placement."""
    if perf.wafer_samples_per_s >= ON_WAFER_GOAL * program.sizing.samples_per_s:
        return {}
    limit = perf.wafer_bottleneck
    if perf.wafer_bottleneck_kind == FLOW:
        starved = [f for f in rp.flows if flow_name(f.src, f.dst) == limit]
    else:
        crossed = crossed_regions(program.routing, program.placement)
        starved = [f for f in rp.flows if limit in crossed.get(f.name, ())]
    lanes: dict[str, int] = defaultdict(int)
    for f in starved:
        for end in {f.src, f.dst}:
            lanes[end] += f.lanes
    least, most = HALO_PES
    return {k: min(most, max(least, -(-n // HALO_LANES_PER_PE))) for k, n in lanes.items()}


TILE_ROUTING_ATTEMPTS = 3
"""Grids tried in turn while the copy packs on their tile but does not route there (each routing
attempt narrows lanes several times, `_route_widest`); then no copies."""


def _place_copies(
    work: Work,
    requested: int | None,
    pins: str | None,
    search: Search,
    say: Callable[[str, str], None],
) -> Placed | str:
    """Copies on a grid of tiles (`wsecc.core.replicas`), or the resource that stops a second copy
    (one of `wsecc.core.replicas.REASONS`) when none fits.

    The grid with the most tiles where greedy packs the copy (`_most_tiles`); the copy placed
    there with the chosen placer (it starts from greedy's packing) and routed; its throughput
    gives k (`wsecc.core.replicas.choose`); every copy is checked on the whole fabric. When the copy
    does not route on a tile, grids with fewer, larger tiles are tried (at most
    `TILE_ROUTING_ATTEMPTS` times).
    """
    sizing = work.sizing
    whole = _problem(work.kg, sizing, work.target, work.precision, pins)
    most = whole.area // copy_area(whole)
    if requested is not None:
        most = min(most, requested)
    blocked = FABRIC_AREA if most >= 2 else FILLS_WAFER
    for _ in range(TILE_ROUTING_ATTEMPTS):
        grid = _most_tiles(whole, most)
        if grid is None:
            return blocked
        columns, rows = grid
        tile = (whole.width // columns, whole.height // rows)
        try:
            problem, placement = _place_in(within(whole, tile), search)
            placement, rp, program = _route_in(work, problem, placement, search, say)
        except PlacementError:
            most = columns * rows - 1  # the placer did not pack what greedy packed
            continue
        except RoutingError as e:
            blocked = COLORS if "colors" in str(e) else LINKS
            say("replicas", f"tiles of {tile[0]}x{tile[1]} do not route ({blocked}): larger tiles")
            most = columns * rows - 1
            continue
        k, reason = choose(columns * rows, _copies_for_host(program), requested, blocked)
        reps = Replicas(k, reason, tile, grid_origins(tile, columns, k))
        _validate_copies(problem, rp, program, reps)
        say(
            "replicas",
            f"{k} copies on {columns}x{rows} tiles of {tile[0]}x{tile[1]} PEs "
            f"(stopped by {reason})",
        )
        return Placed(problem, replace(program, replicas=reps), pool_shapes(sizing, placement))
    return blocked


GRID_SHAPES = 4
"""Grids tried per tile count when searching for the most tiles that pack (`_most_tiles`): the
squarest tiles first."""


def _most_tiles(whole: PlacementProblem, most: int) -> tuple[int, int] | None:
    """(columns, rows) of the grid with the most tiles, at most `most` and at least 2, on whose
    tile the greedy placer packs the copy (or None): a binary search over the tile count n,
    n feasible when one of the `GRID_SHAPES` squarest grids holding n copies packs. Greedy
    takes milliseconds on a few dozen kernels, so the search takes well under a second."""

    def packs(grid: tuple[int, int]) -> bool:
        tile = (whole.width // grid[0], whole.height // grid[1])
        try:
            place(within(whole, tile), placer="greedy", time_budget_s=1.0)
        except PlacementError:
            return False
        return True

    best, lo, hi = None, 2, most
    while lo <= hi:
        n = (lo + hi) // 2
        grid = next((g for g in tile_grids(whole, n)[:GRID_SHAPES] if packs(g)), None)
        if grid is None:
            hi = n - 1
        else:
            best, lo = grid, grid[0] * grid[1] + 1
    return best


def _copies_for_host(program: Program) -> int:
    """k_host of one copy (`wsecc.core.replicas.copies_for_host`): its on-wafer throughput against
    the host I/O bound, from L0 with the whole host I/O."""
    alone = simulate_l0(program)
    host = host_samples_per_s(alone, program.target.io.offwafer_bytes_per_s)
    return copies_for_host(alone.wafer_samples_per_s, host)


def _validate_copies(
    problem: PlacementProblem, rp: RoutingProblem, program: Program, reps: Replicas
) -> None:
    """Every copy on the whole fabric through the validators: no two rectangles overlap, every
    lane stays on the fabric, within the color budget at every router and a link's capacity."""
    W, H = program.target.fabric.program_width, program.target.fabric.program_height
    wp = whole_problem(problem, reps, W, H)
    placement = whole_placement(wp, program.placement, reps)
    whole_rp, routing = whole_routing(rp, program.routing, reps, W, H)
    bad = validate_placement(wp, placement) + validate_routing(whole_rp, placement, routing)
    if bad:
        raise RuntimeError(f"replicated placement/routing failed validation: {bad[0]}")


def simulate(program: Program, options: Options) -> tuple[SramMap, PerfResult, EventResult | None]:
    """The SRAM map, L0, and L1 when `options.sim` is l1, of a placed and routed program. L1's
    skew buffers take at most the SRAM each kernel's fullest PE leaves (fewer chunks, and L1
    shows the back-pressure, where a buffer would not fit), and the map charges them to the
    kernels that hold them."""
    batch = options.batch
    assert batch is not None  # set in infer and generate mode (`Options.__post_init__`)
    perf = simulate_l0(program, batch)
    plain = sram_map(program)
    if options.sim is not SimLevel.L1:
        return plain, perf, None
    room = {k: plain.sram_bytes_per_pe - used for k, used in plain.kernel_max.items()}
    try:
        events = simulate_l1(program, batch, samples=options.sim_samples, skew_room=room)
    except SimulationError as stalled:
        # Cut to fit, the buffers stall the pipeline (a barrier waits on a residual): the
        # program needs them whole, and the map of the whole ones says where they do not fit.
        events = simulate_l1(program, batch, samples=options.sim_samples)
        try:
            sram_map(program, extra_buffers=buffer_bytes_per_pe(events))
        except SramError as e:
            raise SramError(f"{e}; cut to fit, they stall the pipeline ({stalled})") from None
        raise stalled from None  # they fit whole: the stall is not theirs
    return sram_map(program, extra_buffers=buffer_bytes_per_pe(events)), perf, events
